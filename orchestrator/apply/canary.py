"""rollout.canary's steps: the new revision on a few copies, judged on live traffic beside the stable
copies, before the promotion moves every copy (``orchestrator.apply.pipeline`` promotes).

Step 1 starts the canary's copies (``canary_copies``: a Deployment, or for copies that span nodes
one RayCluster each) and runs the existing gate on its pods alone: rollout watch, health, smoke.
Every step then reads each serving pod's metrics (``pod_metrics``, or the same series from a
Prometheus: ``prom_metrics``) over its analysis window and judges the canary against the stable
copies (``gate.canary_analysis``); a later step first grows the canary to its size. Where preflight
found no room beside the stable copies (``replace``), each step takes as many stable copies away as
the canary runs. A failed step, or anything unexpected, removes the canary and gives the stable
copies back what was taken: no stable pod template is ever written, so no stable pod restarts. What
each step measured is the evidence the record keeps (``Steps.evidence``). A passed canary of copies
across nodes is removed before the promotion, which starts every copy of the new revision whole.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from orchestrator import conventions, errors
from orchestrator.apply import (
    canary_control,
    canary_copies,
    canary_route,
    pod_metrics,
    prom_metrics,
    sequence,
    verify,
)
from orchestrator.apply.lock import ReleaseLock
from orchestrator.apply.outcome import Failure, Outcome, Timings
from orchestrator.engines import metric_table
from orchestrator.gate import canary_analysis, live_metrics
from orchestrator.kube import Kube
from orchestrator.profile import slo as slo_language
from orchestrator.profile.canary import CanarySpec, Step
from orchestrator.profile.model import Profile
from orchestrator.records import releases, writer
from orchestrator.render import canary as canary_workload

STAGE = "canary"
FAILED = "canary_failed"  # the failure class of a step whose live traffic judged the canary worse
ABORTED = "canary_aborted"  # `deployctl rollout abort`
Sleep = Callable[[float], None]


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
    copies: canary_copies.Copies  # where the canary runs, and the stable copies `replace` takes and gives back
    route: canary_route.LiveRoute | None = None  # what the steps weigh (traffic httpRoute on a live route)
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
    route = _live_route(profile, live, report) if profile.rollout.canary.traffic == "httpRoute" else None
    copies = canary_copies.of(kube, profile, objects, live.manifests)
    return Canary(kube, profile, objects, live, spec, mode, report, lock.lost_reason, copies, route)


def _live_route(profile: Profile, live: releases.Record, report: verify.Reporter) -> canary_route.LiveRoute | None:
    """The live revision's route to weigh; None, said, when it has none or one that is not the release's own."""
    try:
        route = canary_route.live_route(live.manifests, profile.metadata.name, profile.metadata.namespace)
    except errors.OutsideRelease as e:
        report(
            STAGE,
            f"the live revision's HTTPRoute is never applied, so the Service spreads this canary's traffic: "
            f"{e.message}",
        )
        return None
    if route is None:
        report(STAGE, "the live revision has no HTTPRoute yet: the Service spreads this canary's traffic")
    return route


def first(c: Canary, draft: writer.Draft, description: str, timings: Timings) -> tuple[writer.Draft, Outcome | None]:
    """Run the canary's steps before the promotion: the draft to promote, with the evidence, and None;
    or the outcome of a failed canary, recorded."""
    steps = run(c, timings)
    draft = dataclasses.replace(draft, canary=steps.evidence)
    return draft, failed(c, steps, draft, description, timings) if steps.failure is not None else None


def run(c: Canary, timings: Timings) -> Steps:
    """Run every step; a failed one ends with the canary removed and the stable copies whole. A person
    may promote, abort, pause or resume it meanwhile (``canary_control``)."""
    replicas = c.profile.rollout.replicas
    evidence: dict[str, Any] = {"mode": c.mode, "traffic": c.canary.traffic, "source": c.canary.metrics.source}
    steps: list[dict[str, Any]] = []
    evidence["steps"] = steps
    judged, failure, result = verify.Judgement(None), None, "passed"
    try:
        with timings.phase(STAGE):
            for index, step in enumerate(c.canary.steps):
                steps.append({"step": index + 1, "copies": step.canary_copies(replicas), "of": replicas})
                judged_step, failure = _step(c, index, step, timings, steps[-1])
                judged = judged_step if index == 0 else judged
                if failure is not None:
                    break
    except _ByHand as by_hand:
        steps[-1]["decision"] = by_hand.command.verb
        evidence["promoted_by" if by_hand.command.verb == "promote" else "aborted_by"] = by_hand.command.to_json()
        if by_hand.command.verb == "abort":
            what = f"{by_hand.command.by} aborted the canary in step {len(steps)} (`deployctl rollout abort`)"
            failure = Failure(ABORTED, what, STAGE)
        else:
            result = "promoted"
            c.report(
                STAGE, f"{by_hand.command.by} promoted the canary in step {len(steps)} (`deployctl rollout promote`)"
            )
    except Exception as e:  # every exit after the first write removes the canary
        failure = sequence.unexpected_failure(e, STAGE)
    except BaseException:  # Ctrl-C, SIGTERM: the canary goes too, the stable copies get back what it took
        _remove(c, wait=False)  # no waiting: a pod's grace period may end any moment
        raise
    if failure is None:
        failure = _before_promotion(c)
    evidence["result"] = result if failure is None else "failed"
    if failure is None:
        c.report(STAGE, "the canary passed: promoting it to every copy")
    else:
        evidence["failed_step"] = len(steps)
        evidence["removed"] = _remove(c)
    return Steps(failure, judged, evidence)


def _before_promotion(c: Canary) -> Failure | None:
    """After the steps passed: the lock still held, the route back to one backend, and a canary of copies
    across nodes removed (the promotion's copies need its GPUs); or the failure that stops the promotion."""
    try:
        if (lost := c.abort()) is not None:  # the promotion must not run without the lock
            return Failure("lock_lost", lost, STAGE)
        if c.route is not None and (failure := _unweigh_passed(c)) is not None:
            return failure
        return _free_passed(c) if c.copies.spans_nodes else None
    except Exception as e:  # the caller removes the canary, as after a failed step
        return sequence.unexpected_failure(e, STAGE)
    except BaseException:  # Ctrl-C, SIGTERM: as during the steps
        _remove(c, wait=False)
        raise


class _ByHand(Exception):
    """`deployctl rollout promote` or `abort` ends the steps where they are."""

    def __init__(self, command: canary_control.Command) -> None:
        super().__init__(command.verb)
        self.command = command


def _step(
    c: Canary, index: int, step: Step, timings: Timings, entry: dict[str, Any]
) -> tuple[verify.Judgement, Failure | None]:
    """Size the canary for step ``index``, gate it (the smoke run on the first step only) and judge
    live traffic; what it found goes into ``entry``."""
    replicas, total, copies = c.profile.rollout.replicas, len(c.canary.steps), entry["copies"]
    _publish(c, entry, "starting")
    if index == 0:  # a command an earlier, interrupted run left on its canary is not this one's
        canary_control.clear(c.kube, c.name, c.namespace)
    else:  # a pause between steps holds the next one
        _checkpoint(c, entry)
    if (lost := c.abort()) is not None:  # nothing is written without the lock
        entry["decision"] = "fail"
        return verify.Judgement(None), Failure("lock_lost", lost, STAGE)
    c.report(STAGE, f"step {index + 1}/{total}: the new revision on {copies} of {replicas} copies ({c.mode})")
    if c.mode == "replace":
        canary_copies.take_stable(c.copies, copies, c.spec.rollout_timeout)
    canary_copies.start(c.copies, copies, timeout=c.spec.rollout_timeout)
    spec = canary_copies.gate_spec(c.copies, c.spec, copies)
    if index > 0:
        spec = dataclasses.replace(spec, smoke=None)  # the smoke run judged the revision on step 1
    _publish(c, entry, "gate")
    judged = verify.verify(
        c.kube, c.name, c.namespace, spec, c.live.gate, c.report, timings, abort=c.abort, phase=STAGE
    )
    if judged.smoke is not None:
        entry["gate"] = judged.smoke.verdict.label
    if judged.failure is not None:
        entry["decision"] = "fail"
        return judged, judged.failure
    if c.route is not None:
        percent = canary_route.canary_percent(copies, replicas)
        entry["weights"] = canary_route.weigh(c.kube, c.route, c.objects, c.name, c.namespace, percent, c.sleep)
        c.report(STAGE, f"the HTTPRoute sends {percent}% of its requests to the canary")
    analysis, windows, decision = _judge(c, step, entry)
    entry.update(windows=windows, decision=decision, analysis=analysis.to_json())
    if (lost := c.abort()) is not None:  # a window cut short by a lost lock judges nothing
        return judged, Failure("lock_lost", lost, STAGE)
    if decision == "pass":
        return judged, None
    why = (
        analysis.reason
        if analysis.verdict == "fail"
        else f"inconclusive ({analysis.reason}), policy {c.canary.inconclusive}"
    )
    if analysis.verdict == "inconclusive" and c.canary.inconclusive == "wait":
        why = f"still inconclusive after rollout.canary.maxWait {c.canary.maxWait}: {analysis.reason}"
    return judged, Failure(FAILED, f"the canary failed step {index + 1} of {total} on live traffic: {why}", STAGE)


def _judge(c: Canary, step: Step, entry: dict[str, Any]) -> tuple[canary_analysis.Analysis, int, str]:
    """The step's analysis, window after window while it is inconclusive and the policy waits; with
    how many windows it took and the decision (pass or fail) the policy makes of the last. A pause
    starts the window again, and time spent paused does not count toward maxWait."""
    window = conventions.prometheus_seconds(step.analysis.window)
    max_wait = conventions.prometheus_seconds(c.canary.maxWait)
    started, windows, paused, last = time.monotonic(), 0, 0.0, dict[str, object]()
    while True:
        _publish(c, entry, "analysing", window=windows + 1, last=last or None)
        analysis, held = _window(c, step, window, entry)
        paused += held
        if analysis is None:  # paused and resumed: the pods may have changed meanwhile, read them again
            continue
        windows += 1
        c.report(STAGE, f"window {windows}: {analysis.verdict}: {analysis.reason} ({_share(analysis)})")
        share = analysis.canary_share
        last = {
            "verdict": analysis.verdict,
            "reason": analysis.reason,
            "canary_share": share if share == share else None,
        }
        if analysis.verdict != "inconclusive" or c.abort() is not None:
            return analysis, windows, "pass" if analysis.verdict == "pass" else "fail"
        if c.canary.inconclusive != "wait":
            return analysis, windows, c.canary.inconclusive
        if time.monotonic() - started - paused + window > max_wait:
            return analysis, windows, "fail"


def _share(analysis: canary_analysis.Analysis) -> str:
    share = analysis.canary_share
    if share != share:  # NaN: no request on either side
        return "no requests on either side"
    return f"the canary answered {share:.0%} of {analysis.canary.requests + analysis.stable.requests:g} requests"


def _window(
    c: Canary, step: Step, window: float, entry: dict[str, Any]
) -> tuple[canary_analysis.Analysis | None, float]:
    """Read every serving pod's metrics each interval for ``window`` seconds, and judge the growth;
    None with the seconds held when a pause interrupted it (the caller starts it again)."""
    engine = c.profile.engine
    table = metric_table.table(engine.kind, engine.engine_version)
    interval = _read_interval(c)
    targets = pod_metrics.serving_pods(c.kube, c.name, c.namespace)
    first, last = dict[str, live_metrics.Scrape](), dict[str, live_metrics.Scrape]()
    silent: dict[str, str] = {}  # pod -> why its last read went unanswered

    def read() -> None:  # each pod's first and last answer: a missed read neither drops nor inflates a pod
        answered = reader.read()
        for scrape in answered.scrapes:
            first.setdefault(scrape.pod, scrape)
            last[scrape.pod] = scrape
            silent.pop(scrape.pod, None)
        silent.update(answered.unanswered)

    with _reader(c, table, targets) as reader:
        read()
        deadline = time.monotonic() + window
        while (left := deadline - time.monotonic()) > 0:
            if c.abort() is not None:
                break
            c.sleep(min(interval, left))
            if (held := _checkpoint(c, entry)) > 0:
                return None, held
            read()
    if never := {pod: why for pod, why in silent.items() if pod not in last}:
        c.report(STAGE, "no metrics in this window from " + "; ".join(f"{pod}: {why}" for pod, why in never.items()))
    slo = slo_language.parse_slo(c.profile.gate.smoke.slo)
    stable_expected = any(t.track == canary_workload.STABLE for t in targets.values())
    analysis = canary_analysis.analyse(
        table,
        list(first.values()),
        list(last.values()),
        window,
        c.canary,
        step.analysis.minRequests,
        slo,
        stable_expected=stable_expected,
    )
    return analysis, 0.0


def _read_interval(c: Canary) -> float:
    """How often a window reads: the metrics interval from the pods, the PodMonitor's from Prometheus
    (reading it faster sees the same scrape twice)."""
    metrics = c.canary.metrics
    if metrics.source == "prometheus":
        return max(1.0, conventions.prometheus_seconds(c.profile.monitoring.podMonitor.interval))
    return conventions.prometheus_seconds(metrics.interval)


def _reader(
    c: Canary, table: metric_table.MetricTable, targets: dict[str, pod_metrics.Target]
) -> pod_metrics.Reader | prom_metrics.Reader:
    metrics = c.canary.metrics
    if metrics.source == "prometheus" and metrics.prometheusUrl:
        return prom_metrics.Reader(metrics.prometheusUrl, table, c.namespace, c.name, targets)
    return pod_metrics.Reader(c.kube, c.namespace, targets, table.path)


def _checkpoint(c: Canary, entry: dict[str, Any]) -> float:
    """Act on the last command sent: raise ``_ByHand`` for promote and abort, and hold while paused;
    the seconds it held (0 when not paused). A canary deleted meanwhile (its Deployment, or every canary
    RayCluster) is an abort; an annotation that cannot be read keeps the pause (a passing API error
    resumes nothing)."""
    command = canary_control.read(c.kube, c.name, c.namespace)
    if command is None or command.verb == "resume":
        return 0.0
    if command.verb != "pause":
        raise _ByHand(command)
    held = time.monotonic()
    c.report(STAGE, f"paused by {command.by}: waiting for `deployctl rollout resume`, `promote` or `abort`")
    _publish(c, entry, "paused", by=command.by)
    interval = conventions.prometheus_seconds(c.canary.metrics.interval)
    verb: str | None = "pause"
    while verb == "pause" and c.abort() is None:
        c.sleep(interval)
        if canary_copies.gone(c.copies):
            raise _ByHand(canary_control.Command("abort", "whoever deleted the canary", ""))
        command = canary_control.read(c.kube, c.name, c.namespace) or command  # unreadable: still paused
        verb = command.verb
    if verb in ("promote", "abort"):
        raise _ByHand(command)
    c.report(STAGE, "resumed" if verb == "resume" else "the pause ended: the release lock was lost")
    _publish(c, entry, "analysing")
    return max(time.monotonic() - held, 1e-3)


def _publish(c: Canary, entry: dict[str, Any], state: str, **extra: object) -> None:
    progress = {
        "state": state,
        "step": entry["step"],
        "steps": len(c.canary.steps),
        "copies": entry["copies"],
        "of": entry["of"],
        "mode": c.mode,
        "stable_revision": c.live.revision,
        **{k: v for k, v in extra.items() if v is not None},
    }
    canary_control.publish(c.kube, c.name, c.namespace, progress)


def _remove(c: Canary, *, wait: bool = True) -> list[str]:
    """Delete the canary and give the stable copies back what a replacing canary took (and, with
    ``wait``, wait until they are back); what is left to a person (empty when all went)."""
    left = _unweigh(c, wait=wait) if c.route is not None else []
    if c.mode == "replace" and wait:  # the stable copies given back need the GPUs the canary's pods hold
        left += canary_copies.free(c.copies, c.spec.rollout_timeout)
    else:
        left += canary_copies.remove(c.copies)
    with contextlib.suppress(Exception):  # a progress line never stops the clean-up
        c.report(STAGE, "the canary was removed" if not left else "removing the canary did not finish")
    if c.mode == "replace":
        left += canary_copies.give_back(c.copies, wait=wait, timeout=c.spec.rollout_timeout, engine=c.spec.engine)
    return left


def _free_passed(c: Canary) -> Failure | None:
    """After the last step passed, for copies across nodes: the canary's RayClusters deleted and their
    pods gone, or the failure that stops the promotion (it would find no GPUs for its copies)."""
    c.report(STAGE, "removing the canary's copies: the promotion starts every copy of the new revision whole")
    left = canary_copies.free(c.copies, c.spec.rollout_timeout)
    return Failure("cluster_error", "; ".join(left), STAGE) if left else None


def _unweigh(c: Canary, *, wait: bool) -> list[str]:
    """Give the route back and, after the drain (with ``wait``), delete the two sides' Services; what is left."""
    assert c.route is not None
    if (problem := canary_route.give_back(c.kube, c.route)) is not None:
        return [problem]  # the Services stay while the route may still send to them
    if wait:
        c.sleep(canary_route.DRAIN_S)
    return canary_route.delete_sides(c.kube, c.name, c.namespace)


def _unweigh_passed(c: Canary) -> Failure | None:
    """After the last step passed: the route back (or the failure that stops the promotion); Services
    left over are said, and the promotion's prune removes them."""
    assert c.route is not None
    if (problem := canary_route.give_back(c.kube, c.route)) is not None:
        return Failure("cluster_error", problem, STAGE)
    c.sleep(canary_route.DRAIN_S)
    for leftover in canary_route.delete_sides(c.kube, c.name, c.namespace):
        c.report(STAGE, f"warning: {leftover}")
    return None


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
    kept = "their pods never changed" if c.mode == "beside" else "their pods never changed, their copies given back"
    message = (
        f"{what} in its canary and was rolled back: the canary was removed, and the stable copies of revision "
        f"{live.revision} kept serving, {kept}. {failure.message}"
    )
    return Outcome(
        "rolled_back", c.name, c.namespace, message, revision, failure, timings, smoke, rolled_back_to=live.revision
    )
