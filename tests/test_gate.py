"""The SLO gate: syntax, ordered verdicts, worst wins, trust in the numbers, regressions."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from orchestrator.gate import bench, metrics
from orchestrator.gate import verdict as gate

SLO = {
    "p95_ttft_ms": "<=1500",
    "median_tpot_ms": "<=40",
    "output_throughput": ">=1800",
    "error_rate": "<=0.01",
}


def report(**updates: Any) -> bench.BenchReport:
    """A healthy 256-request run; ``updates`` override any field."""
    base = metrics.compute([], duration=10.0).model_dump()
    base.update(
        completed=256,
        failed=0,
        error_rate=0.0,
        total_output_tokens=65536,
        output_throughput=2000.0,
        p95_ttft_ms=900.0,
        median_tpot_ms=30.0,
    )
    load = metrics.client_load(
        processes=1,
        target_in_flight=64,
        mean_in_flight=63.5,
        cpu_seconds=2.0,
        duration=10.0,
        loop_lags=[0.001],
        dispatch_lags=[],
        send_delays=[],
    )
    fields: dict[str, Any] = {
        **base,
        "config": bench.BenchConfig(url="http://infer:8000", model="m"),
        "started_at": "2026-01-01T00:00:00+00:00",
        "run_id": "abcd",
        "client_cpu_seconds": 2.0,
        "client": load,
        "failures": {},
        "errors": [],
    }
    fields.update(updates)
    return bench.BenchReport.model_validate(fields)


def saturated() -> metrics.ClientLoad:
    return report().client.model_copy(update={"saturated": True, "reasons": ["client CPU at 97% of a core"]})


def row(result: gate.GateReport, metric: str) -> gate.Check:
    [found] = [c for c in result.checks if c.metric == metric]
    return found


# --------------------------------------------------------------------------- syntax


def test_parse_slo_reads_vllm_sla_syntax() -> None:
    parsed = gate.parse_slo({**SLO, "p99_itl_ms": "< 80", "max_concurrent_requests": ">63", "failed": "==0"})
    assert parsed["p95_ttft_ms"] == gate.Condition("<=", 1500.0)
    assert parsed["output_throughput"] == gate.Condition(">=", 1800.0)
    assert parsed["p99_itl_ms"] == gate.Condition("<", 80.0)
    assert parsed["max_concurrent_requests"] == gate.Condition(">", 63.0)
    assert parsed["failed"] == gate.Condition("==", 0.0)
    assert str(parsed["error_rate"]) == "<=0.01"


def test_unknown_metric_names_it_suggests_and_lists_the_allowed() -> None:
    with pytest.raises(ValueError) as caught:
        gate.parse_slo({"p95_ttft": "<=1500"})
    message = str(caught.value)
    assert "'p95_ttft'" in message and "did you mean 'p95_ttft_ms'?" in message
    assert "median_tpot_ms" in message and "output_throughput" in message


@pytest.mark.parametrize("condition", ["1500", "=<1500", "<=", "<=fast", "<=nan", "<=inf", 1500, None])
def test_a_bad_condition_names_the_metric_and_the_operators(condition: object) -> None:
    with pytest.raises(ValueError) as caught:
        gate.parse_slo({"p95_ttft_ms": condition})
    message = str(caught.value)
    assert message.startswith("slo p95_ttft_ms:")
    assert "<=, >=, ==, <, >" in message


def test_string_metrics_are_not_gateable() -> None:
    assert "token_count_source" not in gate.METRIC_NAMES
    assert {"p95_ttft_ms", "median_tpot_ms", "output_throughput", "error_rate"} <= set(gate.METRIC_NAMES)


def test_the_slo_metric_names_are_the_numeric_fields_the_gate_measures_in_order() -> None:
    # profile.slo lists the names so the profile never imports the gate; this holds them to Metrics.
    numeric = tuple(name for name, field in metrics.Metrics.model_fields.items() if field.annotation is not str)
    assert numeric == gate.METRIC_NAMES


def test_verdicts_are_ordered_and_the_worst_wins() -> None:
    order = [gate.Verdict.PASS, gate.Verdict.INCONCLUSIVE, gate.Verdict.ERROR, gate.Verdict.FAIL]
    assert sorted(reversed(order)) == order
    assert max(gate.Verdict.INCONCLUSIVE, gate.Verdict.FAIL, gate.Verdict.PASS) is gate.Verdict.FAIL
    assert gate.Verdict.INCONCLUSIVE.label == "inconclusive"


# --------------------------------------------------------------------------- verdicts


def test_a_healthy_run_passes_every_check() -> None:
    result = gate.evaluate(report(), SLO, min_samples=16)
    assert result.verdict is gate.Verdict.PASS
    assert [c.metric for c in result.checks] == ["completed", "client_saturated", "prompt_tokens", *SLO]
    assert result.summary() == "pass: all 7 checks passed"
    assert row(result, "p95_ttft_ms").measured == 900.0


def test_a_missed_slo_fails_and_says_by_how_much() -> None:
    result = gate.evaluate(report(p95_ttft_ms=1730.25), SLO, min_samples=16)
    assert result.verdict is gate.Verdict.FAIL
    assert row(result, "p95_ttft_ms").reason == "p95_ttft_ms = 1730, misses <=1500"
    assert result.summary().startswith("fail: p95_ttft_ms = 1730")


def test_throughput_below_its_floor_fails() -> None:
    assert gate.evaluate(report(output_throughput=1200.0), SLO, 16).verdict is gate.Verdict.FAIL


def test_too_few_samples_is_inconclusive_even_if_an_slo_is_missed() -> None:
    result = gate.evaluate(report(completed=8, p95_ttft_ms=5000.0), SLO, min_samples=16)
    assert result.verdict is gate.Verdict.INCONCLUSIVE
    assert row(result, "completed").verdict is gate.Verdict.INCONCLUSIVE
    assert "only 8 requests completed" in row(result, "p95_ttft_ms").reason
    assert "misses" in row(result, "p95_ttft_ms").reason


def test_a_client_bound_run_is_inconclusive_for_latency_but_not_for_errors() -> None:
    slow = gate.evaluate(report(client=saturated(), p95_ttft_ms=5000.0), SLO, 16)
    assert slow.verdict is gate.Verdict.INCONCLUSIVE
    assert "client-bound run: client CPU at 97%" in row(slow, "p95_ttft_ms").reason
    failing = gate.evaluate(report(client=saturated(), error_rate=0.2, failed=64), SLO, 16)
    assert failing.verdict is gate.Verdict.FAIL
    assert row(failing, "error_rate").verdict is gate.Verdict.FAIL


def test_worst_wins_fail_over_inconclusive() -> None:
    result = gate.evaluate(report(completed=8, failed=8, error_rate=0.5), SLO, min_samples=16)
    assert row(result, "p95_ttft_ms").verdict is gate.Verdict.INCONCLUSIVE
    assert result.verdict is gate.Verdict.FAIL


def test_a_metric_without_samples_is_inconclusive() -> None:
    result = gate.evaluate(report(median_tpot_ms=None), SLO, 16)
    assert row(result, "median_tpot_ms").verdict is gate.Verdict.INCONCLUSIVE
    assert "no sample" in row(result, "median_tpot_ms").reason


def test_refused_or_stalled_servers_are_errors_not_failures() -> None:
    refused = report(
        completed=0,
        failed=256,
        error_rate=1.0,
        failures={"connect": 256},
        errors=["cannot connect (refused)"],
    )
    result = gate.evaluate(refused, SLO, 16)
    assert result.verdict is gate.Verdict.ERROR
    assert all(c.verdict is gate.Verdict.ERROR for c in result.checks)
    assert "256 of 256 requests could not connect or timed out" in result.summary()
    aborted = gate.evaluate(report(completed=0, aborted="all 8 warm-up requests failed: refused"), SLO, 16)
    assert aborted.verdict is gate.Verdict.ERROR and "warm-up" in aborted.summary()


def test_a_few_timeouts_among_answers_count_as_errors_of_the_server() -> None:
    failed = report(
        completed=250, failed=6, error_rate=6 / 256, failures={"timeout": 6}, errors=["no data within the read timeout"]
    )
    result = gate.evaluate(failed, SLO, 16)
    assert result.verdict is gate.Verdict.FAIL
    assert row(result, "error_rate").verdict is gate.Verdict.FAIL
    # The row says which requests failed and how, so the rollback's reason is actionable.
    reason = row(result, "error_rate").reason
    assert "6 of 256 requests failed (timeout 6), e.g. no data within the read timeout" in reason


def test_an_error_rate_row_without_failures_carries_no_failure_detail() -> None:
    assert "failed" not in row(gate.evaluate(report(), SLO, 16), "error_rate").reason


def test_error_report_for_a_benchmark_that_could_not_start() -> None:
    result = gate.error_report("http://infer:8000/v1/chat/completions: cannot connect")
    assert result.verdict is gate.Verdict.ERROR
    assert result.to_json()["verdict"] == "error"
    assert "cannot connect" in result.summary()


def test_parsed_conditions_are_accepted_too() -> None:
    result = gate.evaluate(report(), gate.parse_slo(SLO), 16)
    assert result.verdict is gate.Verdict.PASS


def test_unknown_metric_in_evaluate_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown metric"):
        gate.evaluate(report(), {"ttft": "<=1"}, 16)


# --------------------------------------------------------------------------- regressions


def test_deltas_against_the_previous_release_are_shown() -> None:
    previous = report(p95_ttft_ms=800.0, output_throughput=2500.0)
    result = gate.evaluate(report(), SLO, 16, previous_report=previous)
    assert row(result, "p95_ttft_ms").previous == 800.0
    assert row(result, "p95_ttft_ms").delta_pct == pytest.approx(12.5)
    assert row(result, "output_throughput").delta_pct == pytest.approx(-20.0)
    assert result.verdict is gate.Verdict.PASS  # no limit given: deltas are information


def test_regression_beyond_the_limit_fails_in_the_worse_direction_only() -> None:
    previous = report(p95_ttft_ms=800.0, output_throughput=2500.0, median_tpot_ms=40.0)
    result = gate.evaluate(report(), SLO, 16, previous_report=previous, max_regression_pct=10)
    assert row(result, "p95_ttft_ms vs previous").verdict is gate.Verdict.FAIL  # +12.5 % latency
    assert "worse by 12.5%, limit 10%" in row(result, "p95_ttft_ms vs previous").reason
    assert row(result, "output_throughput vs previous").verdict is gate.Verdict.FAIL  # -20 % throughput
    assert row(result, "median_tpot_ms vs previous").verdict is gate.Verdict.PASS  # 25 % better
    assert result.verdict is gate.Verdict.FAIL


def test_previous_numbers_come_from_a_stored_gate_report() -> None:
    stored = gate.evaluate(report(p95_ttft_ms=800.0), SLO, 16).to_json()
    result = gate.evaluate(report(), SLO, 16, previous_report=stored, max_regression_pct=10)
    assert row(result, "p95_ttft_ms vs previous").verdict is gate.Verdict.FAIL
    from_bench_json = gate.evaluate(report(), SLO, 16, previous_report=report(p95_ttft_ms=800.0).model_dump())
    assert row(from_bench_json, "p95_ttft_ms").previous == 800.0


def test_an_inconclusive_previous_release_is_no_baseline() -> None:
    stored = gate.evaluate(report(p95_ttft_ms=100.0, completed=4), SLO, 16).to_json()
    assert stored["verdict"] == "inconclusive"
    result = gate.evaluate(report(), SLO, 16, previous_report=stored, max_regression_pct=10)
    assert result.verdict is gate.Verdict.PASS
    assert "no baseline" in row(result, "p95_ttft_ms vs previous").reason


def test_a_zero_previous_value_is_not_a_percentage() -> None:
    result = gate.evaluate(
        report(error_rate=0.005), SLO, 16, previous_report=report(error_rate=0.0), max_regression_pct=10
    )
    assert row(result, "error_rate").delta_pct is None
    assert row(result, "error_rate vs previous").verdict is gate.Verdict.PASS


def test_a_regression_in_a_client_bound_run_is_inconclusive() -> None:
    result = gate.evaluate(
        report(client=saturated()), SLO, 16, previous_report=report(p95_ttft_ms=500.0), max_regression_pct=10
    )
    assert row(result, "p95_ttft_ms vs previous").verdict is gate.Verdict.INCONCLUSIVE
    assert result.verdict is gate.Verdict.INCONCLUSIVE


# --------------------------------------------------------------------------- output


def test_json_has_what_the_release_record_needs() -> None:
    data = gate.evaluate(report(p95_ttft_ms=1600.0), SLO, 16).to_json()
    assert data["verdict"] == "fail" and data["summary"].startswith("fail:")
    assert data["metrics"]["p95_ttft_ms"] == 1600.0
    assert data["bench"]["run_id"] == "abcd" and data["bench"]["config"]["concurrency"] == 64
    assert {"metric", "condition", "measured", "verdict", "reason", "previous", "delta_pct"} == set(data["checks"][0])
    assert "ttfts_ms" not in data["bench"]  # per-request samples stay out of the release record


def test_table_lists_rows_and_explains_what_did_not_pass() -> None:
    result = gate.evaluate(report(p95_ttft_ms=1600.0), SLO, 16, previous_report=report())
    table = gate.format_table(result)
    lines = table.splitlines()
    assert lines[0].split() == ["check", "condition", "measured", "previous", "Δ%", "verdict"]
    assert any(line.startswith("p95_ttft_ms") and line.endswith("FAIL") and "+77.8" in line for line in lines)
    assert "p95_ttft_ms: p95_ttft_ms = 1600, misses <=1500" in table
    assert lines[-1].startswith("verdict: fail:")


# --------------------------------------------------------------------------- retries in the pipeline


def test_a_client_bound_run_is_measured_once_more_and_a_clean_second_run_decides(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from orchestrator.apply import verify
    from orchestrator.profile import model as profile

    prof = profile.load(pathlib.Path(__file__).resolve().parent.parent / "profiles" / "dev-tp2.yaml")
    runs = iter([report(client=saturated()), report()])
    monkeypatch.setattr(bench, "run", lambda _config, api_key=None: next(runs))
    said: list[str] = []
    verdict = verify.run_smoke(prof, "http://infer:8000", None, lambda _phase, message: said.append(message))
    assert verdict.verdict is gate.Verdict.PASS
    assert sum("attempt" in m for m in said) == 2 and any("measuring once more" in m for m in said)


def test_a_client_bound_run_twice_stays_inconclusive_after_one_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.apply import verify
    from orchestrator.profile import model as profile

    prof = profile.load(pathlib.Path(__file__).resolve().parent.parent / "profiles" / "dev-tp2.yaml")
    calls: list[int] = []

    def saturated_run(_config: Any, api_key: str | None = None) -> bench.BenchReport:
        calls.append(1)
        return report(client=saturated())

    monkeypatch.setattr(bench, "run", saturated_run)
    verdict = verify.run_smoke(prof, "http://infer:8000", None, lambda _phase, _message: None)
    assert verdict.client_bound() and len(calls) == 1 + verify.GATE_CLIENT_BOUND_RETRIES
