"""The one mapping from how a sequence ended to its exit code (docs/cli.md, "Exit codes")."""

from __future__ import annotations

import pytest

from orchestrator.apply import outcome
from orchestrator.apply.outcome import Failure
from orchestrator.errors import ExitCode


@pytest.mark.parametrize(
    ("result", "failure", "code"),
    [
        ("deployed", None, ExitCode.OK),
        ("dry_run", None, ExitCode.OK),
        ("refused", Failure("preflight", "no node", "preflight"), ExitCode.ROLLOUT_FAILED),
        ("rolled_back", Failure("crash_loop", "log", "rollout"), ExitCode.ROLLOUT_FAILED),
        ("rolled_back", Failure("slo_failed", "p95", "smoke"), ExitCode.GATE_FAILED_ROLLED_BACK),
        ("rolled_back", Failure("health", "503", "health"), ExitCode.GATE_FAILED_ROLLED_BACK),
        ("rolled_back", Failure("cluster_error", "forbidden", "health"), ExitCode.CLUSTER_ERROR),
        ("rolled_back", Failure("lock_lost", "taken by x", "rollout"), ExitCode.CLUSTER_ERROR),
        # a bug in deployctl is never read as the model missing its SLO, whichever step it hit
        ("rolled_back", Failure("internal_error", "KeyError", "smoke"), ExitCode.ROLLOUT_FAILED),
        ("rolled_back", Failure("internal_error", "KeyError", "health"), ExitCode.ROLLOUT_FAILED),
        ("left_failed", Failure("slo_failed", "p95", "smoke"), ExitCode.ROLLOUT_FAILED),
        ("rollback_failed", Failure("slo_failed", "p95", "smoke"), ExitCode.ROLLBACK_FAILED),
        ("gate_failed", Failure("slo_failed", "p95", "smoke"), ExitCode.GATE_FAILED),
        ("gate_failed", Failure("not_synced", "hash", "sync"), ExitCode.GATE_FAILED),
    ],
)
def test_every_ending_has_its_documented_exit_code(
    result: outcome.Result, failure: Failure | None, code: ExitCode
) -> None:
    assert outcome.exit_code(result, failure) == code
    assert outcome.Outcome(result, "r", "ns", "m", failure=failure).to_json()["exit_code"] == int(code)


def test_the_gitops_gate_failure_code_is_its_own() -> None:
    codes = {int(c) for c in ExitCode}
    assert len(codes) == len(ExitCode)  # no two endings share a number by accident
    assert ExitCode.GATE_FAILED not in (ExitCode.GATE_FAILED_ROLLED_BACK, ExitCode.ROLLOUT_FAILED)
