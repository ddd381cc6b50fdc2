"""Preflight: from the cluster's Nodes and Pods, decide where a release can run and how to roll it out.

Pure: the pipeline lists Nodes and Pods and hands the plain dicts in; nothing here talks to the
cluster. Two questions are answered separately because they have different answers on a full
cluster. "Could a replica ever fit?" counts this release's own pods as free (they are about to be
replaced) and refuses a profile no node can ever host. "Is there room for one more pod right
now?" counts them as used, and picks the Deployment strategy: a RollingUpdate with maxSurge 1 on
a cluster without a spare slot leaves the surge pod Pending forever (design.md, "Rollout on
scarce GPUs"), so we replace one pod at a time instead and say plainly when that means downtime.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from orchestrator import catalog, conventions, errors, profile

GPU_RESOURCE = conventions.GPU_RESOURCE
PRODUCT_LABEL = conventions.GPU_PRODUCT_LABEL
RELEASE_LABEL = conventions.RELEASE_LABEL
# The scheduler taints cordoned nodes with this key; we report "cordoned" instead, once.
_CORDON_TAINT = "node.kubernetes.io/unschedulable"
# PreferNoSchedule only steers the scheduler; these two keep an untolerating pod off the node.
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
_TERMINATED_PHASES = ("Succeeded", "Failed")
# How many node names one sentence lists before it says "and N more".
_NAMES_SHOWN = 4


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


@dataclasses.dataclass(frozen=True)
class Preflight:
    """The verdict: placement, free replica slots and the Deployment strategy, or why we refuse."""

    nodes: list[NodeReport]
    eligible_nodes: list[str]
    spare_slots: int  # replicas that fit beside everything running now, this release's pods included
    capacity_slots: int  # replicas that fit once this release's own pods are gone
    strategy: dict[str, Any]  # Deployment.spec.strategy
    strategy_name: str  # surge | one-at-a-time | recreate
    downtime: bool  # the update leaves no replica serving for a while
    warnings: list[str]
    refusal: str | None  # one paragraph: the need, the best candidates and the fix

    def to_json(self) -> dict[str, object]:
        return {
            "nodes": [n.to_json() for n in self.nodes],
            "eligible_nodes": self.eligible_nodes,
            "spare_slots": self.spare_slots,
            "capacity_slots": self.capacity_slots,
            "strategy": self.strategy,
            "strategy_name": self.strategy_name,
            "downtime": self.downtime,
            "warnings": self.warnings,
            "refusal": self.refusal,
        }


def check(
    prof: profile.Profile, nodes: list[dict[str, Any]], pods: list[dict[str, Any]], deployment_exists: bool
) -> Preflight:
    """Judge every node for ``prof``, count free replica slots and choose the rollout strategy.

    ``deployment_exists`` says whether this is an upgrade (a Deployment already runs the release),
    the only case where the strategy can cause downtime.
    """
    name, gpp, replicas = prof.metadata.name, prof.gpus_per_pod, prof.rollout.replicas
    used, own = _gpus_by_node(pods, prof.metadata.namespace, name)
    reports = [_judge(prof, node, used, own) for node in nodes]
    eligible = [r for r in reports if r.eligible]
    spare = sum(r.gpus_free // gpp for r in eligible)
    capacity = sum((r.gpus_free + r.gpus_release) // gpp for r in eligible)
    ever = sum(r.gpus_total // gpp for r in eligible)

    warnings: list[str] = []
    refusal: str | None = None
    if not eligible:
        refusal = _no_node_refusal(prof, reports)
    elif ever < replicas:
        refusal = (
            f"{name} needs {replicas} replicas of {gpp} GPUs, but the eligible nodes "
            f"({_names(r.name for r in eligible)}) can hold at most {ever} even with nothing else running. "
            f"Lower rollout.replicas to {ever} or add nodes that meet the placement."
        )
    elif capacity < replicas:
        # Not a refusal: other workloads may finish, and the rollout watcher reports a pod that
        # stays unschedulable, with the scheduler's own reason.
        warnings.append(
            f"only {capacity} of {replicas} replicas can be scheduled now; the rest will stay Pending until "
            f"GPUs free up on {_names(r.name for r in eligible)}"
        )

    strategy_name, downtime, strategy_refusal = _strategy(prof, eligible, spare, deployment_exists)
    refusal = refusal or strategy_refusal
    if downtime and refusal is None:
        warnings.append(
            f"this update stops {name}'s running pods before the new ones start; nothing serves until a new "
            "pod is ready (rollout.allowDowntime is true)"
        )
    return Preflight(
        nodes=reports,
        eligible_nodes=[r.name for r in eligible],
        spare_slots=spare,
        capacity_slots=capacity,
        strategy=conventions.strategy_spec(strategy_name),
        strategy_name=strategy_name,
        downtime=downtime,
        warnings=warnings,
        refusal=refusal,
    )


def gpu_pools(
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    nvlink_label: tuple[str, str] = (profile.NVLINK_LABEL_KEY, "true"),
) -> list[dict[str, Any]]:
    """GPU inventory for `deployctl inventory`: one row per (product, NVLink) pool of GPU nodes.

    Rows carry product, nvlink (bool), nodes (count), gpus_total and gpus_free. Free GPUs on a
    cordoned node are not counted as free: no new pod can use them.
    """
    used, _ = _gpus_by_node(pods, namespace=None, release=None)
    pools: dict[tuple[str, bool], dict[str, Any]] = {}
    for node in nodes:
        total = _node_gpus(node)
        if total == 0:
            continue
        labels = _labels(node)
        key = (labels.get(PRODUCT_LABEL, "unknown"), labels.get(nvlink_label[0]) == nvlink_label[1])
        row = pools.setdefault(key, {"product": key[0], "nvlink": key[1], "nodes": 0, "gpus_total": 0, "gpus_free": 0})
        row["nodes"] += 1
        row["gpus_total"] += total
        if not _cordoned(node):
            row["gpus_free"] += max(0, total - used.get(_name(node), 0))
    return [pools[k] for k in sorted(pools)]


# --- per node ---------------------------------------------------------------------------------


def _judge(prof: profile.Profile, node: Mapping[str, Any], used: dict[str, int], own: dict[str, int]) -> NodeReport:
    name, labels = _name(node), _labels(node)
    total = _node_gpus(node)
    product = labels.get(PRODUCT_LABEL)
    nv_key, nv_value = prof.placement.nvlinkLabel.key, prof.placement.nvlinkLabel.value
    reasons: list[str] = []
    if total == 0:
        # Product, NVLink and GPU-count reasons would only restate this one.
        reasons.append("no GPUs")
    else:
        wanted = prof.hardware.gpu
        if prof.placement.matchGpuProduct and wanted is not None:
            products = _products(wanted)
            if product is None:
                reasons.append(f"no {PRODUCT_LABEL} label to match hardware.gpu {wanted}")
            elif product not in products:
                expects = " or ".join(products)
                reasons.append(f"product {product} does not match hardware.gpu {wanted} (expects {expects})")
        if prof.nvlink_required and labels.get(nv_key) != nv_value:
            why = (
                "placement.requireNvlink"
                if prof.placement.requireNvlink
                else f"TP={prof.engine.tensorParallelSize} > 2 needs NVLink"
            )
            reasons.append(f"missing NVLink label {nv_key}={nv_value} ({why})")
        if total < prof.gpus_per_pod:
            reasons.append(f"only {total} allocatable GPUs but a replica needs {prof.gpus_per_pod}")
    for key, value in prof.placement.nodeSelector.items():
        if key not in labels:
            reasons.append(f"nodeSelector label {key}={value} missing")
        elif labels[key] != value:
            reasons.append(f"nodeSelector label {key}={value} missing (node has {key}={labels[key]})")
    for taint in (node.get("spec") or {}).get("taints") or []:
        if (
            taint.get("effect") in _BLOCKING_EFFECTS
            and taint.get("key") != _CORDON_TAINT
            and not any(_tolerates(t, taint) for t in prof.placement.tolerations)
        ):
            reasons.append(f"taint {_taint_text(taint)} not tolerated (add it to placement.tolerations)")
    if _cordoned(node):
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


def _products(gpu_key: str) -> list[str]:
    return list(catalog.gpu(gpu_key).product_labels)


def _tolerates(toleration: profile.Toleration, taint: Mapping[str, Any]) -> bool:
    """The scheduler's rule (k8s.io/api core/v1 Toleration.ToleratesTaint)."""
    if toleration.effect is not None and toleration.effect != taint.get("effect"):
        return False
    if toleration.key is not None and toleration.key != taint.get("key"):
        return False
    if toleration.operator == "Exists":
        return True
    return (toleration.value or "") == (taint.get("value") or "")


