"""`deployctl uninstall`: delete a release's objects, record that, wait for its pods, optionally purge.

Like ``helm uninstall --keep-history`` by default: the objects deployctl applied for the release
(found by the ``deployctl.dev/release`` label, of the kinds it applies: ``kube.kinds.RELEASE_KINDS``,
RayClusters and LeaderWorkerSets included) are deleted, and an ``uninstalled`` record is appended
to the release's hash chain with who, when and what was deleted (the objects' bytes are its
manifests). The history stays, so ``deployctl rollback`` can re-deploy a kept revision.
``--purge`` then removes the records too, the way ``orchestrator.records.purge`` explains.

Never deleted: anything without the label (the user's PVCs, Secrets, the namespace), objects of
other kinds, and labelled objects that another tool applies (no ``deployctl`` field manager: a
Helm chart, Flux, Argo CD), which are refused by name instead, since that tool would put them back.
The release lock (``orchestrator.apply.lock``) is held throughout, so an uninstall cannot race an apply.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from orchestrator import conventions, errors
from orchestrator.apply import applyset, lock, pods_gone, watching
from orchestrator.apply.outcome import Failure, Outcome, Timings
from orchestrator.kube import Kube, connect, kinds
from orchestrator.kube import client as kube_client
from orchestrator.kube import status as kube_status
from orchestrator.records import purge, releases, revisions, signing, writer
from orchestrator.records import trust as record_trust
from orchestrator.render import manifests as render

Reporter = Callable[[str, str], None]

# Workloads first, so pods stop before their Service and NetworkPolicy go (no traffic reaches a
# pod that lost its isolation); the ServiceAccount last, as apply creates it first.
DELETE_ORDER = tuple(reversed(kinds.APPLY_ORDER))
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclasses.dataclass(frozen=True)
class Request:
    """What to uninstall and how; the CLI's options, one for one."""

    name: str
    namespace: str = "default"
    purge: bool = False
    audit_export: str | None = None  # with purge: the file the records are exported to first
    dry_run: bool = False
    wait: bool = True
    timeout: float = 600.0  # one deadline for the deletes and the wait for the pods
    lock_ttl: int = lock.DEFAULT_TTL_SECONDS
    kubeconfig: str | None = None
    context: str | None = None
    environ: dict[str, str] = dataclasses.field(default_factory=dict)  # for the actor's CI info
    keys: record_trust.Keys = dataclasses.field(default_factory=record_trust.Keys)  # sign and check records


def check_request(request: Request) -> None:
    """Refuse a request that can never work, before connecting."""
    if len(request.name) > 63 or not _NAME.match(request.name):
        raise errors.UsageError(
            f"NAME {request.name!r} is not a release name: a release is named by its profile's metadata.name, "
            "lower-case letters, digits and '-', at most 63 characters (`deployctl history NAME` shows one)"
        )
    if request.purge and not request.audit_export:
        raise errors.UsageError(
            "--purge deletes the release's records, its audit trail; give --audit-export FILE as well: deployctl "
            "writes the verified export there first and leaves a tombstone in the namespace (docs/runbook.md)"
        )
    if request.audit_export and not request.purge:
        raise errors.UsageError(
            "--audit-export is written only by --purge; to keep a copy of the records without purging them, run "
            "`deployctl audit export NAME`"
        )
    if request.purge and request.audit_export and not request.dry_run:
        purge.check_export_path(request.audit_export)


# --- what belongs to the release ------------------------------------------------------------------


def applied_by_others(objects: Sequence[kube_status.Object]) -> list[str]:
    """``Kind/name (managers)`` of each object no ``deployctl`` field manager ever wrote: another
    tool applies it. An object without managedFields (a server that strips them) is not judged."""
    found = []
    for obj in objects:
        managers = kube_status.Meta.from_object(obj).managers
        if managers and kube_client.FIELD_MANAGER not in managers:
            found.append(f"{_ref(obj)} ({', '.join(managers)})")
    return found


def rendered_optional_kinds(history: Sequence[releases.Record]) -> set[str]:
    """The kinds whose CRD a cluster may lack (RayCluster, LeaderWorkerSet, PodMonitor, PrometheusRule) that any
    revision of the release applied: those it must be allowed to list and delete."""
    return {kind for kind in kinds.OPTIONAL_KINDS for r in history if f"\nkind: {kind}\n" in f"\n{_text(r)}"}


def _text(record: releases.Record) -> str:
    return record.manifests.decode("utf-8", "replace")


