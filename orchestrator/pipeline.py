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

from orchestrator import audit, bench, errors, gate, health, planner, preflight, releases, render, rollout
from orchestrator.errors import ExitCode
from orchestrator.kube import Kube, PortForwarder, connect
from orchestrator.lock import DEFAULT_TTL_SECONDS, ReleaseLock
from orchestrator.profile import Profile

MANAGED_KINDS = ("Deployment", "Service", "ServiceAccount", "PodDisruptionBudget", "NetworkPolicy")
RELEASE_LABEL = rollout.RELEASE_LABEL
PROFILE_HASH_ANNOTATION = render.PROFILE_HASH_ANNOTATION
GATE_ERROR_RETRIES = 2

# What apply, gate and rollback do in the release's namespace: (verb, group, resource, subresource).
# Checked before the first write, so a Role missing one verb fails fast, names it, and changes nothing.
REQUIRED_ACCESS = [
    *[
        (verb, group, resource, "")
        for group, resource in (
            ("apps", "deployments"),
            ("", "services"),
            ("", "serviceaccounts"),
            ("policy", "poddisruptionbudgets"),
            ("networking.k8s.io", "networkpolicies"),
        )
        for verb in ("get", "list", "watch", "patch", "delete")
    ],
    ("create", "", "configmaps", ""),
    ("list", "", "configmaps", ""),
    ("get", "coordination.k8s.io", "leases", ""),
    ("create", "coordination.k8s.io", "leases", ""),
    ("update", "coordination.k8s.io", "leases", ""),
    ("list", "apps", "replicasets", ""),
    ("watch", "apps", "replicasets", ""),
    ("list", "", "pods", ""),
    ("watch", "", "pods", ""),
    ("get", "", "pods", "log"),
    ("create", "", "pods", "portforward"),
    ("list", "", "events", ""),
    ("watch", "", "events", ""),
]

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
    stage: str  # rollout | health | smoke | apply

    def to_json(self) -> dict[str, str]:
        return {"class": self.cls, "message": self.message, "stage": self.stage}


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
        _ensure_namespace(kube, namespace, options.create_namespace)
        check_access(kube, namespace)
        nodes, _ = kube.list("Node")
        pods, _ = kube.list("Pod")
        deployment = kube.get("Deployment", name, namespace)
        # Only a changed pod template replaces pods; an SLO or gate change must not be refused
        # as downtime, nor wait for a surge.
        replaces_pods = deployment is not None and _pod_template_changes(kube, profile, deployment)
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
            failure={"class": "preflight", "message": check.refusal},
            warnings=list(check.warnings),
        )
    report(
        "preflight",
        f"strategy: {check.strategy_name}" + (" (downtime: one replica, no spare GPUs)" if check.downtime else ""),
    )
    actor = releases.actor(user, options.environ)
    with ReleaseLock(
        kube,
        namespace,
        name,
        user,
        ttl_seconds=options.lock_ttl,
        warn=lambda m: report("lock", f"warning: {m}"),
    ):
        history = releases.load_history(kube, name, namespace)
        live = releases.live(history)
        objects = render.render(profile, strategy=check.strategy)
        manifests = render.to_yaml(objects).encode()
        record_base = _RecordBase(
            profile_text=profile_text,
            plan=plan,
            model=profile.model.name,
            model_revision=profile.model.revision,
            image=profile.engine.image,
            profile_hash=profile.spec_hash(),
            actor=actor,
        )
        if live is None:
            description = "install"
        elif replaces_pods:
            description = f"upgrade from revision {live.revision}"
        else:
            description = f"update of revision {live.revision} (pods unchanged)"
        outcome = _deploy(
            kube,
            profile,
            objects,
            manifests,
            record_base,
            description,
            live,
            options,
            report,
            timings,
            smoke=profile.gate.smoke.enabled and not options.skip_bench,
        )
        outcome.warnings = list(check.warnings) + outcome.warnings
        return outcome


def _pod_template_changes(kube: Kube, profile: Profile, live: dict[str, Any]) -> bool:
    """Whether applying the profile would replace pods: a server-side dry-run fills in the same
    defaults as the live object, so the two pod templates compare exactly."""
    rendered = next(o for o in render.render(profile) if o["kind"] == "Deployment")
    try:
        would_be = kube.apply(rendered, dry_run=True)
    except errors.ClusterError:
        return True  # cannot tell: assume the rollout happens, which is the careful answer
    return bool(would_be.get("spec", {}).get("template") != live.get("spec", {}).get("template"))


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


