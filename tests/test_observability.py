"""The release's alert rules and Grafana dashboard: written in the metric names of the profile's engine
version, and only those (e2e/test_alert_rules.py runs the rules through the real promtool)."""

from __future__ import annotations

import json
import pathlib
import re
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from orchestrator import engines, errors
from orchestrator.apply import confine
from orchestrator.cli import app as cli
from orchestrator.engines import metric_table
from orchestrator.plan import planner
from orchestrator.profile import model as profile
from orchestrator.render import alerts, dashboard, manifests, promql, resolve

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = {"vllm": "prod-tp4.yaml", "sglang": "sglang-tp4.yaml", "tgi": "tgi-tp4.yaml", "trtllm": "trtllm-tp4.yaml"}
MONITORED = {
    "monitoring": {"podMonitor": {"enabled": True}, "alerts": {"enabled": True}, "dashboard": {"enabled": True}}
}
# A metric name in PromQL: an identifier (colons allowed) right before a selector's brace.
_SELECTED = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\{")


def load(engine: str, **changes: Any) -> profile.Profile:
    doc = yaml.safe_load((ROOT / "profiles" / EXAMPLES[engine]).read_text())
    doc["monitoring"] = MONITORED["monitoring"]
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = doc
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return profile.loads(yaml.safe_dump(doc), "test.yaml")


def rules_of(prof: profile.Profile) -> dict[str, dict[str, Any]]:
    found = alerts.rule_file(prof, resolve.startup_allowed(prof, planner.plan(prof)))
    return {rule["alert"]: rule for group in found["groups"] for rule in group["rules"]}


def selected_names(expressions: list[str]) -> set[str]:
    return {name for expr in expressions for name in _SELECTED.findall(expr)}


def test_every_engine_version_deployctl_checks_flags_for_has_a_metric_table() -> None:
    # A profile that validates must render its rules: no version may lack a table.
    for engine in engines.ENGINES.values():
        assert engine.versions(), engine.kind
        assert set(engine.versions()) <= set(metric_table.versions(engine.kind)), engine.kind


@pytest.mark.parametrize("engine", sorted(EXAMPLES))
def test_every_query_names_only_series_the_engine_versions_table_has(engine: str) -> None:
    prof = load(engine)
    table = promql.scope(prof).table
    model = dashboard.dashboard(prof)
    expressions = dashboard.queries(model) + [rule["expr"] for rule in rules_of(prof).values()]
    assert selected_names(expressions) <= table.names() | {"up"}, engine
    for expr in expressions:  # every series of the release, none of another
        assert promql.confined(expr, prof.metadata.namespace, prof.metadata.name) == [], expr
        assert promql.confined(expr, prof.metadata.namespace, "another") != [], expr


def test_the_vllm_dashboard_has_each_panel_an_operator_looks_for_and_the_rollout_annotation() -> None:
    model = dashboard.dashboard(load("vllm"))
    titles = [panel["title"] for panel in model["panels"]]
    assert titles == [
        "Time to first token",
        "Time per output token",
        "End-to-end latency",
        "Tokens per second",
        "Queue and batch",
        "KV cache usage",
        "Server errors (ratio)",
        "Canary against stable: p95 TTFT",
        "Canary against stable: error ratio",
        "Copies answering",
    ]
    ttft = model["panels"][0]["targets"]
    assert [t["legendFormat"] for t in ttft] == ["p50", "p95", "p99"]
    assert "vllm:time_to_first_token_seconds_bucket" in ttft[1]["expr"] and "0.95" in ttft[1]["expr"]
    canary = model["panels"][7]["targets"][0]["expr"]
    assert "deployctl_dev_track" in canary and '"stable"' in canary, "stable pods carry no track label: named"
    (annotation,) = model["annotations"]["list"]
    assert "offset" in annotation["expr"], "marks pods that were not serving a moment before"
    positions = {(p["gridPos"]["x"], p["gridPos"]["y"]) for p in model["panels"]}
    assert len(positions) == len(model["panels"]), "no two panels overlap"


def test_an_engine_without_a_metric_loses_the_panel_and_the_alert_and_says_so() -> None:
    prof = load("tgi", gate__smoke__slo={"p95_ttft_ms": "<=900"})
    model = dashboard.dashboard(prof)
    assert "Time to first token" not in [p["title"] for p in model["panels"]]
    assert "Time to first token (tgi 3.3.7 has no series for ttft)" in model["description"]
    rule = manifests.render(prof, planner.plan(prof))[-1]
    assert rule["kind"] == "PrometheusRule"
    assert (
        "DeployctlTTFTP95OverSLO: tgi 3.3.7 has no metric for ttft"
        in rule["metadata"]["annotations"][alerts.UNANSWERED_ANNOTATION]
    )
    assert "DeployctlTTFTP95OverSLO" not in rules_of(prof)


def test_the_slos_set_the_thresholds_and_without_them_the_defaults_hold() -> None:
    prof = load("vllm", gate__smoke__slo={"p95_ttft_ms": "<=700", "p99_e2el_ms": "<=9000", "error_rate": "<=0.02"})
    rules = rules_of(prof)
    busy = " and on() "  # then the request rate: no page on two or three requests' worth
    assert "* 1000 > 700" + busy in rules["DeployctlTTFTP95OverSLO"]["expr"]
    assert "histogram_quantile(0.99" in rules["DeployctlE2ELP99OverSLO"]["expr"]
    assert "> 9000" + busy in rules["DeployctlE2ELP99OverSLO"]["expr"]
    assert ") > 0.02" + busy in rules["DeployctlErrorRateHigh"]["expr"]
    assert rules["DeployctlErrorRateHigh"]["expr"].endswith(f"> {alerts.MIN_REQUEST_RATE:g}")
    bare = rules_of(load("vllm", gate__smoke__slo={}))
    assert f") > {alerts.DEFAULT_ERROR_RATIO:g}" + busy in bare["DeployctlErrorRateHigh"]["expr"]
    assert not [name for name in bare if name.endswith("OverSLO")], "no latency SLO, no latency alert"
    # A floor is no ceiling: ">=" on a latency pages on nothing.
    assert "DeployctlTTFTP95OverSLO" not in rules_of(load("vllm", gate__smoke__slo={"p95_ttft_ms": ">=1"}))


def test_copies_page_when_down_longer_than_a_load_or_more_missing_than_a_rolling_update_takes() -> None:
    # e2e/test_alert_rules.py replays a one-at-a-time rollout through promtool: no page.
    prof = load("vllm", rollout__replicas=3)
    rules = rules_of(prof)
    allowed = resolve.startup_allowed(prof, planner.plan(prof))
    for name in ("DeployctlPodNotAnswering", "DeployctlCopiesMissing"):
        assert int(rules[name]["for"].removesuffix("m")) * 60 >= allowed, name
    assert rules["DeployctlPodNotAnswering"]["expr"].endswith("== 0")
    assert rules["DeployctlCopiesMissing"]["expr"].endswith("< 2"), "one copy out at a time is a rollout"
    assert rules_of(load("vllm", rollout__replicas=1))["DeployctlCopiesMissing"]["expr"].endswith("< 1")


def test_alerts_without_the_pod_monitor_are_refused_naming_the_field_and_its_line() -> None:
    text = (ROOT / "profiles" / "prod-tp4.yaml").read_text() + "monitoring:\n  alerts:\n    enabled: true\n"
    with pytest.raises(errors.InvalidProfile) as refused:
        profile.loads(text, "prod.yaml")
    message = str(refused.value)
    assert "monitoring.alerts needs monitoring.podMonitor.enabled" in message, message
    assert f"line {text.count(chr(10)) - 2}" in message, message  # where `monitoring:` is


def test_render_prints_the_rule_file_and_the_dashboard_config_map() -> None:
    path = str(ROOT / "profiles" / "prod-tp4.yaml")
    runner = CliRunner()
    rules = runner.invoke(cli.main, ["render", path, "--format", "rules"])
    assert rules.exit_code == 0, rules.output
    assert [g["name"] for g in yaml.safe_load(rules.stdout)["groups"]] == ["deployctl.inference.llama3-70b"]
    shown = runner.invoke(cli.main, ["render", path, "--format", "dashboard", "-o", "json"])
    assert shown.exit_code == 0, shown.output
    (config_map,) = json.loads(shown.stdout)["items"]
    assert config_map["kind"] == "ConfigMap" and config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    model = json.loads(config_map["data"]["llama3-70b.json"])
    assert model["title"] == "deployctl inference/llama3-70b"
    # The same profile, the same bytes: a GitOps diff shows only real changes.
    again = runner.invoke(cli.main, ["render", path, "--format", "dashboard", "-o", "json"])
    assert again.stdout == shown.stdout


def test_the_dashboard_and_the_rules_are_not_the_applys_business_unless_asked() -> None:
    prof = profile.load(ROOT / "profiles" / "prod-tp4.yaml")
    kinds = [o["kind"] for o in manifests.render(prof, planner.plan(prof))]
    assert "PrometheusRule" not in kinds and "ConfigMap" not in kinds
    monitored = load("vllm")
    kinds = [o["kind"] for o in manifests.render(monitored, planner.plan(monitored))]
    assert kinds.count("PrometheusRule") == 1 and "ConfigMap" not in kinds, "apply never writes the dashboard"


# --- a stored PrometheusRule holds only what deployctl writes ---------------------------------------


def stored_rule(**changes: Any) -> dict[str, Any]:
    prof = load("vllm")
    (rule,) = [o for o in manifests.render(prof, planner.plan(prof)) if o["kind"] == "PrometheusRule"]
    first = rule["spec"]["groups"][0]["rules"][0]
    first.update(changes)
    return rule


def test_every_rule_deployctl_renders_passes_its_own_confinement() -> None:
    for engine in EXAMPLES:
        prof = load(engine)
        objects = manifests.render(prof, planner.plan(prof))
        assert confine.problems(prof.metadata.name, prof.metadata.namespace, objects) == [], engine


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"expr": 'sum(rate(vllm:request_success_total{namespace="payments"}[5m])) > 0'}, "not confined"),
        ({"expr": "up == 0"}, "up selects series without the release's labels"),
        ({"expr": 'count({__name__=~".+"}) > 0'}, "not confined"),
        (
            {"labels": {"severity": "critical", "namespace": "payments", "deployctl_dev_release": "llama3-70b"}},
            "labels",
        ),
        (
            {
                "labels": {
                    "severity": "critical",
                    "team": "x",
                    "namespace": "inference",
                    "deployctl_dev_release": "llama3-70b",
                }
            },
            "labels",
        ),
        ({"annotations": {"summary": '{{ query "sum(secret_metric)" }}'}}, "template action"),
        ({"record": "x:y", "alert": None}, "recording rule"),
    ],
)
def test_a_forged_rule_in_a_record_is_refused_before_any_write(changes: dict[str, Any], says: str) -> None:
    rule = stored_rule(**changes)
    if "record" in changes:
        del rule["spec"]["groups"][0]["rules"][0]["alert"]
    found = confine.problems("llama3-70b", "inference", [rule])
    assert any(says in p for p in found), found
    with pytest.raises(errors.OutsideRelease):
        confine.check("llama3-70b", "inference", [rule], "revision 3's stored manifests")


def test_a_second_rule_group_or_group_settings_are_refused() -> None:
    rule = stored_rule()
    rule["spec"]["groups"].append({"name": "sneaky", "rules": []})
    assert any(
        "not named deployctl.inference.llama3-70b" in p for p in confine.problems("llama3-70b", "inference", [rule])
    )
    rule = stored_rule()
    rule["spec"]["groups"][0]["limit"] = 0
    assert any("settings" in p for p in confine.problems("llama3-70b", "inference", [rule]))
