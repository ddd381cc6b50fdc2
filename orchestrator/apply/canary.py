"""rollout.canary's steps: the new revision on a few copies, judged on live traffic beside the stable
copies, before the promotion moves every copy (``orchestrator.apply.pipeline`` promotes).

Step 1 starts the canary Deployment (``orchestrator.render.canary``) and runs the existing gate on
its pods alone: rollout watch, health, smoke. Every step then reads each serving pod's metrics
(``pod_metrics``) over its analysis window and judges the canary against the stable copies
(``gate.canary_analysis``); a later step first grows the canary to its size. Where preflight found
no room beside the stable copies (``replace``), each step takes as many stable copies away as the
canary runs. A failed step, or anything unexpected, removes the canary and gives the stable copies
back what was taken: the stable Deployment's pod template is never written, so its pods never
restart. What each step measured is the evidence the record keeps (``Steps.evidence``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

from orchestrator import conventions, errors
from orchestrator.apply import confine, pod_metrics, rollout, sequence, verify, watching
from orchestrator.apply.lock import ReleaseLock
from orchestrator.apply.outcome import Failure, Outcome, Timings
from orchestrator.engines import metric_table
from orchestrator.gate import canary_analysis
from orchestrator.kube import Kube
from orchestrator.kube import status as kube_status
from orchestrator.profile import slo as slo_language
from orchestrator.profile.canary import CanarySpec, Step
from orchestrator.profile.model import Profile
from orchestrator.records import releases, writer
from orchestrator.render import canary as canary_workload

STAGE = "canary"
FAILED = "canary_failed"  # the failure class of a step whose live traffic judged the canary worse
# What this deployctl does not run yet, said before any write (exit 5) instead of ignored.
_NOT_RUN = {
    "multi_node": "a canary of copies that span nodes (one RayCluster per step)",
    "prometheus": "rollout.canary.metrics.source prometheus",
    "httpRoute": "rollout.canary.traffic httpRoute",
}
Sleep = Callable[[float], None]


def not_run(profile: Profile) -> str | None:
    """Why this deployctl refuses ``profile``'s canary before any write, or None when it runs it."""
    spec = profile.rollout.canary
    if spec is None:
        return None
    missing = [
        what
        for key, what in _NOT_RUN.items()
        if (key == "multi_node" and profile.multi_node)
        or (key == "prometheus" and spec.metrics.source == "prometheus")
        or (key == "httpRoute" and spec.traffic == "httpRoute")
    ]
    if not missing:
        return None
    return (
        f"this deployctl does not run {' or '.join(missing)} yet, and deploying every copy at once would ignore "
        "what the profile asks. Nothing was written. Use metrics.source pods and traffic service on a "
        "single-pod-per-copy release, or remove rollout.canary"
    )


@dataclasses.dataclass
class Steps:
    """How the canary's steps ended: ``failure`` None when every step passed (promote next)."""

    failure: Failure | None
    judged: verify.Judgement  # the gate on the canary's first pods
    evidence: dict[str, Any]  # the record's `canary`


@dataclasses.dataclass(frozen=True)
class Canary:
    """One canary run: the release, its rendered objects and the gate of its first step."""

    kube: Kube
    profile: Profile
    objects: list[dict[str, Any]]
    live: releases.Record
    spec: verify.GateSpec
    mode: str  # "beside" | "replace" (preflight.Preflight.canary_mode)
    report: verify.Reporter
    abort: verify.Abort
    sleep: Sleep = time.sleep

    @property
    def name(self) -> str:
        return self.profile.metadata.name

    @property
    def namespace(self) -> str:
        return self.profile.metadata.namespace

    @property
    def canary(self) -> CanarySpec:
        assert self.profile.rollout.canary is not None
        return self.profile.rollout.canary


def of(
    kube: Kube,
    profile: Profile,
    objects: list[dict[str, Any]],
    live: releases.Record | None,
    spec: verify.GateSpec,
    mode: str,
    report: verify.Reporter,
    lock: ReleaseLock,
) -> Canary | None:
    """The canary run of an apply; None when there is nothing to compare it with: no canary asked, a
    first install, or an update that replaces no pod (preflight placed no canary: ``mode`` empty)."""
    if profile.rollout.canary is None:
        return None
    if live is None or not mode:
        why = "a first install has no stable copies" if live is None else "this update replaces no pod"
        report("apply", f"rollout.canary has nothing to run: {why}")
        return None
    return Canary(kube, profile, objects, live, spec, mode, report, lock.lost_reason)


def first(c: Canary, draft: writer.Draft, description: str, timings: Timings) -> tuple[writer.Draft, Outcome | None]:
    """Run the canary's steps before the promotion: the draft to promote, with the evidence, and None;
    or the outcome of a failed canary, recorded."""
    steps = run(c, timings)
    draft = dataclasses.replace(draft, canary=steps.evidence)
    return draft, failed(c, steps, draft, description, timings) if steps.failure is not None else None


