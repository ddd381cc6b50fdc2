"""Typed views of the few kinds deployctl judges: Pod, Deployment, ReplicaSet and RayCluster.

Each ``from_object`` reads the fields a rollout watch, the group watch and uninstall's wait use
from a plain object as the API server sent it, with the API's defaults for absent fields (a
Deployment without spec.replicas wants 1; a status not yet written counts 0 everywhere). A field
of the wrong type reads as absent: the views never raise on what a server or a fake returns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

# One Kubernetes object, or any mapping inside one, as JSON decoding gives it.
Object = Mapping[str, object]

REVISION_ANNOTATION = "deployment.kubernetes.io/revision"  # the Deployment's and its ReplicaSets'


def mapping(value: object) -> Object:
    """``value`` when it is a mapping, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def mappings(value: object) -> list[Object]:
    """The mappings in ``value`` when it is a list, else none."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def text(value: object, default: str = "") -> str:
    return value if isinstance(value, str) else default


def number(value: object, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


@dataclasses.dataclass(frozen=True)
class Meta:
    """What deployctl reads of an object's metadata."""

    name: str
    generation: int = 0
    uid: str = ""
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    deleting: bool = False  # a deletionTimestamp is set: the object is terminating
    deletion_timestamp: str = ""
    owner_uids: tuple[str, ...] = ()
    managers: tuple[str, ...] = ()  # the field managers that wrote it (who applied it), sorted
    created: str = ""  # creationTimestamp, RFC 3339 as the API server wrote it

    @classmethod
    def from_object(cls, obj: Object) -> Meta:
        meta = mapping(obj.get("metadata"))
        deleted = meta.get("deletionTimestamp")
        return cls(
            name=text(meta.get("name")),
            generation=number(meta.get("generation")),
            uid=text(meta.get("uid")),
            labels=_strings(meta.get("labels")),
            annotations=_strings(meta.get("annotations")),
            deleting=bool(deleted),
            deletion_timestamp=text(deleted),
            owner_uids=tuple(text(o.get("uid")) for o in mappings(meta.get("ownerReferences"))),
            managers=tuple(sorted({str(e.get("manager", "?")) for e in mappings(meta.get("managedFields"))})),
            created=text(meta.get("creationTimestamp")),
        )


def name_of(obj: Object) -> str:
    return text(mapping(obj.get("metadata")).get("name"))


def labels_of(obj: Object) -> Mapping[str, str]:
    return _strings(mapping(obj.get("metadata")).get("labels"))


def _strings(value: object) -> dict[str, str]:
    return {str(k): v for k, v in mapping(value).items() if isinstance(v, str)}


@dataclasses.dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str = ""
    message: str = ""
    since: str = ""  # lastTransitionTime, RFC 3339

    @classmethod
    def from_object(cls, obj: Object) -> Condition:
        return cls(
            text(obj.get("type")),
            text(obj.get("status")),
            text(obj.get("reason")),
            text(obj.get("message")),
            text(obj.get("lastTransitionTime")),
        )

    @property
    def true(self) -> bool:
        return self.status == "True"


def conditions_of(status: Object) -> tuple[Condition, ...]:
    return tuple(Condition.from_object(c) for c in mappings(status.get("conditions")))


@dataclasses.dataclass(frozen=True)
class ContainerStatus:
    """One container's state: why it waits, whether it terminated before, how often it restarted."""

    image: str = ""
    waiting_reason: str = ""
    waiting_message: str = ""
    terminated: bool = False  # the last (or current) run of the container ended
    exit_code: int | None = None  # of that run, when the kubelet said
    restart_count: int = 0
    started_at: str = ""  # when the running container started (state.running.startedAt), RFC 3339
    name: str = ""

    @classmethod
    def from_object(cls, obj: Object) -> ContainerStatus:
        state = mapping(obj.get("state"))
        waiting = mapping(state.get("waiting"))
        ended = mapping(mapping(obj.get("lastState")).get("terminated")) or mapping(state.get("terminated"))
        code = ended.get("exitCode")
        return cls(
            image=text(obj.get("image")),
            name=text(obj.get("name")),
            waiting_reason=text(waiting.get("reason")),
            waiting_message=text(waiting.get("message")),
            terminated=bool(ended),
            exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
            restart_count=number(obj.get("restartCount")),
            started_at=text(mapping(state.get("running")).get("startedAt")),
        )


