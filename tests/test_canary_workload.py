"""The canary's workload beside the stable copies: a Deployment, or for copies across nodes one
RayCluster per canary copy; and the route's sides."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from test_canary_profile import with_rollout

from orchestrator import conventions, errors
from orchestrator.apply import canary_route
from orchestrator.plan import planner
from orchestrator.profile import model as profile
from orchestrator.render import canary as canary_workload
from orchestrator.render import manifests as render

ROOT = Path(__file__).resolve().parents[1]

CANARY = """
replicas: 4
canary:
  steps:
  - copies: 1
"""


def rendered(rollout: str = CANARY) -> tuple[profile.Profile, list[dict[str, object]]]:
    prof = profile.loads(with_rollout(rollout), "canary.yaml")
    return prof, render.render(prof, planner.check(prof))


def test_the_canary_runs_the_new_template_under_its_own_name_selector_and_track() -> None:
    prof, objects = rendered()
    name = prof.metadata.name
    before = copy.deepcopy(objects)
    canary = canary_workload.deployment(objects, name, 2)
    assert objects == before, "deriving the canary changed the rendered release"
    (stable,) = [o for o in objects if o["kind"] == "Deployment"]
    assert canary["metadata"]["name"] == f"{name}-canary" == canary_workload.workload_name(name)
    assert canary["spec"]["replicas"] == 2
    track = {conventions.TRACK_LABEL: "canary"}
    assert canary["spec"]["selector"]["matchLabels"] == {**stable["spec"]["selector"]["matchLabels"], **track}
    labels = canary["spec"]["template"]["metadata"]["labels"]
    assert labels == {**stable["spec"]["template"]["metadata"]["labels"], **track}
    # The release label stays: the Service and the PodMonitor select both sides, prune and uninstall find it.
    assert canary["metadata"]["labels"][conventions.RELEASE_LABEL] == name
    assert canary["spec"]["template"]["spec"] == stable["spec"]["template"]["spec"]
    assert conventions.TRACK_LABEL not in stable["spec"]["template"]["metadata"]["labels"]


def test_a_release_without_its_deployment_has_no_canary() -> None:
    prof, objects = rendered()
    with pytest.raises(ValueError, match="no Deployment"):
        canary_workload.deployment([o for o in objects if o["kind"] != "Deployment"], prof.metadata.name, 1)


def across_nodes(rollout: dict[str, object]) -> tuple[profile.Profile, list[dict[str, object]]]:
    """The 405B example (one RayCluster per copy of two nodes) with ``rollout``."""
    doc = yaml.safe_load((ROOT / "profiles" / "llama31-405b-2node.yaml").read_text())
    doc["rollout"] = {**doc["rollout"], **rollout}
    prof = profile.loads(yaml.safe_dump(doc), "405b.yaml")
    return prof, render.render(prof, planner.check(prof))


def test_a_canary_of_copies_across_nodes_is_the_first_rayclusters_under_canary_names_and_track() -> None:
    prof, objects = across_nodes({"replicas": 3, "canary": {"steps": [{"copies": 1}, {"copies": 2}]}})
    name = prof.metadata.name
    before = copy.deepcopy(objects)
    groups = [o for o in objects if o["kind"] == "RayCluster"]
    canaries = canary_workload.workloads(objects, name, 2)
    assert objects == before, "deriving the canary changed the rendered release"
    assert [o["kind"] for o in canaries] == ["NetworkPolicy", "RayCluster", "RayCluster"]  # denyEgress: a policy
    for rendered_copy, canary in zip(groups[:2], canaries[1:], strict=True):
        stem, index = rendered_copy["metadata"]["name"].rsplit("-", 1)
        assert canary["metadata"]["name"] == f"{stem}-c{index}" == canary_workload.canary_copy_name(stem + "-" + index)
        assert canary["metadata"]["labels"] == {
            **rendered_copy["metadata"]["labels"],
            conventions.TRACK_LABEL: "canary",
        }
        spec, rendered_spec = canary["spec"], rendered_copy["spec"]
        templates = [spec["headGroupSpec"]["template"], spec["workerGroupSpecs"][0]["template"]]
        for template, rendered_template in zip(
            templates,
            [rendered_spec["headGroupSpec"]["template"], rendered_spec["workerGroupSpecs"][0]["template"]],
            strict=True,
        ):
            labels = template["metadata"]["labels"]
            assert labels[conventions.COPY_LABEL] == canary["metadata"]["name"]
            assert labels[conventions.TRACK_LABEL] == "canary"
            assert labels[conventions.RELEASE_LABEL] == name  # the Service, the PodMonitor and prune find it
            # One pod of the canary copy per node, and the copy on one fabric: the terms name the canary copy.
            text = str(template["spec"]["affinity"])
            assert canary["metadata"]["name"] in text and f"'{rendered_copy['metadata']['name']}'" not in text
            assert template["spec"]["containers"] == rendered_template["spec"]["containers"], "the new revision whole"
    assert canary_workload.group_copies(objects, 0) == []
    with pytest.raises(ValueError, match="renders 3"):
        canary_workload.group_copies(objects, 4)


def test_a_kuberay_canary_weighed_on_a_route_is_refused_at_validation() -> None:
    doc = yaml.safe_load((ROOT / "profiles" / "llama31-405b-2node.yaml").read_text())
    doc["rollout"] = {
        **doc["rollout"],
        "replicas": 2,
        "canary": {"steps": [{"copies": 1}], "traffic": "httpRoute", "httpRoute": {"parentRefs": [{"name": "gw"}]}},
    }
    with pytest.raises(errors.InvalidProfile) as refused:
        profile.loads(yaml.safe_dump(doc), "405b.yaml")
    assert "rollout.canary.traffic" in str(refused.value) and "KubeRay" in str(refused.value), refused.value


HTTP_ROUTE = """  traffic: httpRoute
  httpRoute:
    parentRefs: [{name: gw, namespace: gateways, sectionName: https}]
    hostnames: [llm.example]