def run(c: Canary, timings: Timings) -> Steps:
    """Run every step; a failed one ends with the canary removed and the stable copies whole."""
    replicas = c.profile.rollout.replicas
    evidence: dict[str, Any] = {"mode": c.mode, "traffic": c.canary.traffic, "source": c.canary.metrics.source}
    steps: list[dict[str, Any]] = []
    evidence["steps"] = steps
    first = canary_workload.deployment(c.objects, c.name, c.canary.steps[0].canary_copies(replicas))
    # Never over an object the release does not own (a takeover), before the first write.
    confine.before_writing(c.name, c.namespace, [first], c.kube.get, "the canary Deployment", adopt=False)
    judged, failure = verify.Judgement(None), None
    try:
        with timings.phase(STAGE):
            for index, step in enumerate(c.canary.steps):
                judged_step, failure, entry = _step(c, index, step, timings)
                judged = judged_step if index == 0 else judged
                steps.append(entry)
                if failure is not None:
                    break
    except Exception as e:  # every exit after the first write removes the canary
        failure = sequence.unexpected_failure(e, STAGE)
    evidence["result"] = "passed" if failure is None else "failed"
    if failure is None:
        c.report(STAGE, "the canary passed every step: promoting it to every copy")
    else:
        evidence["failed_step"] = len(steps)
        evidence["removed"] = _remove(c)
    return Steps(failure, judged, evidence)


def _step(
    c: Canary, index: int, step: Step, timings: Timings
) -> tuple[verify.Judgement, Failure | None, dict[str, Any]]:
    """Size the canary for step ``index``, gate it (the smoke run on the first step only) and judge a
    window of live traffic."""
    replicas, total = c.profile.rollout.replicas, len(c.canary.steps)
    copies = step.canary_copies(replicas)
    entry: dict[str, Any] = {"step": index + 1, "copies": copies, "of": replicas}
    c.report(STAGE, f"step {index + 1}/{total}: the new revision on {copies} of {replicas} copies ({c.mode})")
    if c.mode == "replace":
        _scale_stable(c, replicas - copies)
    c.kube.apply(canary_workload.deployment(c.objects, c.name, copies))
    spec = dataclasses.replace(
        c.spec, workload=canary_workload.workload_name(c.name), endpoint=None, endpoint_own=False, group=None
    )
    if index > 0:
        spec = dataclasses.replace(spec, smoke=None)  # the smoke run judged the revision on step 1
    judged = verify.verify(
        c.kube, c.name, c.namespace, spec, c.live.gate, c.report, timings, abort=c.abort, phase=STAGE
    )
    if judged.smoke is not None:
        entry["gate"] = judged.smoke.verdict.label
    if judged.failure is not None:
        entry["decision"] = "fail"
        return judged, judged.failure, entry
    analysis, windows, decision = _judge(c, step)
    entry.update(windows=windows, decision=decision, analysis=analysis.to_json())
    if decision == "pass":
        return judged, None, entry
    if (lost := c.abort()) is not None:
        return judged, Failure("lock_lost", lost, STAGE), entry
    why = (
        analysis.reason
        if analysis.verdict == "fail"
        else f"inconclusive ({analysis.reason}), policy {c.canary.inconclusive}"
    )
    if analysis.verdict == "inconclusive" and c.canary.inconclusive == "wait":
        why = f"still inconclusive after rollout.canary.maxWait {c.canary.maxWait}: {analysis.reason}"
    message = f"the canary failed step {index + 1} of {total} on live traffic: {why}"
    return judged, Failure(FAILED, message, STAGE), entry


def _judge(c: Canary, step: Step) -> tuple[canary_analysis.Analysis, int, str]:
    """The step's analysis, window after window while it is inconclusive and the policy waits; with
    how many windows it took and the decision (pass or fail) the policy makes of the last."""
    window = conventions.prometheus_seconds(step.analysis.window)
    max_wait = conventions.prometheus_seconds(c.canary.maxWait)
    started, windows = time.monotonic(), 0
    while True:
        analysis = _window(c, step, window)
        windows += 1
        c.report(STAGE, f"window {windows}: {analysis.verdict}: {analysis.reason} ({_share(analysis)})")
        if analysis.verdict != "inconclusive" or c.abort() is not None:
            return analysis, windows, "pass" if analysis.verdict == "pass" else "fail"
        if c.canary.inconclusive != "wait":
            return analysis, windows, c.canary.inconclusive
        if time.monotonic() - started + window > max_wait:
            return analysis, windows, "fail"


