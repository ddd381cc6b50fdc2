"""`rollout.canary` in the profile: what `validate` refuses (exit 2, naming the field and its line),
and where preflight puts the canary's copies (beside the stable ones, or in their place)."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from test_preflight import cluster, make_profile, other

from orchestrator import errors
from orchestrator.cli import app as cli
from orchestrator.controller import crd
from orchestrator.plan import preflight
from orchestrator.profile import canary as profile_canary
from orchestrator.profile import model as profile

ROOT = pathlib.Path(__file__).resolve().parent.parent
BASE = (ROOT / "profiles" / "prod-tp4.yaml").read_text()


def with_rollout(rollout: str, **sections: Any) -> str:
    """prod-tp4.yaml with its rollout section replaced by ``rollout`` (YAML text, indented under rollout:)."""
    doc = yaml.safe_load(BASE)
    doc["rollout"] = yaml.safe_load(rollout)
    doc.update(sections)
    return yaml.safe_dump(doc, sort_keys=False)


def refusal(text: str) -> str:
    with pytest.raises(errors.InvalidProfile) as refused:
        profile.loads(text, "canary.yaml")
    return str(refused.value)


STEPS = """
replicas: 4
canary:
  steps:
  - copies: 1
    analysis: {window: 5m, minRequests: 50}
  - percent: 50
    analysis: {window: 10m, minRequests: 200}
"""


def test_a_canary_of_growing_steps_is_accepted_with_the_documented_defaults() -> None:
    prof = profile.loads(with_rollout(STEPS), "canary.yaml")
    canary = prof.rollout.canary
    assert canary is not None
    assert [step.canary_copies(4) for step in canary.steps] == [1, 2]
    assert canary.maxRatio == profile_canary.DEFAULT_MAX_RATIO
    assert (canary.inconclusive, canary.traffic, canary.metrics.source) == ("wait", "service", "pods")


def test_a_profile_without_a_canary_hashes_as_before() -> None:
    # The field is left out of the dump when unset: releases made before it do not see a new revision.
    prof = profile.loads(BASE, "prod.yaml")
    assert "canary" not in prof.model_dump(mode="json")["rollout"]


@pytest.mark.parametrize(
    ("steps", "field", "written", "says"),
    [
        ("- copies: 2\n  - copies: 2", "steps.1.copies", "- copies: 2", "each step must grow"),
        ("- copies: 2\n  - percent: 25", "steps.1.percent", "percent: 25", "no more than step 1's 2"),
        ("- copies: 4", "steps.0.copies", "copies: 4", "leaves no stable copy"),
        ("- copies: 1\n    analysis: {window: 20s}", "steps.0.analysis.window", "window: 20s", "at least 30s"),
        ("- copies: 1\n    percent: 10", "steps.0", "copies: 1", "`copies` or as `percent`"),
    ],
)
def test_steps_that_do_not_grow_or_windows_too_short_are_refused_at_their_line(
    steps: str, field: str, written: str, says: str
) -> None:
    text = f"{BASE.rstrip()}\n".replace("rollout:\n", f"rollout:\n  canary:\n    steps:\n    {_indent(steps)}\n", 1)
    text = text.replace("  replicas: 1\n", "  replicas: 4\n")
    message = refusal(text)
    assert says in message, message
    # The last line that holds what is wrong: a repeated item's second occurrence is the one meant.
    line = max(n for n, row in enumerate(text.splitlines(), 1) if written in row)
    assert f"rollout.canary.{field} (line {line})" in message, (message, text)


def _indent(steps: str) -> str:
    return steps.replace("\n  ", "\n    ")


def test_a_ratio_of_zero_or_an_unknown_metric_is_refused_naming_the_metric() -> None:
    zero = refusal(with_rollout("replicas: 4\ncanary:\n  steps: [{copies: 1}]\n  maxRatio: {p95_ttft_ms: 0}\n"))
    assert "rollout.canary.maxRatio.p95_ttft_ms" in zero and "above 0" in zero, zero
    typo = refusal(with_rollout("replicas: 4\ncanary:\n  steps: [{copies: 1}]\n  maxRatio: {p95_ttft: 1.5}\n"))
    assert "did you mean 'p95_ttft_ms'" in typo, typo


def test_the_window_is_held_to_the_podmonitors_interval_when_prometheus_is_the_source() -> None:
    rollout = (
        "replicas: 4\ncanary:\n  steps: [{copies: 1, analysis: {window: 1m}}]\n"
        "  metrics: {source: prometheus, prometheusUrl: 'http://prometheus-operated.monitoring:9090'}\n"
    )
    without = refusal(with_rollout(rollout))
    assert "rollout.canary.metrics.source" in without and "monitoring.podMonitor.enabled" in without
    slow = {"podMonitor": {"enabled": True, "interval": "45s"}}
    message = refusal(with_rollout(rollout, monitoring=slow))
    assert "fewer than two scrapes 45s apart" in message and "at least 1m30s" in message, message
    fast = {"podMonitor": {"enabled": True, "interval": "15s"}}
    assert profile.loads(with_rollout(rollout, monitoring=fast), "canary.yaml").rollout.canary is not None


def test_a_canary_needs_its_own_copies_so_a_leaderworkerset_is_refused() -> None:
    doc = yaml.safe_load((ROOT / "tests" / "golden" / "lws.profile.yaml").read_text())
    doc["rollout"] = {"replicas": 2, "canary": {"steps": [{"copies": 1}]}}
    message = refusal(yaml.safe_dump(doc))
    assert "rollout.canary" in message and "groupEngine kuberay" in message, message


ROUTED = (
    STEPS
    + """  traffic: httpRoute
  httpRoute:
    parentRefs: [{name: inference-gw}]
