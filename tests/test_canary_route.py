"""A canary weighed on the release's HTTPRoute: the two sides' Services, waiting for their endpoints,
the weights, and the route given back (orchestrator.apply.canary_route), over the tests' stand-in
cluster. The real Gateway API CRD takes the same objects in e2e/test_http_route_canary_cluster.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from test_canary_workload import CANARY, HTTP_ROUTE, rendered
from test_confine import ApplyingKube

from orchestrator import conventions, errors
from orchestrator.apply import canary_route
from orchestrator.render import canary as canary_workload


def stable_deployment(kube: ApplyingKube, objects: list[dict[str, Any]], name: str, namespace: str) -> None:
    """The stable Deployment at revision 3, its current ReplicaSet (hash new0) and an old one (hash old0)."""
    (deployment,) = [copy.deepcopy(o) for o in objects if o["kind"] == "Deployment"]
    deployment["metadata"].update(uid="dep-uid", annotations={"deployment.kubernetes.io/revision": "3"})
    kube.objects[("Deployment", namespace, name)] = deployment
    for revision, pod_hash in (("2", "old0"), ("3", "new0")):
        kube.objects[("ReplicaSet", namespace, f"{name}-{pod_hash}")] = {
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{name}-{pod_hash}",
                "namespace": namespace,
                "labels": {conventions.RELEASE_LABEL: name, "pod-template-hash": pod_hash},
                "annotations": {"deployment.kubernetes.io/revision": revision},
                "ownerReferences": [{"kind": "Deployment", "name": name, "uid": "dep-uid"}],
            },
        }


def endpoints(kube: ApplyingKube, namespace: str, service: str, *, ready: bool) -> None:
    kube.objects[("EndpointSlice", namespace, f"{service}-abc")] = {
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{service}-abc",
            "namespace": namespace,
            "labels": {"kubernetes.io/service-name": service},
        },
        "endpoints": [{"addresses": ["10.0.0.7"], "conditions": {"ready": ready}}],
    }


def setup(port: int = 8000) -> tuple[str, str, list[dict[str, Any]], canary_route.LiveRoute, ApplyingKube]:
    prof, objects = rendered(CANARY + HTTP_ROUTE)
    name, namespace = prof.metadata.name, prof.metadata.namespace
    live = canary_route.live_route(yaml.safe_dump_all(objects).encode(), name, namespace)
    assert live is not None and live.route == canary_workload.route_of(objects, name) and live.port == port
    kube = ApplyingKube()
    stable_deployment(kube, objects, name, namespace)
    return name, namespace, objects, live, kube


def test_a_step_weighs_the_live_route_once_both_sides_have_endpoints_and_the_end_gives_it_back() -> None:
    name, namespace, objects, live, kube = setup()
    new = copy.deepcopy(objects)  # the new revision serves on another port
    (service,) = [o for o in new if o["kind"] == "Service"]
    service["spec"]["ports"][0]["port"] = 8001
    for side in canary_workload.side_service_names(name):
        endpoints(kube, namespace, side, ready=True)

    weights = canary_route.weigh(kube, live, new, name, namespace, canary_route.canary_percent(1, 4), lambda _: None)
    assert weights == {"stable": 75, "canary": 25}
    stable = kube.objects[("Service", namespace, f"{name}-stable")]
    assert stable["spec"]["selector"]["pod-template-hash"] == "new0"  # the current ReplicaSet's, not the old one's
    canary = kube.objects[("Service", namespace, f"{name}-canary")]
    assert canary["spec"]["selector"][conventions.TRACK_LABEL] == "canary"
    backends = kube.objects[("HTTPRoute", namespace, name)]["spec"]["rules"][0]["backendRefs"]
    weighed = [(b["name"], b["port"], b["weight"]) for b in backends]
    assert weighed == [(f"{name}-stable", 8000, 75), (f"{name}-canary", 8001, 25)]  # each side on its own port

    assert canary_route.give_back(kube, live) is None
    assert kube.objects[("HTTPRoute", namespace, name)] == live.route
    assert canary_route.delete_sides(kube, name, namespace) == []
    assert ("Service", namespace, f"{name}-stable") not in kube.objects
    assert ("Service", namespace, f"{name}-canary") not in kube.objects


def test_the_route_is_not_pointed_at_a_side_without_a_ready_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    name, namespace, objects, live, kube = setup()
    endpoints(kube, namespace, f"{name}-stable", ready=True)
    endpoints(kube, namespace, f"{name}-canary", ready=False)
    monkeypatch.setattr(canary_route, "ENDPOINTS_TIMEOUT_S", 0.0)
    with pytest.raises(errors.RolloutFailed, match=f"{name}-canary listed no ready endpoint"):
        canary_route.weigh(kube, live, objects, name, namespace, 50, lambda _: None)
    assert ("HTTPRoute", namespace, name) not in kube.objects, "the route was pointed at a Service with no endpoint"


def test_only_the_release_own_side_services_are_deleted() -> None:
    name, namespace, _, _, kube = setup()
    kube.objects[("Service", namespace, f"{name}-stable")] = {
        "kind": "Service",
        "metadata": {"name": f"{name}-stable", "namespace": namespace, "labels": {conventions.RELEASE_LABEL: "other"}},
    }
    assert canary_route.delete_sides(kube, name, namespace) == []
    assert ("Service", namespace, f"{name}-stable") in kube.objects, "another release's Service was deleted"


def test_a_live_revision_without_a_route_has_none_to_weigh() -> None:
    prof, objects = rendered(CANARY)  # traffic service: no route rendered
    manifests = yaml.safe_dump_all(objects).encode()
    assert canary_route.live_route(manifests, prof.metadata.name, prof.metadata.namespace) is None


def test_a_stored_route_that_sends_elsewhere_is_never_weighed_or_given_back() -> None:
    prof, objects = rendered(CANARY + HTTP_ROUTE)
    name, namespace = prof.metadata.name, prof.metadata.namespace
    (route,) = [o for o in objects if o["kind"] == "HTTPRoute"]
    mirror = {"backendRef": {"name": "collector", "namespace": "evil", "port": 80}}
    route["spec"]["rules"][0]["filters"] = [{"type": "RequestMirror", "requestMirror": mirror}]
    with pytest.raises(errors.OutsideRelease, match="tampering"):
        canary_route.live_route(yaml.safe_dump_all(objects).encode(), name, namespace)


def test_without_the_stable_replicaset_nothing_is_weighed() -> None:
    prof, objects = rendered(CANARY + HTTP_ROUTE)
    name, namespace = prof.metadata.name, prof.metadata.namespace
    live = canary_route.live_route(yaml.safe_dump_all(objects).encode(), name, namespace)
    assert live is not None
    kube = ApplyingKube()
    with pytest.raises(errors.RolloutFailed, match=r"stable Deployment .* is gone"):
        canary_route.weigh(kube, live, objects, name, namespace, 50, lambda _: None)
    stable_deployment(kube, objects, name, namespace)
    for key in [k for k in kube.objects if k[0] == "ReplicaSet"]:
        del kube.objects[key]
    with pytest.raises(errors.RolloutFailed, match="current ReplicaSet was not found"):
        canary_route.weigh(kube, live, objects, name, namespace, 50, lambda _: None)
    assert not [k for k in kube.objects if k[0] in ("Service", "HTTPRoute")], "a refused weighing wrote"
