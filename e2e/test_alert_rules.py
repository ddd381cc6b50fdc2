"""The alert rules `deployctl render` writes, checked and run by the real promtool, on series recorded
from each engine mode of the simulator; the PrometheusRule through the operator's real CRD.

promtool is built from github.com/prometheus/prometheus by e2e/cluster/build.sh. The rules are
what `deployctl render --format rules` prints for each engine's example profile; `promtool check
rules` lints them. Then `promtool test rules` replays a recorded scrape: every sample of the
simulator's /metrics, after traffic the test chose, becomes an input series that repeats that
traffic each minute (a counter grows by its recorded value per minute, a gauge holds its value),
labelled as the release's PodMonitor labels them. An alert must fire exactly when the recorded
traffic breaks its condition: half the requests failing, TTFT far over the SLO, a full KV cache, a
growing queue, copies missing. The dashboard's queries are held to the metric table in
tests/test_observability.py; here promtool also parses each of them.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from deployhelpers import deployctl

from orchestrator.engines import metric_table
from orchestrator.gate import exposition

ROOT = Path(__file__).resolve().parent.parent
PROMTOOL = ROOT / ".cache" / "bin" / "promtool"
NAMESPACE, RELEASE = "inference", "llm"
EXAMPLES = {"vllm": "prod-tp4.yaml", "sglang": "sglang-tp4.yaml", "tgi": "tgi-tp4.yaml", "trtllm": "trtllm-tp4.yaml"}
MINUTES = 40  # of replayed traffic: longer than every alert's `for` plus its window
CHAT = {"model": "m", "messages": [{"role": "user", "content": "one two three"}], "max_tokens": 4, "stream": True}
SETS = ("monitoring.podMonitor.enabled=true", "monitoring.alerts.enabled=true")


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PROMTOOL), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def rendered(tmp_path: Path, example: str, *extra: str, fmt: str = "rules") -> Any:
    sets = [
        arg
        for s in (*SETS, f"metadata.name={RELEASE}", f"metadata.namespace={NAMESPACE}", *extra)
        for arg in ("--set", s)
    ]
    result = deployctl(Path(), "render", str(ROOT / "profiles" / example), *sets, "--format", fmt, "-o", "json")
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)


def traffic(sim: Any, requests: int = 12) -> None:
    for _ in range(requests):
        body = json.dumps(CHAT).encode()
        try:
            with urllib.request.urlopen(
                urllib.request.Request(
                    f"{sim.url}/v1/chat/completions", data=body, headers={"content-type": "application/json"}
                ),
                timeout=60,
            ) as answer:
                answer.read()
        except urllib.error.HTTPError:
            pass  # the failures the test asked for


def recorded(sim: Any, path: str) -> dict[str, exposition.Family]:
    traffic(sim)
    with urllib.request.urlopen(sim.url + path, timeout=30) as answer:
        return exposition.parse(answer.read().decode())


def input_series(
    families: dict[str, exposition.Family], overrides: dict[str, str], copies_up: int
) -> list[dict[str, str]]:
    """Each recorded sample as a promtool input series of MINUTES one-minute steps, as the PodMonitor labels it."""
    out = []
    for family in families.values():
        for sample in family.samples:
            labels = {**sample.labels, "namespace": NAMESPACE, "deployctl_dev_release": RELEASE, "pod": "llm-0"}
            if "le" in labels:  # Prometheus 3 stores bucket bounds in float form
                labels["le"] = _float_form(labels["le"])
            grows = family.kind == "counter" or sample.name.endswith(("_bucket", "_count", "_sum"))
            values = overrides.get(family.name) or (
                f"0+{sample.value:g}x{MINUTES}" if grows else f"{sample.value:g}x{MINUTES}"
            )
            out.append({"series": _series(sample.name, labels), "values": values})
    for index in range(copies_up):
        labels = {"namespace": NAMESPACE, "deployctl_dev_release": RELEASE, "pod": f"llm-{index}"}
        out.append({"series": _series("up", labels), "values": f"1x{MINUTES}"})
    return out


def _float_form(bound: str) -> str:
    return bound if bound == "+Inf" else repr(float(bound))


def _series(name: str, labels: dict[str, str]) -> str:
    inside = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f'{{__name__="{name}",{inside}}}'


def firing(tmp_path: Path, rules: dict[str, Any], series: list[dict[str, str]], expected: dict[str, bool]) -> None:
    """promtool test rules: at the end of the replay, each alert of ``expected`` fires or stays silent.

    promtool compares annotations exactly, after expanding their templates with the alert's value;
    `check rules` has parsed those templates, so the replay compares labels only."""
    bare = {
        "groups": [
            {**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]}
            for g in rules["groups"]
        ]
    }
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(bare))
    tests = []
    for alert, fires in expected.items():
        labels = {"namespace": NAMESPACE, "deployctl_dev_release": RELEASE}
        labels["severity"] = next(
            r["labels"]["severity"] for g in rules["groups"] for r in g["rules"] if r["alert"] == alert
        )
        if alert == "DeployctlKVCacheSaturated":
            labels["pod"] = "llm-0"
        exp = [{"exp_labels": labels}] if fires else []
        tests.append({"eval_time": f"{MINUTES}m", "alertname": alert, "exp_alerts": exp})
    unit = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": tests}],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(unit))
    result = promtool("test", "rules", "test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


@pytest.mark.parametrize("engine", sorted(EXAMPLES))
def test_promtool_accepts_each_engines_rules_and_the_dashboards_queries(tmp_path: Path, engine: str) -> None:
    rules = rendered(tmp_path, EXAMPLES[engine])
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    checked = promtool("check", "rules", "--lint=all", "--lint-fatal", "rules.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    dashboard = json.loads(rendered(tmp_path, EXAMPLES[engine], fmt="dashboard")["items"][0]["data"][f"{RELEASE}.json"])
    expressions = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    expressions += [a["expr"] for a in dashboard["annotations"]["list"]]
    assert expressions
    for expr in expressions:
        parsed = promtool("--experimental", "promql", "format", expr, cwd=tmp_path)
        assert parsed.returncode == 0, f"{expr}: {parsed.stderr}"


@pytest.mark.parametrize("engine", sorted(EXAMPLES))
def test_recorded_healthy_traffic_fires_nothing_and_failing_traffic_pages(
    tmp_path: Path, simulator: Callable[..., Any], engine: str
) -> None:
    table = metric_table.table(engine, metric_table.versions(engine)[-1])
    rules = rendered(tmp_path, EXAMPLES[engine], "gate.smoke.slo.p95_ttft_ms=<=1500", "rollout.replicas=2")
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}

    healthy = recorded(simulator(model="m", ttft_ms=5, itl_ms=2, engine=engine), table.path)
    quiet = input_series(healthy, {}, copies_up=2)
    (tmp_path / "healthy").mkdir()
    firing(tmp_path / "healthy", rules, quiet, {alert: False for alert in alerts})

    failing = recorded(simulator(model="m", ttft_ms=2500, itl_ms=2, engine=engine, failure_rate=50, seed=3), table.path)
    overrides = {}
    if (kv := table.role("kv_usage")) is not None:
        overrides[kv.family.name] = f"0.99x{MINUTES}"
    if (waiting := table.role("waiting")) is not None:
        overrides[waiting.family.name] = f"1+1x{MINUTES}"
    loud = input_series(failing, overrides, copies_up=1)
    (tmp_path / "failing").mkdir()
    firing(tmp_path / "failing", rules, loud, {alert: True for alert in alerts})
