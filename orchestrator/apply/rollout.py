"""Watch a Deployment roll out and explain a failure within seconds of the first evidence.

Deployment, ReplicaSets, Pods and Events are watched (not polled) by one thread each, feeding a
queue; the main loop re-evaluates on every change and once a second for time-based rules. A
failed rollout is classified (unschedulable, image pull, crash loop with the log classified,
pods rejected by admission, controller stalled, progress deadline) and explained with the fix,
instead of waiting out a 10-minute progress deadline.
"""

from __future__ import annotations

import dataclasses
import queue
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from orchestrator import conventions, engines, errors
from orchestrator.kube import Kube

RELEASE_LABEL = conventions.RELEASE_LABEL

# Evidence must persist this long before we call a rollout failed: the scheduler legitimately
# reports "Insufficient nvidia.com/gpu" for a moment while an old pod is still terminating.
UNSCHEDULABLE_GRACE_SECONDS = 4.0
CONTROLLER_STALL_SECONDS = 30.0

# The kinds the verdict reads; Events only add detail to messages.
_JUDGED_KINDS = frozenset({"Deployment", "ReplicaSet", "Pod"})
_IMAGE_PULL_REASONS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}

LOG_CLASSES: list[tuple[str, re.Pattern[str], str]] = [
    (
        # The line the Ray head's start script (render.resolve._ray_head_command) prints before it gives up.
        "group_incomplete",
        re.compile(r"deployctl: group incomplete:"),
        "the copy's workers never joined its head, so vLLM was not started: check that the worker pods run "
        "(`deployctl status`), that the NetworkPolicy and the nodes' network let the pods of a copy reach each "
        "other, and raise rollout.groupJoinSeconds if the workers are only slow to start",
    ),
    # What each engine itself prints when it refuses to start lives with the engine
    # (orchestrator.engines, CrashClass); these classes are the same whatever the engine.
    (
        "oom",
        re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory", re.I),
        "the GPU ran out of memory: lower engine.gpuMemoryUtilization if other processes share the GPU, "
        "lower maxNumSeqs or maxNumBatchedTokens, or raise tensorParallelSize (check `deployctl plan`)",
    ),
    (
        "shm",
        re.compile(r"Bus error|NCCL.*(shm|shared memory)|/dev/shm|unhandled system error", re.I),
        "NCCL failed on shared memory: /dev/shm is too small; raise engine.shmSize (tensor parallelism "
        "moves activations through /dev/shm)",
    ),
]


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

    def observe(self, kind: str, etype: str, obj: dict[str, Any]) -> bool:
        """Note one event from a Watcher; False when it carries no object to store (DISCONNECTED)."""
        if etype == "DISCONNECTED":
            if self.disconnected_since is None:
                self.disconnected_since = time.monotonic()
            self.last_error = obj["message"]
            return False
        self.disconnected_since = None
        if etype == "SYNC":
            self.synced.add(kind)
        return True


def store_event(store: dict[str, dict[str, Any]], etype: str, obj: dict[str, Any]) -> None:
    """Apply one SYNC (the whole list), DELETED or other event to ``store``, keyed by name."""
    if etype == "SYNC":
        store.clear()
        for item in obj["items"]:
            store[item["metadata"]["name"]] = item
    elif etype == "DELETED":
        store.pop(obj["metadata"]["name"], None)
    else:
        store[obj["metadata"]["name"]] = obj


@dataclasses.dataclass
class _State(WatchedState):
    deployment: dict[str, Any] | None = None
    replicasets: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    pods: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    events: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


StateT = TypeVar("StateT", bound=WatchedState)
_JudgedState = TypeVar("_JudgedState", bound=WatchedState, contravariant=True)


class Judge(Protocol[_JudgedState]):
    """Turns a watch loop's state into a verdict (None: not yet) and a progress message."""

    def evaluate(self, state: _JudgedState) -> RolloutResult | None: ...

    def result(self, state: _JudgedState, failure: Failure | None) -> RolloutResult: ...

    def describe(self, state: _JudgedState) -> str: ...