def release_objects(kube: releases.Cluster, name: str, namespace: str, used: set[str]) -> list[dict[str, Any]]:
    """The release's objects of every kind deployctl applies, in delete order. An optional kind
    (``kube.kinds.OPTIONAL_KINDS``) whose CRD is missing has none; one this identity may not list is
    an error when the release ``used`` it, since its objects would be left behind unseen."""
    found: list[dict[str, Any]] = []
    for kind in DELETE_ORDER:
        try:
            items, _ = kube.list(kind, namespace, labels=f"{conventions.RELEASE_LABEL}={name}")
        except errors.NotFound:
            if kind not in kinds.OPTIONAL_KINDS:
                raise
            continue
        except errors.Forbidden:
            if kind not in kinds.OPTIONAL_KINDS or kind in used:
                raise
            continue
        found += sorted(items, key=lambda o: o["metadata"]["name"])
    return found


def _refuse_foreign(kube: Kube, name: str, namespace: str, objects: Sequence[kube_status.Object]) -> None:
    """Refuse what another tool would put back: objects it applies, or a controller-driven release."""
    others = applied_by_others(objects)
    if others:
        raise errors.UsageError(
            f"release {name} in namespace {namespace}: {', '.join(others)} carry its label but were applied by "
            "another tool (field managers in brackets), which would put them back. Remove the release from that "
            f"tool (git for Flux or Argo CD, `helm uninstall` for the chart), then run `deployctl uninstall {name}` "
            "to record it. Nothing was deleted"
        )
    try:
        driven = kube.get("InferenceProfile", name, namespace)
    except errors.Forbidden:
        driven = None  # an identity that may not read them is not running the controller's releases
    if driven is not None:
        raise errors.UsageError(
            f"release {name} in namespace {namespace} is driven by the InferenceProfile object {name} (deployctl "
            f"controller), which would apply it again. Delete that object instead (`kubectl delete inferenceprofile "
            f"{name} -n {namespace}`): the controller removes the workload and keeps the records. Nothing was deleted"
        )


def _required_access(request: Request, used_kinds: set[str]) -> list[kinds.Access]:
    wanted = kinds.access(kinds.CORE_KINDS, ("list", "delete"))
    for kind in sorted(used_kinds):
        wanted += [a for a in applyset.GROUP_ACCESS[kind] if a[0] in ("list", "delete")]
    wanted += kinds.access(["ConfigMap"], ("list", "create")) + kinds.access(["Lease"], ("get", "create", "update"))
    if request.wait:
        wanted += kinds.access(["Pod"], ("list", "watch"))
    return wanted


def _check_access(kube: Kube, request: Request, used_kinds: set[str]) -> None:
    missing = applyset.missing_access(kube, request.namespace, _required_access(request, used_kinds))
    if missing:
        raise errors.Forbidden(
            f"the identity of context {kube.context!r} may not: {', '.join(missing)} in namespace "
            f"{request.namespace}, which uninstall needs. Nothing was deleted. Bind it to deployctl's Role "
            "(`deployctl render PROFILE --format rbac`)"
        )
    if request.purge:
        purging = kinds.access(["ConfigMap", "Lease"], ("delete",))
        missing = applyset.missing_access(kube, request.namespace, purging)
        if missing:
            raise errors.Forbidden(
                f"--purge deletes the release records, and the identity of context {kube.context!r} may not: "
                f"{', '.join(missing)} in namespace {request.namespace}. deployctl's Role never grants deleting "
                "ConfigMaps (the records are the audit trail); a person allowed to purge needs the "
                "deployctl-purge Role of docs/runbook.md. Nothing was deleted"
            )


# --- the sequence ---------------------------------------------------------------------------------


