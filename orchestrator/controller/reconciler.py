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
kstatus conditions; and every dependency is one more wheel an air-gapped user must mirror.
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

from orchestrator import errors
from orchestrator.apply import applyset, pipeline, sequence, watching
from orchestrator.apply.lock import ReleaseLock
from orchestrator.apply.outcome import Failure, Outcome
from orchestrator.controller import canary_rollout, resource_status, workqueue
from orchestrator.controller import keys as controller_keys
from orchestrator.kube import Kube, connect
from orchestrator.policy import model as policy
from orchestrator.profile import model as profiles
from orchestrator.records import releases, revisions
from orchestrator.records import trust as record_trust

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
    # Objects named like the release that are not its own: the controller never adopts.
    errors.Takeover: ("takeover", "preflight"),
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
    # The Secret in lease_namespace that holds the key the records are signed with (record_trust).
    signing_secret: str = record_trust.SECRET_NAME
    workers: int = 4  # objects reconciled at once; one object is only ever in one worker


def run(settings: Settings, report: Reporter, stop: threading.Event | None = None) -> None:
    """Lead, then reconcile until ``stop`` is set or the lead is lost (ClusterError: a supervisor
    restarts the process, which then waits for the Lease like any other replica)."""
    stop = stop or threading.Event()
    kube = connect(settings.kubeconfig, settings.context)
    user = kube.whoami()
    keys = controller_keys.signing_keys(kube, settings.lease_namespace, settings.signing_secret, report)
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
        _Reconciler(kube, settings, user, lease, report, keys).loop(stop)
    finally:
        lease.release_lock()


