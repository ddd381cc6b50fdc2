"""Preflight: from the cluster's Nodes and Pods, decide where a release can run and how to roll it out.

Pure: the pipeline lists Nodes and Pods and hands the plain dicts in; nothing here talks to the
cluster. Two questions are answered separately because they have different answers on a full
cluster. "Could a replica ever fit?" counts this release's own pods as free (they are about to be
replaced) and refuses a profile no node can ever host. "Is there room for one more pod right
now?" counts them as used, and picks the Deployment strategy: a RollingUpdate with maxSurge 1 on
a cluster without a spare slot leaves the surge pod Pending forever (design.md, "Rollout on
scarce GPUs"), so we replace one pod at a time instead and say plainly when that means downtime.

A copy that spans nodes (a group: one pod per node, run by KubeRay or a LeaderWorkerSet) needs
``nodes_per_copy`` distinct eligible nodes, all in one placement.topologyKey domain when that is
set, so slots are counted as whole copies per domain (`copies_that_fit`). A group must never run
two revisions at once, so it is never updated pod by pod: the new groups start beside the old
ones when a whole new set fits in the spare GPUs, else the old groups go first, which is downtime.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from orchestrator import conventions, errors
from orchestrator.catalog import lookup as catalog
from orchestrator.profile import model as profile

GPU_RESOURCE = conventions.GPU_RESOURCE
PRODUCT_LABEL = conventions.GPU_PRODUCT_LABEL
RELEASE_LABEL = conventions.RELEASE_LABEL
# The pods whose GPUs count: scheduled and not finished. Asked of the API server as a field selector,
# so a cluster-wide list returns only those, not every pod of the cluster.
POD_FIELDS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
# The scheduler taints cordoned nodes with this key; we report "cordoned" instead, once.
_CORDON_TAINT = "node.kubernetes.io/unschedulable"
# PreferNoSchedule only steers the scheduler; these two keep an untolerating pod off the node.
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
_TERMINATED_PHASES = ("Succeeded", "Failed")
# How many node names one sentence lists before it says "and N more".
_NAMES_SHOWN = 4
# The one domain of a copy that fits on a node, or of a profile without placement.topologyKey.
_ALL = "all"


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
    """The verdict: placement, free replica slots and the rollout strategy, or why we refuse.

    A replica is one model copy; for a copy that spans nodes (``copy_nodes`` > 1) the slots count
    whole copies. ``strategy_name`` for a single-node copy (a Deployment; ``strategy`` is its
    spec.strategy): surge (one extra pod first), one-at-a-time (an old pod stops before its
    replacement starts) or recreate (every old pod stops first). For groups (``strategy`` is {}:
    render takes no Deployment strategy): install (nothing running is replaced: a first install, or
    an update that leaves the pods as they are), surge (a whole new set of rollout.replicas groups
    starts beside the old ones, which are deleted once the new pass the gate) or replace (the old
    groups are deleted before the new ones start: downtime, allowed only with rollout.allowDowntime).
    """

    nodes: list[NodeReport]
    eligible_nodes: list[str]
    copy_nodes: int  # nodes one copy spans, one pod on each (profile.nodes_per_copy)
    # Eligible nodes by placement.topologyKey value, all in name order; a copy's pods share one
    # domain. One domain "all" when the key is unset or a copy fits on one node.
    domains: dict[str, list[str]]
    spare_slots: int  # replicas that fit beside everything running now, this release's pods included
    capacity_slots: int  # replicas that fit once this release's own pods are gone
    strategy: dict[str, Any]  # Deployment.spec.strategy; {} for groups
    strategy_name: str  # surge | one-at-a-time | recreate; for groups install | surge | replace
    downtime: bool  # the update leaves no replica serving for a while
    warnings: list[str]
    refusal: str | None  # one paragraph: the need, the best candidates and the fix

    def to_json(self) -> dict[str, object]:
        return {
            "nodes": [n.to_json() for n in self.nodes],
            "eligible_nodes": self.eligible_nodes,
            "copy_nodes": self.copy_nodes,
            "domains": self.domains,
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
    if prof.multi_node:
        return _check_groups(prof, nodes, reports, deployment_exists)
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
        copy_nodes=1,
        domains={_ALL: [r.name for r in eligible]},
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

    Rows carry product, gpu (the catalog key hardware.gpu takes for that product, None outside the
    catalog: such a GPU is described by hardware.memoryGiB and hardware.productLabels), nvlink
    (bool), nodes (count), gpus_total and gpus_free. Free GPUs on a cordoned node are not counted
    as free: no new pod can use them.
    """
    used, _ = _gpus_by_node(pods, namespace=None, release=None)
    pools: dict[tuple[str, bool], dict[str, Any]] = {}
    for node in nodes:
        total = _node_gpus(node)
        if total == 0:
            continue
        labels = _labels(node)
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
        if not _cordoned(node):
            row["gpus_free"] += max(0, total - used.get(_name(node), 0))
    return [pools[k] for k in sorted(pools)]


