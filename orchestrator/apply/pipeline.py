"""The apply, gate and rollback sequences: plan → preflight → lock → apply → watch → gate → record.

Each step is one call into the module that owns it (every check before the first write is one call
into ``orchestrator.apply.cluster_preflight``, which also renders the release, once); this module
decides the order and what a failure means (roll back, hold, or stop). ``orchestrator.apply.outcome``
turns the ending into an exit code. Nothing is left half-applied: any failure after the first write,
an unexpected exception or a lost lock included, ends in a recorded failed revision and the last
good release's stored bytes restored (or, on a first install, removal of what was created).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from orchestrator import conventions, engines, errors
from orchestrator.apply import (
    applyset,
    canary,
    cluster_preflight,
    confine,
    group_rollout,
    prom_metrics,
    sequence,
    time_to_serving,
    verify,
    warmup,
)
from orchestrator.apply.lock import ReleaseLock
from orchestrator.apply.outcome import Failure, Outcome, Result, Timings
from orchestrator.engines import startup_log
from orchestrator.gate import verdict as gate
from orchestrator.kube import Kube, connect
from orchestrator.plan import planner, preflight
from orchestrator.profile.model import Profile
from orchestrator.records import audit, purge, releases, revisions, writer
from orchestrator.records import trust as record_trust
from orchestrator.render import manifests as render
from orchestrator.render import resolve

Reporter = verify.Reporter
# The failure class of a restore whose target no trusted key vouches for (docs/security.md).
RECORD_REFUSED = "record_refused"


# --- apply --------------------------------------------------------------------------------------


def apply(profile: Profile, profile_text: str, options: sequence.Options, report: Reporter) -> Outcome:
    """Deploy ``profile``; docs/cli.md has the exit codes. The plan is made once, here, and travels on."""
    timings, name, namespace = Timings(), profile.metadata.name, profile.metadata.namespace
    with timings.phase("plan"):
        plan = planner.check(profile)  # refuses (exit 2 or 3) before anything touches a cluster
        verify.gate_target(profile, options.endpoint, options.allowed_gate_hosts)  # so does a refused endpoint
        prom_metrics.check_source(profile, options.allowed_gate_hosts)  # and a canary Prometheus not allowed
        warmup.check_public_key(profile)  # and a model.verify key it could not check with
    kube = connect(options.kubeconfig, options.context)
    if profile.engine.skipMemoryProfiling:
        with timings.phase("plan"):
            plan = planner.check(profile, calibration=_live_calibration(kube, profile, options, report))
    with timings.phase("preflight"):
        checked = cluster_preflight.run(kube, profile, plan, options.keys, report, adopt=options.adopt)
    check, objects = checked.verdict, checked.objects
    if (refusal := check.refusal) is not None:
        refused = Failure("preflight", refusal, "preflight")
        return Outcome("refused", name, namespace, refusal, failure=refused, timings=timings, warnings=check.warnings)
    if options.dry_run:
        return _dry_run(kube, profile, objects, check, options, timings)
    applyset.ensure_namespace(kube, namespace, options.create_namespace)  # the lock's Lease lives there
    with sequence.release_lock(kube, namespace, name, checked.user, options, report) as lock:
        # Only records deployctl's key signed decide what is live (and so what a failure restores).
        live = revisions.live(record_trust.for_write(kube, name, namespace, options.keys, report).trusted)
        probe_warning = cluster_preflight.startup_probe_warning(profile, plan, live, objects)
        manifests = render.to_yaml(objects).encode()
        actor = writer.actor(checked.user, options.environ)
        draft = writer.Draft.of_profile(profile, plan.to_json(), manifests, profile_text, actor, options.keys.signer)
        description = _describe(live, checked.replaces_pods) + confine.adoption(checked.adopted)
        spec = sequence.gate_spec(profile, objects, options)
        # A group is never changed in place: new copies start beside the old ones (surge), whose
        # removal waits for the gate, or in their place once they are gone (replace).
        copies = _CopyChange.of(profile, check, checked.replaces_pods)
        existed = frozenset((e.kind, e.name) for e in checked.found)
        with timings.phase("warmup"):
            new_pods = checked.replaces_pods or live is None
            warm = warmup.begin(
                kube, profile, objects, check, replaces_pods=new_pods, report=report, abort=lock.lost_reason
            )
        try:
            stop = warm.failure()[0] if warm else None
            if warm is not None and (lost := lock.lost_reason()) is not None:  # the warm-up took minutes
                stop = Failure("lock_lost", f"{lost}; the warm-up ran, nothing else was written", "warmup")
            if warm is not None and stop is not None:
                outcome = _stopped_by_warmup(kube, draft, description, stop, warm, report, timings)
            else:  # a canary's steps first; its promotion is an apply like any other, gate included
                trial = canary.of(kube, profile, objects, live, spec, check.canary_mode, report, lock)
                draft, ended = canary.first(trial, draft, description, timings) if trial else (draft, None)
                outcome = ended or _deploy(
                    kube, objects, draft, description, live, spec, lock, options, report, timings, copies, existed, warm
                )
        finally:
            left = warm.cleanup() if warm is not None else []
    unsigned = record_trust.unsigned_warning(options.keys)
    leftover = f"warm-up pods still there after their deletion: {', '.join(left)}" if left else None
    late = [w for w in (probe_warning, unsigned, leftover) if w]
    outcome.warnings = check.warnings + outcome.warnings + late
    return outcome


def _live_calibration(kube: Kube, profile: Profile, options: sequence.Options, report: Reporter) -> planner.Calibration:
    """The calibration engine.skipMemoryProfiling starts from: the release's own trusted records, read
    before anything is written; exit 2 without one (a first install, another setup, no observation)."""
    name, namespace = profile.metadata.name, profile.metadata.namespace
    records = record_trust.for_write(kube, name, namespace, options.keys, report).trusted
    found = sequence.calibration(list(records), name, namespace, profile)
    if isinstance(found, str):
        raise resolve.needs_calibration(found, name)
    report("plan", f"KV cache from the calibration of {found.source}: vLLM's memory profiling is skipped")
    return found


@dataclasses.dataclass(frozen=True)
class _CopyChange:
    """How the copies across nodes change in an apply: new beside old, or old removed first."""

    beside: bool  # surge: old copies keep serving until the new ones passed the gate
    replace: bool  # old copies go before the new ones start (their GPUs are needed)

    @classmethod
    def of(cls, profile: Profile, check: preflight.Preflight, replaces_pods: bool) -> _CopyChange:
        if not profile.multi_node or not replaces_pods:
            return cls(beside=False, replace=False)
        beside = check.strategy_name == "surge"
        return cls(beside=beside, replace=not beside)


def _describe(live: releases.Record | None, replaces_pods: bool) -> str:
    if live is None:
        return "install"
    return (
        f"upgrade from revision {live.revision}"
        if replaces_pods
        else f"update of revision {live.revision} (pods unchanged)"
    )


def _dry_run(
    kube: Kube,
    profile: Profile,
    objects: list[dict[str, Any]],
    check: preflight.Preflight,
    options: sequence.Options,
    timings: Timings,
) -> Outcome:
    """What apply would do, from a server-side dry-run: nothing is written, no lock is taken."""
    name, namespace = profile.metadata.name, profile.metadata.namespace
    if kube.get("Namespace", namespace) is None and not options.create_namespace:
        raise errors.RolloutFailed(f"namespace {namespace} does not exist; create it, or pass --create-namespace")
    changes = applyset.planned_changes(kube, name, namespace, objects)
    changed = [f"{c['action']} {c['object']}" for c in changes if c["action"] != "unchanged"]
    message = (
        f"would deploy {name} with strategy {check.strategy_name}"
        + (" (downtime)" if check.downtime else "")
        + (f", its canary {cluster_preflight.CANARY_PLACES[check.canary_mode]}" if check.canary_mode else "")
        + f" on {len(check.eligible_nodes)} eligible node(s) ({', '.join(check.eligible_nodes[:4])}"
        + (", …" if len(check.eligible_nodes) > 4 else "")
        + f"): {'; '.join(changed) if changed else 'no object changes'}. Nothing was written (--dry-run)"
    )
    return Outcome("dry_run", name, namespace, message, timings=timings, warnings=check.warnings, changes=changes)


def _deploy(
    kube: Kube,
    objects: list[dict[str, Any]],
    draft: writer.Draft,
    description: str,
    live: releases.Record | None,
    spec: verify.GateSpec,
    lock: ReleaseLock,
    options: sequence.Options,
    report: Reporter,
    timings: Timings,
    copies: _CopyChange,
    existed: frozenset[tuple[str, str]],
    warm: warmup.Warmup | None = None,
) -> Outcome:
    """Everything after the first write: apply, verify, record; any failure ends in ``_fail``
    (``existed``: the objects there before the apply, which a failed first install leaves; ``warm``:
    the warm-up, whose nodes still warming are awaited before the revision is recorded)."""
    name, namespace, written = draft.release, draft.namespace, time.monotonic()  # the time to serving starts here
    judged = verify.Judgement(None)
    try:
        with timings.phase("apply"):
            try:
                if copies.replace:
                    report("apply", "removing the old copies first: their GPUs are needed for the new ones")
                    _remove_old_copies(kube, name, namespace, objects, spec.rollout_timeout)
                report("apply", f"server-side apply of {len(objects)} objects to {namespace}")
                applyset.apply(kube, name, namespace, objects, keep_old_copies=copies.beside)
            except errors.ClusterError as e:
                raise _Stop(Failure("apply", e.message, "apply")) from e
        previous = live.gate if live else None
        judged = verify.verify(
            kube, name, namespace, spec, previous, report, timings, abort=lock.lost_reason, started=written
        )
        failure, late, judged = _after_warmup(judged, warm, report)
        if failure is None and (lost := lock.lost_reason()) is not None:
            failure = Failure("lock_lost", lost, "record")
        if failure is None and copies.beside:
            report("apply", "the new copies passed: removing the old ones")
            applyset.prune(kube, name, namespace, objects)
        if failure is None:
            with timings.phase("record"):
                record = sequence.record_revision(kube, draft, "deployed", description, judged)
    except _Stop as stop:
        failure = stop.failure
    except Exception as e:  # every exit after the first write is recorded and restored
        failure = sequence.unexpected_failure(e, timings.current)
    if failure is not None:
        return _fail(kube, draft, description, live, failure, judged, options, report, timings, existed)
    warnings = late + startup_log.warnings(
        draft.plan or {}, judged.observed, spec.max_num_seqs, engines.get(spec.engine).title
    )
    if judged.smoke is not None and judged.smoke.verdict == gate.Verdict.INCONCLUSIVE:
        # Inconclusive is no evidence against the revision, so it is kept, not rolled back, and
        # the reason is said so that a person decides (e.g. rerun `deployctl gate` off-peak).
        warnings.append(f"the smoke gate was inconclusive and did not judge this revision: {judged.smoke.summary()}")
    message = f"revision {record.revision} of {name} is deployed ({description})"
    done = Outcome("deployed", name, namespace, message, record.revision, timings=timings, gate=judged.smoke)
    done.warnings, done.time_to_serving = warnings, judged.serving_json()
    return done


def _after_warmup(
    judged: verify.Judgement, warm: warmup.Warmup | None, report: Reporter
) -> tuple[Failure | None, list[str], verify.Judgement]:
    """The failure, the warnings and the judgement once the warm-up's last nodes are judged too: in a
    one-at-a-time rollout they warmed while the first new pods started."""
    if warm is None:
        return judged.failure, [], judged
    new_pods = {p.node for p in judged.serving.pods} if judged.serving else set()
    failure, late = judged.failure, list[str]()
    if failure is None:
        warm.wait(report, nodes=new_pods)
        failure, late = warm.failure(new_pods=new_pods)
    else:  # the rollout or gate failed: a mismatch already found explains it better
        found, _ = warm.failure(new_pods=set(warm.results))
        failure = found if found is not None and found.cls == "weights_mismatch" else failure
    return failure, late, _with_warmup(judged, warm)


def _with_warmup(judged: verify.Judgement, warm: warmup.Warmup) -> verify.Judgement:
    """``judged`` with the warm-up in its time to serving, as the record keeps it."""
    serving = judged.serving or time_to_serving.TimeToServing({})
    return dataclasses.replace(judged, serving=dataclasses.replace(serving, warmup=warm.to_json()))


def _stopped_by_warmup(
    kube: Kube,
    draft: writer.Draft,
    description: str,
    failure: Failure,
    warm: warmup.Warmup,
    report: Reporter,
    timings: Timings,
) -> Outcome:
    """The warm-up stopped the revision before its first write: record it failed, with the warm-up's
    evidence (a weights mismatch is an audit event), and change nothing else."""
    name, namespace = draft.release, draft.namespace
    report("warmup", f"STOPPED ({failure.cls}): {failure.message}")
    judged = _with_warmup(verify.Judgement(failure), warm)
    if failure.cls == "lock_lost":  # another apply may hold the release now: write nothing
        return Outcome("refused", name, namespace, failure.message, None, failure, timings)
    try:
        failed = sequence.record_revision(kube, draft, "failed", f"{description} failed: {failure.cls}", judged)
        label, revision = f"revision {failed.revision}", failed.revision
    except errors.DeployctlError as e:
        label, revision = f"the new revision (its record could not be written: {e.message})", None
    message = f"{label} was stopped by its warm-up before any GPU pod started; nothing of the release changed. "
    stopped = Outcome("refused", name, namespace, message + failure.message, revision, failure, timings)
    stopped.time_to_serving = judged.serving_json()
    return stopped


class _Stop(Exception):
    """A failure that ends the sequence where it is met."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def _fail(
    kube: Kube,
    draft: writer.Draft,
    description: str,
    live: releases.Record | None,
    failure: Failure,
    judged: verify.Judgement,
    options: sequence.Options,
    report: Reporter,
    timings: Timings,
    existed: frozenset[tuple[str, str]] = frozenset(),
) -> Outcome:
    """Record the failed revision, then restore the last good release (or remove what a failed
    install created: never what was there before it, adopted objects included)."""
    name, namespace = draft.release, draft.namespace
    report(failure.stage, f"FAILED ({failure.cls}): {failure.message}")
    try:
        description = f"{description} failed: {failure.cls}"
        failed = sequence.record_revision(kube, draft, "failed", description, judged, failure)
        label, revision = f"revision {failed.revision}", failed.revision
        what = f"{label} failed ({failure.cls})"
    except errors.DeployctlError as e:
        label, revision = "the new revision", None
        what = f"the new revision failed ({failure.cls}) and its record could not be written ({e.message})"

    def ending(result: Result, message: str, rolled_back_to: int | None = None) -> Outcome:
        ended = Outcome(
            result, name, namespace, message, revision, failure, timings, judged.smoke, rolled_back_to=rolled_back_to
        )
        ended.time_to_serving = judged.serving_json()
        return ended

    if not options.rollback:
        return ending("left_failed", f"{what} and was left in place (--no-rollback)")
    with timings.phase("rollback"):
        if live is None:
            report("rollback", "no earlier release: removing what this install created")
            try:
                applyset.remove(kube, name, namespace, keep=existed)
            except errors.ClusterError as e:
                return ending("rollback_failed", f"{what} and removing it failed too: {e.message}")
            left = confine.left_in_place(existed)
            removed = f"{what}; it was the first install, so the objects it created were removed{left}."
            return ending("rolled_back", f"{removed} {failure.message}")
        report("rollback", f"rolling back to revision {live.revision}")
        try:
            restored = restore(
                kube, live, f"rollback to {live.revision} after {label} failed", options, report, draft.actor
            )
        except errors.DeployctlError as e:  # refused before any write: tampered manifests, a takeover
            return ending("rollback_failed", f"{what} and the rollback to {live.revision} was refused: {e.message}")
    if restored.result != "deployed":
        return ending(
            "rollback_failed", f"{what} and the rollback to revision {live.revision} failed too: {restored.message}"
        )
    message = (
        f"{what} and was rolled back to revision {live.revision} (now revision {restored.revision}). {failure.message}"
    )
    return ending("rolled_back", message, rolled_back_to=live.revision)