class _Reconciler:
    def __init__(
        self,
        kube: Kube,
        settings: Settings,
        user: str,
        lease: ReleaseLock,
        report: Reporter,
        keys: record_trust.Keys | None = None,
    ) -> None:
        self.kube, self.settings, self.user, self.lease, self.report = kube, settings, user, lease, report
        self.keys = keys or record_trust.Keys()
        self._retry_lock = threading.Lock()
        self.retry_at: dict[tuple[str, str], float] = {}  # transient failures: when to try again
        self._forbidden: dict[tuple[str, str], str] = {}  # objects in namespaces not opted in, said once

    def loop(self, stop: threading.Event) -> None:
        """The watch feeds a keyed queue; ``settings.workers`` threads reconcile, one object at a time
        per key, so a model loading for half an hour holds one worker and the others go on."""
        events: queue.Queue[tuple[str, str, dict[str, Any]]] = queue.Queue()
        watch_stop = threading.Event()
        watcher = watching.Watcher(self.kube, KIND, self.settings.namespace, events, watch_stop)
        watcher.start()
        work: workqueue.WorkQueue[tuple[str, str]] = workqueue.WorkQueue()
        known: dict[tuple[str, str], dict[str, Any]] = {}
        workers = workqueue.start_workers(
            work, max(1, self.settings.workers), lambda key: self._work(known, key), watch_stop, "reconcile"
        )
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
                    fresh = {_key(o): o for o in obj["items"]}
                    for key, item in fresh.items():  # an annotation changed while the watch was down
                        if key in known:
                            canary_rollout.forward(self.kube, known[key], item, self._event)
                    for gone in set(known) - set(fresh):  # never emptied: the workers read it meanwhile
                        known.pop(gone, None)
                    known.update(fresh)
                    todo = list(known)
                elif etype in ("ADDED", "MODIFIED"):
                    canary_rollout.forward(self.kube, known.get(_key(obj)), obj, self._event)
                    known[_key(obj)] = obj
                    todo = [_key(obj)]
                elif etype == "DELETED":
                    known.pop(_key(obj), None)
                    with self._retry_lock:
                        self.retry_at.pop(_key(obj), None)
                    todo = []
                else:
                    todo = []
                with self._retry_lock:
                    due = any(t <= time.monotonic() for t in self.retry_at.values())
                if time.monotonic() >= next_resync or due:
                    todo += list(known)  # manual rollbacks and retries show no event of the object
                    next_resync = time.monotonic() + self.settings.resync_seconds
                for key in todo:
                    work.add(key)
        finally:
            watch_stop.set()
            work.close()
            for worker in workers:  # an apply in flight keeps its release lock, renewed until it ends
                worker.join(timeout=self.settings.lease_seconds)

    def _work(self, known: dict[tuple[str, str], dict[str, Any]], key: tuple[str, str]) -> None:
        seen = known.get(key)
        if seen is not None:
            self.reconcile_safely(seen)

    # --- one object -----------------------------------------------------------------------------

    def reconcile_safely(self, seen: dict[str, Any]) -> None:
        """One object's trouble (the API answering an error, a bug) never stops the others: it is
        reported and the object tried again after a pause."""
        try:
            self.reconcile(seen)
            self._retried(_key(seen))
        except errors.Forbidden as e:
            # A namespace not opted in: the controller reads its objects but may write nothing there.
            # Said once per message; the resync looks again (the namespace may be opted in later).
            key = _key(seen)
            if self._forbidden.get(key) != e.message:
                self._forbidden[key] = e.message
                self.report(
                    f"{key[0]}/{key[1]}",
                    f"not acting in namespace {key[0]}, which is not opted in: {e.message}; opt it in with "
                    f"`deployctl render --format controller-namespace --watch-namespace {key[0]}`",
                )
        except Exception as e:
            text = e.message if isinstance(e, errors.DeployctlError) else f"{type(e).__name__}: {e}"
            namespace, name = _key(seen)
            self.report(f"{namespace}/{name}", f"error, retrying in {self.settings.lease_seconds}s: {text}")
            self._retry_later((namespace, name))

    def _retry_later(self, key: tuple[str, str]) -> None:
        with self._retry_lock:
            self.retry_at[key] = time.monotonic() + max(5.0, self.settings.lease_seconds)

    def _retried(self, key: tuple[str, str]) -> None:
        """A due retry that went through (whichever way: deleted, refused, deployed) is done; one
        left due would have every object queued again each second."""
        with self._retry_lock:
            due = self.retry_at.get(key)
            if due is not None and due <= time.monotonic():
                del self.retry_at[key]

    def reconcile(self, seen: dict[str, Any]) -> None:
        namespace, name = _key(seen)
        obj = self.kube.get(KIND, name, namespace)  # the watch may lag; act on what is there now
        if obj is None:
            return
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            self._finalize(obj)
            return
        if self._refused_by_policy(obj):  # before anything is written for it, its finalizer included
            return
        if FINALIZER not in (meta.get("finalizers") or []) and _valid(obj):
            # Only a valid object gets the finalizer: an invalid one is refused below and never
            # deploys, so deleting it must not delete anything (a CLI release of the same name).
            obj = self._add_finalizer(obj)
        status = obj.get("status") or {}
        generation = int(meta.get("generation", 1))
        retry = (meta.get("annotations") or {}).get(RETRY_ANNOTATION)
        with self._retry_lock:
            waiting = self.retry_at.get((namespace, name))
            if waiting is not None and waiting > time.monotonic():
                return  # backing off after a transient problem (a held release lock, an API error)
            self.retry_at.pop((namespace, name), None)
        new = status.get("observedGeneration") != generation or retry != status.get("retry")
        if not new:  # this generation was judged already: never deploy it twice
            self._notice_outside_changes(obj)
            return
        self._deploy(obj, generation, retry)

    def _refused_by_policy(self, obj: dict[str, Any]) -> bool:
        """Whether an InferencePolicy (or the safe default) refuses the object's spec; if so its status
        says why (Stalled, class policy), once per generation and retry value, and nothing else is written."""
        namespace, name = _key(obj)
        try:
            prof = profiles.from_object(obj, f"{KIND} {namespace}/{name}")
        except errors.DeployctlError:
            return False  # an invalid spec is refused by _deploy, naming the field
        try:
            violations = policy.check(prof, self._policies())
            message = policy.describe(prof, violations) if violations else None
        except errors.InvalidInstall as e:  # a policy that does not validate refuses what it applies to
            message = e.message
        if message is None:
            return False
        meta, status = obj["metadata"], obj.get("status") or {}
        generation = int(meta.get("generation", 1))
        retry = (meta.get("annotations") or {}).get(RETRY_ANNOTATION)
        said = (status.get("failure") or {}).get("class") == policy.FAILURE_CLASS
        if said and status.get("observedGeneration") == generation and status.get("retry") == retry:
            return True
        failure = Failure(policy.FAILURE_CLASS, message, "plan")
        refused = resource_status.refused(obj.get("status"), generation, failure, _now())
        self._status(obj, {**refused, "retry": retry})
        self._event(obj, "Warning", "PolicyRefused", message)
        return True

    def _policies(self) -> list[policy.Policy]:
        """The InferencePolicy objects; none (or no such kind installed): the safe default applies."""
        try:
            found, _ = self.kube.list(policy.KIND)
        except errors.NotFound:
            return []
        return [policy.from_object(o) for o in found]

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
        options = sequence.Options(
            kubeconfig=self.settings.kubeconfig,
            context=self.settings.context,
            lock_ttl=self.settings.lock_ttl,
            environ={"DEPLOYCTL_CONTROLLER": self.lease.identity},
            keys=self.keys,
            allowed_gate_hosts=policy.allowed_gate_hosts(self._policies(), namespace),
        )
        # The record keeps the profile as a file would hold it, so a revision deployed by the
        # controller reads like one deployed by the CLI (audit export, rollback settings).
        text = yaml.safe_dump(_profile_document(obj, prof), sort_keys=False)

        def report(phase: str, message: str) -> None:
            self.report(f"{namespace}/{name}", f"[{phase}] {message}")
            if canary_rollout.shown(phase, message):  # the canary's step and evidence, as it goes
                with contextlib.suppress(errors.DeployctlError):  # a progress line never stops the canary
                    self._status(obj, resource_status.canary_progress(obj.get("status"), generation, message, _now()))

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
        live = revisions.live(record_trust.for_write(self.kube, name, namespace, self.keys).trusted)
        status = resource_status.from_outcome(
            obj.get("status") or previous,  # as the apply left it: a canary's Progressing included
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
        self._retry_later(_key(obj))
        self._status(obj, resource_status.reconciling(previous, generation, _now()))
        self._event(obj, "Warning", "Retrying", why)

    def _notice_outside_changes(self, obj: dict[str, Any]) -> None:
        """A revision made outside the controller since its last write (an on-call rollback):
        reported as such, and left serving until the spec changes."""
        namespace, name = _key(obj)
        status = obj.get("status") or {}
        if status.get("liveRevision") is None:
            return
        # Only signed records: a forged one must not pass for an on-call rollback either.
        live = revisions.live(record_trust.for_write(self.kube, name, namespace, self.keys).trusted)
        if live is None or live.revision == status.get("liveRevision") or status.get("manualRollback"):
            return
        generation = int(obj["metadata"].get("generation", 1))
        manual = resource_status.manual_rollback(status, generation, live.revision, live.rollback_of, _now())
        self._status(obj, manual)
        ready = resource_status.condition(manual, "Ready") or {}
        self._event(obj, "Normal", "ManualRollback", str(ready.get("message", "")))

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
        # The release lock, as `deployctl uninstall` takes it: never delete under a running apply.
        # Held by another: errors.Locked, and the object is tried again after a pause.
        with ReleaseLock(self.kube, namespace, name, self.user, ttl_seconds=self.settings.lock_ttl):
            creator = self._creator(name, namespace)
            if creator == self.user:
                applyset.remove(self.kube, name, namespace)  # the workload; the release records stay
                self.report(f"{namespace}/{name}", "deleted: the release's workload was removed, its records kept")
            else:
                # A release of the same name that another identity created (the CLI, another
                # controller), or none at all: deleting this object is no reason to delete it.
                by = f"was created by {creator}" if creator else "has no records"
                self.report(
                    f"{namespace}/{name}",
                    f"deleted: release {name} {by}, not by this controller ({self.user}), so its workload was left "
                    f"in place (`deployctl uninstall {name} -n {namespace}` removes it)",
                )
        finalizers = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
        with contextlib.suppress(errors.NotFound):  # already gone
            self.kube.merge_patch(KIND, name, namespace, patch)

    def _creator(self, name: str, namespace: str) -> str | None:
        """Who wrote the release's first trusted record: the identity that created it; None without
        one. Only a signed (or vouched-for) record counts: a forged record naming this controller
        must not make a deletion remove another identity's release."""
        history = releases.load_history(self.kube, name, namespace, warn=lambda m: self.report("records", m))
        try:
            trusted = record_trust.check(history, self.keys, name, namespace).trusted
        except errors.AuditFailed:  # signed records and no key to check them: nobody's, so kept
            return None
        return str(trusted[0].actor.get("user")) if trusted else None

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


def _valid(obj: dict[str, Any]) -> bool:
    """Whether the object is a valid profile (``_deploy`` says why not, in its status)."""
    try:
        profiles.from_object(obj, f"{KIND} {_key(obj)[0]}/{_key(obj)[1]}")
    except errors.DeployctlError:
        return False
    return True


def _profile_document(obj: dict[str, Any], prof: profiles.Profile) -> dict[str, Any]:
    labels = {"labels": dict(prof.metadata.labels)} if prof.metadata.labels else {}
    metadata: dict[str, Any] = {"name": prof.metadata.name, "namespace": prof.metadata.namespace, **labels}
    return {"apiVersion": profiles.API_VERSION, "kind": KIND, "metadata": metadata, **(obj.get("spec") or {})}


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return str(obj["metadata"].get("namespace", "")), str(obj["metadata"]["name"])


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