def uninstall(request: Request, report: Reporter) -> Outcome:
    """Uninstall ``request.name``; docs/cli.md has the exit codes."""
    check_request(request)
    deadline = time.monotonic() + request.timeout
    name, namespace, timings = request.name, request.namespace, Timings()
    kube = connect(request.kubeconfig, request.context)
    user = kube.whoami()
    history = _history(kube, request)
    # A first apply writes its record only at its end: objects without records, next to a Lease, may
    # be that apply's, so the lock (exit 8 while it runs) decides, and the records are read again.
    if not history and (request.dry_run or not _first_apply_may_be_running(kube, name, namespace)):
        return _no_records(kube, request)
    used_kinds = rendered_optional_kinds(history)
    _check_access(kube, request, used_kinds)
    if request.dry_run:
        return _dry_run(kube, request, history, used_kinds, timings)
    actor = writer.actor(user, request.environ)
    with lock.ReleaseLock(
        kube,
        namespace,
        name,
        user,
        ttl_seconds=request.lock_ttl,
        warn=lambda m: report("lock", f"warning: {m}"),
    ) as held:
        history = _history(kube, request, report)  # as it is now that we hold the lock
        if not history:
            return _no_records(kube, request)
        if not rendered_optional_kinds(history) <= used_kinds:  # an apply finished while we waited
            used_kinds = rendered_optional_kinds(history)
            _check_access(kube, request, used_kinds)
        objects = release_objects(kube, name, namespace, used_kinds)
        _refuse_foreign(kube, name, namespace, objects)
        if request.purge:
            purge.check_chain(releases.load_history(kube, name, namespace), name, namespace)
        changes: list[dict[str, str]] = []
        record = revisions.uninstalled(history)
        if record is not None and not objects:
            report("uninstall", f"{name} is already uninstalled (revision {record.revision}); nothing to delete")
            if not request.purge:
                left = _wait(kube, request, deadline, report, timings, held) if request.wait else []
                return _pods_left(request, record, left, held, timings) if left else _already(request, record, timings)
        else:
            record, failure = _delete_and_record(kube, request, history, objects, actor, report, timings, changes)
            if failure is not None:
                return Outcome("uninstall_failed", name, namespace, failure.message, record.revision, failure, timings)
        left = _wait(kube, request, deadline, report, timings, held) if request.wait else []
        if left:
            return _pods_left(request, record, left, held, timings, changes)
        if request.purge:
            with timings.phase("purge"):
                changes += _purge(kube, request, actor, report)
    if request.purge:
        _remove_lease(kube, name, namespace)
    return _uninstalled(request, record, changes, timings)


def _history(kube: Kube, request: Request, report: Reporter | None = None) -> list[releases.Record]:
    """The records an uninstall may act on: those a trusted key signed (``record_trust``)."""
    return record_trust.for_write(kube, request.name, request.namespace, request.keys, report).trusted


def _first_apply_may_be_running(kube: Kube, name: str, namespace: str) -> bool:
    """The release has no records, but its lock's Lease and labelled objects exist: a first apply
    may be running (it takes the lock before its first object and records at its end)."""
    if kube.get("Lease", lock.lease_name(name), namespace) is None:
        return False
    try:
        return bool(release_objects(kube, name, namespace, set()))
    except errors.Forbidden:
        return False


def _no_records(kube: Kube, request: Request) -> Outcome:
    """No records: a release that was purged (exit 0 when nothing of it is left), or none at all."""
    name, namespace = request.name, request.namespace
    stones = purge.tombstones(kube, name, namespace)
    try:
        leftovers = release_objects(kube, name, namespace, set())
    except errors.Forbidden:
        leftovers = []
    if stones and not leftovers:
        message = purge.explained(
            f"release {name} in namespace {namespace} is already uninstalled and purged", stones, namespace
        )
        return Outcome("already_uninstalled", name, namespace, message)
    message = purge.explained(
        f"no release {name} in namespace {namespace}: it has no records there; check the name and -n "
        f"(`deployctl history {name} -n NAMESPACE` lists a release's revisions)",
        stones,
        namespace,
    )
    if leftovers:
        labelled = ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in leftovers[:5])
        message += (
            f". {labelled} carry its label without any record of deployctl applying them: remove them with the "
            "tool that applied them (Helm, Flux, Argo CD) or kubectl"
        )
    raise errors.UnknownRelease(message)


def _dry_run(
    kube: Kube, request: Request, history: list[releases.Record], used_kinds: set[str], timings: Timings
) -> Outcome:
    """What uninstall would delete, and the refusals it would meet; no lock, nothing written."""
    name, namespace = request.name, request.namespace
    objects = release_objects(kube, name, namespace, used_kinds)
    _refuse_foreign(kube, name, namespace, objects)
    if request.purge:
        purge.check_chain(releases.load_history(kube, name, namespace), name, namespace)
    changes = [{"object": _ref(o), "action": "delete"} for o in objects]
    gone = revisions.uninstalled(history)
    if not (gone is not None and not objects):
        changes.append(
            {"object": f"ConfigMap/{releases.record_name(name, history[-1].revision + 1)}", "action": "create"}
        )
    if request.purge:
        changes.append({"object": "ConfigMap/" + purge.tombstone_name(name, _now()), "action": "create"})
        changes += [
            {"object": f"ConfigMap/{releases.record_name(name, r.revision)}", "action": "delete"} for r in history
        ]
    what = "; ".join(f"{c['action']} {c['object']}" for c in changes) or "nothing"
    message = f"would uninstall {name} from {namespace}: {what}. Nothing was written (--dry-run)"
    return Outcome("dry_run", name, namespace, message, timings=timings, changes=changes)


