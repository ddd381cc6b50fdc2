"""A canary step's verdict from two rounds of /metrics scrapes (gate/live_metrics.py, gate/canary_analysis.py).

The expositions are written as vLLM 0.32.0 writes them (the families and labels of its metric
table); e2e/test_alert_rules.py holds histogram_quantile to the real Prometheus' on the same buckets.
"""

from __future__ import annotations

import json
import math

import pytest

from orchestrator.engines import metric_table
from orchestrator.gate import canary_analysis, exposition, live_metrics
from orchestrator.profile import canary as profile_canary
from orchestrator.profile import slo as slo_language

TABLE = metric_table.table("vllm", "0.32.0")
BOUNDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, math.inf)
SPEC = profile_canary.CanarySpec.model_validate({"steps": [{"copies": 1}]})


def bucketed(latencies: list[float]) -> dict[float, int]:
    return {b: sum(1 for x in latencies if x <= b) for b in BOUNDS}


def text(ok: int, failed: int, ttft: list[float], e2e: list[float] | None = None) -> str:
    """A vLLM /metrics page after ``ok`` answered and ``failed`` failed chat requests."""
    lines = [
        "# TYPE http_requests_total counter",
        f'http_requests_total{{handler="/v1/chat/completions",method="POST",status="2xx"}} {ok}',
        f'http_requests_total{{handler="/v1/chat/completions",method="POST",status="5xx"}} {failed}',
        f'http_requests_total{{handler="/metrics",method="GET",status="2xx"}} {ok * 7}',  # not a request of the API
    ]
    for family, values in (("time_to_first_token_seconds", ttft), ("e2e_request_latency_seconds", e2e or ttft)):
        lines.append(f"# TYPE vllm:{family} histogram")
        for bound, count in bucketed(values).items():
            le = "+Inf" if math.isinf(bound) else repr(bound)
            lines.append(f'vllm:{family}_bucket{{le="{le}",model_name="m"}} {count}')
        lines.append(f'vllm:{family}_count{{model_name="m"}} {len(values)}')
        lines.append(f'vllm:{family}_sum{{model_name="m"}} {sum(values)}')
    return "\n".join(lines) + "\n"


def scrape(pod: str, track: str, page: str) -> live_metrics.Scrape:
    return live_metrics.Scrape(pod, track, exposition.parse(page))


EMPTY = text(0, 0, [])


def judged(
    canary: str, stable: str, min_requests: int = 50, slo: dict[str, str] | None = None
) -> canary_analysis.Analysis:
    start = [scrape("llm-c", "canary", EMPTY), scrape("llm-s1", "stable", EMPTY), scrape("llm-s2", "stable", EMPTY)]
    end = [scrape("llm-c", "canary", canary), scrape("llm-s1", "stable", stable), scrape("llm-s2", "stable", stable)]
    return canary_analysis.analyse(TABLE, start, end, 300, SPEC, min_requests, slo_language.parse_slo(slo or {}))


# --- Prometheus' arithmetic --------------------------------------------------------------------------


def test_histogram_quantile_interpolates_as_prometheus_documents() -> None:
    # All mass in (2.5, 5]: 2.5 + 2.5 × 0.95. All in the lowest bucket: it starts at 0.
    assert live_metrics.histogram_quantile(0.95, {1.0: 0, 2.5: 0, 5.0: 60, math.inf: 60}) == pytest.approx(4.875)
    assert live_metrics.histogram_quantile(0.95, {1.0: 60, 2.5: 60, 5.0: 60, math.inf: 60}) == pytest.approx(0.95)
    # In +Inf: the upper bound of the second highest bucket. Nothing observed: NaN.
    assert live_metrics.histogram_quantile(0.99, {1.0: 10, math.inf: 100}) == 1.0
    assert math.isnan(live_metrics.histogram_quantile(0.5, {1.0: 0, math.inf: 0}))
    assert math.isnan(live_metrics.histogram_quantile(0.5, {1.0: 3}))  # no +Inf bucket: not a histogram


def test_a_pod_that_restarted_inside_the_window_counts_its_new_total() -> None:
    assert live_metrics.increase(100, 130) == 30
    assert live_metrics.increase(100, 12) == 12
    assert live_metrics.bucket_increase({1.0: 5, math.inf: 9}, {1.0: 2, math.inf: 3}) == {1.0: 2, math.inf: 3}
    assert live_metrics.bucket_increase({1.0: 5, math.inf: 9}, {1.0: 7, math.inf: 15}) == {1.0: 2, math.inf: 6}


