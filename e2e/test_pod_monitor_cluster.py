"""monitoring.podMonitor and monitoring.alerts on the real control plane, with the Prometheus
Operator's own PodMonitor and PrometheusRule CRDs.

The CRD comes from the prometheus-operator module build.sh downloads (tools/prometheus-operator),
so the API server checks our rendered PodMonitor against the schema Prometheus users run. No
Prometheus scrapes here; what is checked is what Prometheus would act on: the object is accepted,
its selector picks exactly the release's serving pods, its port name is one those pods declare,
and turning it off removes it. Without the CRD the apply is refused before any write. The
PrometheusRule is accepted by the operator's schema, carries the rules `render --format rules`
prints (which e2e/test_alert_rules.py runs through promtool), and goes when the alerts are off.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import bootstrap  # e2e/cluster, put on the path by conftest
import kubernetes
import pytest
from deployhelpers import ReleaseEnv, profile, wait_until

GROUP, VERSION, PLURAL = "monitoring.coreos.com", "v1", "podmonitors"


def _crd_served(api: kubernetes.client.ApiClient, name: str) -> bool:
    try:
        crd = kubernetes.client.ApiextensionsV1Api(api).read_custom_resource_definition(name)
    except kubernetes.client.ApiException as e:
        if e.status == 404:
            return False
        raise
    return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])


def _crd_gone(api: kubernetes.client.ApiClient, name: str) -> bool:
    try:
        kubernetes.client.ApiextensionsV1Api(api).read_custom_resource_definition(name)
    except kubernetes.client.ApiException as e:
        return e.status == 404
    return False


@pytest.fixture
def pod_monitor_crd(api_client: kubernetes.client.ApiClient) -> Iterator[dict[str, Any]]:
    """The CRD, absent when the test starts (a crashed run may have left it) and removed after."""
    yield from _absent_around(api_client, bootstrap.pod_monitor_crd())


@pytest.fixture
def prometheus_rule_crd(api_client: kubernetes.client.ApiClient) -> Iterator[dict[str, Any]]:
    yield from _absent_around(api_client, bootstrap.prometheus_rule_crd())


def _absent_around(api_client: kubernetes.client.ApiClient, crd: dict[str, Any]) -> Iterator[dict[str, Any]]:
    name = crd["metadata"]["name"]
    extensions = kubernetes.client.ApiextensionsV1Api(api_client)
    if not _crd_gone(api_client, name):
        extensions.delete_custom_resource_definition(name)
        wait_until(lambda: _crd_gone(api_client, name), 60, f"a leftover {name} removed")
    yield crd
    if not _crd_gone(api_client, name):
        extensions.delete_custom_resource_definition(name)
        wait_until(lambda: _crd_gone(api_client, name), 60, f"{name} removed")


def _monitored(env: ReleaseEnv, **pod_monitor: Any) -> dict[str, Any]:
    doc = profile(env.namespace)
    doc["monitoring"] = {"podMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}, **pod_monitor}}
    return doc


def _pod_monitors(env: ReleaseEnv, plural: str = PLURAL) -> list[dict[str, Any]]:
    listed = kubernetes.client.CustomObjectsApi(env.api).list_namespaced_custom_object(
        GROUP, VERSION, env.namespace, plural
    )
    items: list[dict[str, Any]] = listed["items"]
    return items


def test_without_the_crd_the_apply_is_refused_before_any_write(
    env: ReleaseEnv, pod_monitor_crd: dict[str, Any]
) -> None:
    result = env.apply(_monitored(env))
    assert result.code != 0, result.stdout + result.stderr
    message = result.json["error"]
    assert "does not serve PodMonitor" in message and "monitoring.podMonitor.enabled" in message, message
    assert "Nothing was changed" in message
    assert env.deployment() is None


def test_the_pod_monitor_passes_the_operators_schema_selects_the_serving_pods_and_goes_when_disabled(
    env: ReleaseEnv, pod_monitor_crd: dict[str, Any]
) -> None:
    kubernetes.utils.create_from_dict(env.api, pod_monitor_crd)
    name = pod_monitor_crd["metadata"]["name"]
    wait_until(lambda: _crd_served(env.api, name), 60, "the PodMonitor CRD established")

    result = env.apply(_monitored(env, interval="15s"))
    assert result.code == 0, result.stdout + result.stderr
    (monitor,) = _pod_monitors(env)
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["path"] == "/metrics" and endpoint["interval"] == "15s"

    # What Prometheus would scrape: the pods the selector picks, on a port they declare by name.
    selector = ",".join(f"{k}={v}" for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    pods = kubernetes.client.CoreV1Api(env.api).list_namespaced_pod(env.namespace, label_selector=selector).items
    serving = [p for p in pods if p.metadata.deletion_timestamp is None]
    assert len(serving) == env.deployment().spec.replicas, [p.metadata.name for p in pods]
    for pod in serving:
        ports = {port.name for c in pod.spec.containers for port in c.ports or []}
        assert endpoint["port"] in ports, (pod.metadata.name, ports)

    # Turned off, the next apply prunes it like any other object the release no longer renders.
    off = _monitored(env)
    off["monitoring"]["podMonitor"]["enabled"] = False
    again = env.apply(off)
    assert again.code == 0, again.stdout + again.stderr
    assert _pod_monitors(env) == []


def test_the_alerts_pass_the_operators_schema_hold_the_rendered_rules_and_go_when_disabled(
    env: ReleaseEnv, pod_monitor_crd: dict[str, Any], prometheus_rule_crd: dict[str, Any]
) -> None:
    doc = _monitored(env)
    doc["monitoring"]["alerts"] = {"enabled": True, "labels": {"release": "kube-prometheus-stack"}}
    # Without the PrometheusRule CRD (the PodMonitor's is there), refused before any write.
    kubernetes.utils.create_from_dict(env.api, pod_monitor_crd)
    wait_until(lambda: _crd_served(env.api, pod_monitor_crd["metadata"]["name"]), 60, "the PodMonitor CRD")
    refused = env.apply(doc)
    assert refused.code != 0 and "does not serve PrometheusRule" in refused.json["error"], refused.stderr
    assert env.deployment() is None

    kubernetes.utils.create_from_dict(env.api, prometheus_rule_crd)
    wait_until(lambda: _crd_served(env.api, prometheus_rule_crd["metadata"]["name"]), 60, "the PrometheusRule CRD")
    result = env.apply(doc)
    assert result.code == 0, result.stdout + result.stderr
    (rule,) = _pod_monitors(env, "prometheusrules")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["metadata"]["annotations"]["deployctl.dev/metric-table"].startswith("vllm ")
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert {"DeployctlErrorRateHigh", "DeployctlCopiesMissing", "DeployctlKVCacheSaturated"} <= set(alerts), alerts
    (monitor,) = _pod_monitors(env)
    assert monitor["spec"]["podTargetLabels"] == ["deployctl.dev/release", "deployctl.dev/track"]

    doc["monitoring"]["alerts"]["enabled"] = False
    again = env.apply(doc)
    assert again.code == 0, again.stdout + again.stderr
    assert _pod_monitors(env, "prometheusrules") == []
