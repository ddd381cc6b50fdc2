"""A canary run by the controller: the `deployctl.dev/rollout` annotation of an InferenceProfile is
`deployctl rollout promote|abort|pause|resume` from GitOps, and the canary's progress becomes the
object's ``Progressing`` condition.

The annotation's value is the verb, optionally followed by ``/`` and anything (``pause/2``) to send
the same verb again. It is sent when the annotation changes on a watched object, never on the first
sight of it (a controller restart must not replay an old `abort` on the next canary); with no canary
running it is said in an event and dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from orchestrator import errors
from orchestrator.apply import canary_control
from orchestrator.kube import Kube

ANNOTATION = "deployctl.dev/rollout"
# The canary's progress lines the condition shows (the others are rollout and gate detail).
_SHOWN = ("step ", "window ", "paused ", "resumed", "the canary")

Event = Callable[[dict[str, Any], str, str, str], None]  # (object, type, reason, message)


def _value(obj: Mapping[str, Any] | None) -> str:
    return str((((obj or {}).get("metadata") or {}).get("annotations") or {}).get(ANNOTATION) or "")


def forward(kube: Kube, before: Mapping[str, Any] | None, after: dict[str, Any], event: Event) -> None:
    """Send the command of ``after``'s annotation when it changed from ``before``'s (None: first sight)."""
    value = _value(after)
    if before is None or not value or value == _value(before):
        return
    verb = value.partition("/")[0]
    meta = after["metadata"]
    if verb not in canary_control.VERBS:
        event(after, "Warning", "RolloutCommandIgnored", f"{ANNOTATION}: {value!r} is none of {canary_control.VERBS}")
        return
    by = f"annotation {ANNOTATION} on InferenceProfile {meta['namespace']}/{meta['name']}"
    try:
        canary_control.send(kube, meta["name"], meta["namespace"], verb, by=by)
    except errors.DeployctlError as e:
        event(after, "Warning", "RolloutCommandIgnored", e.message)
        return
    event(after, "Normal", "RolloutCommand", f"asked the running canary to {verb}")


def shown(phase: str, message: str) -> bool:
    """Whether a progress line of the apply is one the Progressing condition shows."""
    return phase == "canary" and message.startswith(_SHOWN)
