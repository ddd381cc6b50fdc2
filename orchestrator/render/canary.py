"""The canary's workload: the new revision's Deployment under another name, on a few copies (or, for
copies that span nodes, the new revision's first RayClusters under canary names), and the new
revision's NetworkPolicy for its pods.

The stable Deployment keeps its name, selector and pods, so adding a canary restarts nothing. The
canary Deployment `<release>-canary` runs the new pod template with ``conventions.TRACK_LABEL`` set
to ``canary`` on itself, its selector and its pods; it keeps the release label, so the release's
Service spreads requests over both sides, and the PodMonitor labels each series with its side.
The stable Deployment's selector matches the canary's pods too, which Kubernetes allows: each
ReplicaSet belongs to its Deployment by owner reference, never by labels alone.

Copies that span nodes (KubeRay) have no Deployment to scale: each canary copy is one RayCluster,
the new revision's copy `<prefix>-<digest>-<i>` renamed `<prefix>-<digest>-c<i>`, with the canary
track on the RayCluster and on its head's and workers' pods, and the copy label (and the affinity
terms that keep a copy's pods on distinct nodes) following the new name. A copy never mixes revisions:
a canary copy runs the new revision whole, the stable RayClusters are never written.

With ``rollout.canary.traffic: httpRoute`` the release's HTTPRoute weighs two Services while a step
runs: `<release>-stable`, the release's Service narrowed to the live ReplicaSet's pods by their
``pod-template-hash`` (the stable pods carry no label of their own, so nothing restarts) on the live
revision's port, and `<release>-canary`, narrowed to the canary track. After the steps the route goes back to the one
backend the release renders, and the two Services are deleted.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from orchestrator import conventions

CANARY = "canary"
STABLE = "stable"
_SUFFIX = "-canary"
_STABLE_SUFFIX = "-stable"
GROUP_KIND = "RayCluster"  # one per copy that spans nodes; a canary of LeaderWorkerSets is refused at validation
POD_TEMPLATE_HASH = "pod-template-hash"  # the label the Deployment controller gives each ReplicaSet's pods


def workload_name(release: str) -> str:
    """The canary Deployment's name for ``release``."""
    return release + _SUFFIX


def deployment(objects: Sequence[dict[str, Any]], release: str, copies: int) -> dict[str, Any]:
    """The canary Deployment of the rendered ``objects``: their Deployment ``release``, renamed,
    on ``copies`` replicas, with the canary track on its labels, selector and pod template."""
    found = [o for o in objects if o.get("kind") == "Deployment" and o["metadata"]["name"] == release]
    if not found:
        raise ValueError(f"the rendered release {release} has no Deployment {release} to run a canary of")
    canary = copy.deepcopy(found[0])
    track = {conventions.TRACK_LABEL: CANARY}
    canary["metadata"]["name"] = workload_name(release)
    canary["metadata"]["labels"] = {**canary["metadata"].get("labels", {}), **track}
    spec = canary["spec"]
    spec["replicas"] = copies
    spec["selector"]["matchLabels"] = {**spec["selector"]["matchLabels"], **track}
    template = spec["template"]["metadata"]
    template["labels"] = {**template.get("labels", {}), **track}
    return canary


def network_policy(objects: Sequence[dict[str, Any]], release: str) -> dict[str, Any] | None:
    """The new revision's NetworkPolicy for the canary's pods alone (None when the release renders
    none): a revision that serves on another port, or reaches other egress CIDRs, must let its canary
    do so while the stable copies' policy stays as it is. Policies add up, and the stable one selects
    the canary's pods too, so the canary gets both and the stable pods only their own."""
    found = [o for o in objects if o.get("kind") == "NetworkPolicy" and o["metadata"]["name"] == release]
    if not found:
        return None
    policy = copy.deepcopy(found[0])
    policy["metadata"]["name"] = workload_name(release)
    selector = policy["spec"]["podSelector"]
    selector["matchLabels"] = {**selector.get("matchLabels", {}), conventions.TRACK_LABEL: CANARY}
    return policy


def workloads(objects: Sequence[dict[str, Any]], release: str, copies: int) -> list[dict[str, Any]]:
    """What the canary writes, in apply order: its NetworkPolicy (when the release has one), then its
    Deployment, or its RayClusters when the copies span nodes."""
    policy = network_policy(objects, release)
    groups = group_copies(objects, copies)
    return [*([policy] if policy else []), *(groups or [deployment(objects, release, copies)])]


