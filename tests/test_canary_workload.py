"""The canary's Deployment beside the stable one, and the canaries this deployctl refuses to run
(before any write) rather than deploy every copy at once."""

from __future__ import annotations

import copy

import pytest
from test_canary_profile import with_rollout

from orchestrator import conventions
from orchestrator.apply import canary as canary_steps
from orchestrator.plan import planner
from orchestrator.profile import model as profile
from orchestrator.render import canary as canary_workload
from orchestrator.render import manifests as render

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


def test_a_canary_this_deployctl_does_not_run_is_refused_naming_what() -> None:
    extra = "  traffic: httpRoute\n  httpRoute: {parentRefs: [{name: gw}]}\n"
    prof = profile.loads(with_rollout(CANARY + extra), "canary.yaml")
    refusal = canary_steps.not_run(prof)
    assert refusal is not None and "traffic httpRoute" in refusal and "Nothing was written" in refusal, refusal


def test_the_prometheus_source_runs() -> None:
    extra = "  metrics: {source: prometheus, prometheusUrl: 'http://prom:9090'}\n"
    prof = profile.loads(with_rollout(CANARY + extra, monitoring={"podMonitor": {"enabled": True}}), "canary.yaml")
    assert canary_steps.not_run(prof) is None


def test_a_single_pod_canary_on_pods_and_a_service_runs() -> None:
    prof, _ = rendered()
    assert canary_steps.not_run(prof) is None
    assert canary_steps.not_run(profile.loads(with_rollout("replicas: 2"), "plain.yaml")) is None


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
