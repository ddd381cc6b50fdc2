"""What a release's history says: each revision's status, what is live, what a rollback restores.

It takes the records ``orchestrator.records.releases`` loaded, oldest first, and reads them; it
writes nothing. ``deployed`` means "the newest revision that passed", ``live`` is the target of an
automatic rollback, and ``rollback_target`` what ``deployctl rollback`` without ``--to`` restores.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator import errors
from orchestrator.records import encoding, releases


def status_of(history: Sequence[releases.Record]) -> dict[int, releases.Status]:
    """Revision → status: the newest deployed record is ``deployed`` (live), older deployed ones are
    ``superseded``, failed ones stay ``failed`` and uninstall records are ``uninstalled``.

    ``deployed`` means "the newest revision that passed": when the newest record is failed and its
    automatic rollback failed too, the cluster may still run the failed revision's objects.
    """
    current = live(history)
    statuses: dict[int, releases.Status] = {}
    for record in history:
        if record.outcome in ("failed", "uninstalled", "trusted"):
            statuses[record.revision] = record.outcome
        else:
            statuses[record.revision] = "deployed" if record is current else "superseded"
    return statuses


def summaries(history: Sequence[releases.Record]) -> list[dict[str, object]]:
    """``deployctl history --output json``: one summary per revision, oldest first."""
    statuses = status_of(history)
    return [summary(record, statuses[record.revision]) for record in history]


def summary(record: releases.Record, status: releases.Status) -> dict[str, object]:
    """One row of ``deployctl history --output json``; ``status`` comes from ``status_of``."""
    gate = record.gate or {}
    return {
        "revision": record.revision,
        "format": record.format_version,
        "status": status,
        "description": record.description,
        "timestamp": record.timestamp,
        "actor": record.actor,
        "profile_hash": record.profile_hash,
        "image": record.image,
        "gate": gate.get("verdict"),  # pass|inconclusive|error|fail; None: not gated
        "planner": record.planner_check(),
        # Seconds from the write to the first token (format 4); None before, or when it never served.
        "time_to_serving": encoding.seconds((record.time_to_serving or {}).get("seconds")),
    }


def live(history: Sequence[releases.Record]) -> releases.Record | None:
    """The newest record that was deployed and passed, the target of an automatic rollback; None
    when an uninstall came after it (nothing is live, and a failed apply removes what it created)."""
    newest = _newest_deployed_or_uninstalled(history)
    return newest if newest is not None and newest.outcome == "deployed" else None


def uninstalled(history: Sequence[releases.Record]) -> releases.Record | None:
    """The uninstall record, when the release is uninstalled: no revision was deployed after it."""
    newest = _newest_deployed_or_uninstalled(history)
    return newest if newest is not None and newest.outcome == "uninstalled" else None


def _newest_deployed_or_uninstalled(history: Sequence[releases.Record]) -> releases.Record | None:
    # Failed and trust records change neither what is live nor whether the release is uninstalled.
    return next((r for r in reversed(history) if r.outcome in ("deployed", "uninstalled")), None)


def last_good_before(history: Sequence[releases.Record], revision: int) -> releases.Record | None:
    """The newest deployed record older than ``revision`` whose manifests differ from its own.

    Say revision 1 installed A, 2 upgraded to B, 3 tried C and failed its gate, and 4 is the
    automatic "rollback to 2", live again with B's bytes. An engineer who now asks to roll back
    means "go back to before B": 3 failed and 2 holds exactly what already runs, so the answer
    is 1. Failed records and records with the same bytes as ``revision`` are skipped; None when
    nothing earlier is different.
    """
    by_revision = {r.revision: r for r in history}
    if revision not in by_revision:
        raise errors.UnknownRelease(f"revision {revision} is not in the history ({_revisions(history)})")
    current = by_revision[revision].manifests_sha256
    return next(
        (
            r
            for r in reversed(history)
            if r.revision < revision and r.outcome == "deployed" and r.manifests_sha256 != current
        ),
        None,
    )


def rollback_target(history: Sequence[releases.Record]) -> releases.Record | None:
    """What ``deployctl rollback`` without ``--to`` restores.

    If the newest record failed (an upgrade or rollback whose own rollback did not finish), the
    cluster may be running its bytes, so the target is the live record: restore the last good
    state. Otherwise the target is ``last_good_before`` the live record. Re-applying the live
    bytes is harmless (server-side apply is idempotent and the gate runs again), whereas going
    one step further back than the engineer meant would not be. After an uninstall, the target
    is the revision that was live when it ran.
    """
    gone = uninstalled(history)
    if gone is not None:
        # Undo the uninstall: the revision that was live when it ran (as `helm rollback` after
        # `helm uninstall --keep-history` goes back to the revision before the uninstalled one).
        return next((r for r in reversed(history) if r.revision < gone.revision and r.outcome == "deployed"), None)
    current = live(history)
    if current is None:
        return None
    acted = [r for r in history if r.outcome != "trusted"]  # a trust step changed nothing in the cluster
    if acted and acted[-1].outcome == "failed":
        return current
    return last_good_before(history, current.revision)


def get(history: Sequence[releases.Record], revision: int) -> releases.Record:
    """Revision ``revision``, or NotFound naming the revisions there are (for ``rollback --to``)."""
    for record in history:
        if record.revision == revision:
            return record
    raise errors.UnknownRelease(f"revision {revision} is not in the history ({_revisions(history)})")


def _revisions(history: Sequence[releases.Record]) -> str:
    if not history:
        return "the release has no records"
    return f"it has revisions {history[0].revision} to {history[-1].revision}"
