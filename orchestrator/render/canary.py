"""The canary's workload: the new revision's Deployment under another name, on a few copies, and
the new revision's NetworkPolicy for its pods.

The stable Deployment keeps its name, selector and pods, so adding a canary restarts nothing. The
canary Deployment `<release>-canary` runs the new pod template with ``conventions.TRACK_LABEL`` set
to ``canary`` on itself, its selector and its pods; it keeps the release label, so the release's
Service spreads requests over both sides, and the PodMonitor labels each series with its side.
The stable Deployment's selector matches the canary's pods too, which Kubernetes allows: each
ReplicaSet belongs to its Deployment by owner reference, never by labels alone.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from orchestrator import conventions

CANARY = "canary"
STABLE = "stable"
_SUFFIX = "-canary"


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
    """What the canary writes, in apply order: its NetworkPolicy (when the release has one), then its Deployment."""
    policy = network_policy(objects, release)
    return [*([policy] if policy else []), deployment(objects, release, copies)]
