"""The status an InferenceProfile object carries: what the controller did with its generations.

It follows the kstatus conventions (sigs.k8s.io/cli-utils/pkg/kstatus), so that Flux's health
checks, Argo CD (with gitops/argocd/inferenceprofile-health.lua) and `kubectl wait` read it
without glue:
- ``Ready`` is the summary, with the generation it is about;
- ``Reconciling`` is True while the controller works on a generation;
- ``Stalled`` is True when a generation failed and the controller will not try it again by itself
  (a failed generation is retried only for a new spec or a retry annotation).

The steps of the sequence have a condition each: ``Planned``, ``Applied``, ``RolledOut`` and
``Gated``. A failed step's condition is False with the failure class as its reason (``slo_failed``,
``unschedulable``, ``oom``…); the steps after it are Unknown. While rollout.canary's steps run,
``Progressing`` says which step and what the last window found; it turns False (reason ``Promoted``
or the failure class) when the apply ends. Pure: data in, data out.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.apply.outcome import Failure, Outcome

STEPS = ("Planned", "Applied", "RolledOut", "Gated")
# The stage a failure happened in (Failure.stage), as the step condition it falsifies.
_STEP_OF_STAGE = {
    "plan": "Planned",
    "preflight": "Planned",
    # The warm-up runs before the first write: a stop there leaves the revision not applied.
    "warmup": "Applied",
    "apply": "Applied",
    "rollout": "RolledOut",
    "health": "Gated",
    "smoke": "Gated",
    "canary": "Gated",  # rollout.canary's steps judge the revision on live traffic
    "record": "Gated",
    "sync": "Applied",
}


def reconciling(previous: Mapping[str, object] | None, generation: int, now: str) -> dict[str, object]:
    """While the controller works on ``generation``: Reconciling, Ready Unknown."""
    status = _carry(previous)
    message = f"deploying generation {generation}: plan, preflight, apply, rollout, gate"
    # A canary's Progressing is about the run that set it: a new run starts without it.
    conditions = [c for c in _conditions(previous) if c.get("type") != "Progressing"]
    _set(conditions, "Reconciling", "True", "Progressing", message, generation, now)
    _set(conditions, "Stalled", "False", "Progressing", "", generation, now)
    _set(conditions, "Ready", "Unknown", "Progressing", message, generation, now)
    for step in STEPS:
        _set(conditions, step, "Unknown", "Progressing", "", generation, now)
    return {**status, "conditions": conditions}


def canary_progress(
    previous: Mapping[str, object] | None, generation: int, message: str, now: str
) -> dict[str, object]:
    """While rollout.canary's steps run: ``Progressing`` True with the step and the last window's verdict."""
    conditions = _conditions(previous)
    _set(conditions, "Progressing", "True", "Canary", message, generation, now)
    return {**_carry(previous), "conditions": conditions}


def _canary_ended(conditions: list[dict[str, object]], reason: str, message: str, generation: int, now: str) -> None:
    """``Progressing`` False once the apply ended, when a canary had set it."""
    if any(c.get("type") == "Progressing" for c in conditions):
        _set(conditions, "Progressing", "False", reason, message, generation, now)


def from_outcome(
    previous: Mapping[str, object] | None,
    generation: int,
    outcome: Outcome,
    *,
    live_revision: int | None,
    profile_hash: str,
    now: str,
) -> dict[str, object]:
    """After an apply of ``generation`` ended in ``outcome``."""
    status = {**_carry(previous), "observedGeneration": generation, "manualRollback": False}
    status["liveRevision"] = live_revision
    if outcome.gate is not None:
        status["gate"] = {"verdict": outcome.gate.verdict.label, "summary": outcome.gate.summary()}
    conditions = _conditions(previous)
    _set(conditions, "Reconciling", "False", "Done", "", generation, now)
    if outcome.result == "deployed":
        status["liveProfileHash"] = profile_hash
        status["failure"] = None  # a merge patch's null removes the last failure
        gated = ("Passed", outcome.gate.summary()) if outcome.gate else ("HealthOnly", "health gate passed")
        for step, (reason, message) in zip(
            STEPS, [("Fits", ""), ("Applied", ""), ("RolledOut", ""), gated], strict=True
        ):
            _set(conditions, step, "True", reason, message, generation, now)
        _set(conditions, "Stalled", "False", "Deployed", "", generation, now)
        _set(conditions, "Ready", "True", "Deployed", outcome.message, generation, now)
        _canary_ended(conditions, "Promoted", outcome.message, generation, now)
        return {**status, "conditions": conditions}
    failure = outcome.failure or Failure("failed", outcome.message, "apply")
    return failed(status, conditions, generation, failure, outcome.message, now)


def failed(
    status: dict[str, object],
    conditions: list[dict[str, object]],
    generation: int,
    failure: Failure,
    message: str,
    now: str,
) -> dict[str, object]:
    """A generation that failed at ``failure.stage``: its step False, the later ones Unknown, Stalled."""
    status = {**status, "observedGeneration": generation, "failure": failure.to_record()}
    failed_step = _STEP_OF_STAGE.get(failure.stage, "Applied")
    reached = True
    for step in STEPS:
        if step == failed_step:
            _set(conditions, step, "False", failure.cls, failure.message, generation, now)
            reached = False
        elif reached:
            _set(conditions, step, "True", "Done", "", generation, now)
        else:
            _set(conditions, step, "Unknown", "NotReached", f"{failed_step} failed", generation, now)
    _set(conditions, "Reconciling", "False", failure.cls, "", generation, now)
    _set(
        conditions,
        "Stalled",
        "True",
        failure.cls,
        "not retried until the spec changes or the deployctl.dev/retry annotation changes",
        generation,
        now,
    )
    _set(conditions, "Ready", "False", failure.cls, message, generation, now)
    _canary_ended(conditions, failure.cls, message, generation, now)
    return {**status, "conditions": conditions}


def refused(previous: Mapping[str, object] | None, generation: int, failure: Failure, now: str) -> dict[str, object]:
    """A generation refused before anything was written (invalid, does not fit, preflight, forbidden)."""
    return failed(_carry(previous), _conditions(previous), generation, failure, failure.message, now)


def manual_rollback(
    previous: Mapping[str, object] | None, generation: int, live_revision: int, target: int | None, now: str
) -> dict[str, object]:
    """The live revision is an on-call `deployctl rollback`: the controller leaves it until the spec changes."""
    status = {**_carry(previous), "observedGeneration": generation, "liveRevision": live_revision}
    status["manualRollback"] = True
    made = (
        f"revision {live_revision} is a manual rollback to revision {target}"
        if target is not None
        else f"revision {live_revision} was deployed outside the controller"
    )
    message = made + "; the controller leaves it serving until the spec changes"
    conditions = _conditions(previous)
    _set(conditions, "Reconciling", "False", "ManualRollback", "", generation, now)
    _set(conditions, "Stalled", "False", "ManualRollback", "", generation, now)
    _set(conditions, "Ready", "True", "ManualRollback", message, generation, now)
    return {**status, "conditions": conditions}


def condition(status: Mapping[str, object] | None, kind: str) -> Mapping[str, object] | None:
    """The condition of type ``kind`` in ``status``, or None."""
    return next((item for item in _items(status) if item.get("type") == kind), None)


def _items(status: Mapping[str, object] | None) -> list[Mapping[str, object]]:
    """The conditions of ``status``; none when it has no list of them."""
    items = (status or {}).get("conditions")
    return [item for item in items if isinstance(item, Mapping)] if isinstance(items, list) else []


def _carry(previous: Mapping[str, object] | None) -> dict[str, object]:
    """What a new status keeps of the previous one: everything but the conditions (merged apart)."""
    return {k: v for k, v in (previous or {}).items() if k != "conditions"}


def _conditions(previous: Mapping[str, object] | None) -> list[dict[str, object]]:
    return [dict(c) for c in _items(previous)]


def _set(
    conditions: list[dict[str, object]], kind: str, status: str, reason: str, message: str, generation: int, now: str
) -> None:
    """Set one condition; its lastTransitionTime moves only when its status does."""
    for item in conditions:
        if item.get("type") == kind:
            if item.get("status") != status:
                item["lastTransitionTime"] = now
            item.update(status=status, reason=reason, message=message, observedGeneration=generation)
            return
    conditions.append(
        {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "observedGeneration": generation,
            "lastTransitionTime": now,
        }
    )
