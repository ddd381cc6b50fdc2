"""What preflight says when a release cannot run as asked: the need, the closest nodes and the fix.

Each text names what one copy needs, which nodes come closest and why each falls short (grouped, so a
large cluster stays a few lines), and what to change; ``orchestrator.plan.preflight`` decides when.
"""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.plan import node_reports
from orchestrator.profile import model as profile

# How many node names one sentence lists before it says "and N more".
NAMES_SHOWN = 4


def no_node(prof: profile.Profile, reports: list[node_reports.NodeReport]) -> str:
    """Name the need, the closest nodes and why each falls short, grouped so large clusters stay short."""
    name = prof.metadata.name
    if not reports:
        return f"No node can host {name}: the cluster reports no nodes."
    need = need_text(prof)
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
        sentences.append(f"The largest node that meets everything else ({name_list(best)}) has {most} GPUs.")
    excluded = excluded_text([r for r in reports if r.name not in shown])
    if excluded:
        sentences.append(f"Excluded: {excluded}.")
    sentences.append(
        "Fix the profile to fit an existing node (engine.tensorParallelSize, "
        + ("engine.pipelineParallelSize, " if prof.multi_node else "")
        + "hardware.gpu, placement) or add a node that meets the need."
    )
    return " ".join(sentences)


def need_text(prof: profile.Profile) -> str:
    """What one copy needs, e.g. "8 GPUs (TP=8) of product H100-80GB on one node with deployctl.dev/nvlink=true"."""
    gpp, m = prof.gpus_per_pod, prof.nodes_per_copy
    parallel = f"TP={prof.engine.tensorParallelSize}"
    if prof.engine.pipelineParallelSize > 1:
        parallel += f" × PP={prof.engine.pipelineParallelSize}"
    need = f"{m} nodes with {gpp} GPUs each ({parallel})" if prof.multi_node else f"{gpp} GPUs ({parallel})"
    products = node_reports.wanted_products(prof)
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


def no_copy(prof: profile.Profile, reports: list[node_reports.NodeReport], domain_of: dict[str, str]) -> str:
    """Some nodes can host a pod, but too few of them together (in one domain) for a whole copy."""
    name, gpp, m, key = prof.metadata.name, prof.gpus_per_pod, prof.nodes_per_copy, prof.placement.topologyKey
    eligible = sorted((r for r in reports if r.eligible), key=lambda r: r.name)
    fix_profile = "or fix the profile (engine.pipelineParallelSize, placement.nodesPerCopy, hardware.gpu, placement)"
    if key is None:
        sentences = [
            f"{name} needs {need_text(prof)} for one copy, but only {len(eligible)} node(s) can host one of its "
            f"pods ({name_list(r.name for r in eligible)})."
        ]
        excluded = excluded_text([r for r in reports if not r.eligible])
        if excluded:
            sentences.append(f"Excluded: {excluded}.")
        sentences.append(
            f"Make {m - len(eligible)} more node(s) eligible or add nodes that meet the need, {fix_profile}."
        )
        return " ".join(sentences)
    by_domain: dict[str, list[node_reports.NodeReport]] = {}
    for r in sorted(reports, key=lambda r: r.name):
        if domain_of.get(r.name):
            by_domain.setdefault(domain_of[r.name], []).append(r)
    ranked = sorted(by_domain.items(), key=lambda kv: (-sum(r.eligible for r in kv[1]), kv[0]))
    parts = []
    for domain, rs in ranked[:NAMES_SHOWN]:
        inside = [name_list(r.name for r in rs if r.eligible)] if any(r.eligible for r in rs) else []
        excluded = excluded_text([r for r in rs if not r.eligible])
        if excluded:
            inside.append(excluded)
        parts.append(f"{domain} has {sum(r.eligible for r in rs)} ({'; '.join(inside)})")
    if len(ranked) > NAMES_SHOWN:
        next_best = sum(r.eligible for r in ranked[NAMES_SHOWN][1])
        parts.append(f"{len(ranked) - NAMES_SHOWN} more domains have at most {next_best}")
    most = max(sum(r.eligible for r in rs) for _, rs in ranked)
    sentences = [
        f"No topology domain ({key}) has {m} eligible nodes with {gpp} GPUs each for one copy of {name} "
        f"(it needs {need_text(prof)}): {', '.join(parts)}."
    ]
    unlabelled = excluded_text([r for r in reports if not domain_of.get(r.name)])
    if unlabelled:
        sentences.append(f"Outside any domain: {unlabelled}.")
    sentences.append(
        f"Make {m - most} more node(s) of one domain eligible, label more nodes with {key}, unset "
        f"placement.topologyKey to let a copy span domains, {fix_profile}."
    )
    return " ".join(sentences)


