"""The running canary's control channel, in Argo Rollouts' habits: `deployctl rollout
promote|abort|pause|resume RELEASE` asks, the apply running the canary answers, and `deployctl rollout
status` reads what that apply last published.

Both live on the annotations of the one object a running canary owns alone, its Deployment, or for
copies that span nodes its first RayCluster (`<prefix>-<digest>-c0`, which every step keeps): a
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

from orchestrator import conventions, errors
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


def _canary(kube: Kube, release: str, namespace: str) -> dict[str, Any] | None:
    """The object that carries ``release``'s running canary's channel: its canary Deployment, else its
    first canary RayCluster; None when there is none. An object without the release's label and the
    canary track is not the canary: left alone, never annotated."""
    found = kube.get("Deployment", canary_workload.workload_name(release), namespace)
    if found is not None and _ours(found, release):
        return {**found, "kind": "Deployment"}
    with contextlib.suppress(errors.NotFound, errors.Forbidden):  # no KubeRay here, or no right to read it
        groups, _ = kube.list(canary_workload.GROUP_KIND, namespace, labels=_canary_labels(release))
        ours = sorted((g for g in groups if _ours(g, release)), key=lambda g: str(g["metadata"]["name"]))
        if ours:
            return {**ours[0], "kind": canary_workload.GROUP_KIND}
    return None


def _ours(found: dict[str, Any] | None, release: str) -> bool:
    labels = ((found or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(conventions.RELEASE_LABEL) == release and labels.get(conventions.TRACK_LABEL) == "canary"


def _canary_labels(release: str) -> str:
    return f"{conventions.RELEASE_LABEL}={release},{conventions.TRACK_LABEL}={canary_workload.CANARY}"


def _patch(kube: Kube, release: str, namespace: str, annotations: dict[str, str | None]) -> None:
    """Annotate the running canary's channel object; ``errors.NotFound`` when no canary runs."""
    found = _canary(kube, release, namespace)
    if found is None:
        raise errors.NotFound(f"release {release} has no canary running in namespace {namespace}")
    name = found["metadata"]["name"]
    kube.merge_patch(found["kind"], name, namespace, {"metadata": {"annotations": annotations}})


def send(kube: Kube, release: str, namespace: str, verb: Verb, *, by: str | None = None) -> Command:
    """Ask the apply running ``release``'s canary to ``verb`` it, as ``by`` (default: this identity);
    UsageError when no canary runs."""
    if _canary(kube, release, namespace) is None:
        raise errors.UsageError(
            f"release {release} in namespace {namespace} has no canary running (no Deployment "
            f"{canary_workload.workload_name(release)} nor RayCluster of the release's canary that this identity "
            f"may read); `deployctl rollout status {release}` says what runs"
        )
    at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    command = Command(verb, by or kube.whoami(), at)
    _patch(kube, release, namespace, {COMMAND_ANNOTATION: json.dumps(command.to_json(), sort_keys=True)})
    return command


def clear(kube: Kube, release: str, namespace: str) -> None:
    """Forget any command an earlier, interrupted run left on its canary, before this run creates its
    own (a command sent after this is this run's)."""
    with contextlib.suppress(errors.NotFound):  # the usual case: no canary yet
        _patch(kube, release, namespace, {COMMAND_ANNOTATION: None, STATUS_ANNOTATION: None})


def read(kube: Kube, release: str, namespace: str) -> Command | None:
    """The last command sent; None when none was, or when the annotation is no command (ignored:
    anyone who may annotate could write junk there, and junk must not stop a canary)."""
    try:  # a passing API error only delays the command to the next read
        text = _annotations(_canary(kube, release, namespace)).get(COMMAND_ANNOTATION)
        data = json.loads(text, parse_constant=_no_constant) if text else None
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
    """What the running apply last published, with the last command; None when no canary runs.
    Anyone who may annotate could write the annotation, so only its known fields of plain types count."""
    found = _canary(kube, release, namespace)
    if found is None:
        return None
    try:
        published = json.loads(_annotations(found).get(STATUS_ANNOTATION) or "{}", parse_constant=_no_constant)
    except ValueError:
        published = {}
    published = published if isinstance(published, dict) else {}
    shown: dict[str, Any] = {k: v for k, v in published.items() if k in _PROGRESS and isinstance(v, _PROGRESS[k])}
    last = published.get("last")
    if isinstance(last, dict):
        shown["last"] = {k: v for k, v in last.items() if k in _LAST and isinstance(v, _LAST[k])}
    command = read(kube, release, namespace)
    copies = _copies(kube, found, release, namespace)
    return {**shown, "canary_copies": copies, "command": command.to_json() if command else None}


def _copies(kube: Kube, found: dict[str, Any], release: str, namespace: str) -> dict[str, object]:
    """The canary's copies, desired and ready: its Deployment's replicas, or its RayClusters that KubeRay
    calls ready."""
    if found.get("kind") != canary_workload.GROUP_KIND:
        spec, status = found.get("spec") or {}, found.get("status") or {}
        return {"desired": spec.get("replicas"), "ready": status.get("readyReplicas", 0)}
    groups, _ = kube.list(canary_workload.GROUP_KIND, namespace, labels=_canary_labels(release))
    ready = sum(1 for g in groups if (g.get("status") or {}).get("state") == "ready")
    return {"desired": len(groups), "ready": ready}


# The fields of the published progress `rollout status` shows, with their types.
_PROGRESS: dict[str, type | tuple[type, ...]] = {
    "state": str,
    "step": int,
    "steps": int,
    "copies": int,
    "of": int,
    "mode": str,
    "stable_revision": int,
    "window": int,
    "by": str,
}
_LAST: dict[str, type | tuple[type, ...]] = {"verdict": str, "reason": str, "canary_share": (int, float)}


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is no JSON number")
