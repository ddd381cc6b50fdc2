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

from orchestrator import conventions, engines, errors
from orchestrator.apply import watching
from orchestrator.kube import Kube
from orchestrator.kube import status as kube_status
from orchestrator.kube.status import Object

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
class _State(watching.WatchedState):
    deployment: Object | None = None
    replicasets: dict[str, Object] = dataclasses.field(default_factory=dict)
    pods: dict[str, Object] = dataclasses.field(default_factory=dict)
    events: dict[str, Object] = dataclasses.field(default_factory=dict)


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


def watch_rollout(
    kube: Kube,
    namespace: str,
    name: str,
    wait: watching.Wait,
    *,
    engine: str = engines.DEFAULT_KIND,
    release: str | None = None,
) -> watching.RolloutResult:
    """Wait until Deployment ``name`` is rolled out, or explain why it cannot be.

    A lost lock (``wait.abort``) ends the watch as failure class ``lock_lost``. ``engine`` says
    whose crash lines to read; ``release`` whose Deployment ``name`` is, when it is not the release's
    own (a canary's).
    """
    selector = f"{RELEASE_LABEL}={release or name}"
    return watching.follow(
        kube,
        namespace,
        [
            watching.Watched("Deployment", fields=f"metadata.name={name}"),
            watching.Watched("ReplicaSet", labels=selector),
            watching.Watched("Pod", labels=selector),
            watching.Watched("Event"),
        ],
        _State(),
        _update,
        _Judge(kube, namespace, name, time.monotonic(), engine),
        wait,
        timed_out=lambda waiting: (
            f"the rollout of {name} did not finish within {int(wait.timeout)}s: "
            + (waiting or "no progress was reported")
        ),
        unreachable=lambda error: (
            f"lost the Kubernetes API for {int(wait.unreachable_limit)}s while watching the "
            f"rollout: {error}. The rollout may still finish; check `deployctl status {name}`"
        ),
    )


def _update(state: _State, kind: str, etype: str, obj: Object) -> None:
    if not state.observe(kind, etype, obj):
        return
    if kind == "Deployment":
        if etype == "SYNC":
            items = kube_status.mappings(obj.get("items"))
            state.deployment = items[0] if items else None
        else:
            state.deployment = None if etype == "DELETED" else obj
        return
    watching.store_event({"ReplicaSet": state.replicasets, "Pod": state.pods, "Event": state.events}[kind], etype, obj)


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

    def failure(self, pod: Object, all_pods: Iterable[Object]) -> watching.Failure | None:
        """Unschedulable, image pull or crash loop (its log classified); None when none of them.
        ``all_pods``: the release's pods, whose terminating ones excuse a short unschedulable spell."""
        view = kube_status.Pod.from_object(pod)
        name = view.meta.name
        for cond in view.conditions:
            unschedulable = cond.type == "PodScheduled" and cond.status == "False" and cond.reason == "Unschedulable"
            if (
                unschedulable
                and self.persisted(f"unsched:{name}", UNSCHEDULABLE_GRACE_SECONDS)
                and not any(kube_status.Meta.from_object(p).deleting for p in all_pods)
            ):
                return watching.Failure("unschedulable", _explain_unschedulable(name, cond.message))
        for cs in (*view.init_containers, *view.containers):
            if cs.waiting_reason in _IMAGE_PULL_REASONS:
                return watching.Failure(
                    "image_pull",
                    f"pod {name} cannot pull image {cs.image}: {cs.waiting_reason} "
                    f"({errors.shorten(cs.waiting_message, 200)}). In an air-gapped cluster the image "
                    "must be mirrored into your internal registry and referenced by digest; check the name, "
                    "digest and imagePullSecrets",
                )
            if cs.waiting_reason == "CrashLoopBackOff" or (cs.terminated and cs.restart_count >= 1):
                return self._crash_failure(name, cs)
        return None

    def _crash_failure(self, pod: str, cs: kube_status.ContainerStatus) -> watching.Failure:
        log = ""
        try:
            log = self.kube.pod_log(pod, self.namespace, tail_lines=40)
        except errors.ClusterError as e:
            log = f"(could not read the log: {e.message})"
        # The tail goes into the record and the InferenceProfile's status: each line cut short and without
        # anything shaped like a credential (vLLM logs its non-default args, --api-key among them).
        tail = "\n".join(errors.excerpt(line, 300) for line in log.strip().splitlines()[-8:])
        exit_code = "?" if cs.exit_code is None else cs.exit_code
        known = classify_log(log, self.engine)
        if known:
            cls, fix = known
            return watching.Failure(
                cls,
                f"pod {pod} is crash-looping (exit {exit_code}, {cs.restart_count} restarts): {fix}.\n"
                f"Last log lines:\n{tail}",
            )
        return watching.Failure(
            "crash_loop",
            f"pod {pod} is crash-looping (exit {exit_code}, {cs.restart_count} restarts). "
            f"Last log lines:\n{tail or '(empty log)'}",
        )


