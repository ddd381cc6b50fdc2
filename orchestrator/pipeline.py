"""The apply, gate and rollback sequences: plan → preflight → lock → apply → watch → gate → record.

Each step is one call into the module that owns it; this module decides the order, what a
failure means (roll back, hold, or stop), and the exit code. Nothing is left half-applied: a
failure after the first write either restores the last good release's stored bytes or, on a
first install, removes what was created, and says which in the outcome.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any

import yaml

from orchestrator import applyset, audit, errors, gate, health, planner, preflight, releases, render, rollout
from orchestrator.errors import ExitCode
from orchestrator.kube import Kube, PortForwarder, connect
from orchestrator.lock import DEFAULT_TTL_SECONDS, ReleaseLock
from orchestrator.profile import Profile

PROFILE_HASH_ANNOTATION = render.PROFILE_HASH_ANNOTATION
GATE_ERROR_RETRIES = 2  # an Error verdict (could not measure) is retried before it counts
GITOPS_SYNC_POLL_SECONDS = 2.0

Reporter = Callable[[str, str], None]  # (phase, message)


@dataclasses.dataclass
class Options:
    kubeconfig: str | None = None
    context: str | None = None
    endpoint: str | None = None
    rollback: bool = True
    skip_bench: bool = False
    timeout: float | None = None
    create_namespace: bool = False
    lock_ttl: int = DEFAULT_TTL_SECONDS
    environ: dict[str, str] = dataclasses.field(default_factory=dict)  # for the actor's CI info


@dataclasses.dataclass
class Outcome:
    result: str  # deployed | refused | rolled_back | failed
    release: str
    namespace: str
    exit_code: ExitCode
    message: str
    revision: int | None = None
    failure: dict[str, str] | None = None
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    gate: dict[str, Any] | None = None
    warnings: list[str] = dataclasses.field(default_factory=list)
    rolled_back_to: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "result": self.result,
            "release": self.release,
            "namespace": self.namespace,
            "revision": self.revision,
            "failure": self.failure,
            "timings": {k: round(v, 2) for k, v in self.timings.items()},
            "gate": self.gate,
            "warnings": self.warnings,
            "rolled_back_to": self.rolled_back_to,
            "message": self.message,
            "exit_code": int(self.exit_code),
        }


class _Timings(dict[str, float]):
    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            self[name] = self.get(name, 0.0) + time.monotonic() - start


@dataclasses.dataclass
class _Failure:
    cls: str
    message: str
    stage: str  # apply | rollout | health | smoke

    def to_json(self) -> dict[str, str]:
        return {"class": self.cls, "message": self.message, "stage": self.stage}

    @property
    def in_gate(self) -> bool:
        """Health and smoke failures are gate failures (exit 6 after a rollback), the rest rollout ones (5)."""
        return self.stage in ("health", "smoke")


@dataclasses.dataclass(frozen=True)
class _Release:
    """What a revision is, for its record: everything but the outcome."""

    name: str
    namespace: str
    manifests: bytes
    profile_text: str
    plan: dict[str, Any] | None
    model: releases.ModelRef
    image: str
    profile_hash: str
    actor: dict[str, Any]

    def record(
        self,
        kube: Kube,
        *,
        outcome: releases.Outcome,
        description: str,
        gate_json: dict[str, Any] | None = None,
        failure: dict[str, str] | None = None,
        rollback_of: int | None = None,
    ) -> releases.Record:
        return releases.append(
            kube,
            self.name,
            self.namespace,
            outcome=outcome,
            description=description,
            manifests=self.manifests,
            profile_text=self.profile_text,
            plan=self.plan,
            gate=gate_json,
            failure=failure,
            rollback_of=rollback_of,
            model=self.model,
            image=self.image,
            profile_hash=self.profile_hash,
            actor=self.actor,
        )


@dataclasses.dataclass(frozen=True)
class _GateSpec:
    """How to judge a rolled-out revision: where its pods serve and how long each step may take."""

    model: str
    port: int
    endpoint: str | None
    rollout_timeout: float
    health_timeout: float
    smoke: Profile | None  # the profile whose smoke gate runs; None: health only


# --- apply --------------------------------------------------------------------------------------


def apply(profile: Profile, profile_text: str, options: Options, report: Reporter) -> Outcome:
    """Deploy ``profile``; see the module docstring for the sequence and docs/cli.md for exit codes."""
    timings = _Timings()
    name, namespace = profile.metadata.name, profile.metadata.namespace
    with timings.phase("plan"):
        plan = planner_check(profile)
    kube = connect(options.kubeconfig, options.context)
    with timings.phase("preflight"):
        user = kube.whoami()
        applyset.ensure_namespace(kube, namespace, options.create_namespace)
        applyset.check_access(kube, namespace)
        nodes, _ = kube.list("Node")
        pods, _ = kube.list("Pod")
        deployment = kube.get("Deployment", name, namespace)
        # Only a changed pod template replaces pods; an SLO or gate change must not be refused
        # as downtime, nor wait for a surge.
        rendered_deployment = next(o for o in render.render(profile) if o["kind"] == "Deployment")
        replaces_pods = deployment is not None and applyset.pod_template_changes(kube, rendered_deployment, deployment)
        check = preflight.check(profile, nodes, pods, replaces_pods)
    for warning in check.warnings:
        report("preflight", f"warning: {warning}")
    if check.refusal:
        return Outcome(
            "refused",
            name,
            namespace,
            ExitCode.ROLLOUT_FAILED,
            check.refusal,
            timings=dict(timings),
            failure={"class": "preflight", "message": check.refusal, "stage": "preflight"},
            warnings=list(check.warnings),
        )
    downtime = " (downtime: one replica, no spare GPUs)" if check.downtime else ""
    report("preflight", f"strategy: {check.strategy_name}{downtime}")
    with _locked(kube, namespace, name, user, options, report):
        live = releases.live(releases.load_history(kube, name, namespace))
        objects = render.render(profile, strategy=check.strategy)
        revision = _Release(
            name=name,
            namespace=namespace,
            manifests=render.to_yaml(objects).encode(),
            profile_text=profile_text,
            plan=plan,
            model={"name": profile.model.name, "revision": profile.model.revision},
            image=profile.engine.image,
            profile_hash=profile.spec_hash(),
            actor=releases.actor(user, options.environ),
        )
        if live is None:
            description = "install"
        elif replaces_pods:
            description = f"upgrade from revision {live.revision}"
        else:
            description = f"update of revision {live.revision} (pods unchanged)"
        outcome = _deploy(kube, profile, objects, revision, description, live, options, report, timings)
    outcome.warnings = list(check.warnings) + outcome.warnings
    return outcome


def planner_check(profile: Profile) -> dict[str, Any]:
    """The plan as JSON; refuse (exit 2 or 3) before anything touches a cluster."""
    plan = planner.plan(profile)
    invalid = [f for f in plan.findings if f.severity == "invalid"]
    if invalid:
        raise errors.InvalidProfile("; ".join(f"{f.field}: {f.message}" for f in invalid))
    if not plan.fits:
        problems = [f.message for f in plan.findings if f.severity == "error"]
        raise errors.DoesNotFit("the profile does not fit the GPUs: " + " ".join(problems))
    return plan.to_json()


def _gate_spec(profile: Profile, options: Options) -> _GateSpec:
    timeout = options.timeout or float(profile.rollout.progressDeadlineSeconds)
    return _GateSpec(
        model=profile.model.name,
        port=profile.engine.port,
        endpoint=options.endpoint or profile.gate.endpoint,
        rollout_timeout=timeout,
        health_timeout=min(timeout, float(profile.gate.health.timeoutSeconds)),
        smoke=profile if profile.gate.smoke.enabled and not options.skip_bench else None,
    )


def _deploy(
    kube: Kube,
    profile: Profile,
    objects: list[dict[str, Any]],
    revision: _Release,
    description: str,
    live: releases.Record | None,
    options: Options,
    report: Reporter,
    timings: _Timings,
) -> Outcome:
    with timings.phase("apply"):
        report("apply", f"server-side apply of {len(objects)} objects to {revision.namespace}")
        try:
            applyset.apply(kube, revision.name, revision.namespace, objects)
        except errors.ClusterError as e:
            applied = _Failure("apply", e.message, "apply")
            return _fail(kube, revision, description, live, applied, None, options, report, timings)
    try:
        failure, gate_json = _verify(
            kube, revision.name, revision.namespace, _gate_spec(profile, options), live, report, timings
        )
    except errors.ClusterError as e:
        # Objects are applied: a cluster error now (a permission revoked, an API answer we cannot
        # use) must still end in a recorded, restored release, not a half-applied one.
        failure, gate_json = _Failure("cluster_error", e.message, "rollout"), None
    if failure is not None:
        return _fail(kube, revision, description, live, failure, gate_json, options, report, timings)
    try:
        record = revision.record(kube, outcome="deployed", description=description, gate_json=gate_json)
    except errors.ClusterError as e:
        raise errors.ClusterError(
            f"revision of {revision.name} is live and passed its gate, but its release record could not be "
            f"written: {e.message}. Run `deployctl gate` with the same profile to record it"
        ) from e
    warnings = []
    if gate_json is not None and gate_json.get("verdict") == gate.Verdict.INCONCLUSIVE.label:
        # Inconclusive is no evidence against the revision, so it is kept, not rolled back, and
        # the reason is said so that a person decides (e.g. rerun `deployctl gate` off-peak).
        warnings.append(f"the smoke gate was inconclusive and did not judge this revision: {gate_json.get('summary')}")
    return Outcome(
        "deployed",
        revision.name,
        revision.namespace,
        ExitCode.OK,
        f"revision {record.revision} of {revision.name} is deployed ({description})",
        revision=record.revision,
        timings=dict(timings),
        gate=gate_json,
        warnings=warnings,
    )


def _verify(
    kube: Kube,
    name: str,
    namespace: str,
    spec: _GateSpec,
    live: releases.Record | None,
    report: Reporter,
    timings: _Timings,
    *,
    phase: str = "",
) -> tuple[_Failure | None, dict[str, Any] | None]:
    """Watch the rollout, health-gate every new pod, then run the smoke gate when asked.

    Returns the failure (None when the revision passed) and the smoke gate report (None when
    the smoke gate did not run).
    """
    with timings.phase("rollout"):
        result = rollout.watch_rollout(
            kube, namespace, name, timeout=spec.rollout_timeout, progress=lambda m: report(phase or "rollout", m)
        )
    if not result.ok:
        assert result.failure is not None
        return _Failure(result.failure.cls, result.failure.message, "rollout"), None
    with contextlib.ExitStack() as forwards:
        with timings.phase("health"):  # opening the port-forwards is part of reaching the pods
            urls = forwards.enter_context(_pod_urls(kube, namespace, result.new_pods, spec.port, spec.endpoint))
            hr = health.wait_healthy(
                urls, spec.model, timeout=spec.health_timeout, progress=lambda m: report(phase or "health", m)
            )
        if not hr.ok:
            return _Failure("health", f"the new pods did not pass the health gate: {hr.explain()}", "health"), None
        report(phase or "health", f"healthy: {', '.join(urls)}")
        if spec.smoke is None:
            return None, None
        with timings.phase("smoke"):
            verdict = run_smoke(spec.smoke, next(iter(urls.values())), live.gate if live else None, report)
    gate_json = verdict.to_json()
    if verdict.verdict in (gate.Verdict.FAIL, gate.Verdict.ERROR):
        cls = "slo_failed" if verdict.verdict == gate.Verdict.FAIL else "gate_error"
        return _Failure(cls, verdict.summary(), "smoke"), gate_json
    return None, gate_json


def run_smoke(profile: Profile, url: str, previous: dict[str, Any] | None, report: Reporter) -> gate.GateReport:
    """The smoke benchmark through ``url`` and its verdict; an Error verdict is retried a few times."""
    from orchestrator import bench  # imported here: an apply with --skip-bench never pays for it

    smoke = profile.gate.smoke
    config = bench.BenchConfig(
        url=url,
        model=profile.model.name,
        concurrency=smoke.concurrency,
        requests=smoke.requests,
        input_tokens=smoke.inputTokens,
        output_tokens=smoke.outputTokens,
        warmup=smoke.warmup,
        duration=float(smoke.timeoutSeconds),  # the whole run is bounded; requests are the cap
        timeout=min(float(smoke.timeoutSeconds), 120.0),
    )
    verdict: gate.GateReport | None = None
    for attempt in range(1, GATE_ERROR_RETRIES + 2):
        report("smoke", f"smoke benchmark: {smoke.requests} requests, {smoke.concurrency} streams (attempt {attempt})")
        try:
            bench_report = bench.run(config)
        except errors.EndpointError as e:
            verdict = gate.error_report(e.message)
        else:
            verdict = gate.evaluate(
                bench_report,
                smoke.slo,
                min_samples=smoke.minSamples,
                previous_report=previous,
                max_regression_pct=profile.gate.maxRegression,
            )
        report("smoke", verdict.summary())
        if verdict.verdict != gate.Verdict.ERROR:
            break
    assert verdict is not None
    return verdict


def _fail(
    kube: Kube,
    revision: _Release,
    description: str,
    live: releases.Record | None,
    failure: _Failure,
    gate_json: dict[str, Any] | None,
    options: Options,
    report: Reporter,
    timings: _Timings,
) -> Outcome:
    """Record the failed revision, then restore the last good release (or remove a failed install)."""
    name, namespace = revision.name, revision.namespace
    report(failure.stage, f"FAILED ({failure.cls}): {failure.message}")
    failed = revision.record(
        kube,
        outcome="failed",
        description=f"{description} failed: {failure.cls}",
        gate_json=gate_json,
        failure={"class": failure.cls, "message": failure.message},
    )

    def outcome(result: str, code: ExitCode, message: str, rolled_back_to: int | None = None) -> Outcome:
        return Outcome(
            result,
            name,
            namespace,
            code,
            message,
            revision=failed.revision,
            failure=failure.to_json(),
            timings=dict(timings),
            gate=gate_json,
            rolled_back_to=rolled_back_to,
        )

    what = f"revision {failed.revision} failed ({failure.cls})"
    if failure.cls == "cluster_error":
        # Forbidden or an unusable API answer: a cluster problem for a person to fix (exit 4),
        # even though the revision was undone so that nothing is left half-applied.
        rolled_back_code = ExitCode.CLUSTER_ERROR
    elif failure.in_gate:
        rolled_back_code = ExitCode.GATE_FAILED_ROLLED_BACK
    else:
        rolled_back_code = ExitCode.ROLLOUT_FAILED
    if not options.rollback:
        return outcome("failed", ExitCode.ROLLOUT_FAILED, f"{what} and was left in place (--no-rollback)")
    with timings.phase("rollback"):
        if live is None:
            report("rollback", "no earlier release: removing what this install created")
            try:
                applyset.remove(kube, name, namespace)
            except errors.ClusterError as e:
                return outcome("failed", ExitCode.ROLLBACK_FAILED, f"{what} and removing it failed too: {e.message}")
            return outcome(
                "rolled_back",
                rolled_back_code,
                f"{what}; it was the first install, so its objects were removed. {failure.message}",
            )
        report("rollback", f"rolling back to revision {live.revision}")
        restored = restore(
            kube,
            live,
            f"rollback to {live.revision} after revision {failed.revision} failed",
            options,
            report,
            revision.actor,
        )
    if restored.exit_code != ExitCode.OK:
        return outcome(
            "failed",
            ExitCode.ROLLBACK_FAILED,
            f"{what} and the rollback to revision {live.revision} failed too: {restored.message}",
        )
    return outcome(
        "rolled_back",
        rolled_back_code,
        f"{what} and was rolled back to revision {live.revision} (now revision {restored.revision}). {failure.message}",
        rolled_back_to=live.revision,
    )


# --- rollback (on-call) -------------------------------------------------------------------------


def rollback(name: str, namespace: str, to: int | None, options: Options, report: Reporter) -> Outcome:
    """Re-apply an earlier revision's stored bytes; needs nothing but a kubeconfig."""
    kube = connect(options.kubeconfig, options.context)
    user = kube.whoami()
    applyset.check_access(kube, namespace)
    with _locked(kube, namespace, name, user, options, report):
        history = releases.load_history(kube, name, namespace)
        if not history:
            raise errors.UnknownRelease(
                f"release {name} has no records in namespace {namespace}; "
                "check the name and -n (`deployctl history NAME -n NS` lists a release's revisions)"
            )
        target = _rollback_target(history, name, to)
        problems = [
            p for p in audit.verify(history, release=name, namespace=namespace) if p.revision == target.revision
        ]
        if problems:
            raise errors.AuditFailed(
                f"revision {target.revision} of {name} fails its integrity check, so its stored manifests "
                f"are not re-applied: {'; '.join(p.message for p in problems)}"
            )
        report("rollback", f"rolling back {name} to revision {target.revision} ({target.description})")
        return restore(
            kube, target, f"rollback to {target.revision}", options, report, releases.actor(user, options.environ)
        )


