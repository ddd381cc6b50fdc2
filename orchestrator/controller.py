"""`deployctl controller`: InferenceProfile objects deployed by the same sequence as `deployctl apply`.

One replica leads at a time (a Lease); the leader lists and watches InferenceProfile objects, in one
namespace or all, and for each new generation of a spec runs ``pipeline.apply``: plan, preflight,
the release lock, server-side apply, watch, health, smoke, record, and the last good release
restored on failure. What happened goes into the object's status (``resource_status``: kstatus
conditions) and its events. A failed generation is not retried in a loop: only a new spec or a new
value of the ``deployctl.dev/retry`` annotation makes the controller try again. A revision made
outside the controller (an on-call `deployctl rollback`) is reported, never fought. Deleting the
object removes the release's workload through a finalizer; its records stay: they are the audit
trail.

Why our own watch code and not kopf (docs/architecture.md): the sequence is the synchronous pipeline
the CLI runs, with its own watches, lock and records, and kopf's asyncio handlers would run it in
threads anyway; kopf keeps its own bookkeeping in annotations and status fields, where we need
kstatus conditions; and every dependency is one more wheel an air-gapped user must mirror. What the
controller adds is a list-watch loop, a Lease and status writes: about this module.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import yaml

from orchestrator import applyset, errors, pipeline, releases, resource_status, rollout
from orchestrator import profile as profiles
from orchestrator.kube import Kube, connect
from orchestrator.lock import ReleaseLock
from orchestrator.outcome import Failure, Outcome

KIND = profiles.KIND
FINALIZER = "deployctl.dev/release"  # the release's workload goes before the object does
RETRY_ANNOTATION = "deployctl.dev/retry"  # a new value asks for the generation to be tried again
LEASE_RELEASE = "controller"  # the leader-election Lease: deployctl-controller in --lease-namespace
COMPONENT = "deployctl-controller"
# Refusals that another try cannot change without a new spec: the generation is Stalled.
_REFUSALS: dict[type[errors.DeployctlError], tuple[str, str]] = {
    errors.InvalidProfile: ("invalid", "plan"),
    errors.DoesNotFit: ("does_not_fit", "plan"),
    errors.UsageError: ("invalid", "plan"),
    errors.Forbidden: ("forbidden", "preflight"),
    errors.RolloutFailed: ("preflight", "preflight"),
    # Only an upgraded deployctl reads the release's records: retrying changes nothing.
    errors.NewerRecordFormat: ("record_format", "preflight"),
}

Reporter = Callable[[str, str], None]


@dataclasses.dataclass(frozen=True)
class Settings:
    namespace: str | None  # None: every namespace
    lease_namespace: str
    kubeconfig: str | None = None
    context: str | None = None
    identity: str = dataclasses.field(default_factory=lambda: f"{socket.gethostname()}/pid-{os.getpid()}")
    lease_seconds: int = 15
    resync_seconds: float = 30.0
    lock_ttl: int = 60  # the release lock of each apply, as `deployctl apply --lock-ttl`


def run(settings: Settings, report: Reporter, stop: threading.Event | None = None) -> None:
    """Lead, then reconcile until ``stop`` is set or the lead is lost (ClusterError: a supervisor
    restarts the process, which then waits for the Lease like any other replica)."""
    stop = stop or threading.Event()
    kube = connect(settings.kubeconfig, settings.context)
    user = kube.whoami()
    lease = ReleaseLock(
        kube,
        settings.lease_namespace,
        LEASE_RELEASE,
        user,
        ttl_seconds=settings.lease_seconds,
        warn=lambda m: report("lease", m),
    )
    report("lease", f"waiting to lead (Lease deployctl-{LEASE_RELEASE} in {settings.lease_namespace})")
    while True:
        try:
            lease.acquire()
            break
        except errors.Locked:
            if stop.wait(settings.lease_seconds / 3):
                return
    report("lease", f"leading as {lease.identity}")
    try:
        _Reconciler(kube, settings, user, lease, report).loop(stop)
    finally:
        lease.release_lock()


class _Reconciler:
    def __init__(self, kube: Kube, settings: Settings, user: str, lease: ReleaseLock, report: Reporter) -> None:
        self.kube, self.settings, self.user, self.lease, self.report = kube, settings, user, lease, report
        self.retry_at: dict[tuple[str, str], float] = {}  # transient failures: when to try again

    def loop(self, stop: threading.Event) -> None:
        events: queue.Queue[tuple[str, str, dict[str, Any]]] = queue.Queue()
        watch_stop = threading.Event()
        watcher = rollout.Watcher(self.kube, KIND, self.settings.namespace, events, watch_stop)
        watcher.start()
        known: dict[tuple[str, str], dict[str, Any]] = {}
        next_resync = time.monotonic() + self.settings.resync_seconds
        try:
            while not stop.is_set():
                if (lost := self.lease.lost_reason()) is not None:
                    raise errors.ClusterError(f"lost the controller lead: {lost}")
                try:
                    _kind, etype, obj = events.get(timeout=1.0)
                except queue.Empty:
                    etype, obj = "", {}
                if etype == "SYNC":
                    known = {_key(o): o for o in obj["items"]}
                    todo = list(known.values())
                elif etype in ("ADDED", "MODIFIED"):
                    known[_key(obj)] = obj
                    todo = [obj]
                elif etype == "DELETED":
                    known.pop(_key(obj), None)
                    todo = []
                else:
                    todo = []
                if time.monotonic() >= next_resync or any(t <= time.monotonic() for t in self.retry_at.values()):
                    todo += list(known.values())  # manual rollbacks and retries show no event of the object
                    next_resync = time.monotonic() + self.settings.resync_seconds
                for item in todo:
                    if stop.is_set():
                        break
                    self.reconcile_safely(item)
        finally:
            watch_stop.set()

    # --- one object -----------------------------------------------------------------------------

    def reconcile_safely(self, seen: dict[str, Any]) -> None:
        """One object's trouble (the API answering an error, a bug) never stops the others: it is
        reported and the object tried again after a pause."""
        try:
            self.reconcile(seen)
        except Exception as e:
            text = e.message if isinstance(e, errors.DeployctlError) else f"{type(e).__name__}: {e}"
            namespace, name = _key(seen)
            self.report(f"{namespace}/{name}", f"error, retrying in {self.settings.lease_seconds}s: {text}")
            self.retry_at[(namespace, name)] = time.monotonic() + max(5.0, self.settings.lease_seconds)

    def reconcile(self, seen: dict[str, Any]) -> None:
        namespace, name = _key(seen)
        obj = self.kube.get(KIND, name, namespace)  # the watch may lag; act on what is there now
        if obj is None:
            return
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            self._finalize(obj)
            return
        if FINALIZER not in (meta.get("finalizers") or []):
            obj = self._add_finalizer(obj)
        status = obj.get("status") or {}
        generation = int(meta.get("generation", 1))
        retry = (meta.get("annotations") or {}).get(RETRY_ANNOTATION)
        waiting = self.retry_at.get((namespace, name))
        if waiting is not None and waiting > time.monotonic():
            return  # backing off after a transient problem (a held release lock, an API error)
        new = status.get("observedGeneration") != generation or retry != status.get("retry")
        self.retry_at.pop((namespace, name), None)
        if not new:  # this generation was judged already: never deploy it twice
            self._notice_outside_changes(obj)
            return
        self._deploy(obj, generation, retry)

    def _deploy(self, obj: dict[str, Any], generation: int, retry: str | None) -> None:
        namespace, name = _key(obj)
        source = f"{KIND} {namespace}/{name}"
        now = _now()
        previous = obj.get("status") or {}
        try:
            prof = profiles.from_object(obj, source)
        except errors.DeployctlError as e:
            self._refused(obj, generation, retry, e)
            return
        self._status(obj, {**resource_status.reconciling(previous, generation, now), "retry": retry})
        self._event(obj, "Normal", "Reconciling", f"deploying generation {generation}")
        options = pipeline.Options(
            kubeconfig=self.settings.kubeconfig,
            context=self.settings.context,
            lock_ttl=self.settings.lock_ttl,
            environ={"DEPLOYCTL_CONTROLLER": self.lease.identity},
        )
        # The record keeps the profile as a file would hold it, so a revision deployed by the
        # controller reads like one deployed by the CLI (audit export, rollback settings).
        text = yaml.safe_dump(_profile_document(obj, prof), sort_keys=False)

        def report(phase: str, message: str) -> None:
            self.report(f"{namespace}/{name}", f"[{phase}] {message}")

        try:
            outcome = pipeline.apply(prof, text, options, report)
        except errors.Locked as e:
            # Another apply (the CLI, or a replica that lost the lead mid-apply) holds the release:
            # not the generation's fault; try again once the lock can be taken over.
            self._later(obj, generation, previous, f"release locked: {e.message}")
            return
        except errors.DeployctlError as e:
            if type(e) in _REFUSALS or isinstance(e, errors.Forbidden):
                self._refused(obj, generation, retry, e)
            else:
                self._later(obj, generation, previous, e.message)
            return
        live = releases.live(releases.load_history(self.kube, name, namespace))
        status = resource_status.from_outcome(
            previous,
            generation,
            outcome,
            live_revision=live.revision if live else None,
            profile_hash=prof.spec_hash(),
            now=_now(),
        )
        self._status(obj, {**status, "retry": retry})
        self._event_for(obj, outcome)

    def _refused(self, obj: dict[str, Any], generation: int, retry: str | None, e: errors.DeployctlError) -> None:
        cls, stage = next(((c, s) for t, (c, s) in _REFUSALS.items() if isinstance(e, t)), ("refused", "plan"))
        status = resource_status.refused(obj.get("status"), generation, Failure(cls, e.message, stage), _now())
        self._status(obj, {**status, "retry": retry})
        self._event(obj, "Warning", cls, e.message)

    def _later(self, obj: dict[str, Any], generation: int, previous: dict[str, Any], why: str) -> None:
        """A transient problem: Reconciling stays True and the generation is tried again shortly."""
        self.retry_at[_key(obj)] = time.monotonic() + max(5.0, self.settings.lease_seconds)
        self._status(obj, resource_status.reconciling(previous, generation, _now()))
        self._event(obj, "Warning", "Retrying", why)

    def _notice_outside_changes(self, obj: dict[str, Any]) -> None:
        """A revision made outside the controller since its last write (an on-call rollback):
        reported as such, and left serving until the spec changes."""
        namespace, name = _key(obj)
        status = obj.get("status") or {}
        if status.get("liveRevision") is None:
            return
        live = releases.live(releases.load_history(self.kube, name, namespace))
        if live is None or live.revision == status.get("liveRevision") or status.get("manualRollback"):
            return
        generation = int(obj["metadata"].get("generation", 1))
        manual = resource_status.manual_rollback(status, generation, live.revision, live.rollback_of, _now())
        self._status(obj, manual)
        self._event(obj, "Normal", "ManualRollback", manual["conditions"][-1]["message"])

    # --- finalizer ------------------------------------------------------------------------------

    def _add_finalizer(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        finalizers = [*(meta.get("finalizers") or []), FINALIZER]
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
        return self.kube.merge_patch(KIND, meta["name"], meta["namespace"], patch)

    def _finalize(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        if FINALIZER not in (meta.get("finalizers") or []):
            return
        applyset.remove(self.kube, name, namespace)  # the workload; the release records stay
        self.report(f"{namespace}/{name}", "deleted: the release's workload was removed, its records kept")
        finalizers = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
        with contextlib.suppress(errors.NotFound):  # already gone
            self.kube.merge_patch(KIND, name, namespace, patch)

    # --- writes ---------------------------------------------------------------------------------

    def _status(self, obj: dict[str, Any], status: dict[str, Any]) -> None:
        meta = obj["metadata"]
        with contextlib.suppress(errors.NotFound):  # deleted meanwhile
            self.kube.merge_patch(KIND, meta["name"], meta["namespace"], {"status": status}, subresource="status")
        obj["status"] = status

    def _event_for(self, obj: dict[str, Any], outcome: Outcome) -> None:
        if outcome.result == "deployed":
            self._event(obj, "Normal", "Deployed", outcome.message)
        else:
            cls = outcome.failure.cls if outcome.failure else outcome.result
            self._event(obj, "Warning", cls, outcome.message)

    def _event(self, obj: dict[str, Any], kind: str, reason: str, message: str) -> None:
        meta = obj["metadata"]
        now = _now()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": profiles.RESOURCE_API_VERSION,
                "kind": KIND,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": kind,
            "reason": reason,
            "message": errors.shorten(message, 1000),
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.lease.identity[:128],
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.kube.create(event)
        except errors.ClusterError as e:
            self.report("event", f"could not record event {reason}: {e.message}")
        self.report(f"{meta['namespace']}/{meta['name']}", f"{reason}: {errors.shorten(message, 300)}")


def _profile_document(obj: dict[str, Any], prof: profiles.Profile) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": prof.metadata.name, "namespace": prof.metadata.namespace}
    if prof.metadata.labels:
        metadata["labels"] = dict(prof.metadata.labels)
    return {"apiVersion": profiles.API_VERSION, "kind": KIND, "metadata": metadata, **(obj.get("spec") or {})}


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    return str(meta.get("namespace", "")), str(meta["name"])


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