def _delete_and_record(
    kube: Kube,
    request: Request,
    history: list[releases.Record],
    objects: list[dict[str, Any]],
    actor: dict[str, object],
    report: Reporter,
    timings: Timings,
    changes: list[dict[str, str]],
) -> tuple[releases.Record, Failure | None]:
    """Delete ``objects`` in order, then append the record of what was deleted: ``uninstalled``,
    or ``failed`` when a delete was refused (the release is then still partly there)."""
    name, namespace = request.name, request.namespace
    deleted: list[dict[str, Any]] = []
    failure: Failure | None = None
    with timings.phase("delete"):
        report("delete", f"deleting {len(objects)} objects of {name} from {namespace}")
        for obj in objects:
            try:
                kube.delete(obj["kind"], obj["metadata"]["name"], namespace)
            except errors.ClusterError as e:
                failure = Failure(
                    "cluster_error",
                    f"uninstall of {name} deleted {len(deleted)} of {len(objects)} objects, then deleting {_ref(obj)} "
                    f"failed: {e.message}. Run `deployctl uninstall {name} -n {namespace}` again once that is fixed",
                    "delete",
                )
                break
            deleted.append(obj)
            changes.append({"object": _ref(obj), "action": "delete"})
    with timings.phase("record"):
        record = record_uninstall(kube, history, deleted, actor, failure, request.keys.signer)
    changes.append({"object": f"ConfigMap/{releases.record_name(name, record.revision)}", "action": "create"})
    report("record", f"revision {record.revision} records the uninstall")
    return record, failure


def record_uninstall(
    kube: releases.Cluster,
    history: list[releases.Record],
    deleted: list[dict[str, Any]],
    actor: dict[str, object],
    failure: Failure | None,
    signer: signing.Signer | None = None,
) -> releases.Record:
    """Append the uninstall's record: the removed revision's identity (model, image, profile), the
    deleted objects as they were applied (their bytes are the record's manifests, so an auditor
    sees exactly what was removed), ``outcome`` uninstalled, or failed after a refused delete."""
    live = revisions.live(history)
    base = live or history[-1]
    refs = [_ref(o) for o in deleted]
    was = f"revision {live.revision} was live" if live else "no revision was live"
    if failure is None:
        description = f"uninstall ({was}; {len(refs)} object{'s' if len(refs) != 1 else ''} deleted)"
    else:
        description = f"uninstall failed ({was}; {len(refs)} deleted before a delete was refused)"
    manifests = render.to_yaml([applyset.clean(o) for o in deleted]).encode()
    draft = writer.Draft.following(base, actor, signer, manifests=manifests, profile_text=base.profile)
    outcome: releases.Outcome = "failed" if failure else "uninstalled"
    failed = failure.to_record() if failure else None
    return writer.append(kube, writer.NewRecord(draft, outcome, description, failure=failed, deleted=refs))


def _purge(kube: Kube, request: Request, actor: dict[str, object], report: Reporter) -> list[dict[str, str]]:
    """Export and verify, leave the tombstone, then delete the records (``orchestrator.records.purge``)."""
    name, namespace = request.name, request.namespace
    assert request.audit_export is not None
    history = releases.load_history(kube, name, namespace)
    purge.check_chain(history, name, namespace)
    digest = purge.write_export(history, name, namespace, purge.check_export_path(request.audit_export))
    report("purge", f"wrote and verified the audit export {request.audit_export} (sha256 {digest[:16]}…)")
    stone = purge.tombstone(
        history,
        release=name,
        namespace=namespace,
        actor=actor,
        export_sha256=digest,
        export_file=request.audit_export,
        now=_now(),
    )
    kube.create(stone)
    report("purge", f"created the tombstone ConfigMap {stone['metadata']['name']}; deleting {len(history)} records")
    deleted = purge.delete_records(kube, history)
    return [{"object": f"ConfigMap/{stone['metadata']['name']}", "action": "create"}] + [
        {"object": f"ConfigMap/{cm}", "action": "delete"} for cm in deleted
    ]


