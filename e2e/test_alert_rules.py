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
import math
import random
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
from orchestrator.gate import exposition, live_metrics

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


def samples(families: dict[str, exposition.Family]) -> list[tuple[exposition.Family, exposition.Sample]]:
    return [(family, sample) for family in families.values() for sample in family.samples]


def input_series(
    families: dict[str, exposition.Family], overrides: dict[str, str], *, flat: bool = False
) -> list[dict[str, str]]:
    """Each recorded sample as a promtool input series of MINUTES one-minute steps, labelled as the
    PodMonitor labels it on pod llm-0: a counter grows by its recorded value each minute (``flat``:
    holds it, a server that stopped), a gauge holds its value; ``overrides`` gives a family's values."""
    out = []
    for family, sample in samples(families):
        labels = {**sample.labels, "namespace": NAMESPACE, "deployctl_dev_release": RELEASE, "pod": "llm-0"}
        if "le" in labels:  # Prometheus 3 stores bucket bounds in float form
            labels["le"] = _float_form(labels["le"])
        grows = not flat and (family.kind == "counter" or sample.name.endswith(("_bucket", "_count", "_sum")))
        values = overrides.get(family.name) or (
            f"0+{sample.value:g}x{MINUTES}" if grows else f"{sample.value:g}x{MINUTES}"
        )
        out.append({"series": _series(sample.name, labels), "values": values})
    return out


def up(states: dict[str, str]) -> list[dict[str, str]]:
    """Prometheus' `up` of each pod, in promtool's notation ('1x40', '0x40', '_x5 0x10 1x25')."""
    return [
        {"series": _series("up", {"namespace": NAMESPACE, "deployctl_dev_release": RELEASE, "pod": pod}), "values": v}
        for pod, v in states.items()
    ]


def _float_form(bound: str) -> str:
    return bound if bound == "+Inf" else repr(float(bound))


def _series(name: str, labels: dict[str, str]) -> str:
    inside = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f'{{__name__="{name}",{inside}}}'


def without_successes(families: dict[str, exposition.Family], table: metric_table.MetricTable) -> None:
    """Drop what a server that never answered well would not have: engines create a counter's series
    at its first increment, so there is no success series at all, not one at zero."""
    succeeded, failed = table.role("succeeded"), table.role("failed")
    assert succeeded is not None and failed is not None
    if succeeded.family.name == failed.family.name:
        family = families[succeeded.family.name]
        family.samples = [x for x in family.samples if failed.matches(x.labels)]
    else:
        families.pop(succeeded.family.name, None)  # the simulator's TGI mode already has none


def firing(
    tmp_path: Path,
    rules: dict[str, Any],
    series: list[dict[str, str]],
    expected: dict[str, list[dict[str, str]]],
    at: tuple[int, ...] = (MINUTES,),
) -> None:
    """promtool test rules: at each minute of ``at``, each alert of ``expected`` fires for exactly the
    pods listed (``{}``: the release as a whole), or stays silent (``[]``).

    promtool compares annotations exactly, after expanding their templates with the alert's value;
    `check rules` has parsed those templates, so the replay compares labels only."""
    bare = {
        "groups": [
            {**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]}
            for g in rules["groups"]
        ]
    }
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(bare))
    severity = {r["alert"]: r["labels"]["severity"] for g in rules["groups"] for r in g["rules"]}
    tests = []
    for minute in at:
        for alert, instances in expected.items():
            base = {"namespace": NAMESPACE, "deployctl_dev_release": RELEASE, "severity": severity[alert]}
            exp = [{"exp_labels": {**base, **extra}} for extra in instances]
            tests.append({"eval_time": f"{minute}m", "alertname": alert, "exp_alerts": exp})
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


def alert_names(rules: dict[str, Any]) -> set[str]:
    return {r["alert"] for g in rules["groups"] for r in g["rules"]}


WHOLE: list[dict[str, str]] = [{}]  # an alert about the release as a whole: no pod label
THREE_UP = {"llm-0": f"1x{MINUTES}", "llm-1": f"1x{MINUTES}", "llm-2": f"1x{MINUTES}"}


