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
from collections.abc import Callable, Iterable, Mapping, Sequence

from orchestrator import conventions
from orchestrator.plan import node_reports, refusals
from orchestrator.profile import model as profile

# The pods whose GPUs count: scheduled and not finished. Asked of the API server as a field selector,
# so a cluster-wide list returns only those, not every pod of the cluster.
POD_FIELDS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
# The one domain of a copy that fits on a node, or of a profile without placement.topologyKey.
_ALL = "all"
# (strategy name, downtime, refusal) as the strategy functions choose them.
_Choice = tuple[str, bool, str | None]
# Eligible nodes by placement.topologyKey value (one "all" domain without the key).
_Domains = dict[str, list[node_reports.NodeReport]]


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

    nodes: list[node_reports.NodeReport]
    eligible_nodes: list[str]
    copy_nodes: int  # nodes one copy spans, one pod on each (profile.nodes_per_copy)
    # Eligible nodes by placement.topologyKey value, all in name order; a copy's pods share one
    # domain. One domain "all" when the key is unset or a copy fits on one node.
    domains: dict[str, list[str]]
    spare_slots: int  # replicas that fit beside everything running now, this release's pods included
    capacity_slots: int  # replicas that fit once this release's own pods are gone
    strategy: dict[str, object]  # Deployment.spec.strategy; {} for groups
    strategy_name: str  # surge | one-at-a-time | recreate; for groups install | surge | replace
    downtime: bool  # the update leaves no replica serving for a while
    warnings: list[str]
    refusal: str | None  # one paragraph: the need, the best candidates and the fix
    # rollout.canary on an update that replaces pods: "beside" (the canary's copies start beside the
    # stable ones), "replace" (each step replaces stable copies: no room beside); "" otherwise.
    canary_mode: str = ""

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
            "canary_mode": self.canary_mode,
        }


