"""The loop every rollout watch runs: one watch per kind, a judge asked after every change.

A ``Watcher`` thread per kind lists, then watches, and feeds a queue (re-listing after a 410 or a
lost connection); ``follow`` applies the events to a state and asks a ``Judge`` for a verdict after
each burst, and once a second for the time-based rules, under one deadline. ``rollout`` judges a
Deployment this way, ``group_rollout`` the copies that span nodes.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from orchestrator import errors
from orchestrator.kube import Kube
from orchestrator.kube import status as kube_status

# (kind, event type, object): the event types of a watch, plus SYNC (a fresh list, {"items": [...]})
# and DISCONNECTED ({"message": ...}). The objects are as the API server sent them.
Event = tuple[str, str, dict[str, Any]]


@dataclasses.dataclass
class Failure:
    cls: str  # unschedulable, image_pull, crash_loop/oom/kv_cache/shm/engine_args/max_model_len/model_path, ...
    message: str

    def to_json(self) -> dict[str, str]:
        return {"class": self.cls, "message": self.message}


@dataclasses.dataclass
class RolloutResult:
    ok: bool
    failure: Failure | None
    new_pods: list[str]
    elapsed: float
    revision: str = ""  # the Deployment's revision annotation (ReplicaSet generation)


@dataclasses.dataclass
class WatchedState:
    """What every watch loop keeps besides the objects: whether the API is reachable, and which
    kinds have been listed at least once (a verdict needs them)."""

    disconnected_since: float | None = None
    last_error: str = ""
    synced: set[str] = dataclasses.field(default_factory=set)

    def observe(self, kind: str, etype: str, obj: Mapping[str, object]) -> bool:
        """Note one event from a Watcher; False when it carries no object to store (DISCONNECTED)."""
        if etype == "DISCONNECTED":
            if self.disconnected_since is None:
                self.disconnected_since = time.monotonic()
            self.last_error = kube_status.text(obj.get("message"))
            return False
        self.disconnected_since = None
        if etype == "SYNC":
            self.synced.add(kind)
        return True


def store_event(store: dict[str, Mapping[str, object]], etype: str, obj: Mapping[str, object]) -> None:
    """Apply one SYNC (the whole list), DELETED or other event to ``store``, keyed by name."""
    if etype == "SYNC":
        store.clear()
        for item in kube_status.mappings(obj.get("items")):
            store[kube_status.name_of(item)] = item
    elif etype == "DELETED":
        store.pop(kube_status.name_of(obj), None)
    else:
        store[kube_status.name_of(obj)] = obj


StateT = TypeVar("StateT", bound=WatchedState)
_JudgedState = TypeVar("_JudgedState", bound=WatchedState, contravariant=True)


class Judge(Protocol[_JudgedState]):
    """Turns a watch loop's state into a verdict (None: not yet) and a progress message."""

    def evaluate(self, state: _JudgedState) -> RolloutResult | None: ...

    def result(self, state: _JudgedState, failure: Failure | None) -> RolloutResult: ...

    def describe(self, state: _JudgedState) -> str: ...


@dataclasses.dataclass(frozen=True)
class Wait:
    """How long a watch may wait, whom it tells how it goes, and what may stop it early."""

    timeout: float
    progress: Callable[[str], None] = lambda _msg: None
    # Asked about once a second; a reason it returns (the release lock was lost) ends the watch.
    abort: Callable[[], str | None] = lambda: None
    unreachable_limit: float = 60.0  # seconds without the API before the watch gives up


@dataclasses.dataclass(frozen=True)
class Watched:
    """One kind a watch loop follows, narrowed by label or field selector."""

    kind: str
    labels: str | None = None
    fields: str | None = None


class Watcher(threading.Thread):
    """List, then watch one kind; re-list on 410 and on reconnect, with a bounded backoff."""

    def __init__(
        self,
        kube: Kube,
        kind: str,
        namespace: str | None,  # None: every namespace
        out: queue.Queue[Event],
        stop: threading.Event,
        *,
        labels: str | None = None,
        fields: str | None = None,
    ) -> None:
        super().__init__(name=f"watch-{kind}", daemon=True)
        self.kube, self.kind, self.namespace, self.out, self.stop = kube, kind, namespace, out, stop
        self.labels, self.fields = labels, fields

    def run(self) -> None:
        backoff = 0.5
        while not self.stop.is_set():
            try:
                items, rv = self.kube.list(self.kind, self.namespace, labels=self.labels, fields=self.fields)
                self.out.put((self.kind, "SYNC", {"items": items}))
                backoff = 0.5
                while not self.stop.is_set():
                    for event in self.kube.watch(
                        self.kind,
                        self.namespace,
                        rv,
                        labels=self.labels,
                        fields=self.fields,
                        timeout_seconds=30,
                    ):
                        if self.stop.is_set():
                            return
                        rv = event.object.get("metadata", {}).get("resourceVersion", rv)
                        if event.type != "BOOKMARK":
                            self.out.put((self.kind, event.type, event.object))
            except errors.WatchExpired:
                continue  # history compacted: re-list from now
            except errors.ClusterError as e:
                self.out.put((self.kind, "DISCONNECTED", {"message": e.message}))
                self.stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)


def follow(
    kube: Kube,
    namespace: str,
    kinds: list[Watched],
    state: StateT,
    update: Callable[[StateT, str, str, Mapping[str, object]], None],
    judge: Judge[StateT],
    wait: Wait,
    *,
    timed_out: Callable[[str], str],
    unreachable: Callable[[str], str],
) -> RolloutResult:
    """The loop every rollout watch runs: one Watcher thread per kind feeds ``update``; after each
    burst of events, and once a second for the time-based rules, ``judge`` is asked for a verdict.

    It ends with the judge's verdict, or with class ``timeout`` after ``wait.timeout`` seconds,
    ``api_unreachable`` after ``wait.unreachable_limit`` seconds without the API, or ``lock_lost``
    when ``wait.abort`` gives a reason. The messages of the first two are ``timed_out`` (given what
    is still awaited) and ``unreachable`` (given the last transport error).
    """
    start = time.monotonic()
    events: queue.Queue[Event] = queue.Queue()
    stop = threading.Event()
    for watched in kinds:
        Watcher(kube, watched.kind, namespace, events, stop, labels=watched.labels, fields=watched.fields).start()
    last_progress = ""
    try:
        while True:
            if time.monotonic() - start > wait.timeout:
                return judge.result(state, Failure("timeout", timed_out(judge.describe(state))))
            try:
                update(state, *events.get(timeout=1.0))
                while not events.empty():  # apply everything pending before judging
                    update(state, *events.get_nowait())
            except queue.Empty:
                pass
            if (
                state.disconnected_since is not None
                and time.monotonic() - state.disconnected_since > wait.unreachable_limit
            ):
                return judge.result(state, Failure("api_unreachable", unreachable(state.last_error)))
            if (reason := wait.abort()) is not None:
                return judge.result(state, Failure("lock_lost", reason))
            verdict = judge.evaluate(state)
            if verdict is not None:
                return verdict
            message = judge.describe(state)
            if message and message != last_progress:
                wait.progress(message)
                last_progress = message
    finally:
        stop.set()