def _containers(value: object) -> tuple[ContainerStatus, ...]:
    return tuple(ContainerStatus.from_object(c) for c in mappings(value))


@dataclasses.dataclass(frozen=True)
class Pod:
    meta: Meta
    node: str = ""  # spec.nodeName: empty until scheduled
    phase: str = ""
    conditions: tuple[Condition, ...] = ()
    init_containers: tuple[ContainerStatus, ...] = ()
    containers: tuple[ContainerStatus, ...] = ()
    # (name, image) of spec.containers, in order: the first one serves (the engine).
    specified: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_object(cls, obj: Object) -> Pod:
        status = mapping(obj.get("status"))
        spec_containers = mappings(mapping(obj.get("spec")).get("containers"))
        return cls(
            meta=Meta.from_object(obj),
            node=text(mapping(obj.get("spec")).get("nodeName")),
            phase=text(status.get("phase")),
            conditions=conditions_of(status),
            init_containers=tuple(
                ContainerStatus.from_object(c) for c in mappings(status.get("initContainerStatuses"))
            ),
            containers=tuple(ContainerStatus.from_object(c) for c in mappings(status.get("containerStatuses"))),
            specified=tuple((text(c.get("name")), text(c.get("image"))) for c in spec_containers),
        )

    def condition(self, kind: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == kind), None)

    @property
    def ready(self) -> bool:
        return any(c.type == "Ready" and c.true for c in self.conditions)


@dataclasses.dataclass(frozen=True)
class Deployment:
    meta: Meta
    wanted: int = 1  # spec.replicas
    observed_generation: int = 0
    replicas: int = 0
    ready: int = 0
    updated: int = 0
    available: int = 0
    conditions: tuple[Condition, ...] = ()

    @classmethod
    def from_object(cls, obj: Object) -> Deployment:
        status = mapping(obj.get("status"))
        keys = ("observedGeneration", "replicas", "readyReplicas", "updatedReplicas", "availableReplicas")
        observed, replicas, ready, updated, available = (number(status.get(key)) for key in keys)
        wanted = number(mapping(obj.get("spec")).get("replicas"), 1)
        return cls(Meta.from_object(obj), wanted, observed, replicas, ready, updated, available, conditions_of(status))

    @property
    def revision(self) -> str:
        return self.meta.annotations.get(REVISION_ANNOTATION, "")

    @property
    def observed(self) -> bool:
        """Whether the controller has acted on the latest spec."""
        return self.observed_generation >= self.meta.generation

    @property
    def rolled_out(self) -> bool:
        """Every replica updated, ready and available, and no old one left."""
        counts = (self.updated, self.ready, self.available, self.replicas)
        return all(count == self.wanted for count in counts)


@dataclasses.dataclass(frozen=True)
class ReplicaSet:
    meta: Meta
    conditions: tuple[Condition, ...] = ()

    @classmethod
    def from_object(cls, obj: Object) -> ReplicaSet:
        return cls(meta=Meta.from_object(obj), conditions=conditions_of(mapping(obj.get("status"))))

    @property
    def revision(self) -> str:
        return self.meta.annotations.get(REVISION_ANNOTATION, "")

    @property
    def pod_template_hash(self) -> str | None:
        return self.meta.labels.get("pod-template-hash")


@dataclasses.dataclass(frozen=True)
class RayCluster:
    meta: Meta
    state: str = ""  # KubeRay's summary: ready, failed, suspended…
    ready_workers: int = 0  # workers whose Ray node is up (raylet ready)

    @classmethod
    def from_object(cls, obj: Object) -> RayCluster:
        status = mapping(obj.get("status"))
        return cls(
            meta=Meta.from_object(obj),
            state=text(status.get("state")),
            ready_workers=number(status.get("readyWorkerReplicas")),
        )
