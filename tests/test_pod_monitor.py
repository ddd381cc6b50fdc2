"""The profile's monitoring.podMonitor: the PodMonitor deployctl renders, per engine, and its bad input.

The chart's side (the same object from `helm template`) is in tests/test_chart.py.
"""

from __future__ import annotations

import pathlib
from typing import Any

import click.testing
import pytest
import yaml

from orchestrator import errors
from orchestrator.cli import app as cli
from orchestrator.plan import planner
from orchestrator.profile import model as profile
from orchestrator.render import manifests as render

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROFILES = ROOT / "profiles"
MONITORED = {"enabled": True, "interval": "15s", "labels": {"release": "kube-prometheus-stack"}}


def _with_monitoring(path: pathlib.Path, pod_monitor: dict[str, Any] | None) -> profile.Profile:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if pod_monitor is not None:
        data["monitoring"] = {"podMonitor": pod_monitor}
    return profile.loads(yaml.safe_dump(data))


def _objects(prof: profile.Profile) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in render.render(prof, planner.plan(prof))}


@pytest.mark.parametrize(
    ("example", "path"),
    [
        ("prod-tp4.yaml", "/metrics"),
        ("tgi-tp4.yaml", "/metrics"),
        ("sglang-tp4.yaml", "/metrics"),  # deployctl passes --enable-metrics
        ("trtllm-tp4.yaml", "/prometheus/metrics"),  # its /metrics is JSON iteration stats
        ("llama31-405b-2node.yaml", "/metrics"),  # a RayCluster copy: only the head has the http port
    ],
)
def test_pod_monitor_scrapes_the_engines_metrics_path_on_the_serving_port(example: str, path: str) -> None:
    prof = _with_monitoring(PROFILES / example, MONITORED)
    objects = _objects(prof)
    monitor = objects["PodMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["name"] == prof.metadata.name
    assert monitor["metadata"]["namespace"] == prof.metadata.namespace
    assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "http", "path": path, "interval": "15s"}]
    # The name of the port the serving container really has.
    serving = objects.get("Deployment") or objects["RayCluster"]
    template = (
        serving["spec"]["template"] if "template" in serving["spec"] else serving["spec"]["headGroupSpec"]["template"]
    )
    assert [p["name"] for p in template["spec"]["containers"][0]["ports"]] == ["http"]
    # Selects the release's pods as the Service's selector does, less a copy's leader role.
    assert monitor["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    assert monitor["spec"]["selector"]["matchLabels"].items() <= objects["Service"]["spec"]["selector"].items()


def test_pod_monitor_labels_reach_prometheus_beside_ours() -> None:
    prof = _with_monitoring(PROFILES / "prod-tp4.yaml", {**MONITORED, "labels": {"release": "kps"}})
    meta = _objects(prof)["PodMonitor"]["metadata"]
    assert meta["labels"]["release"] == "kps"
    assert meta["labels"][render.RELEASE_LABEL] == prof.metadata.name


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        # The PodMonitor is applied last: a label the API server refuses would fail after the workload.
        ({"release": "kube prom stack"}, "is not a valid label value"),
        ({"team name": "x"}, "is not a valid label key"),
        ({render.RELEASE_LABEL: "someone-else"}, "are set by deployctl"),
    ],
)
def test_pod_monitor_labels_the_api_server_or_deployctl_would_refuse_are_refused_first(
    tmp_path: pathlib.Path, labels: dict[str, str], message: str
) -> None:
    data = yaml.safe_load((PROFILES / "prod-tp4.yaml").read_text(encoding="utf-8"))
    data["monitoring"] = {"podMonitor": {**MONITORED, "labels": labels}}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    result = click.testing.CliRunner().invoke(cli.main, ["validate", str(path)], prog_name="deployctl")
    assert result.exit_code == errors.ExitCode.INVALID_PROFILE, result.output
    assert "monitoring.podMonitor.labels" in result.stderr and message in result.stderr, result.stderr


@pytest.mark.parametrize("pod_monitor", [None, {"enabled": False, "interval": "1m"}])
def test_no_pod_monitor_unless_the_profile_enables_it(pod_monitor: dict[str, Any] | None) -> None:
    prof = _with_monitoring(PROFILES / "prod-tp4.yaml", pod_monitor)
    assert "PodMonitor" not in _objects(prof)
    # Its values still carry the engine's path, for a chart user who turns it on in values.
    assert render.helm_values(prof, planner.plan(prof))["podMonitor"]["path"] == "/metrics"


def test_turning_the_pod_monitor_on_changes_no_pod_template() -> None:
    off = _objects(_with_monitoring(PROFILES / "llama31-405b-2node.yaml", None))
    on = _objects(_with_monitoring(PROFILES / "llama31-405b-2node.yaml", MONITORED))
    # A copy's name is a hash of its pod templates: equal names mean no copy is replaced (reloaded).
    assert on["RayCluster"]["metadata"]["name"] == off["RayCluster"]["metadata"]["name"]


@pytest.mark.parametrize("interval", ["30 seconds", "30", "1.5m", "", "-1s"])
def test_an_interval_prometheus_cannot_read_is_refused_naming_the_field_and_line(
    tmp_path: pathlib.Path, interval: str
) -> None:
    data = yaml.safe_load((PROFILES / "prod-tp4.yaml").read_text(encoding="utf-8"))
    data["monitoring"] = {"podMonitor": {"enabled": True, "interval": interval}}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.strip().startswith("interval:"))
    result = click.testing.CliRunner().invoke(cli.main, ["render", str(path)], prog_name="deployctl")
    assert result.exit_code == errors.ExitCode.INVALID_PROFILE
    assert "monitoring.podMonitor.interval" in result.stderr and f"line {line}" in result.stderr
    assert "not a Prometheus duration" in result.stderr and "30s" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("interval", ["30s", "1m", "1m30s", "500ms", "1h", "0"])
def test_prometheus_durations_are_accepted(interval: str) -> None:
    prof = _with_monitoring(PROFILES / "prod-tp4.yaml", {"enabled": True, "interval": interval})
    assert _objects(prof)["PodMonitor"]["spec"]["podMetricsEndpoints"][0]["interval"] == interval