def _taint_text(taint: Mapping[str, Any]) -> str:
    value = taint.get("value")
    return f"{taint.get('key')}{'=' + str(value) if value else ''}:{taint.get('effect')}"


def _cordoned(node: Mapping[str, Any]) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", "?"))


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _node_gpus(node: Mapping[str, Any]) -> int:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return _count(allocatable.get(GPU_RESOURCE), f"node {_name(node)} allocatable")


def _count(value: object, where: str) -> int:
    """A GPU quantity as a whole number; an unreadable one is the cluster's error, named by ``where``."""
    try:
        return conventions.gpu_count(value)
    except ValueError as e:
        raise errors.ClusterError(f"{where} {GPU_RESOURCE}: {e}") from e


# --- per pod ----------------------------------------------------------------------------------


def _gpus_by_node(
    pods: Iterable[Mapping[str, Any]], namespace: str | None, release: str | None
) -> tuple[dict[str, int], dict[str, int]]:
    """GPUs requested on each node by pods that hold them, all and this release's alone."""
    used: dict[str, int] = {}
    own: dict[str, int] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in _TERMINATED_PHASES:
            continue
        gpus = _pod_gpus(pod)
        if gpus == 0:
            continue
        used[node] = used.get(node, 0) + gpus
        meta = pod.get("metadata") or {}
        if release is not None and meta.get("namespace") == namespace and _labels(pod).get(RELEASE_LABEL) == release:
            own[node] = own.get(node, 0) + gpus
    return used, own