@pytest.mark.parametrize("engine", sorted(EXAMPLES))
def test_recorded_traffic_pages_exactly_for_what_it_breaks(
    tmp_path: Path, simulator: Callable[..., Any], engine: str
) -> None:
    table = metric_table.table(engine, metric_table.versions(engine)[-1])
    rules = rendered(tmp_path, EXAMPLES[engine], "gate.smoke.slo.p95_ttft_ms=<=1500", "rollout.replicas=3")
    alerts = alert_names(rules)
    silent: dict[str, list[dict[str, str]]] = {alert: [] for alert in alerts}

    # Healthy traffic on three answering copies: nothing.
    healthy = recorded(simulator(model="m", ttft_ms=5, itl_ms=2, engine=engine), table.path)
    firing(tmp_path / "healthy", rules, input_series(healthy, {}) + up(THREE_UP), silent)

    # Half the requests failing, a 2.5 s TTFT against a 1.5 s SLO, a full KV cache, a growing queue,
    # and two of three pods not answering.
    slow = simulator(model="m", ttft_ms=2500, itl_ms=2, engine=engine, failure_rate=50, seed=3)
    failing = recorded(slow, table.path)
    overrides = {}
    if (kv := table.role("kv_usage")) is not None:
        overrides[kv.family.name] = f"0.99x{MINUTES}"
    if (waiting := table.role("waiting")) is not None:
        overrides[waiting.family.name] = f"1+1x{MINUTES}"
    down = {"llm-0": f"1x{MINUTES}", "llm-1": f"0x{MINUTES}", "llm-2": f"0x{MINUTES}"}
    expected = {
        "DeployctlErrorRateHigh": WHOLE,
        "DeployctlTTFTP95OverSLO": WHOLE,
        "DeployctlKVCacheSaturated": [{"pod": "llm-0"}],
        "DeployctlQueueGrowing": WHOLE,
        "DeployctlPodNotAnswering": [{"pod": "llm-1"}, {"pod": "llm-2"}],
        "DeployctlCopiesMissing": WHOLE,
        "DeployctlNoProgress": [],  # tokens keep coming out
    }
    firing(tmp_path / "failing", rules, input_series(failing, overrides) + up(down), _only(expected, alerts))

    # Every request failing: the engine never created a success series, and the ratio still reads 1.
    if "DeployctlErrorRateHigh" in alerts:
        broken = recorded(simulator(model="m", engine=engine, failure_rate=100, seed=3), table.path)
        without_successes(broken, table)
        firing(
            tmp_path / "all-failing",
            rules,
            input_series(broken, {}) + up(THREE_UP),
            {"DeployctlErrorRateHigh": WHOLE},
        )

    # Wedged: requests wait and run, nothing comes out, no request ends, every pod answers.
    if "DeployctlNoProgress" in alerts:
        held = {role.family.name: f"3x{MINUTES}" for r in ("waiting", "running") if (role := table.role(r))}
        wedged = input_series(healthy, held, flat=True) + up(THREE_UP)
        firing(tmp_path / "wedged", rules, wedged, {**silent, "DeployctlNoProgress": WHOLE})


def _only(expected: dict[str, list[dict[str, str]]], alerts: set[str]) -> dict[str, list[dict[str, str]]]:
    """The expectations of the alerts this engine's rules have, and every other alert silent."""
    return {alert: expected.get(alert, []) for alert in alerts}


def test_a_rolling_update_one_copy_at_a_time_never_pages_and_a_pod_that_stays_down_does(tmp_path: Path) -> None:
    rules = rendered(tmp_path, EXAMPLES["vllm"], "rollout.replicas=3")
    copies = {r["alert"]: r for g in rules["groups"] for r in g["rules"] if r["alert"].startswith("DeployctlPod")}
    load = int(copies["DeployctlPodNotAnswering"]["for"].removesuffix("m")) - 6  # well inside the allowance
    # Old pods a, b, c leave one at a time; each replacement answers after `load` minutes.
    steps = {}
    for index, pod in enumerate("abc"):
        leaves = 2 + index * (load + 1)
        steps[f"llm-{pod}"] = f"1x{leaves} stale"
        steps[f"llm-{pod}2"] = f"_x{leaves} 0x{load} 1x{MINUTES * 2}"
    quiet = {"DeployctlPodNotAnswering": [], "DeployctlCopiesMissing": []}
    horizon = 2 + 3 * (load + 1) + 5
    firing(tmp_path / "rollout", rules, up(steps), quiet, at=tuple(range(5, horizon, 5)))
    # The same, but the first replacement never answers: that pod pages once it has had its allowance.
    steps["llm-a2"] = f"_x2 0x{MINUTES * 2}"
    stuck = {"DeployctlPodNotAnswering": [{"pod": "llm-a2"}], "DeployctlCopiesMissing": []}
    firing(tmp_path / "stuck", rules, up(steps), stuck, at=(horizon,))


def test_deployctls_histogram_quantile_is_prometheus_own(tmp_path: Path) -> None:
    """The canary's analysis reads percentiles without a Prometheus (gate/live_metrics.py): on the same
    buckets, promtool's histogram_quantile must give the same numbers."""
    rng = random.Random(27)
    bounds = ["0.05", "0.1", "0.25", "0.5", "1.0", "2.5", "5.0", "+Inf"]
    series, tests = [], []
    for case in range(8):
        per_minute, running = [], 0
        for _ in bounds:
            running += rng.choice((0, 0, 1, 3, 7, 20))
            per_minute.append(running)
        if case == 0:
            per_minute = [0] * (len(bounds) - 1) + [5]  # everything above the highest finite bound
        for bound, count in zip(bounds, per_minute, strict=True):
            series.append({"series": f'h_bucket{{case="{case}",le="{bound}"}}', "values": f"0+{count}x15"})
        cumulative = {float(b): float(c) for b, c in zip(bounds, per_minute, strict=True)}
        for q in (0.5, 0.95, 0.99):
            ours = live_metrics.histogram_quantile(q, cumulative)
            # Rates and counts differ in the last bits: both sides round to a millionth, as PromQL's
            # round() does it (floor(v × 1/n + 0.5) / (1/n)).
            expr = f'round(histogram_quantile({q}, sum by (le) (rate(h_bucket{{case="{case}"}}[5m]))), 0.000001)'
            inverse = 1 / 0.000001
            samples = (
                [] if math.isnan(ours) else [{"labels": "{}", "value": math.floor(ours * inverse + 0.5) / inverse}]
            )
            tests.append({"expr": expr, "eval_time": "10m", "exp_samples": samples})
    unit = {
        "evaluation_interval": "1m",
        "fuzzy_compare": True,
        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": tests}],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(unit))
    result = promtool("test", "rules", "test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
