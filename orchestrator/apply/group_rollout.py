"""Watch the copies of a release that span nodes (one RayCluster each) come up, and explain a failure.

A copy is ready when every one of its pods is Ready and its engine reports the workers joined
(KubeRay counts ready workers in the RayCluster's status; the head serves only after they joined
Ray). Every member is judged by the same pod rules as a Deployment's pods (unschedulable, image
pull, crash loop with the log classified), and the message names the member and its copy. One
failure is the group's own: `group_incomplete`, a copy whose workers never joined in time.
"""

from __future__ import annotations

import dataclasses
import time

from orchestrator import conventions, errors
from orchestrator.apply import rollout, watching
from orchestrator.apply.watching import Failure, RolloutResult
from orchestrator.kube import Kube
from orchestrator.kube import status as kube_status
from orchestrator.kube.status import Object

# A group object without any pod after this long: nobody reconciles it (KubeRay not running).
ENGINE_STALL_SECONDS = 30.0
_SYNCED = frozenset({"RayCluster", "Pod"})


@dataclasses.dataclass
class _State(watching.WatchedState):
    groups: dict[str, Object] = dataclasses.field(default_factory=dict)
    pods: dict[str, Object] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class GroupWatch:
    """What to wait for: the copies' group objects, their size and how long workers may take to join."""

    copies: tuple[str, ...]
    size: int  # pods per copy
    join_seconds: float


def watch_groups(
    kube: Kube,
    namespace: str,
    name: str,
    watch: GroupWatch,
    wait: watching.Wait,
) -> RolloutResult:
    """Wait until every copy in ``watch`` is ready, or explain why one cannot be.

    ``new_pods`` of the result are the copies' leaders (the pods that serve), for the health gate.
    """
    selector = f"{conventions.RELEASE_LABEL}={name}"
    return watching.follow(
        kube,
        namespace,
        [watching.Watched("RayCluster", labels=selector), watching.Watched("Pod", labels=selector)],
        _State(),
        _update,
        _GroupJudge(kube, namespace, watch, time.monotonic()),
        wait,
        timed_out=lambda waiting: f"the copies of {name} were not ready within {int(wait.timeout)}s: {waiting}",
        unreachable=lambda error: (
            f"lost the Kubernetes API for {int(wait.unreachable_limit)}s while watching the copies "
            f"of {name}: {error}. They may still come up; check `deployctl status {name}`"
        ),
    )


def _update(state: _State, kind: str, etype: str, obj: Object) -> None:
    if state.observe(kind, etype, obj):
        watching.store_event(state.groups if kind == "RayCluster" else state.pods, etype, obj)


