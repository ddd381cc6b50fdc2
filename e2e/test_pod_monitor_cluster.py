"""monitoring.podMonitor and monitoring.alerts on the real control plane, with the Prometheus
Operator's own PodMonitor and PrometheusRule CRDs.

The CRD comes from the prometheus-operator module build.sh downloads (tools/prometheus-operator),
so the API server checks our rendered PodMonitor against the schema Prometheus users run. What is
checked is what Prometheus would act on: the object is accepted, its selector picks exactly the
release's serving pods, its port name is one those pods declare, and turning it off removes it.
Without the CRD the apply is refused before any write. The PrometheusRule is accepted by the
operator's schema, carries the rules `render --format rules` prints (which e2e/test_alert_rules.py
runs through promtool), and goes when the alerts are off.

No operator runs here, so the last test stands in for it: a real Prometheus (e2e/promserver.py)
scrapes each pod's server with the labels the operator would give the PodMonitor's series, and the
canary reads its live traffic from that Prometheus (rollout.canary.metrics.source prometheus).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import bootstrap  # e2e/cluster, put on the path by conftest
import kubernetes
import pytest
from deployhelpers import GOOD_TTFT_MS, MODEL, ReleaseEnv, Traffic, profile, wait_until
from promserver import Prometheus

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


def test_prometheus_as_the_canary_source_judges_a_slower_canary_and_removes_it(
    env: ReleaseEnv, pod_monitor_crd: dict[str, Any], simulator: Callable[..., Any], tmp_path: Path
) -> None:
    """A real Prometheus scrapes every pod's server each second, labelled as the PodMonitor's series
    are; the canary's windows are PromQL against it. The new revision serves on pod port 8001, where a
    simulator answers ten times slower: its smoke run passes, Prometheus' numbers fail it on p95 TTFT,
    and the canary is removed with the stable Deployment never written."""
    kubernetes.utils.create_from_dict(env.api, pod_monitor_crd)
    wait_until(lambda: _crd_served(env.api, pod_monitor_crd["metadata"]["name"]), 60, "the PodMonitor CRD")
    slow = simulator(model=MODEL, ttft_ms=GOOD_TTFT_MS * 10)
    env.forward_8001(slow.port)
    stable = _monitored(env, interval="1s")
    stable["rollout"] = {**stable["rollout"], "replicas": 2}
    first = env.apply(stable)
    assert first.code == 0, first.stdout + first.stderr
    before = env.deployment()

    with Prometheus(tmp_path, scrape_interval="1s") as prometheus, PodTargets(env, prometheus, slow.port):
        canary = {
            "replicas": 2,
            "canary": {
                "steps": [{"copies": 1, "analysis": {"window": "20s", "minRequests": 10}}],
                "metrics": {"source": "prometheus", "prometheusUrl": prometheus.url},
            },
        }
        changed = {**stable, "engine": {**stable["engine"], "port": 8001}, "rollout": {**stable["rollout"], **canary}}
        refused = env.apply(changed)  # the profile's author chose the URL: the operator must allow its host
        assert refused.code == 2 and "allow-gate-host 127.0.0.1" in refused.json["error"], refused.stderr
        assert env.deployment("llm-canary") is None
        with Traffic([env.good_port, slow.port]) as traffic:
            failed = env.apply(changed, "--allow-gate-host", "127.0.0.1", timeout=400)
        ever_up = f'max by (pod) (max_over_time(up{{namespace="{env.namespace}"}}[10m])) == 1'
        scraped = {s["metric"]["pod"] for s in prometheus.query(ever_up)}
    assert failed.code == 6, failed.stdout + failed.stderr
    assert failed.json["failure"]["class"] == "canary_failed" and "p95_ttft_ms" in failed.json["message"], failed.json
    assert traffic.failed == 0, traffic
    assert len(scraped) == 3, f"Prometheus scraped {scraped}: two stable pods and the canary's"
    assert env.deployment().metadata.generation == before.metadata.generation
    assert env.deployment("llm-canary") is None
    evidence = env.record(2)["canary"]
    assert evidence["source"] == "prometheus" and evidence["result"] == "failed", evidence
    analysis = evidence["steps"][0]["analysis"]
    assert len(analysis["canary"]["pods"]) == 1 and len(analysis["stable"]["pods"]) == 2, analysis
    assert analysis["canary"]["requests"] >= 10 and analysis["stable"]["requests"] >= 10, analysis
    checks = {c["metric"]: c for c in analysis["checks"] if c["source"].startswith("ratio")}
    assert checks["p95_ttft_ms"]["passed"] is False, checks
    assert checks["p95_ttft_ms"]["canary"] > 3 * checks["p95_ttft_ms"]["limit"] / 1.2, checks


class PodTargets:
    """While it runs, Prometheus scrapes every pod of the release: a canary pod the simulator on
    ``canary_port``, the others the healthy one, each with the PodMonitor's labels."""

    def __init__(self, env: ReleaseEnv, prometheus: Prometheus, canary_port: int) -> None:
        self.env, self.prometheus, self.canary_port = env, prometheus, canary_port
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> None:
        self._thread.start()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        core = kubernetes.client.CoreV1Api(self.env.api)
        while not self._stop.is_set():
            pods = core.list_namespaced_pod(self.env.namespace, label_selector="deployctl.dev/release=llm").items
            targets = []
            for pod in pods:
                labels = pod.metadata.labels or {}
                canary = labels.get("deployctl.dev/track") == "canary"
                # As the operator labels a PodMonitor's targets, the pod labels it copies included.
                target_labels = {"namespace": self.env.namespace, "pod": pod.metadata.name, "endpoint": "http"}
                target_labels.update({"container": "vllm", "deployctl_dev_release": "llm"})
                if canary:
                    target_labels["deployctl_dev_track"] = "canary"
                targets.append((self.canary_port if canary else self.env.good_port, target_labels))
            self.prometheus.scrape(targets)
            self._stop.wait(0.5)