def group_copies(objects: Sequence[dict[str, Any]], copies: int) -> list[dict[str, Any]]:
    """The canary's RayClusters: the first ``copies`` of the rendered ones under their canary names, with
    the canary track; empty when the release's copies are single pods."""
    found = [o for o in objects if o.get("kind") == GROUP_KIND]
    if found and copies > len(found):
        raise ValueError(f"a canary of {copies} copies, where the release renders {len(found)}")
    return [_canary_copy(o) for o in found[:copies]]


def canary_copy_name(copy_name: str) -> str:
    """A canary copy's name: the new revision's copy `<prefix>-<digest>-<i>` as `<prefix>-<digest>-c<i>`."""
    stem, _, index = copy_name.rpartition("-")
    return f"{stem}-c{index}"


def _canary_copy(group: dict[str, Any]) -> dict[str, Any]:
    canary = copy.deepcopy(group)
    old = canary["metadata"]["name"]
    new = canary_copy_name(old)
    track = {conventions.TRACK_LABEL: CANARY}
    canary["metadata"]["name"] = new
    canary["metadata"]["labels"] = {**canary["metadata"].get("labels", {}), **track}
    spec = canary["spec"]
    for template in [spec["headGroupSpec"]["template"], *(g["template"] for g in spec.get("workerGroupSpecs", []))]:
        labels = template["metadata"].get("labels", {})
        template["metadata"]["labels"] = {**labels, conventions.COPY_LABEL: new, **track}
        _rename_copy_terms(template["spec"].get("affinity", {}), old, new)
    return canary


def _rename_copy_terms(node: object, old: str, new: str) -> None:
    """Point every label selector on the copy label at ``old`` (the affinity that keeps one pod of a copy
    per node, and a copy in one topology domain) to ``new``, in place."""
    if isinstance(node, dict):
        labels = node.get("matchLabels")
        if isinstance(labels, dict) and labels.get(conventions.COPY_LABEL) == old:
            labels[conventions.COPY_LABEL] = new
        for value in node.values():
            _rename_copy_terms(value, old, new)
    elif isinstance(node, list):
        for item in node:
            _rename_copy_terms(item, old, new)


def side_services(service: dict[str, Any], release: str, stable_hash: str, stable_port: int) -> list[dict[str, Any]]:
    """The Services a weighted route sends to, both made from the new revision's ``service``: the stable
    side narrowed to the pods of the ReplicaSet whose pod-template-hash is ``stable_hash``, on the live
    revision's ``stable_port``, and the canary's side narrowed to the canary track."""
    stable_name, canary_name = side_service_names(release)
    stable, canary = copy.deepcopy(service), copy.deepcopy(service)
    stable["metadata"]["name"], canary["metadata"]["name"] = stable_name, canary_name
    stable["spec"]["selector"] = {**service["spec"]["selector"], POD_TEMPLATE_HASH: stable_hash}
    stable["spec"]["ports"][0]["port"] = stable_port
    canary["spec"]["selector"] = {**service["spec"]["selector"], conventions.TRACK_LABEL: CANARY}
    return [stable, canary]


def side_service_names(release: str) -> tuple[str, str]:
    """The stable and canary Services' names, as side_services names them."""
    return release + _STABLE_SUFFIX, workload_name(release)


def weighted_route(route: dict[str, Any], release: str, ports: tuple[int, int], canary_percent: int) -> dict[str, Any]:
    """``route`` (the release's HTTPRoute) with each rule's backends the two sides, on their ``ports``
    (stable, canary), ``canary_percent`` of the requests to the canary's Service and the rest to the stable one."""
    weighted = copy.deepcopy(route)
    stable, canary = side_service_names(release)
    backends = [
        {"name": stable, "port": ports[0], "weight": 100 - canary_percent},
        {"name": canary, "port": ports[1], "weight": canary_percent},
    ]
    for rule in weighted["spec"]["rules"]:
        rule["backendRefs"] = copy.deepcopy(backends)
    return weighted


def route_of(objects: Sequence[dict[str, Any]], release: str) -> dict[str, Any] | None:
    """The release's HTTPRoute among ``objects``, or None when they have none."""
    return _one(objects, conventions.HTTP_ROUTE_KIND, release)


def service_of(objects: Sequence[dict[str, Any]], release: str) -> dict[str, Any] | None:
    """The release's Service among ``objects``, or None when they have none."""
    return _one(objects, "Service", release)


def service_port(service: dict[str, Any]) -> int:
    """The port a route reaches ``service`` on: its one port, the engine's."""
    return int(service["spec"]["ports"][0]["port"])


def _one(objects: Sequence[dict[str, Any]], kind: str, name: str) -> dict[str, Any] | None:
    found = [o for o in objects if o.get("kind") == kind and o["metadata"]["name"] == name]
    return copy.deepcopy(found[0]) if found else None