"""
)


def test_a_release_name_too_long_for_the_weighed_services_is_refused_naming_it() -> None:
    doc = yaml.safe_load(with_rollout(ROUTED))
    doc["metadata"]["name"] = "a" * 57  # a-...-stable would be 64 characters
    message = refusal(yaml.safe_dump(doc))
    assert "metadata.name" in message and "at most 56 characters" in message, message
    doc["metadata"]["name"] = "a" * 56
    assert profile.loads(yaml.safe_dump(doc), "canary.yaml").rollout.canary is not None


@pytest.mark.parametrize(
    ("route", "field"),
    [
        ("{parentRefs: [{name: Inference_GW}]}", "parentRefs.0.name"),
        ("{parentRefs: [{name: gw, namespace: Gateways}]}", "parentRefs.0.namespace"),
        ("{parentRefs: [{name: gw}], hostnames: ['llm.example/v1']}", "hostnames.0"),
    ],
)
def test_a_route_the_gateway_api_would_refuse_is_refused_at_validation(route: str, field: str) -> None:
    text = with_rollout(STEPS + f"  traffic: httpRoute\n  httpRoute: {route}\n")
    assert f"rollout.canary.httpRoute.{field}" in refusal(text)


def test_validate_exits_2_with_one_paragraph_and_no_traceback(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "canary.yaml"
    path.write_text(with_rollout("replicas: 3\ncanary:\n  steps: [{copies: 2}, {copies: 1}]\n"))
    result = CliRunner().invoke(cli.main, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "each step must grow" in result.output and "Traceback" not in result.output


# --- preflight: beside or in place -------------------------------------------------------------------


def canary_profile(replicas: int, copies: list[int], **rollout: Any) -> profile.Profile:
    steps = [{"copies": c} for c in copies]
    return make_profile(tp=4, rollout={"replicas": replicas, "canary": {"steps": steps}, **rollout})


def test_with_room_for_the_largest_step_the_canary_goes_beside_the_stable_copies() -> None:
    verdict = preflight.check(canary_profile(2, [1]), cluster(), [], deployment_exists=True)
    assert (verdict.canary_mode, verdict.refusal) == ("beside", None)
    assert verdict.to_json()["canary_mode"] == "beside"


def test_without_room_it_replaces_stable_copies_which_one_copy_cannot_afford() -> None:
    full = [other(n) for n in ("gpu-a100-nvl-0", "gpu-a100-nvl-1")] + [other("gpu-h100-nvl-0", 8)]
    two = preflight.check(canary_profile(2, [1]), cluster(), full, deployment_exists=True)
    assert (two.canary_mode, two.refusal) == ("replace", None)
    one = preflight.check(canary_profile(1, [1]), cluster(), full, deployment_exists=True)
    assert one.canary_mode == "replace" and one.refusal is not None
    assert "nothing would serve while it loads" in one.refusal and "rollout.allowDowntime" in one.refusal
    allowed = preflight.check(canary_profile(1, [1], allowDowntime=True), cluster(), full, deployment_exists=True)
    assert (allowed.canary_mode, allowed.refusal) == ("replace", None)


def test_a_first_install_has_no_stable_copies_and_so_no_canary() -> None:
    verdict = preflight.check(canary_profile(3, [1]), cluster(), [], deployment_exists=False)
    assert verdict.canary_mode == ""


def test_the_crd_takes_the_canary_as_the_profile_does() -> None:
    schema = crd.definition()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    rollout = schema["properties"]["spec"]["properties"]["rollout"]["properties"]
    assert "canary" in rollout and "steps" in rollout["canary"]["properties"]