def _pod_gpus(pod: Mapping[str, Any]) -> int:
    try:
        return conventions.pod_gpus(pod)
    except ValueError as e:
        raise errors.ClusterError(f"pod {_name(pod)} {GPU_RESOURCE}: {e}") from e


# --- strategy ---------------------------------------------------------------------------------


def _strategy(
    prof: profile.Profile, eligible: list[NodeReport], spare: int, deployment_exists: bool
) -> tuple[str, bool, str | None]:
    """(strategy name, downtime, refusal) for the profile's rollout.strategy on this cluster."""
    rollout, name, gpp = prof.rollout, prof.metadata.name, prof.gpus_per_pod
    wanted = rollout.strategy
    if not deployment_exists:
        # A first install replaces nothing, so no choice here can cause downtime or hang on surge;
        # auto starts safe, and the next apply chooses again from the cluster it finds.
        first = {"recreate": "recreate", "surge": "surge"}.get(wanted, "one-at-a-time")
        return first, False, None
    if wanted == "recreate":
        if rollout.allowDowntime:
            return "recreate", True, None
        return (
            "recreate",
            True,
            (
                f"rollout.strategy recreate stops every pod of {name} before the new ones start, so "
                "nothing serves until a new pod has loaded the model. Set rollout.allowDowntime: true to "
                "accept that, or use strategy auto (surges when there is room, else replaces one pod at a "
                "time)."
            ),
        )
    if wanted == "surge" or (wanted == "auto" and spare >= 1):
        if spare >= 1:
            return "surge", False, None
        return (
            "surge",
            False,
            (
                f"rollout.strategy surge needs {gpp} free GPUs on one eligible node for the extra pod, and "
                f"none has them ({_free_text(eligible)}); the surge pod would stay Pending forever and the "
                f"rollout would never finish. Free {gpp} GPUs on an eligible node, or use strategy auto or "
                "no-surge to replace one pod at a time."
            ),
        )
    # One at a time: each old pod stops before its replacement starts; with a single replica
    # that is an outage for as long as the new pod takes to load the model.
    downtime = rollout.replicas == 1
    if not downtime or rollout.allowDowntime:
        return "one-at-a-time", downtime, None
    if spare >= 1:  # only reachable with strategy no-surge
        cause = "rollout.strategy no-surge stops the only pod before the new one starts"
        fix = "use strategy auto (there is room to surge now)"
    else:
        cause = (
            f"no eligible node has {gpp} free GPUs for a new pod beside the old one "
            f"({_free_text(eligible)}), so the only pod must stop before the new one starts"
        )
        fix = f"free {gpp} GPUs on an eligible node"
    return (
        "one-at-a-time",
        True,
        (
            f"Updating {name} would take it offline: it runs 1 replica and {cause}; nothing serves while "
            f"the new pod loads the model. To proceed, {fix}, set rollout.allowDowntime: true to accept "
            "the outage, or run rollout.replicas: 2 or more so one replica keeps serving."
        ),
    )