def check(
    prof: profile.Profile,
    nodes: Sequence[Mapping[str, object]],
    pods: Iterable[Mapping[str, object]],
    deployment_exists: bool,
) -> Preflight:
    """Judge every node for ``prof``, count free replica slots and choose the rollout strategy.

    ``deployment_exists`` says whether this is an upgrade (a Deployment already runs the release),
    the only case where the strategy can cause downtime.
    """
    name, gpp, replicas = prof.metadata.name, prof.gpus_per_pod, prof.rollout.replicas
    used, own = node_reports.gpus_by_node(pods, prof.metadata.namespace, name)
    reports = [node_reports.judge(prof, node, used, own) for node in nodes]
    if prof.multi_node:
        return _check_groups(prof, nodes, reports, deployment_exists)
    eligible = [r for r in reports if r.eligible]
    spare = sum(r.gpus_free // gpp for r in eligible)
    capacity = sum((r.gpus_free + r.gpus_release) // gpp for r in eligible)
    ever = sum(r.gpus_total // gpp for r in eligible)

    warnings: list[str] = []
    refusal: str | None = None
    if not eligible:
        refusal = refusals.no_node(prof, reports)
    elif ever < replicas:
        refusal = (
            f"{name} needs {replicas} replicas of {gpp} GPUs, but the eligible nodes "
            f"({refusals.name_list(r.name for r in eligible)}) can hold at most {ever} even with nothing else "
            f"running. Lower rollout.replicas to {ever} or add nodes that meet the placement."
        )
    elif capacity < replicas:
        # Not a refusal: other workloads may finish, and the rollout watcher reports a pod that
        # stays unschedulable, with the scheduler's own reason.
        warnings.append(
            f"only {capacity} of {replicas} replicas can be scheduled now; the rest will stay Pending until "
            f"GPUs free up on {refusals.name_list(r.name for r in eligible)}"
        )
    choice, canary_mode = _canary(prof, _strategy(prof, eligible, spare, deployment_exists), spare, deployment_exists)
    domains = {_ALL: [r.name for r in eligible]}
    verdict = _verdict(prof, reports, domains, (spare, capacity), choice, refusal, warnings)
    return dataclasses.replace(verdict, canary_mode=canary_mode)


def _verdict(
    prof: profile.Profile,
    reports: list[node_reports.NodeReport],
    domains: dict[str, list[str]],
    slots: tuple[int, int],
    choice: _Choice,
    refusal: str | None,
    warnings: list[str],
) -> Preflight:
    """The Preflight of a single-node copy or a group: ``slots`` is (spare, capacity), ``refusal``
    what the slots refuse; the strategy's own refusal counts only when they refuse nothing."""
    strategy_name, downtime, strategy_refusal = choice
    refusal = refusal or strategy_refusal
    if downtime and refusal is None:
        stops, serves = (
            ("deletes {}'s running groups", "copy") if prof.multi_node else ("stops {}'s running pods", "pod")
        )
        warnings.append(
            f"this update {stops.format(prof.metadata.name)} before the new ones start; nothing serves until a new "
            f"{serves} is ready (rollout.allowDowntime is true)"
        )
    return Preflight(
        nodes=reports,
        eligible_nodes=[r.name for r in reports if r.eligible],
        copy_nodes=prof.nodes_per_copy if prof.multi_node else 1,
        domains=domains,
        spare_slots=slots[0],
        capacity_slots=slots[1],
        strategy={} if prof.multi_node else conventions.strategy_spec(strategy_name),
        strategy_name=strategy_name,
        downtime=downtime,
        warnings=warnings,
        refusal=refusal,
    )


def _canary(prof: profile.Profile, choice: _Choice, spare: int, replaces: bool) -> tuple[_Choice, str]:
    """The strategy as rollout.canary changes it, and where the canary's copies go on an update that
    replaces pods: "beside" the stable copies when the cluster has room for the largest step (the
    canary copies serve while the stable ones are replaced at promotion, so no strategy takes the
    release offline), else "replace" stable copies step by step, which a single copy cannot afford
    without rollout.allowDowntime (the refusal says so, before any write)."""
    canary = prof.rollout.canary
    if canary is None or not replaces:
        return choice, ""
    name, _, _ = choice
    replicas = prof.rollout.replicas
    if spare >= canary.largest_step(replicas):
        # The promotion removes the canary and rolls the stable copies out as any apply: the
        # strategy's own downtime and refusal stand.
        return choice, "beside"
    if replicas > 1:
        return choice, "replace"
    if prof.rollout.allowDowntime:
        return (name, True, None), "replace"
    unit = "copy" if prof.multi_node else "pod"
    refusal = (
        f"rollout.canary on {prof.metadata.name}: the cluster has no room for a canary {unit} beside the only "
        f"one ({prof.gpus_per_pod} free GPUs on an eligible node{' for each of its pods' if prof.multi_node else ''}), "
        "so the canary would replace it and nothing would serve while it loads. Free the GPUs for one more "
        "copy, run rollout.replicas: 2 or more, or set rollout.allowDowntime: true to accept the outage."
    )
    return (name, True, refusal), "replace"


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
    prof: profile.Profile,
    nodes: Sequence[Mapping[str, object]],
    reports: list[node_reports.NodeReport],
    deployment_exists: bool,
) -> Preflight:
    """`check` for a copy that spans nodes: slots are whole copies, counted per topology domain."""
    gpp, m, replicas, key = prof.gpus_per_pod, prof.nodes_per_copy, prof.rollout.replicas, prof.placement.topologyKey
    # An eligible node has the key's label (node_reports.judge), so every one lands in a domain.
    domain_of = {
        node_reports.name_of(n): node_reports.labels_of(n).get(key, "") if key is not None else _ALL for n in nodes
    }
    eligible = [r for r in reports if r.eligible]
    domains: _Domains = {}
    for r in sorted(eligible, key=lambda r: (domain_of[r.name], r.name)):
        domains.setdefault(domain_of[r.name], []).append(r)

    def fit(slots: Callable[[node_reports.NodeReport], int]) -> dict[str, int]:
        return {d: copies_that_fit((slots(r) for r in rs), m) for d, rs in domains.items()}

    ever = fit(lambda r: r.gpus_total // gpp)
    capacity = sum(fit(lambda r: (r.gpus_free + r.gpus_release) // gpp).values())
    spare_by_domain = fit(lambda r: r.gpus_free // gpp)

    warnings: list[str] = []
    refusal: str | None = None
    if not eligible:
        refusal = refusals.no_node(prof, reports)
    elif sum(ever.values()) == 0:
        refusal = refusals.no_copy(prof, reports, domain_of)
    elif sum(ever.values()) < replicas:
        refusal = refusals.too_few_copies(prof, eligible, ever)
    elif capacity < replicas:
        warnings.append(
            f"only {capacity} of {replicas} copies can be scheduled now; the rest will stay Pending until GPUs "
            f"free up on {refusals.name_list(r.name for r in eligible)}, and the pods of a partly scheduled copy "
            "hold their GPUs meanwhile"
        )
    replaces = deployment_exists and bool(domains)
    spare = sum(spare_by_domain.values())
    choice, canary_mode = _canary(prof, _group_strategy(prof, domains, spare_by_domain, replaces), spare, replaces)
    named = {d: [r.name for r in rs] for d, rs in domains.items()}
    verdict = _verdict(prof, reports, named, (spare, capacity), choice, refusal, warnings)
    return dataclasses.replace(verdict, canary_mode=canary_mode)


def _group_strategy(
    prof: profile.Profile, domains: _Domains, spare_by_domain: dict[str, int], replaces: bool
) -> _Choice:
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
    room, free = refusals.surge_room(prof, domains, spare, missing)
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
            f"Updating {name} would take it offline: {cause}, and {outage}. {room} To proceed, free {free}, or set "
            "rollout.allowDowntime: true to accept the outage."
        ),
    )


def _nodes_short(domains: _Domains, spare_by_domain: dict[str, int], m: int, gpp: int, want: int) -> dict[str, int]:
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


# --- strategy ---------------------------------------------------------------------------------


def _strategy(
    prof: profile.Profile, eligible: list[node_reports.NodeReport], spare: int, deployment_exists: bool
) -> _Choice:
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
                f"none has them ({refusals.free_text(eligible)}); the surge pod would stay Pending forever and the "
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
            f"({refusals.free_text(eligible)}), so the only pod must stop before the new one starts"
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