def excluded_text(reports: list[node_reports.NodeReport]) -> str:
    """Nodes grouped by their reasons, fewest reasons and largest first: "a, b: cordoned; c: no GPUs"."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for r in sorted(reports, key=lambda r: (len(r.reasons), -r.gpus_total, r.name)):
        groups.setdefault(r.reasons, []).append(r.name)
    return "; ".join(f"{name_list(names)}: {', '.join(why)}" for why, names in groups.items())


def free_text(eligible: list[node_reports.NodeReport]) -> str:
    parts = [f"{r.name} {r.gpus_free} of {r.gpus_total} free" for r in eligible[:NAMES_SHOWN]]
    if len(eligible) > NAMES_SHOWN:
        parts.append(f"{len(eligible) - NAMES_SHOWN} more")
    return ", ".join(parts)


def name_list(names: Iterable[str]) -> str:
    """Up to NAMES_SHOWN names, then how many more."""
    listed = list(names)
    if len(listed) <= NAMES_SHOWN:
        return ", ".join(listed)
    return ", ".join(listed[:NAMES_SHOWN]) + f" and {len(listed) - NAMES_SHOWN} more"


def too_few_copies(prof: profile.Profile, eligible: list[node_reports.NodeReport], ever: dict[str, int]) -> str:
    """The eligible nodes can never hold rollout.replicas copies (``ever``: the most per domain)."""
    name, gpp, m, replicas = prof.metadata.name, prof.gpus_per_pod, prof.nodes_per_copy, prof.rollout.replicas
    key, most = prof.placement.topologyKey, sum(ever.values())
    per_domain = ""
    if key is not None:
        per_domain = f" (per {key} domain: " + ", ".join(f"{d} {n}" for d, n in ever.items()) + ")"
    return (
        f"{name} needs {replicas} copies of {m} nodes with {gpp} GPUs each, but the eligible nodes "
        f"({name_list(r.name for r in eligible)}) can hold at most {most} even with nothing else running"
        f"{per_domain}. Lower rollout.replicas to {most} or add nodes that meet the placement."
    )


def surge_room(
    prof: profile.Profile, domains: dict[str, list[node_reports.NodeReport]], spare: int, missing: dict[str, int]
) -> tuple[str, str]:
    """Why a surge of the groups does not fit (``missing``: the nodes short, by domain), and what to
    free for it: "3 eligible nodes (24 GPUs) in zone-a (3)"."""
    gpp, m, replicas, key = prof.gpus_per_pod, prof.nodes_per_copy, prof.rollout.replicas, prof.placement.topologyKey
    nodes = sum(missing.values())
    where = f" in {', '.join(f'{d} ({n})' for d, n in missing.items())}" if key is not None else ""
    shape = f"{m} nodes with {gpp} free GPUs each" + (f", in one {key} domain" if key is not None else "")
    copies = "copy" if replicas == 1 else "copies"
    room = (
        f"A surge starts {replicas} new {copies} ({shape}) beside the old groups, and {spare} "
        f"{'fits' if spare == 1 else 'fit'} now ({free_text([r for rs in domains.values() for r in rs])}); "
        f"{nodes} more eligible {'node' if nodes == 1 else 'nodes'} with {gpp} free GPUs ({nodes * gpp} GPUs)"
        f"{where} would make room."
    )
    return room, f"{nodes} eligible {'node' if nodes == 1 else 'nodes'} ({nodes * gpp} GPUs){where}"
