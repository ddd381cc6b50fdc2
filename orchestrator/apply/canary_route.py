"""A canary's share of the traffic on the release's HTTPRoute (rollout.canary.traffic httpRoute).

Each step sends its share of the requests, its canary copies over the release's copies, to the
canary's Service and the rest to the stable one (``orchestrator.render.canary.side_services``), once
both have ready endpoints; when the steps end, passed or not, the route goes back to what the live
revision applied and, after a short drain, the two Services are deleted. The promotion then applies
the new revision's route.

Only a route that is in the cluster can be weighed: a live revision that rendered none (the first
canary after a switch to traffic httpRoute) leaves this canary's traffic to the Service. So does a
stored route that is not the release's own (a record edited to send elsewhere): it is never applied.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from orchestrator import conventions, errors
from orchestrator.apply import confine
from orchestrator.kube import Kube
from orchestrator.kube import status as kube_status
from orchestrator.render import canary as canary_workload

Sleep = Callable[[float], None]
# How long a side Service may take to list a ready endpoint before the route sends to it.
ENDPOINTS_TIMEOUT_S = 60.0
# Between giving the route back and deleting the Services it sent to: a Gateway acts on the route's
# change within a second or two, and a request it still sends to a deleted Service fails.
DRAIN_S = 5.0
_SERVICE_NAME_LABEL = "kubernetes.io/service-name"  # what the EndpointSlice controller labels a slice with


@dataclasses.dataclass(frozen=True)
class LiveRoute:
    """What the live revision applied: its HTTPRoute, given back after the steps, and the port of its
    Service, which the stable side keeps."""

    route: dict[str, Any]
    port: int


def live_route(manifests: bytes, release: str, namespace: str) -> LiveRoute | None:
    """The live revision's route and Service port (its stored manifests), or None when it rendered no
    route. ``OutsideRelease`` when the stored route or Service is not the release's own."""
    objects = confine.stored_objects(manifests, "the live revision's stored manifests", release, namespace)
    route, service = canary_workload.route_of(objects, release), canary_workload.service_of(objects, release)
    if route is None or service is None:
        return None
    confine.check(release, namespace, [route, service], "the live revision's stored route")
    return LiveRoute(route, canary_workload.service_port(service))


def canary_percent(copies: int, replicas: int) -> int:
    """The canary's weight in percent: its share of the copies, at least 1 so that it is judged at all."""
    return min(100, max(1, round(100 * copies / replicas)))


def weigh(
    kube: Kube,
    live: LiveRoute,
    objects: Sequence[dict[str, Any]],
    release: str,
    namespace: str,
    percent: int,
    sleep: Sleep = time.sleep,
) -> dict[str, int]:
    """Point the route at the two sides, ``percent`` to the canary (the new revision's ``objects`` give
    the Services' form), once both sides list a ready endpoint; the weights as set."""
    service = canary_workload.service_of(objects, release)
    if service is None:
        raise errors.RolloutFailed(f"the new revision renders no Service {release} to make the two sides from")
    sides = canary_workload.side_services(service, release, _stable_hash(kube, release, namespace), live.port)
    for side in sides:
        kube.apply(side)
    _wait_for_endpoints(kube, namespace, [s["metadata"]["name"] for s in sides], sleep)
    ports = live.port, canary_workload.service_port(service)
    kube.apply(canary_workload.weighted_route(live.route, release, ports, percent))
    return {"stable": 100 - percent, "canary": percent}


def give_back(kube: Kube, live: LiveRoute) -> str | None:
    """Apply the live revision's route again; why that failed, or None."""
    try:
        kube.apply(live.route)
    except errors.DeployctlError as e:
        return f"the HTTPRoute could not be given its one backend back: {e.message}"
    return None


def delete_sides(kube: Kube, release: str, namespace: str) -> list[str]:
    """Delete the two sides' Services (only those labelled as the release's: preflight refused any other
    under these names); what could not be deleted."""
    left = []
    for name in canary_workload.side_service_names(release):
        try:
            found = kube.get("Service", name, namespace)
            labels = kube_status.Meta.from_object(found).labels if found is not None else {}
            if labels.get(conventions.RELEASE_LABEL) == release:
                kube.delete("Service", name, namespace)
        except errors.DeployctlError as e:
            left.append(f"the canary's Service {name} could not be deleted: {e.message}")
    return left


def _stable_hash(kube: Kube, release: str, namespace: str) -> str:
    """The pod-template-hash of the stable Deployment's current ReplicaSet: the stable pods' only label
    that the canary's pods lack, besides the track the canary's carry."""
    raw = kube.get("Deployment", release, namespace)
    if raw is None:
        raise errors.RolloutFailed(f"the stable Deployment {release} is gone: there is no stable side to weigh")
    deployment = kube_status.Deployment.from_object(raw)
    items, _ = kube.list("ReplicaSet", namespace, labels=f"{conventions.RELEASE_LABEL}={release}")
    for item in items:
        rs = kube_status.ReplicaSet.from_object(item)
        if deployment.meta.uid in rs.meta.owner_uids and rs.revision == deployment.revision and rs.pod_template_hash:
            return rs.pod_template_hash
    raise errors.RolloutFailed(
        f"the stable Deployment {release}'s current ReplicaSet was not found: its pods cannot be told apart "
        "from the canary's on the HTTPRoute"
    )


def _wait_for_endpoints(kube: Kube, namespace: str, services: list[str], sleep: Sleep) -> None:
    """Wait until each of ``services`` lists a ready endpoint: a route that sends to a Service with none
    fails those requests."""
    deadline = time.monotonic() + ENDPOINTS_TIMEOUT_S
    waiting = list(services)
    while waiting:
        waiting = [name for name in waiting if not _has_ready_endpoint(kube, namespace, name)]
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise errors.RolloutFailed(
                f"the Service {waiting[0]} listed no ready endpoint within {ENDPOINTS_TIMEOUT_S:.0f} s, so the "
                "HTTPRoute was not pointed at it"
            )
        sleep(0.5)


def _has_ready_endpoint(kube: Kube, namespace: str, service: str) -> bool:
    slices, _ = kube.list("EndpointSlice", namespace, labels=f"{_SERVICE_NAME_LABEL}={service}")
    return any(
        (endpoint.get("conditions") or {}).get("ready") is not False  # unset means ready (discovery.k8s.io/v1)
        for piece in slices
        for endpoint in piece.get("endpoints") or []
    )