class _Judge:
    """Turns the watched state into progress messages and, when it is clear, a verdict."""

    def __init__(self, kube: Kube, namespace: str, name: str, start: float, engine: str = engines.DEFAULT_KIND) -> None:
        self.kube, self.namespace, self.name, self.start = kube, namespace, name, start
        self.pods = PodJudge(kube, namespace, engine)

    def new_pods(self, state: _State) -> list[Object]:
        rs = self.new_replicaset(state)
        if rs is None:
            return []
        return sorted(
            (p for p in state.pods.values() if _of_template(kube_status.Meta.from_object(p), rs.pod_template_hash)),
            key=kube_status.name_of,
        )

    def new_replicaset(self, state: _State) -> kube_status.ReplicaSet | None:
        if state.deployment is None:
            return None
        dep = kube_status.Deployment.from_object(state.deployment)
        for raw in state.replicasets.values():
            rs = kube_status.ReplicaSet.from_object(raw)
            if dep.meta.uid in rs.meta.owner_uids and rs.revision == dep.revision:
                return rs
        return None

    def result(self, state: _State, failure: watching.Failure | None) -> watching.RolloutResult:
        dep = state.deployment
        return watching.RolloutResult(
            ok=failure is None,
            failure=failure,
            new_pods=[kube_status.name_of(p) for p in self.new_pods(state)],
            elapsed=time.monotonic() - self.start,
            revision=kube_status.Deployment.from_object(dep).revision if dep is not None else "",
        )

    def evaluate(self, state: _State) -> watching.RolloutResult | None:
        if state.deployment is None or not state.synced >= _JUDGED_KINDS:
            # An unchanged Deployment is rolled out in its first event; judged before the
            # ReplicaSets and Pods are listed, it would pass with no new pods to gate.
            return None
        dep = kube_status.Deployment.from_object(state.deployment)
        generation = dep.meta.generation
        if not dep.observed:
            if self.pods.persisted(f"stall:{generation}", CONTROLLER_STALL_SECONDS):
                return self.result(
                    state,
                    watching.Failure(
                        "controller_stalled",
                        f"Deployment {self.name} generation {generation} has not been picked up by the "
                        f"Kubernetes controller-manager for {int(CONTROLLER_STALL_SECONDS)}s (observed "
                        f"{dep.observed_generation}); is kube-controller-manager running? "
                        "Ask the cluster administrators; nothing deployctl can fix",
                    ),
                )
            return None
        # The Deployment's conditions, then its new ReplicaSet's (where admission refusals show first).
        rs = self.new_replicaset(state)
        failure = self._condition_failure(state, (*dep.conditions, *(rs.conditions if rs else ())))
        for pod in self.new_pods(state):
            failure = failure or self.pods.failure(pod, state.pods.values())
        if failure is not None:
            return self.result(state, failure)
        return self.result(state, None) if dep.rolled_out else None

    def _condition_failure(self, state: _State, conditions: Iterable[kube_status.Condition]) -> watching.Failure | None:
        for cond in conditions:
            if cond.type == "Progressing" and cond.reason == "ProgressDeadlineExceeded":
                what = f"Deployment {self.name} exceeded its progress deadline: {cond.message}. "
                return watching.Failure("progress_deadline", what + (self.describe(state) or ""))
            if cond.type == "ReplicaFailure" and cond.true:
                why = errors.shorten(cond.message, 300)
                return watching.Failure(
                    "replica_failure",
                    f"the cluster refused to create pods for {self.name}: {why}. Fix the policy or the profile "
                    "(Pod Security, quota, admission webhooks)",
                )
        return None

    def describe(self, state: _State) -> str:
        if state.deployment is None:
            return "waiting for the Deployment to appear"
        pods = self.new_pods(state)
        if not pods:
            wanted = kube_status.Deployment.from_object(state.deployment).wanted
            return f"waiting for the controller to create pods ({wanted} wanted)"
        # One line per replica: a terminal shows them as a block that updates in place.
        lines = [f"{kube_status.name_of(pod)}: {pod_phase(pod)}" for pod in pods]
        # Old pods are this Deployment's: beside a canary, the release's other pods are the stable copies.
        dep_uid = kube_status.Deployment.from_object(state.deployment).meta.uid
        mine = {
            rs.meta.uid
            for rs in map(kube_status.ReplicaSet.from_object, state.replicasets.values())
            if dep_uid in rs.meta.owner_uids
        }
        old = len(
            [p for p in state.pods.values() if p not in pods and mine & set(kube_status.Meta.from_object(p).owner_uids)]
        )
        if old:
            lines.append(f"{old} old pod(s) still present")
        return "\n".join(lines)


def _of_template(meta: kube_status.Meta, pod_hash: str | None) -> bool:
    """Whether a pod is a live one of the ReplicaSet whose pod-template-hash is ``pod_hash``."""
    return meta.labels.get("pod-template-hash") == pod_hash and not meta.deleting


def pod_phase(pod: Object) -> str:
    view = kube_status.Pod.from_object(pod)
    if not view.node:
        return "scheduling"
    if view.ready:
        return f"ready on {view.node}"
    if any(cs.waiting_reason in ("ContainerCreating", "PodInitializing") for cs in view.containers):
        return f"pulling image / starting on {view.node}"
    if view.phase == "Running":
        return f"loading the model on {view.node}"
    return f"starting on {view.node}"


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
    events: queue.Queue[watching.Event] = queue.Queue()
    stop = threading.Event()
    watcher = watching.Watcher(kube, kind, namespace, events, stop, fields=f"metadata.name={name}")
    watcher.start()
    have: str | None = None
    try:
        while (left := deadline - time.monotonic()) > 0:
            try:
                _kind, etype, obj = events.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            objects = kube_status.mappings(obj.get("items")) if etype == "SYNC" else [obj]
            if etype in ("SYNC", "DELETED"):
                have = None
            for item in objects if etype not in ("DELETED", "DISCONNECTED") else []:
                have = kube_status.Meta.from_object(item).annotations.get(key)
            if have == want:
                return have
            progress(have)
        return have
    finally:
        stop.set()