def test_only_the_api_requests_count_and_both_sides_sum_their_pods() -> None:
    analysis = judged(text(90, 10, [0.2] * 100), text(100, 0, [0.2] * 100))
    assert analysis.canary.requests == 100 and analysis.stable.requests == 200, "GET /metrics is no request"
    assert analysis.canary.error_rate == pytest.approx(0.1)
    assert analysis.canary_share == pytest.approx(100 / 300)


# --- verdicts ------------------------------------------------------------------------------------------


def test_a_canary_like_the_stable_copies_passes_with_each_check_in_the_evidence() -> None:
    analysis = judged(text(200, 0, [0.2] * 150 + [0.4] * 50), text(200, 0, [0.2] * 150 + [0.4] * 50))
    assert analysis.verdict == "pass", analysis.reason
    assert {c.metric for c in analysis.checks} == {"p95_ttft_ms", "p95_e2el_ms", "error_rate"}
    evidence = json.loads(json.dumps(analysis.to_json(), allow_nan=False))
    assert evidence["canary"]["requests"] == 200 and evidence["stable"]["pods"] == ["llm-s1", "llm-s2"]


def test_a_slower_canary_fails_naming_the_metric_its_value_and_the_limit() -> None:
    analysis = judged(text(200, 0, [2.0] * 200), text(200, 0, [0.2] * 200))
    assert analysis.verdict == "fail"
    assert analysis.reason.startswith("p95_ttft_ms ") and "ratio 1.2 to stable" in analysis.reason, analysis.reason
    (ttft,) = [c for c in analysis.checks if c.metric == "p95_ttft_ms"]
    assert ttft.canary > 1000 and not ttft.passed
    assert ttft.limit == pytest.approx(1.2 * analysis.stable.latency_ms("p95", "ttft"))


def test_errors_against_a_clean_stable_side_are_judged_from_the_floor() -> None:
    # 2 × the floor of 0.01: one failure in two hundred passes, ten fail.
    assert judged(text(199, 1, [0.2] * 200), text(200, 0, [0.2] * 200)).verdict == "pass"
    failed = judged(text(190, 10, [0.2] * 200), text(200, 0, [0.2] * 200))
    assert failed.verdict == "fail" and failed.reason.startswith("error_rate 0.05 is over 0.02"), failed.reason


def test_too_little_traffic_is_inconclusive_whatever_the_numbers() -> None:
    analysis = judged(text(20, 20, [9.0] * 40), text(200, 0, [0.2] * 200), min_requests=50)
    assert analysis.verdict == "inconclusive"
    assert "canary copies answered 40 requests" in analysis.reason and "minRequests 50" in analysis.reason


def test_the_slos_judge_the_canary_absolutely_even_without_stable_copies() -> None:
    start = [scrape("llm-c", "canary", EMPTY)]
    end = [scrape("llm-c", "canary", text(200, 0, [0.8] * 200))]
    slo = slo_language.parse_slo({"p95_ttft_ms": "<=500", "output_throughput": ">=10"})
    analysis = canary_analysis.analyse(TABLE, start, end, 300, SPEC, 50, slo, stable_expected=False)
    assert analysis.verdict == "fail" and [c.source for c in analysis.checks] == ["slo <=500"], analysis.checks


def test_stable_copies_that_exist_but_did_not_answer_leave_the_window_inconclusive() -> None:
    start = [scrape("llm-c", "canary", EMPTY)]
    end = [scrape("llm-c", "canary", text(200, 0, [0.2] * 200))]
    analysis = canary_analysis.analyse(TABLE, start, end, 300, SPEC, 50, {})
    assert analysis.verdict == "inconclusive" and "no stable pod answered" in analysis.reason, analysis


def test_a_canary_no_pod_of_which_answered_fails() -> None:
    start = [scrape("llm-s", "stable", EMPTY)]
    end = [scrape("llm-s", "stable", text(200, 0, [0.2] * 200))]
    analysis = canary_analysis.analyse(TABLE, start, end, 300, SPEC, 50, {})
    assert analysis.verdict == "fail" and "no canary pod answered" in analysis.reason, analysis


def test_a_window_no_check_could_judge_is_inconclusive() -> None:
    start = [scrape("llm-c", "canary", EMPTY)]
    end = [scrape("llm-c", "canary", text(200, 0, [0.2] * 200))]
    analysis = canary_analysis.analyse(TABLE, start, end, 300, SPEC, 50, {}, stable_expected=False)
    assert analysis.verdict == "inconclusive" and "no check could judge" in analysis.reason, analysis