def _share(analysis: canary_analysis.Analysis) -> str:
    share = analysis.canary_share
    if share != share:  # NaN: no request on either side
        return "no requests on either side"
    return f"the canary answered {share:.0%} of {analysis.canary.requests + analysis.stable.requests:g} requests"


def _window(c: Canary, step: Step, window: float) -> canary_analysis.Analysis:
    """Read every serving pod's metrics each interval for ``window`` seconds, and judge the growth."""
    engine = c.profile.engine
    table = metric_table.table(engine.kind, engine.engine_version)
    interval = conventions.prometheus_seconds(c.canary.metrics.interval)
    targets = serving_pods(c.kube, c.name, c.namespace)
    with pod_metrics.Reader(c.kube, c.namespace, targets, table.path) as reader:
        first = last = reader.read()
        deadline = time.monotonic() + window
        while (left := deadline - time.monotonic()) > 0:
            if c.abort() is not None:
                break
            c.sleep(min(interval, left))
            last = reader.read()
    slo = slo_language.parse_slo(c.profile.gate.smoke.slo)
    return canary_analysis.analyse(table, first.scrapes, last.scrapes, window, c.canary, step.analysis.minRequests, slo)


def serving_pods(kube: Kube, name: str, namespace: str) -> dict[str, pod_metrics.Target]:
    """The release's Ready pods that serve (a port named http), by side: the canary's carry the track."""
    pods, _ = kube.list("Pod", namespace, labels=f"{conventions.RELEASE_LABEL}={name}")
    targets: dict[str, pod_metrics.Target] = {}
    for pod in pods:
        port = _http_port(pod)
        if port is None or pod["metadata"].get("deletionTimestamp") or not kube_status.Pod.from_object(pod).ready:
            continue
        labels = pod["metadata"].get("labels") or {}
        track = canary_workload.CANARY if labels.get(conventions.TRACK_LABEL) == canary_workload.CANARY else "stable"
        targets[kube_status.name_of(pod)] = pod_metrics.Target(track, port)
    return targets


def _http_port(pod: Mapping[str, Any]) -> int | None:
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == "http" and isinstance(port.get("containerPort"), int):
                return int(port["containerPort"])
    return None


def _scale_stable(c: Canary, replicas: int) -> None:
    """The stable Deployment on ``replicas`` copies; its pod template is left as it is."""
    c.kube.merge_patch("Deployment", c.name, c.namespace, {"spec": {"replicas": replicas}})


def _remove(c: Canary) -> list[str]:
    """Delete the canary and give the stable copies back what a replacing canary took; what is left
    to a person (empty when the stable copies are whole again)."""
    left = []
    try:
        c.kube.delete("Deployment", canary_workload.workload_name(c.name), c.namespace)
        c.report(STAGE, "the canary was removed; the stable copies were never changed")
    except errors.DeployctlError as e:
        left.append(f"the canary Deployment could not be deleted: {e.message}")
    if c.mode == "replace":
        try:
            _scale_stable(c, c.profile.rollout.replicas)
            wait = watching.Wait(c.spec.rollout_timeout, lambda m: c.report(STAGE, m), lambda: None)
            back = rollout.watch_rollout(c.kube, c.namespace, c.name, wait, engine=c.spec.engine)
            if not back.ok and back.failure is not None:
                left.append(f"the stable copies did not come back: {back.failure.message}")
        except errors.DeployctlError as e:
            left.append(f"the stable copies could not be scaled back: {e.message}")
    return left


def failed(c: Canary, steps: Steps, draft: writer.Draft, description: str, timings: Timings) -> Outcome:
    """Record the revision whose canary failed, with the evidence; the stable copies still serve the
    live revision, so nothing is restored and no rollback revision is written."""
    assert steps.failure is not None
    failure, live = steps.failure, c.live
    c.report(failure.stage, f"FAILED ({failure.cls}): {failure.message}")
    left = steps.evidence.get("removed") or []
    try:
        record = sequence.record_revision(
            c.kube, draft, "failed", f"{description} failed its canary: {failure.cls}", steps.judged, failure
        )
        what = f"revision {record.revision} failed ({failure.cls})"
        revision: int | None = record.revision
    except errors.DeployctlError as e:
        what, revision = (
            f"the new revision failed ({failure.cls}) and its record could not be written ({e.message})",
            None,
        )
    smoke = steps.judged.smoke
    if left:
        message = f"{what}; removing its canary did not finish: {'; '.join(left)}. {failure.message}"
        return Outcome("rollback_failed", c.name, c.namespace, message, revision, failure, timings, smoke)
    message = (
        f"{what} in its canary and was rolled back: the canary was removed, and the stable copies of revision "
        f"{live.revision} kept serving, never changed. {failure.message}"
    )
    return Outcome(
        "rolled_back", c.name, c.namespace, message, revision, failure, timings, smoke, rolled_back_to=live.revision
    )
