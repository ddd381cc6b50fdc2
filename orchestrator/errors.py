"""The exception tree of deployctl and the exit code each failure maps to.

Exit codes are part of the command-line interface (docs/cli.md): pipelines branch on them,
so every failure a user can meet is one of these classes and nothing else escapes the CLI.
Library exceptions (kubernetes, httpx, yaml, pydantic) are converted to these at the one
module that meets them, with ``raise ... from e``.
"""

from __future__ import annotations

import enum
import re
import unicodedata
from collections.abc import Iterable


class ExitCode(enum.IntEnum):
    OK = 0
    USAGE = 1  # bad command line, missing file: the user's invocation, not the profile
    INVALID_PROFILE = 2
    DOES_NOT_FIT = 3
    CLUSTER_ERROR = 4  # unreachable, API error, forbidden
    ROLLOUT_FAILED = 5  # rollout failed or refused by preflight; nothing left half-applied
    GATE_FAILED_ROLLED_BACK = 6
    ROLLBACK_FAILED = 7
    LOCKED = 8
    AUDIT_FAILED = 9  # the release chain does not verify
    GATE_FAILED = 10  # `deployctl gate` (GitOps): the synced revision failed its gate; nothing was rolled back
    # `deployctl diff` found changes. Not kubectl's 1: here 1 is a usage error for every command, and CI
    # must tell "the live objects differ" from "the command was wrong" (docs/cli.md#exit-codes).
    DIFF_CHANGES = 11


class DeployctlError(Exception):
    """A failure explained for the user: ``message`` names the thing, the condition and the fix."""

    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UsageError(DeployctlError):
    exit_code = ExitCode.USAGE


class InvalidProfile(DeployctlError):
    """The profile breaks its schema, its YAML or a rule vLLM would refuse; the message names field and line."""

    exit_code = ExitCode.INVALID_PROFILE


class InvalidInstall(DeployctlError):
    """What `render --format controller` was asked to install breaks a rule a profile is held to
    (an image pinned by digest, names that are DNS labels): exit 2, as an invalid profile."""

    exit_code = ExitCode.INVALID_PROFILE


class DoesNotFit(DeployctlError):
    """The planner found an error: the weights or one sequence do not fit the GPUs, or the layout cannot be."""

    exit_code = ExitCode.DOES_NOT_FIT


class ClusterError(DeployctlError):
    """The cluster could not be reached, or the API server answered with an error."""

    exit_code = ExitCode.CLUSTER_ERROR


class Forbidden(ClusterError):
    """The API server refused a verb; the message names the verb, resource and namespace."""


class NotFound(ClusterError):
    """An object we need (namespace, release, revision) is not in the cluster."""


class UnknownRelease(NotFound):
    """The release or revision the user named has no record: a typo or the wrong -n, so exit 1.

    A NotFound still (callers that handle a missing object keep working), but the user's
    mistake, not the cluster's (docs/cli.md: exit 1 for an unknown release or revision).
    """

    exit_code = ExitCode.USAGE


class Conflict(ClusterError):
    """An optimistic-concurrency conflict (resourceVersion or create of an existing name)."""


class WatchExpired(ClusterError):
    """The watch's resourceVersion is too old (HTTP 410); the caller re-lists and watches again."""


class EndpointError(DeployctlError):
    """The inference server could not be reached or answered badly (connection, timeout, HTTP status)."""

    exit_code = ExitCode.ROLLOUT_FAILED


class RolloutFailed(DeployctlError):
    """The rollout failed or preflight refused it; nothing is left half-applied."""

    exit_code = ExitCode.ROLLOUT_FAILED


class Takeover(RolloutFailed):
    """Objects exist under the release's names without its label: applying would take them over.
    Refused before any write unless the user adopts them (docs/security.md#no-takeover)."""


class GateFailedRolledBack(DeployctlError):
    """`apply`: the health or smoke gate failed and the release was rolled back."""

    exit_code = ExitCode.GATE_FAILED_ROLLED_BACK


class RollbackFailed(DeployctlError):
    """A step failed and so did the rollback after it: a person is needed (docs/runbook.md)."""

    exit_code = ExitCode.ROLLBACK_FAILED


class Locked(DeployctlError):
    """Another apply, gate, rollback or uninstall of the release holds its lock."""

    exit_code = ExitCode.LOCKED


class AuditFailed(DeployctlError):
    """The release chain does not verify, or a record is unreadable, unsigned where it must be, or tampered."""

    exit_code = ExitCode.AUDIT_FAILED


class NewerRecordFormat(AuditFailed):
    """A release record or audit export in a format this deployctl does not read: refused before
    any write, since guessing at a newer record could break its chain. Upgrading deployctl fixes it,
    so the controller stalls on it instead of retrying (docs/record-format.md)."""


class OutsideRelease(AuditFailed):
    """Objects to write that are not the release's own kinds, in its namespace, labelled for it: a
    record's stored manifests were tampered with (docs/security.md#confined-writes). Exit 9."""


def shorten(text: str, limit: int = 300) -> str:
    """Cut an echoed server payload so a message stays one readable paragraph."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# What of a server's answer may enter a message, and from there a release record, an InferenceProfile's
# status and its events: short, on one line, and without anything that looks like a credential.
EXCERPT_CHARS = 200
REDACTED = "[redacted]"
_CREDENTIALS = (
    re.compile(r"(?i)\b(bearer|basic)\s+(?!\[redacted\])[^\s\"',;}\]]+"),
    re.compile(
        r"(?i)\b(api[_-]?key|access[_-]?token|token|password|passwd|secret|authorization)([\"']?\s*[:=]\s*[\"']?)(?!\[redacted\])[^\s\"',;}\]]+"
    ),
    re.compile(
        r"(hf|sk|ghp|gho|glpat|xox[abp])[-_][A-Za-z0-9_-]{12,}"
    ),  # Hugging Face, OpenAI-style, GitHub, GitLab, Slack; no \b: an expanded `llama$(HF_TOKEN)` glues it on
)


def excerpt(text: str, limit: int = EXCERPT_CHARS, secrets: Iterable[str | None] = ()) -> str:
    """At most ``limit`` characters of an echoed server payload, safe to store and show.

    ``secrets`` (the gate's API key) and anything shaped like a credential (a Bearer token,
    ``api_key=…``, an ``hf_…`` token) become [redacted] before the cut, so no prefix of one survives;
    control and line-separator characters (ANSI escapes, U+0085, U+2028, U+2029) become spaces, so a
    body cannot forge lines in a log or a terminal.
    """
    known = sorted({s for s in secrets if s}, key=len, reverse=True)
    # Redact in a window that holds whatever the cut keeps, plus a whole secret that starts inside it.
    window = text[: limit + max((len(s) for s in known), default=0) + 256]
    for secret in known:
        window = window.replace(secret, REDACTED)
    for pattern in _CREDENTIALS:
        window = pattern.sub(_redact, window)
    cleaned = "".join(" " if unicodedata.category(ch) in _UNPRINTABLE else ch for ch in window)
    return shorten(cleaned, limit)


_UNPRINTABLE = ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn")


def _redact(match: re.Match[str]) -> str:
    if match.re is _CREDENTIALS[1]:
        return f"{match.group(1)}{match.group(2)}{REDACTED}"
    if match.re is _CREDENTIALS[0]:
        return f"{match.group(1)} {REDACTED}"
    return REDACTED