class _GroupJudge:
    def __init__(self, kube: Kube, namespace: str, watch: GroupWatch, start: float) -> None:
        self.watch, self.start = watch, start
        self.pods = rollout.PodJudge(kube, namespace)

    def members(self, state: _State, copy: str) -> list[Object]:
        live = [p for p in state.pods.values() if not kube_status.Meta.from_object(p).deleting]
        return sorted(
            (p for p in live if _labels(p).get(conventions.COPY_LABEL) == copy),
            key=lambda p: (not _leads(p), _name(p)),
        )

    def leaders(self, state: _State) -> list[str]:
        return [_name(p) for copy in self.watch.copies for p in self.members(state, copy) if _leads(p)]

    def result(self, state: _State, failure: Failure | None) -> RolloutResult:
        return RolloutResult(
            ok=failure is None, failure=failure, new_pods=self.leaders(state), elapsed=time.monotonic() - self.start
        )

    def evaluate(self, state: _State) -> RolloutResult | None:
        if not state.synced >= _SYNCED:  # a copy missing from a partial view is not yet a failure
            return None
        ready = 0
        for copy in self.watch.copies:
            failure = self._copy_failure(state, copy)
            if failure is not None:
                return self.result(state, failure)
            ready += self._copy_ready(state, copy)
        return self.result(state, None) if ready == len(self.watch.copies) else None

    def _copy_failure(self, state: _State, copy: str) -> Failure | None:
        group = state.groups.get(copy)
        members = self.members(state, copy)
        if group is None or not members:
            what = f"RayCluster {copy}" + (" was not created" if group is None else " has no pods")
            if self.pods.persisted(f"nopods:{copy}", ENGINE_STALL_SECONDS):
                return Failure(
                    "controller_stalled",
                    f"{what} after {int(ENGINE_STALL_SECONDS)}s: is KubeRay's ray-operator running in the cluster "
                    "and watching this namespace? Ask the cluster administrators (docs/multinode.md)",
                )
            return None
        for pod in members:
            failure = self.pods.failure(pod, state.pods.values())
            if failure is not None:
                role = _labels(pod).get(conventions.GROUP_ROLE_LABEL, "member")
                return Failure(failure.cls, f"{role} of copy {copy}: {failure.message}")
        return self._incomplete(copy, members)

    def _incomplete(self, copy: str, members: list[Object]) -> Failure | None:
        """Workers that have not joined ``join_seconds`` after the copy's head started running."""
        leader = members[0] if _leads(members[0]) else None
        if leader is None or kube_status.Pod.from_object(leader).phase != "Running":
            return None
        workers = [p for p in members if p is not leader]
        waiting = [p for p in workers if not _ready(p)]
        missing = self.watch.size - 1 - len(workers)
        if not waiting and missing <= 0:
            return None
        if not self.pods.persisted(f"join:{copy}", self.watch.join_seconds):
            return None
        named = [f"{_name(p)} ({rollout.pod_phase(p)})" for p in waiting]
        if missing > 0:
            named.append(f"{missing} worker pod(s) never created")
        return Failure(
            "group_incomplete",
            f"copy {copy}: workers never joined its head {_name(leader)} within rollout.groupJoinSeconds "
            f"({int(self.watch.join_seconds)}s): {', '.join(named)}. vLLM serves only once every node joined; "
            "check the workers' logs, that the pods of a copy can reach each other (NetworkPolicy, node "
            "network), or raise rollout.groupJoinSeconds if they are only slow",
        )

    def _copy_ready(self, state: _State, copy: str) -> bool:
        members = self.members(state, copy)
        if len(members) < self.watch.size or not all(_ready(p) for p in members):
            return False
        # KubeRay's own count of workers whose Ray node is up (raylet ready): the engine says they joined.
        group = kube_status.RayCluster.from_object(state.groups.get(copy) or {})
        return group.ready_workers >= self.watch.size - 1

    def describe(self, state: _State) -> str:
        lines = []
        for copy in self.watch.copies:
            members = self.members(state, copy)
            if not members:
                lines.append(f"{copy}: waiting for KubeRay to create its pods")
            for pod in members:
                role = _labels(pod).get(conventions.GROUP_ROLE_LABEL, "member")
                lines.append(f"{copy} {role} {_name(pod)}: {rollout.pod_phase(pod)}")
        return "\n".join(lines)


def _ready(pod: Object) -> bool:
    return kube_status.Pod.from_object(pod).ready


def _leads(pod: Object) -> bool:
    return _labels(pod).get(conventions.GROUP_ROLE_LABEL) == conventions.LEADER_ROLE


_labels = kube_status.labels_of
_name = kube_status.name_of


def wait_copies_gone(kube: Kube, namespace: str, name: str, keep: set[str], *, timeout: float) -> None:
    """Wait until no pod of the release belongs to a copy outside ``keep`` (the old copies' pods
    have terminated and their GPUs are free); ClusterError when they are still there at ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        pods, _ = kube.list("Pod", namespace, labels=f"{conventions.RELEASE_LABEL}={name}")
        left = sorted(_name(p) for p in pods if _labels(p).get(conventions.COPY_LABEL, "") not in keep | {""})
        if not left:
            return
        if time.monotonic() > deadline:
            raise errors.ClusterError(
                f"the old copies' pods of {name} did not terminate within {int(timeout)}s: {', '.join(left[:4])}"
            )
        time.sleep(1.0)
