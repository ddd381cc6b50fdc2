"""What the apply, rollback and GitOps gate sequences share: their options, the gate's spec from
those options, the release lock, a revision's record, and the failure an unexpected error becomes.

``orchestrator.apply.pipeline`` runs apply and rollback with these, ``orchestrator.apply.gitops`` the
GitOps gate and ``orchestrator.apply.views`` the audit trust step, so that every sequence takes the
lock, judges and records a revision the same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

from orchestrator import errors
from orchestrator.apply import verify
from orchestrator.apply.lock import DEFAULT_TTL_SECONDS, ReleaseLock
from orchestrator.apply.outcome import INTERNAL_CLASS, Failure
from orchestrator.kube import Kube, connection
from orchestrator.plan import planner
from orchestrator.profile.model import Profile
from orchestrator.records import releases, writer
from orchestrator.records import trust as record_trust


@dataclasses.dataclass
class Options(connection.Connection):
    """How a sequence runs, besides which cluster it talks to (the CLI's flags, or the controller's settings)."""

    endpoint: str | None = None
    # Gate hosts besides the release's own Service that gate.endpoint may name (--allow-gate-host;
    # the controller: its policy's allowedGateHosts).
    allowed_gate_hosts: tuple[str, ...] = ()
    rollback: bool = True
    skip_bench: bool = False
    timeout: float | None = None
    create_namespace: bool = False
    dry_run: bool = False
    lock_ttl: int = DEFAULT_TTL_SECONDS
    adopt: bool = False  # --adopt: take over existing objects without the release's label (recorded)
    environ: dict[str, str] = dataclasses.field(default_factory=dict)  # for the actor's CI info
    # The key new records are signed with and the keys records are checked against (record_trust).
    keys: record_trust.Keys = dataclasses.field(default_factory=record_trust.Keys)


def gate_spec(profile: Profile, objects: list[dict[str, Any]], options: Options) -> verify.GateSpec:
    """What verify judges a revision of ``profile`` by, with the options' timeout, endpoint and bench choice."""
    return verify.spec_of(
        profile,
        objects,
        timeout=options.timeout,
        endpoint=options.endpoint,
        skip_bench=options.skip_bench,
        allowed_hosts=options.allowed_gate_hosts,
    )


@contextlib.contextmanager
def release_lock(
    kube: Kube, namespace: str, name: str, user: str, options: Options, report: verify.Reporter
) -> Iterator[ReleaseLock]:
    """Hold the release's Lease (``options.lock_ttl``) for the block; its warnings go to ``report``."""
    with ReleaseLock(
        kube, namespace, name, user, ttl_seconds=options.lock_ttl, warn=lambda m: report("lock", f"warning: {m}")
    ) as lock:
        yield lock


def record_revision(
    kube: Kube,
    draft: writer.Draft,
    outcome: releases.Outcome,
    description: str,
    judged: verify.Judgement,
    failure: Failure | None = None,
    *,
    rollback_of: int | None = None,
) -> releases.Record:
    """Append the revision's record: what verify judged (its failure unless another is given),
    the smoke report and the start-up observations, as JSON."""
    failure = failure or judged.failure
    return draft.record(
        kube,
        outcome=outcome,
        description=description,
        gate=judged.smoke.to_json() if judged.smoke else None,
        failure=failure.to_record() if failure else None,
        observed=judged.observed_json(),
        time_to_serving=judged.serving_json(),
        rollback_of=rollback_of,
    )


def calibration(
    records: list[releases.Record], release: str, namespace: str, profile: Profile
) -> planner.Calibration | str:
    """The planner's error as the newest deployed revision with a vLLM start-up observation showed it
    (``plan --calibrate-from``, engine.skipMemoryProfiling), or why there is none: the revision ran
    another model, GPU, vLLM version, TP or PP size (the error does not carry over), or none observed."""
    for record in reversed(records):
        observed = record.planner_check()["kv_tokens_observed"]
        if record.outcome != "deployed" or record.plan is None or not isinstance(observed, int):
            continue
        if not planner.same_setup(record.plan, profile):
            return (
                f"revision {record.revision} of {release} ran another model, GPU, vLLM version, tensor- or pipeline-"
                "parallel size than this profile; a calibration only carries over between the same ones"
            )
        try:
            return planner.calibrate(record.plan, observed, f"{release} revision {record.revision} in {namespace}")
        except (KeyError, TypeError, ValueError, OverflowError):  # a plan edited by hand: no calibration from it
            continue
    return (
        f"release {release} in {namespace} has no deployed revision with a vLLM start-up observation "
        "(its pods' logs held no KV cache line); deploy it with this deployctl first"
    )


def unexpected_failure(e: Exception, stage: str) -> Failure:
    """The failure an exception met after the first write becomes: the cluster's (exit 4) or a bug of ours (5)."""
    if isinstance(e, errors.ClusterError):
        # Forbidden or an unusable API answer after the first write: a cluster problem for a person.
        return Failure("cluster_error", e.message, stage)
    text = e.message if isinstance(e, errors.DeployctlError) else f"{type(e).__name__}: {errors.shorten(str(e), 200)}"
    return Failure(INTERNAL_CLASS, f"deployctl failed unexpectedly during {stage} ({text}); please report it", stage)