@dataclasses.dataclass
class _RecordBase:
    profile_text: str
    plan: dict[str, Any]
    model: str
    model_revision: str | None
    image: str
    profile_hash: str
    actor: dict[str, Any]


def _deploy(
    kube: Kube,
    profile: Profile,
    objects: list[dict[str, Any]],
    manifests: bytes,
    base: _RecordBase,
    description: str,
    live: releases.Record | None,
    options: Options,
    report: Reporter,
    timings: _Timings,
    *,
    smoke: bool,
    rollback_of: int | None = None,
) -> Outcome:
    name, namespace = profile.metadata.name, profile.metadata.namespace
    with timings.phase("apply"):
        report("apply", f"server-side apply of {len(objects)} objects to {namespace}")
        try:
            apply_objects(kube, name, namespace, objects)
        except errors.ClusterError as e:
            failure = _Failure("apply", e.message, "apply")
            return _fail(kube, profile, manifests, base, description, live, failure, options, report, timings)
    timeout = options.timeout or float(profile.rollout.progressDeadlineSeconds)
    with timings.phase("rollout"):
        result = rollout.watch_rollout(kube, namespace, name, timeout=timeout, progress=lambda m: report("rollout", m))
    if not result.ok:
        assert result.failure is not None
        failure = _Failure(result.failure.cls, result.failure.message, "rollout")
        return _fail(kube, profile, manifests, base, description, live, failure, options, report, timings)
    gate_json: dict[str, Any] | None = None
    with _pod_urls(
        kube, namespace, result.new_pods, profile.engine.port, options.endpoint or profile.gate.endpoint
    ) as urls:
        with timings.phase("health"):
            hr = health.wait_healthy(
                urls,
                profile.model.name,
                timeout=min(timeout, float(profile.gate.health.timeoutSeconds)),
                progress=lambda m: report("health", m),
            )
        if not hr.ok:
            failure = _Failure("health", f"the new pods did not pass the health gate: {hr.explain()}", "health")
            return _fail(kube, profile, manifests, base, description, live, failure, options, report, timings)
        report("health", f"healthy: {', '.join(urls)}")
        if smoke:
            with timings.phase("smoke"):
                previous = live.gate if live is not None else None
                verdict = run_smoke(profile, next(iter(urls.values())), previous, report)
            gate_json = verdict.to_json()
            if verdict.verdict in (gate.Verdict.FAIL, gate.Verdict.ERROR):
                cls = "slo_failed" if verdict.verdict == gate.Verdict.FAIL else "gate_error"
                failure = _Failure(cls, verdict.summary(), "smoke")
                return _fail(
                    kube,
                    profile,
                    manifests,
                    base,
                    description,
                    live,
                    failure,
                    options,
                    report,
                    timings,
                    gate_json=gate_json,
                )
    record = releases.append(
        kube,
        name,
        namespace,
        outcome="deployed",
        description=description,
        manifests=manifests,
        profile_text=base.profile_text,
        plan=base.plan,
        gate=gate_json,
        failure=None,
        rollback_of=rollback_of,
        model={"name": base.model, "revision": base.model_revision},
        image=base.image,
        profile_hash=base.profile_hash,
        actor=base.actor,
    )
    message = f"revision {record.revision} of {name} is deployed ({description})"
    warnings = []
    if gate_json is not None and gate_json.get("verdict") == gate.Verdict.INCONCLUSIVE.label:
        # Inconclusive is no evidence against the revision, so it is kept, not rolled back, and
        # the reason is said so that a person decides (e.g. rerun `deployctl gate` off-peak).
        warnings.append(f"the smoke gate was inconclusive and did not judge this revision: {gate_json.get('summary')}")
    return Outcome(
        "deployed",
        name,
        namespace,
        ExitCode.OK,
        message,
        revision=record.revision,
        timings=dict(timings),
        gate=gate_json,
        warnings=warnings,
    )