@dataclasses.dataclass(frozen=True)
class Watched:
    """One kind a watch loop follows, narrowed by label or field selector."""

    kind: str
    labels: str | None = None
    fields: str | None = None


def classify_log(text: str, engine: str = engines.DEFAULT_KIND) -> tuple[str, str] | None:
    """The failure class and the fix for a crash log of ``engine``, or None when nothing known matches.
    The engine's own refusals come first: they name the cause, where a generic OOM line is a symptom."""
    known = engines.get(engine).classify_log(text)
    if known is not None:
        return known
    for cls, pattern, fix in LOG_CLASSES:
        if pattern.search(text):
            return cls, fix
    return None


class Watcher(threading.Thread):
    """List, then watch one kind; re-list on 410 and on reconnect, with a bounded backoff."""

    def __init__(
        self,
        kube: Kube,
        kind: str,
        namespace: str | None,  # None: every namespace
        out: queue.Queue[tuple[str, str, dict[str, Any]]],
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


def watch_rollout(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    timeout: float,
    progress: Callable[[str], None] = lambda _msg: None,
    unreachable_limit: float = 60.0,
    abort: Callable[[], str | None] = lambda: None,
    engine: str = engines.DEFAULT_KIND,
) -> RolloutResult:
    """Wait until Deployment ``name`` is rolled out, or explain why it cannot be.

    ``abort`` is asked about once a second; a reason it returns (the release lock was lost) ends
    the watch as failure class ``lock_lost``. ``engine`` says whose crash lines to read.
    """
    selector = f"{RELEASE_LABEL}={name}"
    return follow(
        kube,
        namespace,
        [
            Watched("Deployment", fields=f"metadata.name={name}"),
            Watched("ReplicaSet", labels=selector),
            Watched("Pod", labels=selector),
            Watched("Event"),
        ],
        _State(),
        _update,
        _Judge(kube, namespace, name, time.monotonic(), engine),
        timeout=timeout,
        timed_out=lambda waiting: (
            f"the rollout of {name} did not finish within {int(timeout)}s: " + (waiting or "no progress was reported")
        ),
        unreachable=lambda error: (
            f"lost the Kubernetes API for {int(unreachable_limit)}s while watching the "
            f"rollout: {error}. The rollout may still finish; check `deployctl status {name}`"
        ),
        progress=progress,
        unreachable_limit=unreachable_limit,
        abort=abort,
    )


def follow(
    kube: Kube,
    namespace: str,
    kinds: list[Watched],
    state: StateT,
    update: Callable[[StateT, str, str, dict[str, Any]], None],
    judge: Judge[StateT],
    *,
    timeout: float,
    timed_out: Callable[[str], str],
    unreachable: Callable[[str], str],
    progress: Callable[[str], None],
    unreachable_limit: float,
    abort: Callable[[], str | None],
) -> RolloutResult:
    """The loop every rollout watch runs: one Watcher thread per kind feeds ``update``; after each
    burst of events, and once a second for the time-based rules, ``judge`` is asked for a verdict.

    It ends with the judge's verdict, or with class ``timeout`` after ``timeout`` seconds,
    ``api_unreachable`` after ``unreachable_limit`` seconds without the API, or ``lock_lost``
    when ``abort`` gives a reason. The messages of the first two are ``timed_out`` (given what
    is still awaited) and ``unreachable`` (given the last transport error).
    """
    start = time.monotonic()
    events: queue.Queue[tuple[str, str, dict[str, Any]]] = queue.Queue()
    stop = threading.Event()
    for watched in kinds:
        Watcher(kube, watched.kind, namespace, events, stop, labels=watched.labels, fields=watched.fields).start()
    last_progress = ""
    try:
        while True:
            if time.monotonic() - start > timeout:
                return judge.result(state, Failure("timeout", timed_out(judge.describe(state))))
            try:
                update(state, *events.get(timeout=1.0))
                while not events.empty():  # apply everything pending before judging
                    update(state, *events.get_nowait())
            except queue.Empty:
                pass
            if state.disconnected_since is not None and time.monotonic() - state.disconnected_since > unreachable_limit:
                return judge.result(state, Failure("api_unreachable", unreachable(state.last_error)))
            if (reason := abort()) is not None:
                return judge.result(state, Failure("lock_lost", reason))
            verdict = judge.evaluate(state)
            if verdict is not None:
                return verdict
            message = judge.describe(state)
            if message and message != last_progress:
                progress(message)
                last_progress = message
    finally:
        stop.set()


def _update(state: _State, kind: str, etype: str, obj: dict[str, Any]) -> None:
    if not state.observe(kind, etype, obj):
        return
    if kind == "Deployment":
        if etype == "SYNC":
            state.deployment = obj["items"][0] if obj["items"] else None
        else:
            state.deployment = None if etype == "DELETED" else obj
        return
    store_event({"ReplicaSet": state.replicasets, "Pod": state.pods, "Event": state.events}[kind], etype, obj)


class PodJudge:
    """What is wrong with one pod, from its status and, when it crashes, its log: the rules every
    rollout watch applies to each pod it waits for (a Deployment's, or any member of a group)."""

    def __init__(self, kube: Kube, namespace: str, engine: str = engines.DEFAULT_KIND) -> None:
        self.kube, self.namespace, self.engine = kube, namespace, engine
        self.first_seen: dict[str, float] = {}  # evidence key -> first time seen

    def persisted(self, key: str, seconds: float) -> bool:
        """Whether the evidence ``key`` has been seen for ``seconds`` (it starts counting now)."""
        now = time.monotonic()
        first = self.first_seen.setdefault(key, now)
        return now - first >= seconds

    def failure(self, pod: dict[str, Any], all_pods: Iterable[dict[str, Any]]) -> Failure | None:
        """Unschedulable, image pull or crash loop (its log classified); None when none of them.
        ``all_pods``: the release's pods, whose terminating ones excuse a short unschedulable spell."""
        name = pod["metadata"]["name"]
        status = pod.get("status") or {}
        for cond in status.get("conditions") or []:
            unschedulable = (
                cond.get("type") == "PodScheduled"
                and cond.get("status") == "False"
                and cond.get("reason") == "Unschedulable"
            )
            if (
                unschedulable
                and self.persisted(f"unsched:{name}", UNSCHEDULABLE_GRACE_SECONDS)
                and not any(p["metadata"].get("deletionTimestamp") for p in all_pods)
            ):
                return Failure("unschedulable", _explain_unschedulable(name, cond.get("message", "")))
        statuses = (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
        for cs in statuses:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            reason = waiting.get("reason", "")
            if reason in _IMAGE_PULL_REASONS:
                return Failure(
                    "image_pull",
                    f"pod {name} cannot pull image {cs.get('image', '')}: {reason} "
                    f"({errors.shorten(waiting.get('message', ''), 200)}). In an air-gapped cluster the image "
                    "must be mirrored into your internal registry and referenced by digest; check the name, "
                    "digest and imagePullSecrets",
                )
            terminated = (cs.get("lastState") or {}).get("terminated") or (cs.get("state") or {}).get("terminated")
            if reason == "CrashLoopBackOff" or (terminated and cs.get("restartCount", 0) >= 1):
                return self._crash_failure(name, cs, terminated or {})
        return None

    def _crash_failure(self, pod: str, cs: dict[str, Any], terminated: dict[str, Any]) -> Failure:
        log = ""
        try:
            log = self.kube.pod_log(pod, self.namespace, tail_lines=40)
        except errors.ClusterError as e:
            log = f"(could not read the log: {e.message})"
        # The tail goes into the record and the InferenceProfile's status: each line cut short and without
        # anything shaped like a credential (vLLM logs its non-default args, --api-key among them).
        tail = "\n".join(errors.excerpt(line, 300) for line in log.strip().splitlines()[-8:])
        exit_code = terminated.get("exitCode", "?")
        known = classify_log(log, self.engine)
        restarts = cs.get("restartCount", 0)
        if known:
            cls, fix = known
            return Failure(
                cls,
                f"pod {pod} is crash-looping (exit {exit_code}, {restarts} restarts): {fix}.\nLast log lines:\n{tail}",
            )
        return Failure(
            "crash_loop",
            f"pod {pod} is crash-looping (exit {exit_code}, {restarts} restarts). "
            f"Last log lines:\n{tail or '(empty log)'}",
        )


class _Judge:
    """Turns the watched state into progress messages and, when it is clear, a verdict."""

    def __init__(self, kube: Kube, namespace: str, name: str, start: float, engine: str = engines.DEFAULT_KIND) -> None:
        self.kube, self.namespace, self.name, self.start = kube, namespace, name, start
        self.pods = PodJudge(kube, namespace, engine)

    def _persisted(self, key: str, seconds: float) -> bool:
        return self.pods.persisted(key, seconds)

    def new_pods(self, state: _State) -> list[dict[str, Any]]:
        rs = self.new_replicaset(state)
        if rs is None:
            return []
        pod_hash = rs["metadata"].get("labels", {}).get("pod-template-hash")
        return sorted(
            (
                p
                for p in state.pods.values()
                if p["metadata"].get("labels", {}).get("pod-template-hash") == pod_hash
                and not p["metadata"].get("deletionTimestamp")
            ),
            key=lambda p: p["metadata"]["name"],
        )

    def new_replicaset(self, state: _State) -> dict[str, Any] | None:
        dep = state.deployment
        if dep is None:
            return None
        revision = dep["metadata"].get("annotations", {}).get("deployment.kubernetes.io/revision")
        uid = dep["metadata"].get("uid")
        for rs in state.replicasets.values():
            owners = rs["metadata"].get("ownerReferences") or []
            if any(o.get("uid") == uid for o in owners) and (
                rs["metadata"].get("annotations", {}).get("deployment.kubernetes.io/revision") == revision
            ):
                return rs
        return None

    def result(self, state: _State, failure: Failure | None) -> RolloutResult:
        dep = state.deployment or {"metadata": {}}
        return RolloutResult(
            ok=failure is None,
            failure=failure,
            new_pods=[p["metadata"]["name"] for p in self.new_pods(state)],
            elapsed=time.monotonic() - self.start,
            revision=dep["metadata"].get("annotations", {}).get("deployment.kubernetes.io/revision", ""),
        )

    def evaluate(self, state: _State) -> RolloutResult | None:
        dep = state.deployment
        if dep is None or not state.synced >= _JUDGED_KINDS:
            # An unchanged Deployment is rolled out in its first event; judged before the
            # ReplicaSets and Pods are listed, it would pass with no new pods to gate.
            return None
        generation = dep["metadata"].get("generation", 0)
        status = dep.get("status") or {}
        if status.get("observedGeneration", 0) < generation:
            if self._persisted(f"stall:{generation}", CONTROLLER_STALL_SECONDS):
                return self.result(
                    state,
                    Failure(
                        "controller_stalled",
                        f"Deployment {self.name} generation {generation} has not been picked up by the "
                        f"Kubernetes controller-manager for {int(CONTROLLER_STALL_SECONDS)}s (observed "
                        f"{status.get('observedGeneration', 0)}); is kube-controller-manager running? "
                        "Ask the cluster administrators; nothing deployctl can fix",
                    ),
                )
            return None
        # The Deployment's conditions, then its new ReplicaSet's (where admission refusals show first).
        rs = self.new_replicaset(state) or {}
        for cond in [*(status.get("conditions") or []), *((rs.get("status") or {}).get("conditions") or [])]:
            if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
                return self.result(
                    state,
                    Failure(
                        "progress_deadline",
                        f"Deployment {self.name} exceeded its progress deadline: {cond.get('message', '')}. "
                        + (self.describe(state) or ""),
                    ),
                )
            if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
                return self.result(
                    state,
                    Failure(
                        "replica_failure",
                        f"the cluster refused to create pods for {self.name}: "
                        f"{errors.shorten(cond.get('message', ''), 300)}. Fix the policy or the profile "
                        "(Pod Security, quota, admission webhooks)",
                    ),
                )
        for pod in self.new_pods(state):
            failure = self.pods.failure(pod, state.pods.values())
            if failure is not None:
                return self.result(state, failure)
        replicas = dep.get("spec", {}).get("replicas", 1)
        done = (
            status.get("updatedReplicas", 0) == replicas
            and status.get("readyReplicas", 0) == replicas
            and status.get("availableReplicas", 0) == replicas
            and status.get("replicas", 0) == replicas
        )
        return self.result(state, None) if done else None

    def describe(self, state: _State) -> str:
        dep = state.deployment
        if dep is None:
            return "waiting for the Deployment to appear"
        pods = self.new_pods(state)
        replicas = dep.get("spec", {}).get("replicas", 1)
        if not pods:
            return f"waiting for the controller to create pods ({replicas} wanted)"
        # One line per replica: a terminal shows them as a block that updates in place.
        lines = [f"{pod['metadata']['name']}: {pod_phase(pod)}" for pod in pods]
        old = len([p for p in state.pods.values() if p not in pods])
        if old:
            lines.append(f"{old} old pod(s) still present")
        return "\n".join(lines)


def pod_phase(pod: dict[str, Any]) -> str:
    status = pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName")
    if not node:
        return "scheduling"
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    if ready:
        return f"ready on {node}"
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in ("ContainerCreating", "PodInitializing"):
            return f"pulling image / starting on {node}"
    if status.get("phase") == "Running":
        return f"loading the model on {node}"
    return f"starting on {node}"


def _explain_unschedulable(pod: str, message: str) -> str:
    if "persistentvolumeclaim" in message.lower():
        # The scheduler places no pod whose claim is missing or not yet bound to a volume.
        return (
            f"pod {pod} cannot be scheduled: a PersistentVolumeClaim it mounts (model.source.pvc, or a "
            f"volume in engine.volumes) is missing or not bound. Scheduler: {errors.shorten(message, 300)}. "
            "Check `kubectl get pvc` in the release's namespace: the claim must exist and be Bound "
            "(its StorageClass provisions or binds it) before the deploy"
        )
    hints = []
    if "nvidia.com/gpu" in message:
        hints.append("not enough free nvidia.com/gpu on any eligible node (other workloads hold them)")
    if "node affinity" in message or "selector" in message:
        hints.append("no node matches the GPU product / NVLink / nodeSelector labels")
    if "taint" in message:
        hints.append("a node taint is not tolerated (placement.tolerations)")
    why = "; ".join(hints) or "see the scheduler's message"
    return (
        f"pod {pod} cannot be scheduled: {why}. Scheduler: {errors.shorten(message, 300)}. "
        "Free GPUs (`deployctl inventory` shows the pools), or change placement/tensorParallelSize"
    )


def wait_for_annotation(
    kube: Kube,
    namespace: str,
    name: str,
    key: str,
    want: str,
    *,
    timeout: float,
    progress: Callable[[str | None], None] = lambda _have: None,
    kind: str = "Deployment",
) -> str | None:
    """Watch object ``kind``/``name`` until annotation ``key`` equals ``want``; returns the value last
    seen (``want``, or what it still was at the deadline). ``progress`` hears every other value."""
    deadline = time.monotonic() + timeout
    events: queue.Queue[tuple[str, str, dict[str, Any]]] = queue.Queue()
    stop = threading.Event()
    watcher = Watcher(kube, kind, namespace, events, stop, fields=f"metadata.name={name}")
    watcher.start()
    have: str | None = None
    try:
        while (left := deadline - time.monotonic()) > 0:
            try:
                _kind, etype, obj = events.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            objects = obj.get("items", []) if etype == "SYNC" else [] if etype in ("DELETED", "DISCONNECTED") else [obj]
            if etype in ("SYNC", "DELETED"):
                have = None
            for item in objects:
                have = ((item.get("metadata") or {}).get("annotations") or {}).get(key)
            if have == want:
                return have
            progress(have)
        return have
    finally:
        stop.set()