def _rollback_target(history: list[releases.Record], name: str, to: int | None) -> releases.Record:
    if to is not None:
        target = releases.get(history, to)
        if target.outcome != "deployed":
            raise errors.UsageError(
                f"revision {to} of {name} never passed its gate ({target.description}); "
                "roll back to a revision that was deployed (see `deployctl history`)"
            )
        return target
    found = releases.rollback_target(history)
    if found is None:
        raise errors.UsageError(
            f"release {name} has no earlier good revision to roll back to; pass --to N (see `deployctl history`)"
        )
    return found


def restore(
    kube: Kube,
    target: releases.Record,
    description: str,
    options: Options,
    report: Reporter,
    actor: dict[str, Any],
) -> Outcome:
    """Re-apply the stored bytes of ``target``, watch, health-gate and record a new revision."""
    name, namespace = target.release, target.namespace
    timings = _Timings()
    objects = [o for o in yaml.safe_load_all(target.manifests.decode()) if o]
    with timings.phase("apply"):
        applyset.apply(kube, name, namespace, objects)
    failure, _ = _verify(
        kube, name, namespace, _stored_gate_spec(target, objects, options), None, report, timings, phase="rollback"
    )
    revision = _Release(
        name=name,
        namespace=namespace,
        manifests=target.manifests,
        profile_text=target.profile,
        plan=target.plan,
        model=target.model,
        image=target.image,
        profile_hash=target.profile_hash,
        actor=actor,
    )
    record = revision.record(
        kube,
        outcome="failed" if failure else "deployed",
        description=description + (" (failed)" if failure else ""),
        failure={"class": failure.cls, "message": failure.message} if failure else None,
        rollback_of=target.revision,
    )
    if failure:
        return Outcome(
            "failed",
            name,
            namespace,
            ExitCode.ROLLBACK_FAILED,
            f"rollback to revision {target.revision} failed ({failure.cls}): {failure.message}",
            revision=record.revision,
            failure=failure.to_json(),
            timings=dict(timings),
        )
    return Outcome(
        "deployed",
        name,
        namespace,
        ExitCode.OK,
        f"revision {record.revision} of {name} is live: {description}",
        revision=record.revision,
        timings=dict(timings),
        rolled_back_to=target.revision,
    )