def run_smoke(profile: Profile, url: str, previous: dict[str, Any] | None, report: Reporter) -> gate.GateReport:
    """The smoke benchmark through ``url`` and its verdict; an Error verdict is retried a few times."""
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
        report(
            "smoke",
            f"smoke benchmark: {smoke.requests} requests, {smoke.concurrency} streams (attempt {attempt})",
        )
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
    profile: Profile,
    manifests: bytes,
    base: _RecordBase,
    description: str,
    live: releases.Record | None,
    failure: _Failure,
    options: Options,
    report: Reporter,
    timings: _Timings,
    *,
    gate_json: dict[str, Any] | None = None,
) -> Outcome:
    """Record the failed revision, then restore the last good release (or remove a failed install)."""
    name, namespace = profile.metadata.name, profile.metadata.namespace
    report(failure.stage, f"FAILED ({failure.cls}): {failure.message}")
    failed = releases.append(
        kube,
        name,
        namespace,
        outcome="failed",
        description=f"{description} failed: {failure.cls}",
        manifests=manifests,
        profile_text=base.profile_text,
        plan=base.plan,
        gate=gate_json,
        failure={"class": failure.cls, "message": failure.message},
        rollback_of=None,
        model={"name": base.model, "revision": base.model_revision},
        image=base.image,
        profile_hash=base.profile_hash,
        actor=base.actor,
    )
    gate_stage = failure.stage in ("health", "smoke")
    if not options.rollback:
        return Outcome(
            "failed",
            name,
            namespace,
            ExitCode.ROLLOUT_FAILED,
            f"revision {failed.revision} failed ({failure.cls}) and was left in place (--no-rollback)",
            revision=failed.revision,
            failure=failure.to_json(),
            timings=dict(timings),
            gate=gate_json,
        )
    with timings.phase("rollback"):
        if live is None:
            report("rollback", "no earlier release: removing what this install created")
            try:
                remove_objects(kube, name, namespace)
            except errors.ClusterError as e:
                return Outcome(
                    "failed",
                    name,
                    namespace,
                    ExitCode.ROLLBACK_FAILED,
                    f"revision {failed.revision} failed ({failure.cls}) and removing it failed too: {e.message}",
                    revision=failed.revision,
                    failure=failure.to_json(),
                    timings=dict(timings),
                    gate=gate_json,
                )
            return Outcome(
                "rolled_back",
                name,
                namespace,
                ExitCode.GATE_FAILED_ROLLED_BACK if gate_stage else ExitCode.ROLLOUT_FAILED,
                f"revision {failed.revision} failed ({failure.cls}); it was the first install, so its "
                f"objects were removed. {failure.message}",
                revision=failed.revision,
                failure=failure.to_json(),
                timings=dict(timings),
                gate=gate_json,
            )
        report("rollback", f"rolling back to revision {live.revision}")
        restored = restore(
            kube,
            live,
            f"rollback to {live.revision} after revision {failed.revision} failed",
            options,
            report,
            base.actor,
        )
    if restored.exit_code != ExitCode.OK:
        return Outcome(
            "failed",
            name,
            namespace,
            ExitCode.ROLLBACK_FAILED,
            f"revision {failed.revision} failed ({failure.cls}) and the rollback to revision "
            f"{live.revision} failed too: {restored.message}",
            revision=failed.revision,
            failure=failure.to_json(),
            timings=dict(timings),
            gate=gate_json,
        )
    return Outcome(
        "rolled_back",
        name,
        namespace,
        ExitCode.GATE_FAILED_ROLLED_BACK if gate_stage else ExitCode.ROLLOUT_FAILED,
        f"revision {failed.revision} failed ({failure.cls}) and was rolled back to revision "
        f"{live.revision} (now revision {restored.revision}). {failure.message}",
        revision=failed.revision,
        failure=failure.to_json(),
        timings=dict(timings),
        gate=gate_json,
        rolled_back_to=live.revision,
    )


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
        apply_objects(kube, name, namespace, objects)
    deployment = next((o for o in objects if o.get("kind") == "Deployment"), None)
    timeout = options.timeout or float((deployment or {}).get("spec", {}).get("progressDeadlineSeconds", 1800))
    failure: dict[str, str] | None = None
    with timings.phase("rollout"):
        result = rollout.watch_rollout(kube, namespace, name, timeout=timeout, progress=lambda m: report("rollback", m))
    if not result.ok:
        assert result.failure is not None
        failure = result.failure.to_json()
    else:
        port = _container_port(deployment)
        with (
            _pod_urls(kube, namespace, result.new_pods, port, options.endpoint) as urls,
            timings.phase("health"),
        ):
            hr = health.wait_healthy(
                urls, target.model.get("name", ""), timeout=timeout, progress=lambda m: report("rollback", m)
            )
        if not hr.ok:
            failure = {"class": "health", "message": hr.explain()}
    record = releases.append(
        kube,
        name,
        namespace,
        outcome="failed" if failure else "deployed",
        description=description + (" (failed)" if failure else ""),
        manifests=target.manifests,
        profile_text=target.profile,
        plan=target.plan,
        gate=None,
        failure=failure,
        rollback_of=target.revision,
        model=target.model,
        image=target.image,
        profile_hash=target.profile_hash,
        actor=actor,
    )
    if failure:
        return Outcome(
            "failed",
            name,
            namespace,
            ExitCode.ROLLBACK_FAILED,
            f"rollback to revision {target.revision} failed ({failure['class']}): {failure['message']}",
            revision=record.revision,
            failure=failure,
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


# --- rollback (on-call) and gate (GitOps) -------------------------------------------------------


def rollback(name: str, namespace: str, to: int | None, options: Options, report: Reporter) -> Outcome:
    """Re-apply an earlier revision's stored bytes; needs nothing but a kubeconfig."""
    kube = connect(options.kubeconfig, options.context)
    user = kube.whoami()
    check_access(kube, namespace)
    with ReleaseLock(
        kube,
        namespace,
        name,
        user,
        ttl_seconds=options.lock_ttl,
        warn=lambda m: report("lock", f"warning: {m}"),
    ):
        history = releases.load_history(kube, name, namespace)
        if not history:
            raise errors.NotFound(
                f"release {name} has no records in namespace {namespace}; "
                f"check the name and -n (deployctl history lists releases' revisions)"
            )
        if to is not None:
            target = releases.get(history, to)
            if target.outcome != "deployed":
                raise errors.UsageError(
                    f"revision {to} of {name} never passed its gate ({target.description}); "
                    "roll back to a revision that was deployed"
                )
        else:
            found = releases.rollback_target(history)
            if found is None:
                raise errors.UsageError(
                    f"release {name} has no earlier good revision to roll back to; "
                    "pass --to N (see `deployctl history`)"
                )
            target = found
        problems = audit.verify(history, release=name, namespace=namespace)
        if any(p.revision == target.revision for p in problems):
            raise errors.AuditFailed(
                f"revision {target.revision} of {name} fails its integrity check, so its stored manifests "
                f"are not re-applied: {'; '.join(p.message for p in problems if p.revision == target.revision)}"
            )
        report("rollback", f"rolling back {name} to revision {target.revision} ({target.description})")
        return restore(
            kube,
            target,
            f"rollback to {target.revision}",
            options,
            report,
            releases.actor(user, options.environ),
        )


def gate_only(profile: Profile, profile_text: str, options: Options, report: Reporter) -> Outcome:
    """GitOps: wait for what Argo CD/Flux applied to carry this profile, then gate and record it."""
    timings = _Timings()
    name, namespace = profile.metadata.name, profile.metadata.namespace
    plan = planner_check(profile)
    kube = connect(options.kubeconfig, options.context)
    user = kube.whoami()
    check_access(kube, namespace)
    timeout = options.timeout or float(profile.rollout.progressDeadlineSeconds)
    want = profile.spec_hash()
    with timings.phase("sync"):
        deadline = time.monotonic() + timeout
        while True:
            dep = kube.get("Deployment", name, namespace)
            have = (dep or {}).get("metadata", {}).get("annotations", {}).get(PROFILE_HASH_ANNOTATION)
            if have == want:
                break
            if time.monotonic() > deadline:
                return Outcome(
                    "failed",
                    name,
                    namespace,
                    ExitCode.GATE_FAILED_ROLLED_BACK,
                    f"Deployment {namespace}/{name} never carried profile hash {want[:12]} (has "
                    f"{(have or 'none')[:12]}); did the GitOps sync apply this commit's manifests?",
                    timings=dict(timings),
                    failure={"class": "not_synced", "message": "profile hash mismatch"},
                )
            report(
                "sync",
                f"waiting for the GitOps tool to apply profile {want[:12]} (live: {(have or 'none')[:12]})",
            )
            time.sleep(2)
    with ReleaseLock(
        kube,
        namespace,
        name,
        user,
        ttl_seconds=options.lock_ttl,
        warn=lambda m: report("lock", f"warning: {m}"),
    ):
        history = releases.load_history(kube, name, namespace)
        live = releases.live(history)
        objects = render.render(profile)
        manifests = render.to_yaml(objects).encode()
        base = _RecordBase(
            profile_text,
            plan,
            profile.model.name,
            profile.model.revision,
            profile.engine.image,
            want,
            releases.actor(user, options.environ),
        )
        gitops = dataclasses.replace(options, rollback=False)
        outcome = _deploy_gate_only(kube, profile, manifests, base, live, gitops, report, timings)
        return outcome


def _deploy_gate_only(
    kube: Kube,
    profile: Profile,
    manifests: bytes,
    base: _RecordBase,
    live: releases.Record | None,
    options: Options,
    report: Reporter,
    timings: _Timings,
) -> Outcome:
    name, namespace = profile.metadata.name, profile.metadata.namespace
    timeout = options.timeout or float(profile.rollout.progressDeadlineSeconds)
    with timings.phase("rollout"):
        result = rollout.watch_rollout(kube, namespace, name, timeout=timeout, progress=lambda m: report("rollout", m))
    failure: _Failure | None = None
    gate_json: dict[str, Any] | None = None
    if not result.ok:
        assert result.failure is not None
        failure = _Failure(result.failure.cls, result.failure.message, "rollout")
    else:
        with _pod_urls(
            kube, namespace, result.new_pods, profile.engine.port, options.endpoint or profile.gate.endpoint
        ) as urls:
            with timings.phase("health"):
                hr = health.wait_healthy(
                    urls,
                    profile.model.name,
                    timeout=float(profile.gate.health.timeoutSeconds),
                    progress=lambda m: report("health", m),
                )
            if not hr.ok:
                failure = _Failure("health", hr.explain(), "health")
            elif profile.gate.smoke.enabled and not options.skip_bench:
                with timings.phase("smoke"):
                    verdict = run_smoke(profile, next(iter(urls.values())), live.gate if live else None, report)
                gate_json = verdict.to_json()
                if verdict.verdict in (gate.Verdict.FAIL, gate.Verdict.ERROR):
                    failure = _Failure(
                        "slo_failed" if verdict.verdict == gate.Verdict.FAIL else "gate_error",
                        verdict.summary(),
                        "smoke",
                    )
    record = releases.append(
        kube,
        name,
        namespace,
        outcome="failed" if failure else "deployed",
        description=f"gitops sync gated{' — failed: ' + failure.cls if failure else ''}",
        manifests=manifests,
        profile_text=base.profile_text,
        plan=base.plan,
        gate=gate_json,
        failure=failure.to_json() if failure else None,
        rollback_of=None,
        model={"name": base.model, "revision": base.model_revision},
        image=base.image,
        profile_hash=base.profile_hash,
        actor=base.actor,
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


# --- cluster writes ---------------------------------------------------------------------------


def check_access(kube: Kube, namespace: str) -> None:
    """Refuse before any write when the identity lacks a permission the sequence will need."""
    missing = [
        f"{verb} {resource}{'/' + sub if sub else ''}" + (f" ({group})" if group else "")
        for verb, group, resource, sub in REQUIRED_ACCESS
        if not kube.can_i(verb, resource, namespace, group=group, subresource=sub)
    ]
    if missing:
        raise errors.Forbidden(
            f"the identity of context {kube.context!r} may not: {', '.join(missing)} in namespace {namespace}. "
            "Nothing was changed. Bind it to deployctl's Role (`deployctl render PROFILE --format rbac`)"
        )


def _ensure_namespace(kube: Kube, namespace: str, create: bool) -> None:
    if kube.get("Namespace", namespace) is not None:
        return
    if not create:
        raise errors.RolloutFailed(f"namespace {namespace} does not exist; create it, or pass --create-namespace")
    with contextlib.suppress(errors.Conflict):
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})


def apply_objects(kube: Kube, name: str, namespace: str, objects: list[dict[str, Any]]) -> None:
    """Server-side apply every object, then prune this release's objects the new set no longer has."""
    for obj in objects:
        kube.apply(obj)
    keep = {(o["kind"], o["metadata"]["name"]) for o in objects}
    for kind in MANAGED_KINDS:
        items, _ = kube.list(kind, namespace, labels=f"{RELEASE_LABEL}={name}")
        for item in items:
            if (kind, item["metadata"]["name"]) not in keep:
                kube.delete(kind, item["metadata"]["name"], namespace)


def remove_objects(kube: Kube, name: str, namespace: str) -> None:
    for kind in MANAGED_KINDS:
        items, _ = kube.list(kind, namespace, labels=f"{RELEASE_LABEL}={name}")
        for item in items:
            kube.delete(kind, item["metadata"]["name"], namespace)


def _container_port(deployment: dict[str, Any] | None) -> int:
    containers = (deployment or {}).get("spec", {}).get("template", {}).get("spec", {}).get("containers") or [{}]
    ports = containers[0].get("ports") or [{}]
    return int(ports[0].get("containerPort", 8000))


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
