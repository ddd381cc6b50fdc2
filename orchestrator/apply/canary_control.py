"""The running canary's control channel, in Argo Rollouts' habits: `deployctl rollout
promote|abort|pause|resume RELEASE` asks, the apply running the canary answers, and `deployctl rollout
status` reads what that apply last published.

Both live on the canary Deployment's annotations, the one object a running canary owns alone: a
command in ``COMMAND_ANNOTATION`` (the last one wins: `resume` replaces `pause`), and the apply's
progress in ``STATUS_ANNOTATION``. Whoever may annotate Deployments in the namespace (an `edit` role)
may send a command, as they could delete the canary Deployment: `promote` only moves the promotion
forward to the objects the apply's own user rendered, with the full gate still run, and `abort`
removes the canary, so neither widens what deployctl writes. The name in a command is what its
sender's kubeconfig said, kept as said, beside the apply's own actor in the record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
from typing import Any, Literal, cast, get_args

from orchestrator import errors
from orchestrator.kube import Kube
from orchestrator.render import canary as canary_workload

Verb = Literal["promote", "abort", "pause", "resume"]
VERBS: tuple[Verb, ...] = get_args(Verb)
COMMAND_ANNOTATION = "deployctl.dev/canary-command"
STATUS_ANNOTATION = "deployctl.dev/canary-status"


@dataclasses.dataclass(frozen=True)
class Command:
    verb: Verb
    by: str  # the sender's user, as its kubeconfig named it
    at: str  # when it was sent (UTC, ISO 8601)

    def to_json(self) -> dict[str, str]:
        return {"command": self.verb, "by": self.by, "at": self.at}


def _annotations(obj: dict[str, Any] | None) -> dict[str, str]:
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}


def _patch(kube: Kube, release: str, namespace: str, annotations: dict[str, str | None]) -> None:
    name = canary_workload.workload_name(release)
    kube.merge_patch("Deployment", name, namespace, {"metadata": {"annotations": annotations}})


def send(kube: Kube, release: str, namespace: str, verb: Verb, *, by: str | None = None) -> Command:
    """Ask the apply running ``release``'s canary to ``verb`` it, as ``by`` (default: this identity);
    UsageError when no canary runs."""
    if kube.get("Deployment", canary_workload.workload_name(release), namespace) is None:
        raise errors.UsageError(
            f"release {release} in namespace {namespace} has no canary running (no Deployment "
            f"{canary_workload.workload_name(release)}); `deployctl rollout status {release}` says what is live"
        )
    at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    command = Command(verb, by or kube.whoami(), at)
    _patch(kube, release, namespace, {COMMAND_ANNOTATION: json.dumps(command.to_json(), sort_keys=True)})
    return command


def clear(kube: Kube, release: str, namespace: str) -> None:
    """Forget any command left on the canary Deployment by an earlier run, before this one reads any."""
    _patch(kube, release, namespace, {COMMAND_ANNOTATION: None, STATUS_ANNOTATION: None})


def read(kube: Kube, release: str, namespace: str) -> Command | None:
    """The last command sent; None when none was, or when the annotation is no command (ignored:
    anyone who may annotate could write junk there, and junk must not stop a canary)."""
    try:  # a passing API error only delays the command to the next read
        text = _annotations(kube.get("Deployment", canary_workload.workload_name(release), namespace)).get(
            COMMAND_ANNOTATION
        )
        data = json.loads(text) if text else None
    except (errors.DeployctlError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("command") not in VERBS:
        return None
    return Command(cast(Verb, data["command"]), str(data.get("by", "")), str(data.get("at", "")))


def publish(kube: Kube, release: str, namespace: str, progress: dict[str, object]) -> None:
    """Say where the canary is (``rollout status`` reads it); best effort: progress is no evidence."""
    with contextlib.suppress(errors.DeployctlError):
        _patch(kube, release, namespace, {STATUS_ANNOTATION: json.dumps(progress, sort_keys=True)})


def progress(kube: Kube, release: str, namespace: str) -> dict[str, Any] | None:
    """What the running apply last published, with the last command; None when no canary runs."""
    found = kube.get("Deployment", canary_workload.workload_name(release), namespace)
    if found is None:
        return None
    try:
        published = json.loads(_annotations(found).get(STATUS_ANNOTATION) or "{}")
    except ValueError:
        published = {}
    command = read(kube, release, namespace)
    spec, status = found.get("spec") or {}, found.get("status") or {}
    return {
        **(published if isinstance(published, dict) else {}),
        "canary_copies": {"desired": spec.get("replicas"), "ready": status.get("readyReplicas", 0)},
        "command": command.to_json() if command else None,
    }