# --- rollback (on-call) -------------------------------------------------------------------------


def rollback(name: str, namespace: str, to: int | None, options: sequence.Options, report: Reporter) -> Outcome:
    """Re-apply an earlier revision's stored bytes; needs nothing but a kubeconfig."""
    kube = connect(options.kubeconfig, options.context)
    user = kube.whoami()
    applyset.check_access(kube, namespace)
    record_trust.for_write(kube, name, namespace, options.keys)  # refused before the lock's write, as in apply
    with sequence.release_lock(kube, namespace, name, user, options, report):
        checked = record_trust.for_write(kube, name, namespace, options.keys, report)
        history = checked.records
        if not history:
            stones = purge.tombstones(kube, name, namespace)  # purged: by whom, and where the records went
            raise errors.UnknownRelease(
                purge.explained(conventions.no_records_message(name, namespace), stones, namespace)
            )
        if to is not None and (refused := checked.refusal(to)) is not None:
            raise errors.AuditFailed(
                f"revision {to} of {name} is not restored: {refused.message()}. Nothing was changed"
            )
        target = _rollback_target(checked.trusted, name, to)
        problems = [
            p for p in audit.verify(history, release=name, namespace=namespace) if p.revision == target.revision
        ]
        if problems:
            raise errors.AuditFailed(
                f"revision {target.revision} of {name} fails its integrity check, so its stored manifests "
                f"are not re-applied: {'; '.join(p.message for p in problems)}"
            )
        report("rollback", f"rolling back {name} to revision {target.revision} ({target.description})")
        actor = writer.actor(user, options.environ)
        return restore(kube, target, f"rollback to {target.revision}", options, report, actor)


