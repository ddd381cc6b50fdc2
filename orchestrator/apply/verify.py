"""Judge a rolled-out revision: watch the rollout, health-gate every new pod, then the smoke gate.

One step shared by apply, the GitOps gate and rollback, so the three judge a revision the same
way. It writes nothing: the caller records what it returns.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from orchestrator import conventions, engines, errors
from orchestrator.apply import group_rollout, health, rollout, time_to_serving, watching
from orchestrator.apply.outcome import Failure, Timings
from orchestrator.engines import startup_log
from orchestrator.gate import metrics
from orchestrator.gate import verdict as gate
from orchestrator.gate.bench_report import BenchReport
from orchestrator.kube import Kube, PortForwarder
from orchestrator.kube import status as kube_status
from orchestrator.kube.status import Object, mapping, mappings
from orchestrator.profile import gate_auth, gate_endpoint, slo
from orchestrator.profile.model import Profile
from orchestrator.records import releases

GATE_ERROR_RETRIES = 2  # an Error verdict (could not measure) is retried before it counts
# A run the benchmark client could not keep up with (a busy deployctl host) is measured once more
# before its inconclusive verdict stands: the host's load is often a passing spike.
GATE_CLIENT_BOUND_RETRIES = 1
# The start-up lines come first in a pod's log; this much of it holds them even with verbose logging.
STARTUP_LOG_BYTES = 4 << 20

Reporter = Callable[[str, str], None]  # (phase, message)
Abort = Callable[[], "str | None"]  # why to stop now (the lock was lost), or None to go on


@dataclasses.dataclass(frozen=True)
class GateSpec:
    """How to judge a rolled-out revision: where its pods serve and how long each step may take."""

    model: str
    port: int
    endpoint: str | None
    rollout_timeout: float
    health_timeout: float
    smoke: Profile | None  # the profile whose smoke gate runs; None: health only
    max_num_seqs: int = 0  # engine.maxNumSeqs, to check the observed concurrency against; 0: unknown
    group: group_rollout.GroupWatch | None = None  # copies that span nodes; None: a Deployment
    engine: str = engines.DEFAULT_KIND  # whose crash lines and start-up log to read
    health_path: str = "/health"  # the engine's "model loaded" endpoint
    api_key_secret: gate_auth.ApiKeySecret | None = None  # gate.apiKeySecret: the server wants a key
    endpoint_own: bool = False  # the endpoint is the release's own Service: the API key may go there
    note: str | None = None  # what the gate changed about a stored revision's settings, to report
    workload: str | None = None  # the Deployment that runs the revision; None: the release's own (a canary's: not)

    @property
    def sends_key(self) -> bool:
        """Whether the gate reads gate.apiKeySecret and sends the key: only to the release's own pods
        (port-forwards) or its own Service, never to another host."""
        return self.api_key_secret is not None and (self.endpoint is None or self.endpoint_own)


def gate_target(
    profile: Profile, endpoint: str | None, allowed_hosts: tuple[str, ...] = ()
) -> gate_endpoint.Target | None:
    """The endpoint the gate uses for ``profile`` (``--endpoint`` over gate.endpoint), or None: port-forwards.

    Refused before anything is written: a host that is neither the release's own Service nor allowed
    (exit 2 for the profile's gate.endpoint, 1 for --endpoint), and an API key bound for a foreign host.
    """
    name, namespace = profile.metadata.name, profile.metadata.namespace
    url, source = (endpoint, "--endpoint") if endpoint else (profile.gate.endpoint, gate_endpoint.FIELD)
    if url is None:
        return None
    problem: type[errors.DeployctlError] = errors.UsageError if endpoint else errors.InvalidProfile
    try:
        target = gate_endpoint.resolve(
            url, release=name, namespace=namespace, allowed_hosts=allowed_hosts, typed=bool(endpoint), source=source
        )
    except gate_endpoint.Refused as e:
        raise problem(e.message) from e
    if profile.gate.apiKeySecret is not None and not target.own:
        raise problem(gate_endpoint.key_refused(target, name, namespace, source))
    return target


def spec_of(
    profile: Profile,
    objects: Sequence[Object],
    *,
    timeout: float | None,
    endpoint: str | None,
    skip_bench: bool,
    allowed_hosts: tuple[str, ...] = (),
) -> GateSpec:
    """The gate a profile asks for, of its rendered ``objects``; ``timeout`` and ``endpoint`` are the
    command line's overrides, ``allowed_hosts`` the gate hosts the operator allows beside the release's own."""
    target = gate_target(profile, endpoint, allowed_hosts)
    deadline = timeout or float(profile.rollout.progressDeadlineSeconds)
    settings = profile.server_settings()
    return GateSpec(
        model=profile.engine.engine.served_id(settings.served_name, settings.model_path),
        port=profile.engine.port,
        endpoint=target.url if target else None,
        rollout_timeout=deadline,
        health_timeout=min(deadline, float(profile.gate.health.timeoutSeconds)),
        smoke=profile if profile.gate.smoke.enabled and not skip_bench else None,
        max_num_seqs=profile.engine.maxNumSeqs,
        group=group_watch(objects, float(profile.rollout.groupJoinSeconds)),
        engine=profile.engine.kind,
        health_path=profile.engine.engine.health_path,
        api_key_secret=profile.gate.apiKeySecret,
        endpoint_own=target.own if target else False,
    )


def group_watch(objects: Sequence[Object], join_seconds: float) -> group_rollout.GroupWatch | None:
    """The copies across nodes among ``objects`` (RayClusters), or None when a Deployment runs them."""
    copies = [o for o in objects if o.get("kind") == "RayCluster"]
    if not copies:
        return None
    groups = mappings(mapping(copies[0].get("spec")).get("workerGroupSpecs"))
    workers = sum(kube_status.number(g.get("replicas")) for g in groups)
    names = tuple(kube_status.name_of(o) for o in copies)
    return group_rollout.GroupWatch(copies=names, size=workers + 1, join_seconds=join_seconds)


def _serving_pod(objects: Sequence[Object]) -> Object:
    """The pod template that serves HTTP: the Deployment's, or a copy's Ray head."""
    for obj in objects:
        spec = mapping(obj.get("spec"))
        if obj.get("kind") == "Deployment":
            return mapping(spec.get("template"))
        if obj.get("kind") == "RayCluster":
            return mapping(mapping(spec.get("headGroupSpec")).get("template"))
    return {}


def _number(value: object, default: float) -> float:
    """A number a stored manifest or profile gives (an int, a float or its text), else ``default``."""
    return float(value) if isinstance(value, (int, float, str)) and not isinstance(value, bool) else default


def stored_spec(
    target: releases.Record,
    objects: Sequence[Object],
    *,
    timeout: float | None,
    endpoint: str | None,
    allowed_hosts: tuple[str, ...] = (),
) -> GateSpec:
    """Health-gate settings for a stored revision, read from its own manifests and profile text.

    No smoke run: a rollback restores what ran before, and health decides at 3 a.m. A stored
    gate.endpoint that the rules refuse (an edited record) is not used: the gate port-forwards to the
    release's own pods instead, and says so.
    """
    deployment = next((o for o in objects if o.get("kind") == "Deployment"), {})
    container = (mappings(mapping(_serving_pod(objects).get("spec")).get("containers")) or [{}])[0]
    ports = mappings(container.get("ports")) or [{}]
    settings = target.stored_settings()
    health_section = settings.get("health")
    health_timeout = health_section.get("timeoutSeconds", 1800) if isinstance(health_section, dict) else 1800
    stored_rollout = target.stored_section("rollout")
    progress_deadline = stored_rollout.get("progressDeadlineSeconds", 1800)
    stored_deadline = mapping(deployment.get("spec")).get("progressDeadlineSeconds", progress_deadline)
    deadline = timeout or _number(stored_deadline, 1800)
    join_seconds = stored_rollout.get("groupJoinSeconds", 600)
    # A revision written before deployctl served other engines has no engine.kind: it is vLLM's.
    kind = target.stored_section("engine").get("kind", engines.DEFAULT_KIND)
    engine = kind if kind in engines.KINDS else engines.DEFAULT_KIND
    probe = mapping(mapping(container.get("readinessProbe")).get("httpGet"))
    stored_source = target.stored_section("model").get("source")
    source = stored_source if isinstance(stored_source, dict) else {}
    model_path = str(source.get("path") or source.get("mountPath") or "/models")
    gated, note = _stored_target(target, endpoint, settings.get("endpoint"), allowed_hosts)
    return GateSpec(
        model=engines.get(engine).served_id(target.model.name, model_path),
        port=int(_number(ports[0].get("containerPort"), 8000)),
        endpoint=gated.url if gated else None,
        rollout_timeout=deadline,
        health_timeout=min(deadline, float(health_timeout)),
        smoke=None,
        group=group_watch(objects, float(join_seconds)),
        engine=engine,
        health_path=str(probe.get("path") or engines.get(engine).health_path),
        api_key_secret=_stored_key_secret(settings.get("apiKeySecret")),
        endpoint_own=gated.own if gated else False,
        note=note,
    )


def _stored_target(
    target: releases.Record, endpoint: str | None, stored: object, allowed_hosts: tuple[str, ...]
) -> tuple[gate_endpoint.Target | None, str | None]:
    """The gate's target for a stored revision, and a note when its stored endpoint was set aside."""
    release, namespace = target.release, target.namespace
    if endpoint:  # typed by the operator: a refusal is the operator's to fix, exit 1
        try:
            typed = gate_endpoint.resolve(
                endpoint, release=release, namespace=namespace, typed=True, source="--endpoint"
            )
        except gate_endpoint.Refused as e:
            raise errors.UsageError(e.message) from e
        return typed, None
    if not isinstance(stored, str) or not stored:
        return None, None
    try:
        return gate_endpoint.resolve(stored, release=release, namespace=namespace, allowed_hosts=allowed_hosts), None
    except gate_endpoint.Refused as e:
        return None, f"not using the revision's stored gate endpoint ({e.message}); gating through port-forwards"


def _stored_key_secret(stored: object) -> gate_auth.ApiKeySecret | None:
    """The stored revision's gate.apiKeySecret: a rollback's health gate needs the same key."""
    if not isinstance(stored, dict):
        return None
    try:
        return gate_auth.ApiKeySecret.model_validate(stored)
    except ValueError:  # pydantic's ValidationError: a record edited by hand; gate without a key
        return None


@dataclasses.dataclass(frozen=True)
class Judgement:
    """What verify found: the failure (None when the revision passed), the smoke verdict (None when
    it did not run), what each new pod's engine logged about its memory at start-up, and how long
    the revision took to serve (None when it never got as far as healthy)."""

    failure: Failure | None
    smoke: gate.GateReport | None = None
    observed: tuple[startup_log.Observation, ...] = ()
    serving: time_to_serving.TimeToServing | None = None

    def observed_json(self) -> list[dict[str, Any]] | None:
        return [o.to_json() for o in self.observed] or None

    def serving_json(self) -> dict[str, object] | None:
        return self.serving.to_json() if self.serving else None


def verify(
    kube: Kube,
    name: str,
    namespace: str,
    spec: GateSpec,
    previous: Mapping[str, object] | None,
    report: Reporter,
    timings: Timings,
    *,
    abort: Abort = lambda: None,
    phase: str = "",
    started: float | None = None,
) -> Judgement:
    """Watch, health-gate, read the start-up logs, smoke-gate; ``previous`` is the live release's
    stored gate report, for the regression check. The time to serving is counted from ``started``
    (``time.monotonic()`` before the first write), else from the call."""
    clock = _Clock(started)
    with timings.phase("rollout"):
        result = _watch(kube, name, namespace, spec, lambda m: report(phase or "rollout", m), abort)
    if not result.ok:
        assert result.failure is not None
        return Judgement(Failure(result.failure.cls, result.failure.message, "rollout"))
    clock.lap("rollout")
    if spec.note is not None:
        report(phase or "health", spec.note)
    secret = spec.api_key_secret if spec.sends_key else None
    try:
        api_key = gate_auth.read(kube.get, namespace, secret) if secret else None
    except gate_auth.ApiKeyUnavailable as e:
        return _could_not_measure(e.message)
    with contextlib.ExitStack() as forwards:
        with timings.phase("health"):  # opening the port-forwards is part of reaching the pods
            urls = forwards.enter_context(pod_urls(kube, namespace, result.new_pods, spec.port, spec.endpoint))
            healthy = _wait_healthy(urls, spec, lambda m: report(phase or "health", m), api_key)
        if healthy.unauthorized is not None:
            return _could_not_measure(gate_auth.refused_message(namespace, spec.api_key_secret, healthy.unauthorized))
        if not healthy.ok:
            return Judgement(
                Failure("health", f"the new pods did not pass the health gate: {healthy.explain()}", "health")
            )
        report(phase or "health", f"healthy: {', '.join(urls)}")
        observed, starts = read_starts(kube, namespace, result.new_pods, spec)
        clock.lap("health")
        if (lost := abort()) is not None:
            return Judgement(Failure("lock_lost", lost, "health"), observed=observed, serving=clock.serving(starts))
        if spec.smoke is None:
            return _judged(Judgement(None, observed=observed, serving=clock.serving(starts)), report, phase)
        with timings.phase("smoke"):
            url = next(iter(urls.values()))
            verdict = run_smoke(spec.smoke, url, previous, report, api_key=api_key, serving_before=clock.total())
            if verdict.verdict is gate.Verdict.ERROR and _refused(verdict):
                refused = gate_auth.refused_message(namespace, spec.api_key_secret, "HTTP 401 on the smoke requests")
                return _could_not_measure(refused, observed)
    serving = clock.serving(starts, verdict.metrics.get(slo.SERVING_METRIC))
    return _judged(_smoke_judgement(verdict, observed, serving), report, phase)


def _wait_healthy(
    urls: dict[str, str], spec: GateSpec, progress: Callable[[str], None], api_key: str | None
) -> health.HealthReport:
    """Every new pod's health path, as ``spec`` says, until it answers or the health timeout passes."""
    return health.wait_healthy(
        urls, spec.model, timeout=spec.health_timeout, path=spec.health_path, progress=progress, api_key=api_key
    )


def _smoke_judgement(
    verdict: gate.GateReport,
    observed: tuple[startup_log.Observation, ...],
    serving: time_to_serving.TimeToServing,
) -> Judgement:
    """The judgement of a smoke run that gave ``verdict``: a Fail missed an SLO, an Error could not measure."""
    if verdict.verdict in (gate.Verdict.FAIL, gate.Verdict.ERROR):
        cls = "slo_failed" if verdict.verdict == gate.Verdict.FAIL else "gate_error"
        return Judgement(Failure(cls, verdict.summary(), "smoke"), verdict, observed, serving)
    return Judgement(None, verdict, observed, serving)


class _Clock:
    """The release's steps of the time to serving (time_to_serving.RELEASE_STEPS), on the monotonic clock."""

    def __init__(self, started: float | None = None) -> None:
        self.start = self.last = time.monotonic() if started is None else started
        self.steps: dict[str, float] = {}

    def lap(self, step: str) -> None:
        now = time.monotonic()
        self.steps[step] = now - self.last
        self.last = now

    def total(self) -> float:
        """Seconds since the start: what the smoke run's first token adds to."""
        return time.monotonic() - self.start

    def serving(
        self, starts: tuple[time_to_serving.PodStart, ...], until_first_token: float | None = None
    ) -> time_to_serving.TimeToServing:
        """The time to serving; ``until_first_token`` is the smoke run's (slo.SERVING_METRIC) when it ran."""
        steps = dict(self.steps)
        if until_first_token is not None:
            steps["first_token"] = max(0.0, until_first_token - sum(steps.values()))
        return time_to_serving.TimeToServing(steps, starts)


def _judged(judged: Judgement, report: Reporter, phase: str) -> Judgement:
    """``judged``, after saying its time to serving on the progress stream."""
    if judged.serving is not None:
        report(phase or "serving", "time to serving: " + time_to_serving.summary(judged.serving.to_json()))
    return judged


def _watch(
    kube: Kube, name: str, namespace: str, spec: GateSpec, progress: Callable[[str], None], abort: Abort
) -> watching.RolloutResult:
    """Watch the rollout: the copies' groups when they span nodes, else the Deployment."""
    wait = watching.Wait(spec.rollout_timeout, progress, abort)
    if spec.group is not None:
        return group_rollout.watch_groups(kube, namespace, name, spec.group, wait)
    if spec.workload is not None:
        return rollout.watch_rollout(kube, namespace, spec.workload, wait, engine=spec.engine, release=name)
    return rollout.watch_rollout(kube, namespace, name, wait, engine=spec.engine)


def _could_not_measure(message: str, observed: tuple[startup_log.Observation, ...] = ()) -> Judgement:
    """A gate that could not measure (the API key): an Error verdict, never a Fail, rolled back
    like any failed gate because the revision was never shown to serve."""
    return Judgement(Failure("gate_error", message, "health"), gate.error_report(message), observed)


def copy_members(kube: Kube, namespace: str, group: group_rollout.GroupWatch | None) -> list[str]:
    """Every pod of the new copies across nodes (leaders and workers), whose starts the time to
    serving records; empty for a Deployment, or when they cannot be listed (the leaders stand in)."""
    if group is None:
        return []
    try:
        pods, _ = kube.list("Pod", namespace, labels=f"{conventions.COPY_LABEL} in ({','.join(group.copies)})")
    except errors.ClusterError:
        return []
    return sorted(kube_status.name_of(p) for p in pods if not kube_status.Meta.from_object(p).deleting)


def read_starts(
    kube: Kube, namespace: str, pods: list[str], spec: GateSpec
) -> tuple[tuple[startup_log.Observation, ...], tuple[time_to_serving.PodStart, ...]]:
    """What each new pod's engine logged at start-up, and how each pod started (its status, the
    kubelet's events, the engine's phases); for copies across nodes every member's start, ``pods``
    being their leaders. What cannot be read is left out: it never fails a deploy, it only leaves the
    planner unchecked or a step of the start unknown."""
    engine, found, starts = engines.get(spec.engine), [], []
    for pod in copy_members(kube, namespace, spec.group) or pods:
        try:
            text = kube.pod_log(pod, namespace, tail_lines=None, limit_bytes=STARTUP_LOG_BYTES)
        except errors.ClusterError:
            text = ""
        if text and (seen := engine.parse_startup(pod, text)) is not None:
            found.append(seen)
        try:
            obj = kube.get("Pod", pod, namespace)
            events = kube.list("Event", namespace, fields=f"involvedObject.name={pod}")[0] if obj else []
        except errors.ClusterError:
            continue
        try:
            starts += [time_to_serving.pod_start(obj, events, engine.phases(text))] if obj is not None else []
        except (TypeError, ValueError, OverflowError, AttributeError):  # a status no kubelet writes: unknown
            continue
    return tuple(found), tuple(starts)


def run_smoke(
    profile: Profile,
    url: str,
    previous: Mapping[str, object] | None,
    report: Reporter,
    *,
    api_key: str | None = None,
    serving_before: float | None = None,
) -> gate.GateReport:
    """The smoke benchmark through ``url`` and its verdict; an Error verdict is retried a few times, and one
    that is inconclusive because the client could not keep up is measured once more. ``serving_before``:
    the seconds from the write to this call, which the run's first token completes into the time to
    serving that an SLO may judge (slo.SERVING_METRIC)."""
    from orchestrator import errors

    # bench imported here: an apply with --skip-bench never pays for it
    from orchestrator.gate import bench, bench_config

    smoke = profile.gate.smoke
    config = bench_config.config_from_profile(profile, url)
    verdict = gate.error_report("the smoke benchmark did not run")
    errors_left, client_bound_left = GATE_ERROR_RETRIES, GATE_CLIENT_BOUND_RETRIES
    attempt, called = 0, time.monotonic()
    first_token: float | None = None  # the first attempt that got a token times it; a retry never re-times it
    while True:
        attempt += 1
        sent = time.monotonic()
        report("smoke", f"smoke benchmark: {smoke.requests} requests, {smoke.concurrency} streams (attempt {attempt})")
        try:
            measured = bench.run(config, api_key=api_key)
        except errors.EndpointError as e:
            verdict = gate.error_report(e.message)
        else:
            first_token = (
                first_token if first_token is not None else _first_token(measured, serving_before, sent - called)
            )
            verdict = gate.evaluate(
                measured,
                smoke.slo,
                min_samples=smoke.minSamples,
                previous_report=previous,
                max_regression_pct=profile.gate.maxRegression,
                serving=first_token,
            )
        report("smoke", verdict.summary())
        if verdict.verdict is gate.Verdict.ERROR and errors_left > 0 and not _refused(verdict):
            errors_left -= 1
        elif verdict.client_bound() and client_bound_left > 0:
            client_bound_left -= 1
            report("smoke", "the benchmark client could not keep up: measuring once more")
        else:
            return verdict


def _first_token(measured: BenchReport, before: float | None, retried: float) -> float | None:
    """The time to serving at this run's first token: ``before`` the smoke run, the earlier attempts
    (``retried``), and the run's own time to its first token, warm-up included; None when not timed
    or no token came."""
    if before is None or measured.first_token_s is None:
        return None
    return before + retried + measured.first_token_s


def _refused(verdict: gate.GateReport) -> bool:
    """Whether the server refused the smoke requests' key: a retry would be refused again."""
    failures = verdict.bench.get("failures") or {}
    return bool(failures.get(metrics.FailureKind.UNAUTHORIZED.value))


@contextlib.contextmanager
def pod_urls(kube: Kube, namespace: str, pods: list[str], port: int, endpoint: str | None) -> Iterator[dict[str, str]]:
    """Base URLs for the gate: the endpoint when given, else a port-forward per new pod."""
    if endpoint:
        yield {"endpoint": endpoint.rstrip("/")}
        return
    with contextlib.ExitStack() as stack:
        urls = {}
        for pod in pods:
            forwarder = stack.enter_context(PortForwarder(kube, namespace, pod, port))
            urls[f"pod/{pod}"] = forwarder.url
        yield urls
