"""The GitOps gate: wait for what Argo CD or Flux applied to carry this profile, then gate and record it.

The same verify step as apply (rollout, health, smoke), the same lock and records; what differs
is who wrote the objects. The record holds the bytes the GitOps tool applied, read back from the
cluster, and a failure rolls nothing back: in GitOps the fix is a revert in git (docs/gitops.md),
so it exits 10, not 6.
"""

from __future__ import annotations

import time
from typing import Any

from orchestrator import conventions
from orchestrator.apply import applyset, cluster_preflight, rollout, sequence, verify
from orchestrator.apply.outcome import Failure, Outcome, Timings
from orchestrator.kube import Kube, connect
from orchestrator.plan import planner
from orchestrator.profile.model import Profile
from orchestrator.records import revisions, writer
from orchestrator.records import trust as record_trust
from orchestrator.render import manifests as render


def gate(profile: Profile, profile_text: str, options: sequence.Options, report: verify.Reporter) -> Outcome:
    """Wait for the sync, judge the synced revision and record it (deployed or failed); its time to
    serving counts from the gate's start, as the write was the GitOps tool's."""
    timings, name, namespace, begun = Timings(), profile.metadata.name, profile.metadata.namespace, time.monotonic()
    with timings.phase("plan"):
        plan = planner.check(profile)
        verify.gate_target(profile, options.endpoint, options.allowed_gate_hosts)  # refused before any wait
    kube = connect(options.kubeconfig, options.context)
    user = kube.whoami()
    objects = render.render(profile, plan)
    applyset.check_access(kube, namespace, cluster_preflight.check_group_engine(kube, profile))
    # Unreadable or newer records, or signatures without a key: refused before any wait or write;
    # a ConfigMap posing as a record is said.
    record_trust.for_write(kube, name, namespace, options.keys, report)
    spec = sequence.gate_spec(profile, objects, options)
    with timings.phase("sync"):
        not_synced = _wait_for_sync(kube, profile, objects, spec.rollout_timeout, report)
    if not_synced is not None:
        unsynced = Failure("not_synced", not_synced, "sync")
        return Outcome("gate_failed", name, namespace, not_synced, failure=unsynced, timings=timings)
    with sequence.release_lock(kube, namespace, name, user, options, report) as lock:
        live = revisions.live(record_trust.for_write(kube, name, namespace, options.keys, report).trusted)
        applied = render.to_yaml(applyset.live_objects(kube, name, namespace)).encode()
        actor = writer.actor(user, options.environ)
        draft = writer.Draft.of_profile(profile, plan.to_json(), applied, profile_text, actor, options.keys.signer)
        try:
            previous = live.gate if live else None
            judged = verify.verify(
                kube, name, namespace, spec, previous, report, timings, abort=lock.lost_reason, started=begun
            )
        except Exception as e:  # the gate's verdict is recorded whatever happened
            judged = verify.Judgement(sequence.unexpected_failure(e, timings.current))
        failure, gate_report = judged.failure, judged.smoke
        described = f"gitops sync gated{' — failed: ' + failure.cls if failure else ''}"
        record = sequence.record_revision(kube, draft, "failed" if failure else "deployed", described, judged)
    if failure:
        message = (
            f"revision {record.revision} failed its gate ({failure.cls}): {failure.message}. "
            "In GitOps, roll back by reverting the commit"
        )
        ended = Outcome("gate_failed", name, namespace, message, record.revision, failure, timings, gate_report)
    else:
        message = f"revision {record.revision} of {name} passed its gate"
        ended = Outcome("deployed", name, namespace, message, record.revision, timings=timings, gate=gate_report)
    ended.time_to_serving = judged.serving_json()
    if profile.rollout.warmup is not None and profile.rollout.warmup.enabled:
        ended.warnings.append(
            "rollout.warmup and model.verify run only where deployctl makes the write (apply, the controller): "
            "the GitOps tool applied this revision, so no node was warmed and no weights were verified"
        )
    return ended


def _wait_for_sync(
    kube: Kube, profile: Profile, objects: list[dict[str, Any]], timeout: float, report: verify.Reporter
) -> str | None:
    """Wait until the GitOps tool applied this profile; None once it did, else why the gate fails."""
    # The object whose annotation says the sync happened: the Deployment, or a copy's group object
    # (its name carries the pod templates' hash, so it exists only once this revision was applied).
    synced = next(o for o in reversed(objects) if o["kind"] in ("Deployment", *conventions.GROUP_KINDS))
    kind, target, namespace = synced["kind"], synced["metadata"]["name"], profile.metadata.namespace
    want = profile.spec_hash()

    def waiting(have: str | None) -> None:
        report("sync", f"waiting for the GitOps tool to apply profile {want[:12]} (live: {(have or 'none')[:12]})")

    have = rollout.wait_for_annotation(
        kube, namespace, target, conventions.PROFILE_HASH_ANNOTATION, want, timeout=timeout, progress=waiting, kind=kind
    )
    if have == want:
        return None
    return (
        f"{kind} {namespace}/{target} never carried profile hash {want[:12]} (has {(have or 'none')[:12]}); "
        "did the GitOps sync apply this commit's manifests?"
    )
