"""The profile's hardware and placement sections: the GPU (from the catalog, or given), and which
nodes the pods may land on: node labels, NVLink, the GPU product label, tolerations, a copy's
nodes and the topology that keeps them together.
"""

from __future__ import annotations

from typing import Annotated, Literal

import pydantic
from pydantic import Field

from orchestrator.catalog import lookup as catalog
from orchestrator.profile import base as profile_base

NVLINK_LABEL_KEY = "deployctl.dev/nvlink"


class HardwareSpec(profile_base.Model):
    # The catalog's key in any case; the catalog's spelling kept.
    gpu: Annotated[str, pydantic.AfterValidator(catalog.resolve_gpu)] | None = Field(
        default=None,
        description="GPU catalog key; gives memory as CUDA reports it, native fp8, and the node product labels.",
        examples=["A100-80GB"],
    )
    memoryGiB: float | None = Field(
        default=None, gt=0, le=4096, description="Override: GPU memory in GiB as CUDA reports it (total)."
    )
    fp8: bool | None = Field(default=None, description="Override: whether the GPU has native fp8.")
    productLabels: list[str] | None = Field(
        default=None,
        description="Values of the `nvidia.com/gpu.product` node label (set by GPU feature discovery) a node may "
        "carry for these GPUs; they replace the catalog's for hardware.gpu. Required for a GPU outside the "
        "catalog while placement.matchGpuProduct is on, so the constraint is never silently dropped.",
        examples=[["NVIDIA-B200"]],
    )
    gpusPerNode: int = Field(
        default=8,
        ge=1,
        le=64,
        description="GPUs on one node; a copy needing more (TP × PP) spans nodes, with pipeline stages "
        "across them (placement.nodesPerCopy).",
    )
    interconnect: Literal["nvlink", "pcie"] = Field(
        default="nvlink", description="GPU-to-GPU link inside a node; TP > 2 over PCIe is slow."
    )
    nodeInterconnect: Literal["infiniband", "roce", "ethernet"] | None = Field(
        default=None,
        description="Link between the nodes of a copy that spans nodes: InfiniBand or RoCE (RDMA) carries "
        "pipeline stages well; plain Ethernet makes the planner warn. Unset on a multi-node copy: the "
        "planner asks for it.",
    )

    @pydantic.field_validator("productLabels")
    @classmethod
    def _product_labels(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (not v or not all(v)):
            raise ValueError("give at least one non-empty nvidia.com/gpu.product value, e.g. [NVIDIA-B200]")
        return v

    @pydantic.model_validator(mode="after")
    def _gpu_or_memory(self) -> HardwareSpec:
        if self.gpu is None and self.memoryGiB is None:
            raise ValueError("give hardware.gpu (one of " + ", ".join(catalog.gpu_keys()) + ") or hardware.memoryGiB")
        return self


class Toleration(profile_base.Model):
    key: str | None = Field(
        default=None,
        description="Taint key. Unset matches every taint (of `effect`, if set), so it needs `operator: Exists` "
        "written out: a toleration that only sets an effect is refused, not read as tolerate-everything.",
    )
    operator: Literal["Exists", "Equal"] = Field(default="Exists", description="How the value is compared.")
    value: str | None = Field(default=None, description="Taint value, with operator Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect; unset matches all."
    )

    @pydantic.model_validator(mode="after")
    def _key_or_everything_on_purpose(self) -> Toleration:
        # The API server's rules (ValidateTolerations), and one of ours: a toleration without a key
        # tolerates every taint (of its effect), so the operator that says so must be written, not defaulted.
        if not self.key and self.operator == "Equal":
            raise profile_base.field_error(
                ("operator",),
                "a toleration without a key must use operator Exists (Kubernetes refuses Equal there); "
                "name the taint's key, e.g. key: nvidia.com/gpu",
            )
        if not self.key and "operator" not in self.model_fields_set:
            matched = f"every {self.effect} taint" if self.effect else "every taint of every effect"
            raise profile_base.field_error(
                ("key",),
                f"a toleration without a key tolerates {matched} on any node; name the taint's key "
                "(e.g. key: nvidia.com/gpu), or write operator: Exists to tolerate them all on purpose",
            )
        if self.operator == "Exists" and self.value:
            raise profile_base.field_error(
                ("value",),
                "operator Exists matches any value, so value must be empty (Kubernetes refuses it); "
                "remove value, or use operator: Equal",
            )
        return self


class NodeLabel(profile_base.Model):
    key: str = Field(default=NVLINK_LABEL_KEY, description="Node label key.")
    value: str = Field(default="true", description="Node label value.")


def _default_tolerations() -> list[Toleration]:
    return [Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")]


class PlacementSpec(profile_base.Model):
    nodeSelector: dict[str, str] = Field(default_factory=dict, description="Extra node labels a pod requires.")
    nvlinkLabel: NodeLabel = Field(
        default_factory=NodeLabel, description="The node label that marks NVLink-connected GPUs."
    )
    requireNvlink: bool | None = Field(
        default=None,
        description="Require nodes with the NVLink label. Unset: required when tensorParallelSize > 2, where "
        "PCIe all-reduce costs most of the throughput.",
    )
    matchGpuProduct: bool = Field(
        default=True,
        description="Require nodes whose `nvidia.com/gpu.product` label is one of hardware.productLabels (default: "
        "the catalog's for hardware.gpu), so the VRAM math holds on the node the pod lands on. Only NVIDIA's "
        "label is matched.",
    )
    tolerations: list[Toleration] = Field(
        default_factory=_default_tolerations,
        description="Tolerations; the default tolerates the usual `nvidia.com/gpu` taint on GPU nodes.",
    )
    podLabels: profile_base.UserLabels = Field(default_factory=dict, description="Extra labels on the pods.")
    podAnnotations: dict[str, str] = Field(default_factory=dict, description="Extra annotations on the pods.")
    priorityClassName: str | None = Field(default=None, description="PriorityClass of the pods.")
    runtimeClassName: str | None = Field(
        default=None,
        description="RuntimeClass of the pods (e.g. `nvidia` where the GPU operator sets one up).",
    )
    nodesPerCopy: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="Nodes one model copy spans, one pod on each. Unset: 1 when tensorParallelSize × "
        "pipelineParallelSize fits hardware.gpusPerNode, else as many nodes as that needs. More than 1 "
        "renders a group (groupEngine) instead of a Deployment.",
    )
    groupEngine: Literal["kuberay", "lws"] = Field(
        default="kuberay",
        description="What runs a copy that spans nodes: `kuberay` (one RayCluster per copy, vLLM's Ray backend; "
        "KubeRay's ray-operator must be installed) or `lws` (a LeaderWorkerSet, vLLM's multiprocessing "
        "multi-node backend; the LeaderWorkerSet controller must be installed).",
    )
    topologyKey: str | None = Field(
        default=None,
        description="Node label whose value every node of one copy must share (a rack, fabric or "
        "network-domain label, e.g. `network.example.com/fabric`): preflight counts nodes per domain and the "
        "scheduler keeps a copy's pods inside one. Unset: any nodes.",
        examples=["topology.kubernetes.io/zone"],
    )