# --- refusal text -----------------------------------------------------------------------------


def _no_node_refusal(prof: profile.Profile, reports: list[NodeReport]) -> str:
    """Name the need, the closest nodes and why each falls short, grouped so large clusters stay short."""
    name, gpp = prof.metadata.name, prof.gpus_per_pod
    if not reports:
        return f"No node can host {name}: the cluster reports no nodes."
    parallel = f"TP={prof.engine.tensorParallelSize}"
    if prof.engine.pipelineParallelSize > 1:
        parallel += f" × PP={prof.engine.pipelineParallelSize}"
    need = f"{gpp} GPUs ({parallel})"
    if prof.placement.matchGpuProduct and prof.hardware.gpu is not None:
        need += f" of product {prof.hardware.gpu}"
    need += " on one node"
    constraints = [f"{k}={v}" for k, v in prof.placement.nodeSelector.items()]
    if prof.nvlink_required:
        constraints.insert(0, f"{prof.placement.nvlinkLabel.key}={prof.placement.nvlinkLabel.value}")
    if constraints:
        need += " with " + ", ".join(constraints)

    sentences = [f"No node can ever host a replica of {name}: it needs {need}."]
    # Nodes that fail only on GPU count are the closest candidates: name the largest.
    count_only = [r for r in reports if len(r.reasons) == 1 and r.reasons[0].startswith("only ")]
    shown: set[str] = set()
    if count_only:
        most = max(r.gpus_total for r in count_only)
        best = [r.name for r in count_only if r.gpus_total == most]
        shown.update(best)
        sentences.append(f"The largest node that meets everything else ({_names(best)}) has {most} GPUs.")
    groups: dict[tuple[str, ...], list[str]] = {}
    for r in sorted(reports, key=lambda r: (len(r.reasons), -r.gpus_total, r.name)):
        if r.name not in shown:
            groups.setdefault(r.reasons, []).append(r.name)
    if groups:
        sentences.append(
            "Excluded: " + "; ".join(f"{_names(names)}: {', '.join(why)}" for why, names in groups.items()) + "."
        )
    sentences.append(
        "Fix the profile to fit an existing node (engine.tensorParallelSize, hardware.gpu, placement) "
        "or add a node that meets the need."
    )
    return " ".join(sentences)


def _free_text(eligible: list[NodeReport]) -> str:
    parts = [f"{r.name} {r.gpus_free} of {r.gpus_total} free" for r in eligible[:_NAMES_SHOWN]]
    if len(eligible) > _NAMES_SHOWN:
        parts.append(f"{len(eligible) - _NAMES_SHOWN} more")
    return ", ".join(parts)


def _names(names: Iterable[str]) -> str:
    listed = list(names)
    if len(listed) <= _NAMES_SHOWN:
        return ", ".join(listed)
    return ", ".join(listed[:_NAMES_SHOWN]) + f" and {len(listed) - _NAMES_SHOWN} more"