# --- copies that span nodes -------------------------------------------------------------------


def copies_that_fit(slots: Iterable[int], nodes_per_copy: int) -> int:
    """The most copies of ``nodes_per_copy`` pods, each pod of a copy on a different node, that
    nodes with ``slots`` free pod slots each can hold (one domain: the caller splits by topology).

    k copies fit exactly when sum(min(s, k)) >= k × nodes_per_copy. Necessary: a node gives each
    copy at most one pod, so at most min(s, k) of its slots. Sufficient: deal those usable slots,
    node after node, round-robin onto the k copies; a node's run of at most k slots never lands
    twice on one copy. The left side minus the right is concave in k and 0 at k = 0, so the k that
    fit are 0..K and counting up stops at the first that does not.
    """
    if nodes_per_copy < 1:
        raise ValueError(f"nodes_per_copy must be at least 1, not {nodes_per_copy}")
    usable = [s for s in slots if s > 0]
    k = 0
    while sum(min(s, k + 1) for s in usable) >= (k + 1) * nodes_per_copy:
        k += 1
    return k


def _check_groups(
    prof: profile.Profile, nodes: list[dict[str, Any]], reports: list[NodeReport], deployment_exists: bool
) -> Preflight:
    """`check` for a copy that spans nodes: slots are whole copies, counted per topology domain."""
    name, gpp, m, replicas = prof.metadata.name, prof.gpus_per_pod, prof.nodes_per_copy, prof.rollout.replicas
    key = prof.placement.topologyKey
    # An eligible node has the key's label (_judge), so every one lands in a domain.
    domain_of = {_name(n): _labels(n).get(key, "") if key is not None else _ALL for n in nodes}
    eligible = [r for r in reports if r.eligible]
    domains: dict[str, list[NodeReport]] = {}
    for r in sorted(eligible, key=lambda r: (domain_of[r.name], r.name)):
        domains.setdefault(domain_of[r.name], []).append(r)

    def fit(slots: Callable[[NodeReport], int]) -> dict[str, int]:
        return {d: copies_that_fit((slots(r) for r in rs), m) for d, rs in domains.items()}

    ever = fit(lambda r: r.gpus_total // gpp)
    capacity = sum(fit(lambda r: (r.gpus_free + r.gpus_release) // gpp).values())
    spare_by_domain = fit(lambda r: r.gpus_free // gpp)
    spare = sum(spare_by_domain.values())

    warnings: list[str] = []
    refusal: str | None = None
    if not eligible:
        refusal = _no_node_refusal(prof, reports)
    elif sum(ever.values()) == 0:
        refusal = _no_copy_refusal(prof, reports, domain_of)
    elif sum(ever.values()) < replicas:
        most = sum(ever.values())
        per_domain = ""
        if key is not None:
            per_domain = f" (per {key} domain: " + ", ".join(f"{d} {n}" for d, n in ever.items()) + ")"
        refusal = (
            f"{name} needs {replicas} copies of {m} nodes with {gpp} GPUs each, but the eligible nodes "
            f"({_names(r.name for r in eligible)}) can hold at most {most} even with nothing else running"
            f"{per_domain}. Lower rollout.replicas to {most} or add nodes that meet the placement."
        )
    elif capacity < replicas:
        warnings.append(
            f"only {capacity} of {replicas} copies can be scheduled now; the rest will stay Pending until GPUs "
            f"free up on {_names(r.name for r in eligible)}, and the pods of a partly scheduled copy hold "
            "their GPUs meanwhile"
        )

    strategy_name, downtime, strategy_refusal = _group_strategy(
        prof, domains, spare_by_domain, deployment_exists and bool(domains)
    )
    refusal = refusal or strategy_refusal
    if downtime and refusal is None:
        warnings.append(
            f"this update deletes {name}'s running groups before the new ones start; nothing serves until a new "
            "copy is ready (rollout.allowDowntime is true)"
        )
    return Preflight(
        nodes=reports,
        eligible_nodes=[r.name for r in eligible],
        copy_nodes=m,
        domains={d: [r.name for r in rs] for d, rs in domains.items()},
        spare_slots=spare,
        capacity_slots=capacity,
        strategy={},
        strategy_name=strategy_name,
        downtime=downtime,
        warnings=warnings,
        refusal=refusal,
    )


def _group_strategy(
    prof: profile.Profile,
    domains: dict[str, list[NodeReport]],
    spare_by_domain: dict[str, int],
    replaces: bool,
) -> tuple[str, bool, str | None]:
    """(strategy name, downtime, refusal) for groups; ``replaces``: running groups would change.

    Never pod by pod: the pods of one copy exchange activations every step and must run one
    revision. A surge needs room for all new copies at once, because the old ones keep serving
    until every new one has passed the gate. As for a Deployment, auto surges when there is room,
    surge refuses when there is none, and no-surge and recreate never take extra GPUs; replacing
    the groups whole is downtime, which only rollout.allowDowntime accepts.
    """
    rollout, name, gpp, m = prof.rollout, prof.metadata.name, prof.gpus_per_pod, prof.nodes_per_copy
    if not replaces:
        return "install", False, None
    wanted, replicas = rollout.strategy, rollout.replicas
    spare = sum(spare_by_domain.values())
    if spare >= replicas and wanted in ("auto", "surge"):
        return "surge", False, None
    if rollout.allowDowntime and wanted != "surge":
        return "replace", True, None
    outage = "nothing serves until a new copy has loaded the model"
    if spare >= replicas:  # no-surge or recreate, although a surge would fit
        return (
            "replace",
            True,
            (
                f"Updating {name} would take it offline: rollout.strategy {wanted} deletes every group of {name} "
                f"before the new ones start, and {outage}. To proceed, use strategy auto (there is room to "
                "surge now), or set rollout.allowDowntime: true to accept the outage."
            ),
        )
    missing = _nodes_short(domains, spare_by_domain, m, gpp, replicas)
    key, nodes = prof.placement.topologyKey, sum(missing.values())
    where = f" in {', '.join(f'{d} ({n})' for d, n in missing.items())}" if key is not None else ""
    shape = f"{m} nodes with {gpp} free GPUs each" + (f", in one {key} domain" if key is not None else "")
    room = (
        f"A surge starts {replicas} new {_copies(replicas)} ({shape}) beside the old groups, and {spare} "
        f"{'fits' if spare == 1 else 'fit'} now ({_free_text([r for rs in domains.values() for r in rs])}); "
        f"{nodes} more eligible {'node' if nodes == 1 else 'nodes'} with {gpp} free GPUs ({nodes * gpp} GPUs)"
        f"{where} would make room."
    )
    if wanted == "surge":
        return (
            "surge",
            False,
            (
                f"rollout.strategy surge cannot update {name}: the new groups would stay Pending forever and the "
                f"rollout would never finish. {room} Free those nodes, or use strategy auto with "
                "rollout.allowDowntime: true to replace the groups."
            ),
        )
    if wanted in ("no-surge", "recreate"):
        cause = f"rollout.strategy {wanted} deletes every group of {name} before the new ones start"
    else:
        cause = (
            f"a copy spans {m} nodes and must never run two revisions, so its groups are replaced whole; with "
            "no room for the new groups beside the old ones, the old are deleted first"
        )
    return (
        "replace",
        True,
        (
            f"Updating {name} would take it offline: {cause}, and {outage}. {room} To proceed, free "
            f"{nodes} eligible {'node' if nodes == 1 else 'nodes'} ({nodes * gpp} GPUs){where}, or set "
            "rollout.allowDowntime: true to accept the outage."
        ),
    )


def _copies(n: int) -> str:
    return "copy" if n == 1 else "copies"


def _nodes_short(
    domains: dict[str, list[NodeReport]], spare_by_domain: dict[str, int], m: int, gpp: int, want: int
) -> dict[str, int]:
    """The fewest nodes with ``gpp`` free GPUs to add (or free), by domain, for ``want`` spare copies.

    Per domain, the nodes that c more copies need (at most c × m: c fresh copies); then the cheapest
    split of the missing copies over the domains.
    """
    need = want - sum(spare_by_domain.values())
    # best[c]: (nodes, nodes by domain) for c more copies over the domains seen so far.
    best: dict[int, tuple[int, dict[str, int]]] = {0: (0, {})}
    for domain, rs in domains.items():
        slots = [r.gpus_free // gpp for r in rs]
        cost, added = [0], 0
        for more in range(1, need + 1):
            while copies_that_fit(slots + [1] * added, m) < spare_by_domain[domain] + more:
                added += 1
            cost.append(added)
        merged: dict[int, tuple[int, dict[str, int]]] = {}
        for have, (nodes, split) in best.items():
            for more in range(need - have + 1):
                total = nodes + cost[more]
                if have + more not in merged or total < merged[have + more][0]:
                    merged[have + more] = (total, split | ({domain: cost[more]} if cost[more] else {}))
        best = merged
    return best[need][1]


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
        products = _products(prof)
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


def _products(prof: profile.Profile) -> tuple[str, ...] | None:
    """The product label values a node must carry; None when the profile does not match products."""
    if not prof.placement.matchGpuProduct:
        return None
    return catalog.product_labels(prof.hardware.gpu, prof.hardware.productLabels)


def _products_source(prof: profile.Profile) -> str:
    """Which field the wanted products come from, for the reasons a node is excluded."""
    if prof.hardware.productLabels is not None:
        return "hardware.productLabels"
    return f"hardware.gpu {prof.hardware.gpu}"


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
    name = prof.metadata.name
    if not reports:
        return f"No node can host {name}: the cluster reports no nodes."
    need = _need_text(prof)
    if prof.multi_node:
        sentences = [f"No node can ever host a pod of {name}: each copy needs {need}."]
    else:
        sentences = [f"No node can ever host a replica of {name}: it needs {need}."]
    # Nodes that fail only on GPU count are the closest candidates: name the largest.
    count_only = [r for r in reports if len(r.reasons) == 1 and r.reasons[0].startswith("only ")]
    shown: set[str] = set()
    if count_only:
        most = max(r.gpus_total for r in count_only)
        best = [r.name for r in count_only if r.gpus_total == most]
        shown.update(best)
        sentences.append(f"The largest node that meets everything else ({_names(best)}) has {most} GPUs.")
    excluded = _excluded_text([r for r in reports if r.name not in shown])
    if excluded:
        sentences.append(f"Excluded: {excluded}.")
    sentences.append(
        "Fix the profile to fit an existing node (engine.tensorParallelSize, "
        + ("engine.pipelineParallelSize, " if prof.multi_node else "")
        + "hardware.gpu, placement) or add a node that meets the need."
    )
    return " ".join(sentences)


def _need_text(prof: profile.Profile) -> str:
    """What one copy needs, e.g. "8 GPUs (TP=8) of product H100-80GB on one node with deployctl.dev/nvlink=true"."""
    gpp, m = prof.gpus_per_pod, prof.nodes_per_copy
    parallel = f"TP={prof.engine.tensorParallelSize}"
    if prof.engine.pipelineParallelSize > 1:
        parallel += f" × PP={prof.engine.pipelineParallelSize}"
    need = f"{m} nodes with {gpp} GPUs each ({parallel})" if prof.multi_node else f"{gpp} GPUs ({parallel})"
    products = _products(prof)
    if products is not None:
        need += f" of product {prof.hardware.gpu or ' or '.join(products)}"
    if not prof.multi_node:
        need += " on one node"
    constraints = [f"{k}={v}" for k, v in prof.placement.nodeSelector.items()]
    if prof.nvlink_required:
        constraints.insert(0, f"{prof.placement.nvlinkLabel.key}={prof.placement.nvlinkLabel.value}")
    if constraints:
        need += " with " + ", ".join(constraints)
    if prof.multi_node and prof.placement.topologyKey is not None:
        need += f", all with one {prof.placement.topologyKey} value"
    return need


def _no_copy_refusal(prof: profile.Profile, reports: list[NodeReport], domain_of: dict[str, str]) -> str:
    """Some nodes can host a pod, but too few of them together (in one domain) for a whole copy."""
    name, gpp, m, key = prof.metadata.name, prof.gpus_per_pod, prof.nodes_per_copy, prof.placement.topologyKey
    eligible = sorted((r for r in reports if r.eligible), key=lambda r: r.name)
    fix_profile = "or fix the profile (engine.pipelineParallelSize, placement.nodesPerCopy, hardware.gpu, placement)"
    if key is None:
        sentences = [
            f"{name} needs {_need_text(prof)} for one copy, but only {len(eligible)} node(s) can host one of its "
            f"pods ({_names(r.name for r in eligible)})."
        ]
        excluded = _excluded_text([r for r in reports if not r.eligible])
        if excluded:
            sentences.append(f"Excluded: {excluded}.")
        sentences.append(
            f"Make {m - len(eligible)} more node(s) eligible or add nodes that meet the need, {fix_profile}."
        )
        return " ".join(sentences)
    by_domain: dict[str, list[NodeReport]] = {}
    for r in sorted(reports, key=lambda r: r.name):
        if domain_of.get(r.name):
            by_domain.setdefault(domain_of[r.name], []).append(r)
    ranked = sorted(by_domain.items(), key=lambda kv: (-sum(r.eligible for r in kv[1]), kv[0]))
    parts = []
    for domain, rs in ranked[:_NAMES_SHOWN]:
        inside = [_names(r.name for r in rs if r.eligible)] if any(r.eligible for r in rs) else []
        excluded = _excluded_text([r for r in rs if not r.eligible])
        if excluded:
            inside.append(excluded)
        parts.append(f"{domain} has {sum(r.eligible for r in rs)} ({'; '.join(inside)})")
    if len(ranked) > _NAMES_SHOWN:
        next_best = sum(r.eligible for r in ranked[_NAMES_SHOWN][1])
        parts.append(f"{len(ranked) - _NAMES_SHOWN} more domains have at most {next_best}")
    most = max(sum(r.eligible for r in rs) for _, rs in ranked)
    sentences = [
        f"No topology domain ({key}) has {m} eligible nodes with {gpp} GPUs each for one copy of {name} "
        f"(it needs {_need_text(prof)}): {', '.join(parts)}."
    ]
    unlabelled = _excluded_text([r for r in reports if not domain_of.get(r.name)])
    if unlabelled:
        sentences.append(f"Outside any domain: {unlabelled}.")
    sentences.append(
        f"Make {m - most} more node(s) of one domain eligible, label more nodes with {key}, unset "
        f"placement.topologyKey to let a copy span domains, {fix_profile}."
    )
    return " ".join(sentences)


def _excluded_text(reports: list[NodeReport]) -> str:
    """Nodes grouped by their reasons, fewest reasons and largest first: "a, b: cordoned; c: no GPUs"."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for r in sorted(reports, key=lambda r: (len(r.reasons), -r.gpus_total, r.name)):
        groups.setdefault(r.reasons, []).append(r.name)
    return "; ".join(f"{_names(names)}: {', '.join(why)}" for why, names in groups.items())


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