def _stored_gate_spec(target: releases.Record, objects: list[dict[str, Any]], options: Options) -> _GateSpec:
    """Health-gate settings for a stored revision, read from its own manifests and profile text.

    The stored profile is read leniently (plain YAML, not today's schema): a rollback must work
    for a revision written by an older deployctl.
    """
    deployment = next((o for o in objects if o.get("kind") == "Deployment"), {})
    containers = deployment.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or [{}]
    ports = containers[0].get("ports") or [{}]
    try:
        stored = yaml.safe_load(target.profile) or {}
    except yaml.YAMLError:
        stored = {}
    gate_section = stored.get("gate") if isinstance(stored, dict) else None
    gate_section = gate_section if isinstance(gate_section, dict) else {}
    health_section = gate_section.get("health")
    health_section = health_section if isinstance(health_section, dict) else {}
    timeout = options.timeout or float(deployment.get("spec", {}).get("progressDeadlineSeconds", 1800))
    return _GateSpec(
        model=target.model.get("name", ""),
        port=int(ports[0].get("containerPort", 8000)),
        endpoint=options.endpoint or gate_section.get("endpoint"),
        rollout_timeout=timeout,
        health_timeout=min(timeout, float(health_section.get("timeoutSeconds", 1800))),
        smoke=None,  # a rollback restores what ran before: health decides, no SLO run at 3 a.m.
    )