"""


def test_traffic_http_route_runs_and_renders_the_route_to_the_release_service() -> None:
    prof, objects = rendered(CANARY + HTTP_ROUTE)
    name = prof.metadata.name
    route = canary_workload.route_of(objects, name)
    assert route is not None and route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["metadata"]["labels"][conventions.RELEASE_LABEL] == name
    (ref,) = route["spec"]["parentRefs"]
    assert ref == {
        "group": "gateway.networking.k8s.io",
        "kind": "Gateway",
        "name": "gw",
        "namespace": "gateways",
        "sectionName": "https",
    }
    assert route["spec"]["hostnames"] == ["llm.example"]
    (service,) = [o for o in objects if o["kind"] == "Service"]
    port = service["spec"]["ports"][0]["port"]
    assert route["spec"]["rules"] == [{"backendRefs": [{"name": name, "port": port}]}]  # at rest: one backend
    assert [o["kind"] for o in objects][-1] == "HTTPRoute"  # after the Service it routes to
    assert canary_workload.route_of(rendered()[1], name) is None  # traffic service renders none


def test_the_sides_narrow_the_release_service_and_the_route_weighs_them() -> None:
    prof, objects = rendered(CANARY + HTTP_ROUTE)
    name = prof.metadata.name
    service = canary_workload.service_of(objects, name)
    assert service is not None and canary_workload.service_port(service) == 8000
    # The new revision's Service, with the live revision's port on the stable side (it served on 8001).
    stable, canary = canary_workload.side_services(service, name, "5d9f7c", 8001)
    assert (stable["metadata"]["name"], canary["metadata"]["name"]) == canary_workload.side_service_names(name)
    assert canary["metadata"]["name"] == canary_workload.workload_name(name)
    selector = service["spec"]["selector"]
    assert stable["spec"]["selector"] == {**selector, canary_workload.POD_TEMPLATE_HASH: "5d9f7c"}
    assert canary["spec"]["selector"] == {**selector, conventions.TRACK_LABEL: "canary"}
    assert canary_workload.service_port(stable) == 8001 and canary_workload.service_port(canary) == 8000
    assert stable["metadata"]["labels"] == canary["metadata"]["labels"] == service["metadata"]["labels"]
    route = canary_workload.route_of(objects, name)
    assert route is not None
    weighted = canary_workload.weighted_route(route, name, (8001, 8000), 25)
    assert weighted["spec"]["rules"] == [
        {
            "backendRefs": [
                {"name": f"{name}-stable", "port": 8001, "weight": 75},
                {"name": f"{name}-canary", "port": 8000, "weight": 25},
            ]
        }
    ]
    assert weighted["spec"]["parentRefs"] == route["spec"]["parentRefs"]
    assert route["spec"]["rules"][0]["backendRefs"] == [{"name": name, "port": 8000}], "weighing changed the input"


@pytest.mark.parametrize(("copies", "replicas", "percent"), [(1, 2, 50), (1, 4, 25), (1, 300, 1), (3, 3, 100)])
def test_the_canary_weight_is_its_share_of_the_copies_and_never_zero(copies: int, replicas: int, percent: int) -> None:
    assert canary_route.canary_percent(copies, replicas) == percent


def test_the_canary_has_the_new_network_policy_for_its_pods_alone() -> None:
    prof, objects = rendered()
    name = prof.metadata.name
    (stable,) = [o for o in objects if o["kind"] == "NetworkPolicy"]
    policy = canary_workload.network_policy(objects, name)
    assert policy is not None and policy["metadata"]["name"] == f"{name}-canary"
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector == {**stable["spec"]["podSelector"]["matchLabels"], conventions.TRACK_LABEL: "canary"}
    assert (
        policy["spec"]["ingress"] == stable["spec"]["ingress"] and policy["spec"]["egress"] == stable["spec"]["egress"]
    )
    kinds = [o["kind"] for o in canary_workload.workloads(objects, name, 1)]
    assert kinds == ["NetworkPolicy", "Deployment"], kinds  # the policy before the first canary pod
    without = [o for o in objects if o["kind"] != "NetworkPolicy"]
    assert canary_workload.network_policy(without, name) is None
    assert [o["kind"] for o in canary_workload.workloads(without, name, 1)] == ["Deployment"]
