"""The one kind table (orchestrator.kube.kinds): what applyset, uninstall, confine and the Role
deployctl renders for itself derive from it, held equal to the lists they wrote out before."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.apply import applyset, uninstall
from orchestrator.kube import kinds
from orchestrator.render import manifests as render

_WRITE_VERBS = ("get", "list", "watch", "patch", "delete")
_MONITOR_VERBS = ("get", "list", "patch", "delete")  # no watch: nothing follows a PodMonitor
_CORE = (
    ("apps", "deployments"),
    ("", "services"),
    ("", "serviceaccounts"),
    ("policy", "poddisruptionbudgets"),
    ("networking.k8s.io", "networkpolicies"),
)


def test_the_release_kinds_and_their_orders_are_what_applyset_and_uninstall_wrote_out() -> None:
    assert applyset.MANAGED_KINDS == (
        "Deployment", "Service", "ServiceAccount", "PodDisruptionBudget", "NetworkPolicy",
        "RayCluster", "LeaderWorkerSet", "PodMonitor", "PrometheusRule", "HTTPRoute",
    )  # fmt: skip
    assert applyset.OPTIONAL_KINDS == ("RayCluster", "LeaderWorkerSet", "PodMonitor", "PrometheusRule", "HTTPRoute")
    assert uninstall.DELETE_ORDER == (  # the route first: a Gateway stops sending before the Service goes
        "HTTPRoute", "PrometheusRule", "PodMonitor", "LeaderWorkerSet", "RayCluster", "Deployment",
        "PodDisruptionBudget", "Service", "NetworkPolicy", "ServiceAccount",
    )  # fmt: skip


def test_the_access_apply_checks_is_the_list_it_wrote_out() -> None:
    assert [
        *[(verb, group, resource, "") for group, resource in _CORE for verb in _WRITE_VERBS],
        ("create", "", "configmaps", ""),
        ("list", "", "configmaps", ""),
        ("get", "coordination.k8s.io", "leases", ""),
        ("create", "coordination.k8s.io", "leases", ""),
        ("update", "coordination.k8s.io", "leases", ""),
        ("list", "apps", "replicasets", ""),
        ("watch", "apps", "replicasets", ""),
        ("list", "", "pods", ""),
        ("watch", "", "pods", ""),
        ("get", "", "pods", "log"),
        ("create", "", "pods", "portforward"),
        ("list", "", "events", ""),
        ("watch", "", "events", ""),
    ] == applyset.REQUIRED_ACCESS
    assert {
        "RayCluster": [(verb, "ray.io", "rayclusters", "") for verb in _WRITE_VERBS],
        "LeaderWorkerSet": [(verb, "leaderworkerset.x-k8s.io", "leaderworkersets", "") for verb in _WRITE_VERBS],
        "PodMonitor": [
            (verb, "monitoring.coreos.com", "podmonitors", "") for verb in ("get", "list", "patch", "delete")
        ],
        "PrometheusRule": [
            (verb, "monitoring.coreos.com", "prometheusrules", "") for verb in ("get", "list", "patch", "delete")
        ],
        "HTTPRoute": [
            *[(verb, "gateway.networking.k8s.io", "httproutes", "") for verb in ("get", "list", "patch", "delete")],
            ("list", "discovery.k8s.io", "endpointslices", ""),
        ],
    } == applyset.GROUP_ACCESS


@pytest.mark.parametrize("wait", [True, False])
def test_the_access_uninstall_checks_is_the_list_it_wrote_out(wait: bool) -> None:
    request = uninstall.Request("chat", wait=wait)
    expected = [(verb, group, resource, "") for group, resource in _CORE for verb in ("list", "delete")]
    expected += [("list", "ray.io", "rayclusters", ""), ("delete", "ray.io", "rayclusters", "")]
    expected += [
        ("list", "", "configmaps", ""),
        ("create", "", "configmaps", ""),
        ("get", "coordination.k8s.io", "leases", ""),
        ("create", "coordination.k8s.io", "leases", ""),
        ("update", "coordination.k8s.io", "leases", ""),
    ]
    if wait:
        expected += [("list", "", "pods", ""), ("watch", "", "pods", "")]
    assert uninstall._required_access(request, {"RayCluster"}) == expected


@pytest.mark.parametrize(
    ("kind", "namespace", "name", "sub", "path"),
    [
        ("Pod", "ns", "p", "log", "/api/v1/namespaces/ns/pods/p/log"),
        ("Pod", None, None, None, "/api/v1/pods"),
        ("Deployment", "ns", None, None, "/apis/apps/v1/namespaces/ns/deployments"),
        ("Namespace", "ignored", "ns", None, "/api/v1/namespaces/ns"),
        ("InferencePolicy", None, "p", None, "/apis/deployctl.dev/v1/inferencepolicies/p"),
    ],
)
def test_a_kind_has_its_rest_path(
    kind: str, namespace: str | None, name: str | None, sub: str | None, path: str
) -> None:
    assert kinds.ref_of(kind).path(namespace, name, sub) == path


def test_the_group_of_a_kind_is_rbacs_name_for_it() -> None:
    assert kinds.ref_of("Pod").group == ""
    assert kinds.ref_of("Deployment").group == "apps"
    assert kinds.ref_of("Lease").group == "coordination.k8s.io"


def _role_rules(**kwargs: Any) -> list[dict[str, Any]]:
    (role,) = [o for o in render.rbac("inference", **kwargs) if o["kind"] == "Role"]
    rules: list[dict[str, Any]] = role["rules"]
    return rules


def test_the_rendered_role_grants_exactly_the_resources_the_table_derives() -> None:
    granted = {(g, r) for rule in _role_rules() for g in rule["apiGroups"] for r in rule["resources"]}
    release = {(kinds.ref_of(k).group, kinds.ref_of(k).plural) for k in kinds.RELEASE_KINDS}
    support = {(kinds.ref_of(k).group, kinds.ref_of(k).plural) for k in ("ConfigMap", "Lease", "Namespace")}
    watched = {(kinds.ref_of(k).group, kinds.ref_of(k).plural) for k in ("ReplicaSet", "Pod", "Event")}
    pods = {("", f"pods/{sub}") for sub in ("log", "portforward")}
    endpoints = {("discovery.k8s.io", "endpointslices")}  # a canary weighed on an HTTPRoute waits for them
    assert granted == release | support | watched | pods | endpoints


def test_the_rendered_role_grants_every_access_apply_and_uninstall_check() -> None:
    rules = _role_rules()
    wanted = list(applyset.REQUIRED_ACCESS) + [a for group in applyset.GROUP_ACCESS.values() for a in group]
    wanted += uninstall._required_access(uninstall.Request("chat"), set(kinds.OPTIONAL_KINDS))
    wanted += applyset.WARMUP_ACCESS  # a Role for any profile: one with rollout.warmup too
    denied = [a for a in wanted if not any(kinds.rule_grants(rule, *a) for rule in rules)]
    assert denied == []
    writes = ("get", "list", "create", "patch", "update", "delete")  # applied, pruned and deleted
    release = [a for kind in kinds.RELEASE_KINDS for a in kinds.access([kind], writes)]
    assert [a for a in release if not any(kinds.rule_grants(rule, *a) for rule in rules)] == []
