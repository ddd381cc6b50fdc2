"""The InferenceProfile status (kstatus conditions) and the Argo CD health check that reads it.

The Lua check runs in a real Lua interpreter (lupa embeds Lua 5.4), against the statuses
orchestrator.controller.resource_status writes for each way a generation can end.
"""

from __future__ import annotations

import pathlib
import re
from typing import Any

import lupa
import pytest
import yaml

from orchestrator.apply.outcome import Failure, Outcome
from orchestrator.controller import resource_status
from orchestrator.gate import verdict as gate

ROOT = pathlib.Path(__file__).resolve().parent.parent
HEALTH_LUA = ROOT / "gitops" / "argocd" / "inferenceprofile-health.lua"
T0, T1, T2 = "2026-12-01T03:00:00Z", "2026-12-01T03:05:00Z", "2026-12-01T03:09:00Z"


def _by_type(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def _deployed(revision: int = 1) -> Outcome:
    report = gate.GateReport(verdict=gate.Verdict.PASS, checks=(), metrics={}, bench={})
    return Outcome("deployed", "llm", "ns", f"revision {revision} of llm is deployed (install)", revision, gate=report)


def _slo_failed() -> Outcome:
    failure = Failure("slo_failed", "fail: p95_ttft_ms = 4429, misses <=1500", "smoke")
    return Outcome("rolled_back", "llm", "ns", "revision 2 failed (slo_failed) and was rolled back", 2, failure)


def test_a_deployed_generation_is_ready_every_step_true_and_no_longer_reconciling() -> None:
    working = resource_status.reconciling(None, 1, T0)
    assert _by_type(working)["Reconciling"]["status"] == "True"
    assert _by_type(working)["Ready"]["status"] == "Unknown"
    done = resource_status.from_outcome(working, 1, _deployed(), live_revision=1, profile_hash="h1", now=T1)
    conditions = _by_type(done)
    assert {k: conditions[k]["status"] for k in (*resource_status.STEPS, "Ready")} == dict.fromkeys(
        (*resource_status.STEPS, "Ready"), "True"
    )
    assert conditions["Reconciling"]["status"] == conditions["Stalled"]["status"] == "False"
    assert done["observedGeneration"] == 1 and done["liveRevision"] == 1 and done["liveProfileHash"] == "h1"
    assert all(c["observedGeneration"] == 1 for c in done["conditions"])
    assert conditions["Ready"]["lastTransitionTime"] == T1, "Unknown -> True is a transition"


def test_a_generation_that_misses_its_slo_is_not_ready_stalled_with_the_class_and_the_live_revision_kept() -> None:
    good = resource_status.from_outcome(None, 1, _deployed(), live_revision=1, profile_hash="h1", now=T0)
    working = resource_status.reconciling(good, 2, T1)
    bad = resource_status.from_outcome(working, 2, _slo_failed(), live_revision=3, profile_hash="h2", now=T2)
    conditions = _by_type(bad)
    assert conditions["Ready"]["status"] == "False" and conditions["Ready"]["reason"] == "slo_failed"
    assert conditions["Stalled"]["status"] == "True" and conditions["Stalled"]["reason"] == "slo_failed"
    assert [conditions[s]["status"] for s in resource_status.STEPS] == ["True", "True", "True", "False"]
    assert conditions["Gated"]["reason"] == "slo_failed" and "p95_ttft_ms" in conditions["Gated"]["message"]
    assert bad["failure"] == {"class": "slo_failed", "message": "fail: p95_ttft_ms = 4429, misses <=1500"}
    assert bad["liveRevision"] == 3 and bad["liveProfileHash"] == "h1", "the last good profile still serves"
    assert bad["observedGeneration"] == 2


@pytest.mark.parametrize(
    ("stage", "failed_step", "after"),
    [("preflight", "Planned", ["Applied", "RolledOut", "Gated"]), ("rollout", "RolledOut", ["Gated"])],
)
def test_a_failed_step_is_false_with_its_class_and_the_steps_after_it_are_unknown(
    stage: str, failed_step: str, after: list[str]
) -> None:
    status = resource_status.refused(None, 4, Failure("unschedulable", "pod x cannot be scheduled", stage), T0)
    conditions = _by_type(status)
    assert conditions[failed_step]["status"] == "False" and conditions[failed_step]["reason"] == "unschedulable"
    assert [conditions[s]["status"] for s in after] == ["Unknown"] * len(after)


def test_a_manual_rollback_is_ready_and_says_the_controller_leaves_it() -> None:
    status = resource_status.manual_rollback(None, 2, live_revision=5, target=1, now=T0)
    ready = _by_type(status)["Ready"]
    assert status["manualRollback"] is True and ready["status"] == "True" and ready["reason"] == "ManualRollback"
    assert "revision 5 is a manual rollback to revision 1" in ready["message"]


def test_a_condition_keeps_its_transition_time_while_its_status_stays() -> None:
    first = resource_status.from_outcome(None, 1, _deployed(), live_revision=1, profile_hash="h", now=T0)
    again = resource_status.from_outcome(first, 2, _deployed(2), live_revision=2, profile_hash="h", now=T1)
    assert _by_type(again)["Ready"]["lastTransitionTime"] == T0
    assert _by_type(again)["Ready"]["observedGeneration"] == 2


# --- the Argo CD health check, in a real Lua interpreter ----------------------------------------


def _argo_health(obj: dict[str, Any]) -> dict[str, str]:
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = _to_lua(lua, obj)
    result = lua.execute(HEALTH_LUA.read_text())
    return {"status": result["status"], "message": result["message"]}


def _to_lua(lua: Any, value: Any) -> Any:
    """Argo CD hands the object to the script as nested Lua tables, lists 1-based."""
    if isinstance(value, dict):
        return lua.table_from({k: _to_lua(lua, v) for k, v in value.items()})
    if isinstance(value, list):
        return lua.table_from([_to_lua(lua, v) for v in value])
    return value


def _object(generation: int, status: dict[str, Any] | None) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": "llm", "generation": generation}}
    if status is not None:
        obj["status"] = status
    return obj


def test_argo_cd_sees_each_status_the_controller_writes_as_the_right_health() -> None:
    good = resource_status.from_outcome(None, 1, _deployed(), live_revision=1, profile_hash="h1", now=T0)
    working = resource_status.reconciling(good, 2, T1)
    bad = resource_status.from_outcome(working, 2, _slo_failed(), live_revision=3, profile_hash="h2", now=T2)
    manual = resource_status.manual_rollback(good, 1, live_revision=4, target=1, now=T2)
    assert _argo_health(_object(1, None))["status"] == "Progressing"
    assert _argo_health(_object(1, good)) == {
        "status": "Healthy",
        "message": "Deployed: revision 1 of llm is deployed (install)",
    }
    assert _argo_health(_object(2, good))["status"] == "Progressing", "a new generation not yet observed"
    assert _argo_health(_object(2, working))["status"] == "Progressing"
    degraded = _argo_health(_object(2, bad))
    assert degraded["status"] == "Degraded" and degraded["message"].startswith("slo_failed: revision 2 failed")
    assert _argo_health(_object(1, manual))["status"] == "Healthy"


def test_the_flux_example_in_the_docs_carries_the_shipped_health_check_expressions() -> None:
    shipped = yaml.safe_load((ROOT / "gitops" / "flux" / "inferenceprofile-health.yaml").read_text())
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "docs" / "gitops.md").read_text(), re.S)
    documented = [
        doc["spec"]["healthCheckExprs"]
        for block in blocks
        for doc in [yaml.safe_load(block)]
        if isinstance(doc, dict) and "healthCheckExprs" in (doc.get("spec") or {})
    ]
    assert documented == [shipped]
    assert {e["kind"] for e in shipped} == {"InferenceProfile"}