def _remove_lease(kube: Kube, name: str, namespace: str) -> None:
    """After a purge nothing of the release is left but its tombstone: the handed-back lock goes too
    (unless someone took it in the meantime; the resourceVersion guards that)."""
    lease = kube.get("Lease", lock.lease_name(name), namespace)
    if lease is None or (lease.get("spec") or {}).get("holderIdentity"):
        return
    # Taken again in the meantime (Conflict): it belongs to whoever holds it now.
    with contextlib.suppress(errors.Conflict):
        kube.delete("Lease", lock.lease_name(name), namespace, precondition_rv=lease["metadata"]["resourceVersion"])


# --- waiting for the pods -------------------------------------------------------------------------


def _wait(
    kube: Kube, request: Request, deadline: float, report: Reporter, timings: Timings, held: lock.ReleaseLock
) -> list[str]:
    with timings.phase("wait"):
        left = max(0.0, deadline - time.monotonic())
        wait_for = watching.Wait(left, lambda m: report("wait", m), held.lost_reason)
        return pods_gone.wait(kube, request.namespace, request.name, wait_for)


# --- endings --------------------------------------------------------------------------------------


def _uninstalled(request: Request, record: releases.Record, changes: list[dict[str, str]], timings: Timings) -> Outcome:
    name, namespace = request.name, request.namespace
    # The objects deleted are of the kinds deployctl applies, never ConfigMaps: those are the records.
    objects = [c for c in changes if c["action"] == "delete" and not c["object"].startswith("ConfigMap/")]
    purged = [c for c in changes if c["action"] == "delete" and c["object"].startswith("ConfigMap/")]
    stone = next((c["object"] for c in changes if c["action"] == "create" and ".purged." in c["object"]), "")
    if objects or not purged:
        message = f"release {name} is uninstalled from {namespace}: {_count(len(objects), 'object')} deleted"
    else:
        message = f"release {name} in {namespace} was already uninstalled (revision {record.revision})"
    message += ", its pods are gone" if request.wait else " (not waiting for its pods: --no-wait)"
    if purged:
        message += (
            f"; its {_count(len(purged), 'record')} were exported to {request.audit_export} and purged, and the "
            f"tombstone {stone} records the purge"
        )
    else:
        message += f"; revision {record.revision} records it and the history is kept" + _rollback_hint(name, namespace)
    return Outcome("uninstalled", name, namespace, message, record.revision, timings=timings, changes=changes)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"


def _already(request: Request, record: releases.Record, timings: Timings) -> Outcome:
    name, namespace = request.name, request.namespace
    message = (
        f"release {name} in {namespace} is already uninstalled (revision {record.revision}, {record.timestamp} by "
        f"{record.actor.get('user', '?')}); nothing was changed" + _rollback_hint(name, namespace)
    )
    return Outcome("already_uninstalled", name, namespace, message, record.revision, timings=timings)


def _pods_left(
    request: Request,
    record: releases.Record,
    left: list[str],
    held: lock.ReleaseLock,
    timings: Timings,
    changes: list[dict[str, str]] | None = None,
) -> Outcome:
    """The objects are deleted and recorded, but pods of the release are still there: the deadline
    ran out (exit 5), or the lock was lost while waiting (exit 4: someone else now acts on it)."""
    pods = f"{len(left)} pod{'s' if len(left) != 1 else ''}"
    lost = held.lost_reason()
    why = f"the wait for {pods} stopped: {lost}" if lost else f"{pods} did not terminate within {int(request.timeout)}s"
    message = (
        f"release {request.name}'s objects are deleted (revision {record.revision} records it), but {why}: "
        f"{', '.join(left[:4])}. Look at their finalizers and nodes (`kubectl get pod {left[0]} -n "
        f"{request.namespace} -o yaml`); running the same uninstall again waits for them"
        + (" and then purges" if request.purge else "")
    )
    failure = Failure("lock_lost" if lost else "timeout", message, "wait")
    return Outcome(
        "uninstall_failed", request.name, request.namespace, message, record.revision, failure, timings, changes=changes
    )


def _rollback_hint(name: str, namespace: str) -> str:
    return f" (`deployctl rollback {name} -n {namespace}` re-deploys the revision that was live)"


def _ref(obj: kube_status.Object) -> str:
    return f"{kube_status.text(obj.get('kind'))}/{kube_status.name_of(obj)}"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)
