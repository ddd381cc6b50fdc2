"""Nodes and pods as preflight sees them: each node judged for a profile, GPUs counted per node.

Pure: takes the plain dicts the API returns (``kube.list("Node")``, ``kube.list("Pod")``) and reads
them defensively, a field missing or of another shape counting as absent. ``orchestrator.plan.preflight``
turns the reports into slots and a strategy; ``gpu_pools`` is `deployctl inventory`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from typing import TypedDict

from orchestrator import conventions, errors
from orchestrator.catalog import lookup as catalog
from orchestrator.profile import model as profile
from orchestrator.profile import placement as profile_placement

GPU_RESOURCE = conventions.GPU_RESOURCE
PRODUCT_LABEL = conventions.GPU_PRODUCT_LABEL
RELEASE_LABEL = conventions.RELEASE_LABEL
# The scheduler taints cordoned nodes with this key; we report "cordoned" instead, once.
_CORDON_TAINT = "node.kubernetes.io/unschedulable"
# PreferNoSchedule only steers the scheduler; these two keep an untolerating pod off the node.
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
_TERMINATED_PHASES = ("Succeeded", "Failed")


@dataclasses.dataclass(frozen=True)
class NodeReport:
    """One node as preflight sees it, for the `deployctl apply` report and the refusal text."""

    name: str
    product: str | None  # the nvidia.com/gpu.product label; None on nodes without it
    gpus_total: int  # allocatable nvidia.com/gpu
    gpus_free: int  # not requested by any running pod, this release's included
    gpus_release: int  # requested by this release's own pods, which an update replaces
    nvlink: bool
    eligible: bool
    reasons: tuple[str, ...]  # why not eligible, in plain words; empty when eligible

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self) | {"reasons": list(self.reasons)}


class GpuPool(TypedDict):
    """One (product, NVLink) pool of GPU nodes in `deployctl inventory`."""

    product: str
    gpu: str | None  # the catalog key hardware.gpu takes for the product; None outside the catalog
    nvlink: bool
    nodes: int
    gpus_total: int
    gpus_free: int


def gpu_pools(
    nodes: Iterable[Mapping[str, object]],
    pods: Iterable[Mapping[str, object]],
    nvlink_label: tuple[str, str] = (profile_placement.NVLINK_LABEL_KEY, "true"),
) -> list[GpuPool]:
    """GPU inventory for `deployctl inventory`: one row per (product, NVLink) pool of GPU nodes.

    Rows carry product, gpu (the catalog key hardware.gpu takes for that product, None outside the
    catalog: such a GPU is described by hardware.memoryGiB and hardware.productLabels), nvlink
    (bool), nodes (count), gpus_total and gpus_free. Free GPUs on a cordoned node are not counted
    as free: no new pod can use them.
    """
    used, _ = gpus_by_node(pods, namespace=None, release=None)
    pools: dict[tuple[str, bool], GpuPool] = {}
    for node in nodes:
        total = node_gpus(node)
        if total == 0:
            continue
        labels = labels_of(node)
        key = (labels.get(PRODUCT_LABEL, "unknown"), labels.get(nvlink_label[0]) == nvlink_label[1])
        known = catalog.gpu_for_product_label(key[0])
        row = pools.setdefault(
            key,
            {
                "product": key[0],
                "gpu": known.key if known else None,
                "nvlink": key[1],
                "nodes": 0,
                "gpus_total": 0,
                "gpus_free": 0,
            },
        )
        row["nodes"] += 1
        row["gpus_total"] += total
        if not cordoned(node):
            row["gpus_free"] += max(0, total - used.get(name_of(node), 0))
    return [pools[k] for k in sorted(pools)]


# --- per node ---------------------------------------------------------------------------------


def judge(prof: profile.Profile, node: Mapping[str, object], used: dict[str, int], own: dict[str, int]) -> NodeReport:
    """One node for ``prof``: its GPUs (``used`` by any pod, ``own``: by the release's) and why it is not eligible."""
    name, labels = name_of(node), labels_of(node)
    total = node_gpus(node)
    product = labels.get(PRODUCT_LABEL)
    nv_key, nv_value = prof.placement.nvlinkLabel.key, prof.placement.nvlinkLabel.value
    reasons: list[str] = []
    if total == 0:
        # Product, NVLink and GPU-count reasons would only restate this one.
        reasons.append("no GPUs")
    else:
        products = wanted_products(prof)
        if products is not None:
            wanted = _products_source(prof)
            if product is None:
                reasons.append(f"no {PRODUCT_LABEL} label to match {wanted}")
            elif product not in products:
                expects = " or ".join(products)
                reasons.append(f"product {product} does not match {wanted} (expects {expects})")
        if prof.nvlink_required and labels.get(nv_key) != nv_value:
            why = (
                "placement.requireNvlink"
                if prof.placement.requireNvlink
                else f"TP={prof.engine.tensorParallelSize} > 2 needs NVLink"
            )
            reasons.append(f"missing NVLink label {nv_key}={nv_value} ({why})")
        if total < prof.gpus_per_pod:
            needs = "each pod of a copy needs" if prof.multi_node else "a replica needs"
            reasons.append(f"only {total} allocatable GPUs but {needs} {prof.gpus_per_pod}")
        key = prof.placement.topologyKey
        # One node is always one domain: the key only constrains a copy that spans nodes.
        if prof.multi_node and key is not None and key not in labels:
            reasons.append(f"no {key} label (placement.topologyKey)")
    for key, value in prof.placement.nodeSelector.items():
        if key not in labels:
            reasons.append(f"nodeSelector label {key}={value} missing")
        elif labels[key] != value:
            reasons.append(f"nodeSelector label {key}={value} missing (node has {key}={labels[key]})")
    for taint in _mappings(_field(node, "spec", "taints")):
        if (
            taint.get("effect") in _BLOCKING_EFFECTS
            and taint.get("key") != _CORDON_TAINT
            and not any(_tolerates(t, taint) for t in prof.placement.tolerations)
        ):
            reasons.append(f"taint {_taint_text(taint)} not tolerated (add it to placement.tolerations)")
    if cordoned(node):
        reasons.append("cordoned (spec.unschedulable)")
    return NodeReport(
        name=name,
        product=product,
        gpus_total=total,
        gpus_free=max(0, total - used.get(name, 0)),
        gpus_release=own.get(name, 0),
        nvlink=labels.get(nv_key) == nv_value,
        eligible=not reasons,
        reasons=tuple(reasons),
    )


def wanted_products(prof: profile.Profile) -> tuple[str, ...] | None:
    """The product label values a node must carry; None when the profile does not match products."""
    if not prof.placement.matchGpuProduct:
        return None
    return catalog.product_labels(prof.hardware.gpu, prof.hardware.productLabels)


def _products_source(prof: profile.Profile) -> str:
    """Which field the wanted products come from, for the reasons a node is excluded."""
    if prof.hardware.productLabels is not None:
        return "hardware.productLabels"
    return f"hardware.gpu {prof.hardware.gpu}"


def _tolerates(toleration: profile_placement.Toleration, taint: Mapping[str, object]) -> bool:
    """The scheduler's rule (k8s.io/api core/v1 Toleration.ToleratesTaint)."""
    if toleration.effect is not None and toleration.effect != taint.get("effect"):
        return False
    if toleration.key is not None and toleration.key != taint.get("key"):
        return False
    if toleration.operator == "Exists":
        return True
    return (toleration.value or "") == (taint.get("value") or "")


def _taint_text(taint: Mapping[str, object]) -> str:
    value = taint.get("value")
    return f"{taint.get('key')}{'=' + str(value) if value else ''}:{taint.get('effect')}"


def cordoned(node: Mapping[str, object]) -> bool:
    return bool(_field(node, "spec", "unschedulable"))


def name_of(obj: Mapping[str, object]) -> str:
    name = _field(obj, "metadata", "name")
    return "?" if name is None else str(name)


def labels_of(obj: Mapping[str, object]) -> dict[str, str]:
    labels = _field(obj, "metadata", "labels")
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def node_gpus(node: Mapping[str, object]) -> int:
    return _count(_field(node, "status", "allocatable", GPU_RESOURCE), f"node {name_of(node)} allocatable")


def _count(value: object, where: str) -> int:
    """A GPU quantity as a whole number; an unreadable one is the cluster's error, named by ``where``."""
    try:
        return conventions.gpu_count(value)
    except ValueError as e:
        raise errors.ClusterError(f"{where} {GPU_RESOURCE}: {e}") from e


# --- per pod ----------------------------------------------------------------------------------


def gpus_by_node(
    pods: Iterable[Mapping[str, object]], namespace: str | None, release: str | None
) -> tuple[dict[str, int], dict[str, int]]:
    """GPUs requested on each node by pods that hold them, all and this release's alone."""
    used: dict[str, int] = {}
    own: dict[str, int] = {}
    for pod in pods:
        node_name = _field(pod, "spec", "nodeName")
        if not node_name or _field(pod, "status", "phase") in _TERMINATED_PHASES:
            continue
        gpus = _pod_gpus(pod)
        if gpus == 0:
            continue
        node = str(node_name)
        used[node] = used.get(node, 0) + gpus
        if (
            release is not None
            and _field(pod, "metadata", "namespace") == namespace
            and labels_of(pod).get(RELEASE_LABEL) == release
        ):
            own[node] = own.get(node, 0) + gpus
    return used, own


def _pod_gpus(pod: Mapping[str, object]) -> int:
    try:
        return conventions.pod_gpus(pod)
    except ValueError as e:
        raise errors.ClusterError(f"pod {name_of(pod)} {GPU_RESOURCE}: {e}") from e


# --- reading API objects ----------------------------------------------------------------------


def _field(obj: Mapping[str, object], *path: str) -> object:
    """The value at ``path`` in an API object; None where a step is missing or not a mapping."""
    value: object = obj
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _mappings(value: object) -> Iterator[Mapping[str, object]]:
    """The mappings in a list field (a node's taints); nothing when the field is absent."""
    if isinstance(value, list):
        yield from (item for item in value if isinstance(item, Mapping))