def _rollback_target(history: list[releases.Record], name: str, to: int | None) -> releases.Record:
    if to is not None:
        target = revisions.get(history, to)
        if target.outcome == "uninstalled":
            raise errors.UsageError(
                f"revision {to} of {name} records an uninstall, which has nothing to re-deploy; roll back to a "
                "revision that was deployed (`deployctl history` shows them; without --to, the one live before it)"
            )
        if target.outcome != "deployed":
            raise errors.UsageError(
                f"revision {to} of {name} never passed its gate ({target.description}); "
                "roll back to a revision that was deployed (see `deployctl history`)"
            )
        return target
    found = revisions.rollback_target(history)
    if found is None:
        raise errors.UsageError(
            f"release {name} has no earlier good revision to roll back to; pass --to N (see `deployctl history`)"
        )
    return found


def restore(
    kube: Kube,
    target: releases.Record,
    description: str,
    options: sequence.Options,
    report: Reporter,
    actor: dict[str, Any],
) -> Outcome:
    """Re-apply the stored bytes of ``target``, watch, health-gate and record a new revision.
    Objects that are not the release's own are refused (``confine``) before any write and unrecorded."""
    name, namespace, timings = target.release, target.namespace, Timings()
    # Checked again here, whoever chose the target: restore writes a record's stored bytes. A refused
    # target is not recorded either: a new record would copy (and sign) the refused bytes.
    try:
        record_trust.require(record_trust.for_write(kube, name, namespace, options.keys), target)
    except errors.AuditFailed as e:
        refused = Failure(RECORD_REFUSED, e.message, "rollback")
        return Outcome("rollback_failed", name, namespace, e.message, None, refused, timings)
    source = f"revision {target.revision}'s stored manifests"
    objects = confine.stored_objects(target.manifests, source, name, namespace)
    confine.before_writing(name, namespace, objects, kube.get, source, adopt=False)
    spec = verify.stored_spec(
        target, objects, timeout=options.timeout, endpoint=options.endpoint, allowed_hosts=options.allowed_gate_hosts
    )
    written = time.monotonic()
    try:
        with timings.phase("apply"):
            if spec.group is not None:
                # Copies that are not the target's go first: a failed new copy holds the GPUs the
                # target's copies need when those were removed for it.
                _remove_old_copies(kube, name, namespace, objects, spec.rollout_timeout)
            applyset.apply(kube, name, namespace, objects)
        judged = verify.verify(kube, name, namespace, spec, None, report, timings, phase="rollback", started=written)
    except Exception as e:  # a restore that cannot finish is said, never a traceback
        judged = verify.Judgement(sequence.unexpected_failure(e, timings.current))
    failure = judged.failure
    draft = writer.Draft.of(target, actor, options.keys.signer)
    outcome: releases.Outcome = "failed" if failure else "deployed"
    described = description + (" (failed)" if failure else "")
    record = sequence.record_revision(kube, draft, outcome, described, judged, failure, rollback_of=target.revision)
    if failure:
        message = f"rollback to revision {target.revision} failed ({failure.cls}): {failure.message}"
        return Outcome("rollback_failed", name, namespace, message, record.revision, failure, timings)
    message = f"revision {record.revision} of {name} is live: {description}"
    return Outcome(
        "deployed",
        name,
        namespace,
        message,
        record.revision,
        timings=timings,
        rolled_back_to=target.revision,
        time_to_serving=judged.serving_json(),
    )


def _remove_old_copies(kube: Kube, name: str, namespace: str, objects: list[dict[str, Any]], timeout: float) -> None:
    """Delete the release's group objects that ``objects`` does not hold, and wait until their
    pods are gone (their GPUs are free again)."""
    applyset.prune(kube, name, namespace, objects, kinds=conventions.GROUP_KINDS)
    keep = {o["metadata"]["name"] for o in objects if o["kind"] in conventions.GROUP_KINDS}
    group_rollout.wait_copies_gone(kube, namespace, name, keep, timeout=timeout)