# --- gate (GitOps) ------------------------------------------------------------------------------


def gate_only(profile: Profile, profile_text: str, options: Options, report: Reporter) -> Outcome:
    """GitOps: wait for what Argo CD/Flux applied to carry this profile, then gate and record it.

    There is no rollback here: in GitOps the fix is a revert in git (docs/gitops.md).
    """
    timings = _Timings()
    name, namespace = profile.metadata.name, profile.metadata.namespace
    plan = planner_check(profile)
    kube = connect(options.kubeconfig, options.context)
    user = kube.whoami()
    applyset.check_access(kube, namespace)
    spec = _gate_spec(profile, options)
    want = profile.spec_hash()
    with timings.phase("sync"):
        have = _wait_for_sync(kube, name, namespace, want, spec.rollout_timeout, report)
    if have != want:
        return Outcome(
            "failed",
            name,
            namespace,
            ExitCode.GATE_FAILED_ROLLED_BACK,
            f"Deployment {namespace}/{name} never carried profile hash {want[:12]} (has {(have or 'none')[:12]}); "
            "did the GitOps sync apply this commit's manifests?",
            timings=dict(timings),
            failure={"class": "not_synced", "message": "profile hash mismatch", "stage": "sync"},
        )
    with _locked(kube, namespace, name, user, options, report):
        live = releases.live(releases.load_history(kube, name, namespace))
        revision = _Release(
            name=name,
            namespace=namespace,
            manifests=render.to_yaml(render.render(profile)).encode(),
            profile_text=profile_text,
            plan=plan,
            model={"name": profile.model.name, "revision": profile.model.revision},
            image=profile.engine.image,
            profile_hash=want,
            actor=releases.actor(user, options.environ),
        )
        failure, gate_json = _verify(kube, name, namespace, spec, live, report, timings)
        record = revision.record(
            kube,
            outcome="failed" if failure else "deployed",
            description=f"gitops sync gated{' — failed: ' + failure.cls if failure else ''}",
            gate_json=gate_json,
            failure={"class": failure.cls, "message": failure.message} if failure else None,
        )
    if failure:
        return Outcome(
            "failed",
            name,
            namespace,
            ExitCode.GATE_FAILED_ROLLED_BACK,
            f"revision {record.revision} failed its gate ({failure.cls}): {failure.message}. "
            "In GitOps, roll back by reverting the commit",
            revision=record.revision,
            failure=failure.to_json(),
            timings=dict(timings),
            gate=gate_json,
        )
    return Outcome(
        "deployed",
        name,
        namespace,
        ExitCode.OK,
        f"revision {record.revision} of {name} passed its gate",
        revision=record.revision,
        timings=dict(timings),
        gate=gate_json,
    )


def _wait_for_sync(kube: Kube, name: str, namespace: str, want: str, timeout: float, report: Reporter) -> str | None:
    """The profile hash on the live Deployment once it equals ``want``, or the last one seen at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        dep = kube.get("Deployment", name, namespace)
        have: str | None = (dep or {}).get("metadata", {}).get("annotations", {}).get(PROFILE_HASH_ANNOTATION)
        if have == want or time.monotonic() > deadline:
            return have
        report("sync", f"waiting for the GitOps tool to apply profile {want[:12]} (live: {(have or 'none')[:12]})")
        time.sleep(GITOPS_SYNC_POLL_SECONDS)


# --- plumbing -----------------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(kube: Kube, namespace: str, name: str, user: str, options: Options, report: Reporter) -> Iterator[None]:
    with ReleaseLock(
        kube, namespace, name, user, ttl_seconds=options.lock_ttl, warn=lambda m: report("lock", f"warning: {m}")
    ):
        yield


@contextlib.contextmanager
def _pod_urls(kube: Kube, namespace: str, pods: list[str], port: int, endpoint: str | None) -> Iterator[dict[str, str]]:
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
