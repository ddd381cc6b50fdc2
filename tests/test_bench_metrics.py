"""The smoke benchmark: every metric against hand-computed values, the loop, the workload, failures.

HTTP is faked at the transport (``httpx.MockTransport``) and time by a fake clock that the
scripted response bodies advance, so each request's TTFT, ITL and E2EL are known exactly.
"""

from __future__ import annotations

import asyncio
import json
import math
import pathlib
import re
from collections.abc import Callable, Sequence

import httpx
import pytest
from streamfakes import (
    DONE_EVENT,
    ROLE_EVENT,
    FakeClock,
    Script,
    Step,
    event,
    streaming,
    token_event,
    usage_event,
    vllm_steps,
)

from orchestrator import errors
from orchestrator.gate import bench, bench_config, bench_report, early_stop, metrics, workload
from orchestrator.profile import model as profile

PROD = pathlib.Path(__file__).resolve().parent.parent / "profiles" / "prod-tp4.yaml"

# --------------------------------------------------------------------------- statistics


def test_percentile_is_numpys_linear_interpolation() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert metrics.percentile(values, 50) == 2.5
    assert metrics.percentile(values, 95) == pytest.approx(3.85)
    assert metrics.percentile(values, 99) == pytest.approx(3.97)
    assert metrics.percentile(values, 0) == 1.0
    assert metrics.percentile(values, 100) == 4.0
    assert metrics.percentile([7.0], 99) == 7.0


def test_summarize_reports_milliseconds_and_population_std() -> None:
    s = metrics.summarize([0.001, 0.002, 0.003, 0.004])
    assert (s.mean, s.median, s.std) == pytest.approx((2.5, 2.5, math.sqrt(1.25)))
    assert (s.p95, s.p99) == pytest.approx((3.85, 3.97))


def test_summary_of_nothing_is_none_not_zero() -> None:
    assert metrics.summarize([]) == metrics.Summary(None, None, None, None, None)


# --------------------------------------------------------------------------- compute


def hand_samples() -> list[metrics.RequestSample]:
    """Two completed requests and one failed; the expected numbers are worked out in the tests."""
    r1 = metrics.RequestSample(start=0.0, prompt_tokens_estimate=9, ttft=0.1, latency=0.16, end=0.17)
    r1.itl = [0.02, 0.02, 0.02]
    r1.token_chunks, r1.completion_tokens, r1.prompt_tokens = 4, 4, 10
    # Three chunks but five tokens: one chunk carried three tokens, so usage, not chunks, counts.
    r2 = metrics.RequestSample(start=0.05, prompt_tokens_estimate=9, ttft=0.2, latency=0.24, end=0.3)
    r2.itl = [0.01, 0.03]
    r2.token_chunks, r2.completion_tokens, r2.prompt_tokens = 3, 5, 20
    r3 = metrics.RequestSample(start=0.1, prompt_tokens_estimate=9, end=0.11)
    r3.failure, r3.error = metrics.FailureKind.HTTP_STATUS, "HTTP 500"
    return [r1, r2, r3]


def test_counts_totals_and_throughputs() -> None:
    m = metrics.compute(hand_samples(), duration=0.5)
    assert (m.completed, m.failed) == (2, 1)
    assert m.error_rate == pytest.approx(1 / 3)
    assert (m.total_input_tokens, m.total_output_tokens) == (30, 9)
    assert m.request_throughput == pytest.approx(4.0)
    assert m.output_throughput == pytest.approx(18.0)
    assert m.total_token_throughput == pytest.approx(78.0)
    assert m.max_concurrent_requests == 2
    assert m.max_output_tokens_per_s == 7.0  # all 7 chunks land in the first second
    assert m.token_count_source == "usage"


def test_ttft_and_e2el_statistics() -> None:
    m = metrics.compute(hand_samples(), duration=0.5)
    # TTFT 100 and 200 ms.
    assert (m.mean_ttft_ms, m.median_ttft_ms, m.std_ttft_ms) == pytest.approx((150.0, 150.0, 50.0))
    assert (m.p95_ttft_ms, m.p99_ttft_ms) == pytest.approx((195.0, 199.0))
    # E2EL 160 and 240 ms.
    assert (m.mean_e2el_ms, m.median_e2el_ms, m.std_e2el_ms) == pytest.approx((200.0, 200.0, 40.0))
    assert (m.p95_e2el_ms, m.p99_e2el_ms) == pytest.approx((236.0, 239.2))


def test_tpot_is_decode_time_over_usage_tokens_minus_one() -> None:
    m = metrics.compute(hand_samples(), duration=0.5)
    # r1: (160 - 100) / (4 - 1) = 20 ms; r2: (240 - 200) / (5 - 1) = 10 ms.
    assert (m.mean_tpot_ms, m.median_tpot_ms, m.std_tpot_ms) == pytest.approx((15.0, 15.0, 5.0))
    assert (m.p95_tpot_ms, m.p99_tpot_ms) == pytest.approx((19.5, 19.9))
    assert m.median_decode_tok_s_per_stream == pytest.approx(1000 / 15)


def test_itl_pools_the_gaps_of_all_requests() -> None:
    m = metrics.compute(hand_samples(), duration=0.5)
    # Gaps 20, 20, 20, 10, 30 ms.
    assert (m.mean_itl_ms, m.median_itl_ms) == pytest.approx((20.0, 20.0))
    assert m.std_itl_ms == pytest.approx(math.sqrt(40.0))
    assert (m.p95_itl_ms, m.p99_itl_ms) == pytest.approx((28.0, 29.6))


def test_single_token_answers_have_no_tpot() -> None:
    one = metrics.RequestSample(start=0.0, prompt_tokens_estimate=1, ttft=0.1, latency=0.1, end=0.1)
    one.token_chunks, one.completion_tokens = 1, 1
    m = metrics.compute([one], duration=1.0)
    assert m.completed == 1
    assert (m.median_tpot_ms, m.median_decode_tok_s_per_stream) == (None, None)


def test_nothing_completed_gives_nulls_not_zeros() -> None:
    m = metrics.compute(hand_samples()[2:], duration=0.5)
    assert (m.completed, m.failed, m.error_rate) == (0, 1, 1.0)
    assert m.median_ttft_ms is None and m.p99_e2el_ms is None
    assert m.token_count_source.startswith("none")
    assert metrics.compute([], duration=0.0).request_throughput is None


def test_token_count_source_says_what_fell_back() -> None:
    r1, r2, _ = hand_samples()
    r2.completion_tokens = None
    m = metrics.compute([r1, r2], duration=1.0)
    assert m.token_count_source.startswith("usage, chunks for 1 of 2 requests")
    assert m.total_output_tokens == 4 + 3  # r2 counted by its 3 chunks
    r1.completion_tokens = None
    assert metrics.compute([r1, r2], duration=1.0).token_count_source.startswith("chunks (no request")


def test_peak_concurrency_treats_intervals_as_half_open() -> None:
    a = metrics.RequestSample(start=0.0, prompt_tokens_estimate=1, ttft=0.1, latency=1.0)
    b = metrics.RequestSample(start=1.0, prompt_tokens_estimate=1, ttft=0.1, latency=1.0)
    assert metrics.peak_concurrency([a, b]) == 1


def test_mean_in_flight_is_time_weighted_over_the_window() -> None:
    a = metrics.RequestSample(start=0.0, prompt_tokens_estimate=1, end=1.0)
    b = metrics.RequestSample(start=0.5, prompt_tokens_estimate=1, end=2.0)
    assert metrics.mean_in_flight([a, b], 0.0, 1.0) == pytest.approx(1.5)
    assert metrics.mean_in_flight([a, b], 1.0, 1.0) is None


# --------------------------------------------------------------------------- client saturation


def load(**overrides: object) -> metrics.ClientLoad:
    args: dict[str, object] = {
        "processes": 1,
        "target_in_flight": 64,
        "mean_in_flight": 63.0,
        "cpu_seconds": 1.0,
        "duration": 10.0,
        "loop_lags": [0.001] * 100,
        "dispatch_lags": [],
        "send_delays": [0.002] * 10,
    }
    args.update(overrides)
    return metrics.client_load(**args)  # type: ignore[arg-type]


def test_a_client_with_headroom_is_not_saturated() -> None:
    result = load()
    assert not result.saturated and result.reasons == []
    assert result.cpu_utilization == pytest.approx(0.1)
    assert result.loop_lag_p99_ms == pytest.approx(1.0)
    assert result.send_delay_p99_ms == pytest.approx(2.0)


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"cpu_seconds": 9.5}, "client CPU at 95%"),
        ({"cpu_seconds": 19.0, "processes": 2}, "client CPU at 95%"),
        ({"loop_lags": [0.2] * 10}, "event loop late by 200.0 ms"),
        ({"mean_in_flight": 50.0}, "kept 50.0 of 64 streams"),
        ({"dispatch_lags": [0.3] * 10}, "sent requests 300 ms after"),
    ],
)
def test_each_saturation_signal_is_named(overrides: dict[str, object], words: str) -> None:
    result = load(**overrides)
    assert result.saturated
    assert any(words in reason for reason in result.reasons), result.reasons


# --------------------------------------------------------------------------- the workload


def test_prompt_starts_with_the_nonce_and_the_rest_is_deterministic() -> None:
    text = workload.build_prompt(seed=3, index=7, nonce="abcd1234-7", words=94)
    assert text.startswith("abcd1234-7 ")
    again = workload.build_prompt(seed=3, index=7, nonce="ffff0000-7", words=94)
    assert again.split(" ", 1)[1] == text.split(" ", 1)[1]
    other = workload.build_prompt(seed=4, index=7, nonce="abcd1234-7", words=94)
    assert other != text
    assert len(text.split()) == 1 + 94


def test_the_estimate_is_one_token_per_word_after_the_nonce() -> None:
    words = workload.ESTIMATE.words_for(100)
    assert words == 94 and workload.ESTIMATE.tokens_for(words) == 100


def test_tiny_prompts_still_carry_one_word() -> None:
    assert workload.ESTIMATE.words_for(1) == 1
    assert len(workload.build_prompt(seed=0, index=0, nonce="n", words=0).split()) == 2


def test_request_body_asks_for_a_measurable_stream() -> None:
    config = bench.BenchConfig(url="http://infer:8000", model="llama", output_tokens=33)
    body = json.loads(workload.request_body(config, "hello"))
    assert body == {
        "model": "llama",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 33,
        "max_completion_tokens": 33,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_arrivals_are_seeded_and_rescaled_to_count_over_rate() -> None:
    first = workload.arrival_offsets(100, rate=10.0, burstiness=1.0, seed=1, duration=None)
    assert first == workload.arrival_offsets(100, rate=10.0, burstiness=1.0, seed=1, duration=None)
    assert first != workload.arrival_offsets(100, rate=10.0, burstiness=1.0, seed=2, duration=None)
    assert len(first) == 100 and first == sorted(first)
    assert first[-1] == pytest.approx(10.0)


def test_burstiness_changes_the_spread_of_gaps_not_the_mean() -> None:
    def gaps(burstiness: float) -> list[float]:
        offsets = workload.arrival_offsets(2000, rate=50.0, burstiness=burstiness, seed=5, duration=None)
        return [b - a for a, b in zip([0.0, *offsets], offsets, strict=False)]

    def cv(values: list[float]) -> float:
        mean = sum(values) / len(values)
        return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)) / mean

    assert sum(gaps(1.0)) / 2000 == pytest.approx(0.02)
    assert cv(gaps(1.0)) == pytest.approx(1.0, abs=0.1)  # Poisson: exponential gaps
    assert cv(gaps(4.0)) == pytest.approx(0.5, abs=0.1)  # gamma shape 4: 1/sqrt(4)


def test_arrivals_stop_at_the_duration() -> None:
    unbounded = workload.arrival_offsets(None, rate=20.0, burstiness=1.0, seed=0, duration=2.0)
    assert unbounded and unbounded[-1] <= 2.0
    assert len(unbounded) == pytest.approx(40, abs=20)
    capped = workload.arrival_offsets(100, rate=20.0, burstiness=1.0, seed=0, duration=2.0)
    assert capped[-1] <= 2.0 and len(capped) < 100


def test_config_needs_an_end_and_an_http_url() -> None:
    with pytest.raises(ValueError, match="requests or duration"):
        bench.BenchConfig(url="http://x:1", model="m", requests=None)
    with pytest.raises(ValueError, match="http"):
        bench.BenchConfig(url="infer:8000", model="m")
    assert bench.BenchConfig(url="http://x:1/", model="m").url == "http://x:1"


@pytest.mark.parametrize(
    "url, base",
    [
        ("http://infer:8000", "http://infer:8000"),
        ("http://infer:8000/", "http://infer:8000"),
        ("http://infer:8000/v1", "http://infer:8000"),
        ("http://infer:8000/v1/", "http://infer:8000"),
        ("https://gw.internal/llm/v1", "https://gw.internal/llm"),
        ("http://v1", "http://v1"),  # a host called v1 is not a path
        ("http://infer:8000/v12", "http://infer:8000/v12"),
    ],
)
def test_endpoint_url_drops_an_openai_style_v1(url: str, base: str) -> None:
    assert bench_config.endpoint_url(url) == base


@pytest.mark.parametrize("url", ["ftp://x", "infer:8000", "http://"])
def test_endpoint_url_refuses_what_can_never_work(url: str) -> None:
    with pytest.raises(errors.UsageError, match="URL"):
        bench_config.endpoint_url(url)


def test_config_for_turns_refused_values_into_usage_errors() -> None:
    assert bench_config.config_for("http://x:1/v1", model="m").url == "http://x:1"
    with pytest.raises(errors.UsageError, match="--model"):
        bench_config.config_for("http://x:1", model="")
    with pytest.raises(errors.UsageError, match="--request-rate must be a finite number"):
        bench_config.config_for("http://x:1", model="m", request_rate=math.inf)
    with pytest.raises(errors.UsageError, match="requests or duration"):
        bench_config.config_for("http://x:1", model="m", requests=None)


def test_config_from_profile_is_the_profiles_smoke_section() -> None:
    prof = profile.load(PROD)
    assert bench_config.config_from_profile(prof, "http://10.0.0.7:8000") == bench.BenchConfig(
        url="http://10.0.0.7:8000",
        model="meta-llama/Meta-Llama-3-70B-Instruct",
        concurrency=16,
        requests=64,
        input_tokens=512,
        output_tokens=128,
        warmup=4,
        duration=600.0,  # timeoutSeconds bounds the whole run
        timeout=120.0,  # and one request, at most two minutes
    )


def test_config_from_profile_lets_a_short_smoke_bound_one_request_too() -> None:
    prof = profile.load(PROD)
    smoke = prof.gate.smoke.model_copy(
        update={"timeoutSeconds": 45, "warmup": 0, "concurrency": 3, "requests": 20, "inputTokens": 7}
    )
    prof = prof.model_copy(update={"gate": prof.gate.model_copy(update={"smoke": smoke})})
    config = bench_config.config_from_profile(prof, "http://infer:8000")
    assert (config.duration, config.timeout) == (45.0, 45.0)
    assert (config.warmup, config.concurrency, config.requests, config.input_tokens) == (0, 3, 20, 7)
    assert config.request_rate is None and config.processes is None and config.seed == 0


def test_process_count_caps_at_concurrency() -> None:
    assert bench.BenchConfig(url="http://x:1", model="m", concurrency=3, processes=8).process_count() == 3
    assert bench.BenchConfig(url="http://x:1", model="m", concurrency=1).process_count() == 1


def test_plan_splits_streams_requests_warmup_and_arrivals_across_processes() -> None:
    config = bench.BenchConfig(url="http://x:1", model="m", concurrency=5, requests=7, warmup=3, processes=2)
    shards = bench._plan(config)
    assert [s.concurrency for s in shards] == [3, 2]
    assert [s.request_indices for s in shards] == [(0, 2, 4, 6), (1, 3, 5)]
    assert [s.warmup for s in shards] == [2, 1]
    open_loop = bench._plan(config.model_copy(update={"request_rate": 10.0}))
    assert [len(s.arrivals or ()) for s in open_loop] == [4, 3]


# --------------------------------------------------------------------------- the loop, end to end


def run(
    config: bench.BenchConfig,
    respond: Callable[[httpx.Request], Sequence[Step]],
    clock: FakeClock | None = None,
    seen: list[dict[str, object]] | None = None,
) -> bench_report.BenchReport:
    clock = clock or FakeClock()

    def steps(request: httpx.Request) -> Sequence[Step]:
        if seen is not None:
            seen.append(json.loads(request.content))
        return respond(request)

    return asyncio.run(bench.run_async(config, clock=clock, transport=streaming(clock, steps), run_id="r1"))


def config(**overrides: object) -> bench.BenchConfig:
    base: dict[str, object] = {
        "url": "http://infer.test:8000",
        "model": "m",
        "concurrency": 1,
        "requests": 3,
        "input_tokens": 20,
        "output_tokens": 4,
        "warmup": 0,
        "size_prompts": False,  # the sizing probes have tests of their own (test_prompt_sizing.py)
    }
    base.update(overrides)
    return bench.BenchConfig.model_validate(base)


def test_closed_loop_metrics_match_the_scripted_timing() -> None:
    report = run(config(), lambda _: vllm_steps(ttft=0.1, itl=0.02, tokens=4, prompt_tokens=25))
    # Three back-to-back requests of 100 ms TTFT + 3 x 20 ms: the run lasts 3 x 160 ms.
    assert (report.completed, report.failed, report.error_rate) == (3, 0, 0.0)
    assert report.duration == pytest.approx(0.48)
    assert report.total_input_tokens == 75 and report.total_output_tokens == 12
    assert report.output_throughput == pytest.approx(25.0)
    assert report.request_throughput == pytest.approx(6.25)
    assert report.total_token_throughput == pytest.approx(87 / 0.48)
    assert report.median_ttft_ms == pytest.approx(100.0) and report.p99_ttft_ms == pytest.approx(100.0)
    assert report.median_tpot_ms == pytest.approx(20.0) and report.std_tpot_ms == pytest.approx(0.0)
    assert report.median_itl_ms == pytest.approx(20.0) and report.p95_itl_ms == pytest.approx(20.0)
    assert report.median_e2el_ms == pytest.approx(160.0)
    assert report.median_decode_tok_s_per_stream == pytest.approx(50.0)
    assert report.max_concurrent_requests == 1
    assert report.token_count_source == "usage"
    assert report.client.mean_in_flight == pytest.approx(1.0)
    assert report.ttfts_ms == pytest.approx([100.0] * 3) and report.output_lens == [4, 4, 4]
    assert report.run_id == "r1" and report.failures == {} and report.aborted is None


def test_every_request_is_a_streaming_chat_request_with_a_unique_leading_nonce() -> None:
    seen: list[dict[str, object]] = []
    run(config(requests=4, warmup=2), lambda _: vllm_steps(0.1, 0.02, 4), seen=seen)
    prompts = [str(body["messages"][0]["content"]) for body in seen]  # type: ignore[index]
    assert len(seen) == 6
    nonces = [p.split(" ", 1)[0] for p in prompts]
    assert len(set(nonces)) == 6
    assert all(re.fullmatch(r"r1-(w0-)?\d+", n) for n in nonces), nonces
    assert all(body["stream"] is True and body["ignore_eos"] is True for body in seen)


def test_warmup_requests_are_sent_but_not_measured() -> None:
    seen: list[dict[str, object]] = []
    report = run(config(requests=3, warmup=2), lambda _: vllm_steps(0.1, 0.02, 4), seen=seen)
    assert len(seen) == 5
    assert report.completed == 3 and report.duration == pytest.approx(0.48)


def test_the_first_token_is_timed_from_the_runs_start_warm_up_included() -> None:
    # A server that just became healthy: its first answer is slow, the later ones are not. The time to
    # serving ends at that first token, which only the warm-up request saw.
    cold = [True]

    def respond(_: httpx.Request) -> Sequence[Step]:
        slow, cold[0] = cold[0], False
        return vllm_steps(2.0 if slow else 0.1, 0.02, 4)

    report = run(config(requests=3, warmup=1), respond)
    assert report.first_token_s == pytest.approx(2.0)
    assert min(report.ttfts_ms) == pytest.approx(100.0)  # the measured requests never saw the cold one


def test_chunks_are_counted_when_usage_is_missing() -> None:
    report = run(config(), lambda _: vllm_steps(0.1, 0.02, 4, prompt_tokens=None))
    assert report.total_output_tokens == 12
    assert report.token_count_source.startswith("chunks")
    assert report.total_input_tokens == 3 * 20  # the estimate, flagged by the same source line


def test_a_chunk_carrying_several_tokens_is_counted_by_usage() -> None:
    steps: list[Step] = [
        0.1,
        ROLE_EVENT + token_event("ab"),
        0.06,
        token_event("cd"),
        usage_event(5, 4),
        DONE_EVENT,
    ]
    report = run(config(requests=1), lambda _: steps)
    assert report.total_output_tokens == 4
    assert report.median_tpot_ms == pytest.approx(20.0)  # 60 ms over 3 further tokens
    assert report.median_itl_ms == pytest.approx(60.0)  # one gap between two chunks


def broken(steps: list[Step]) -> Callable[[httpx.Request], Sequence[Step]]:
    return lambda _: steps


def raising(exc: Exception) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    return handler


@pytest.mark.parametrize(
    "steps, kind, words",
    [
        (
            [0.1, token_event(), event({"error": {"message": "engine died", "code": 500}}), DONE_EVENT],
            "stream_error",
            "engine died",
        ),
        ([0.1, token_event(), 0.02, token_event(), usage_event(1, 2)], "protocol", "without data: [DONE]"),
        ([0.1, token_event(), b"data: {not json\n\n", DONE_EVENT], "protocol", "not JSON"),
        ([0.1, token_event(), httpx.RemoteProtocolError("peer closed")], "protocol", "peer closed"),
        ([0.1, token_event(), httpx.ReadTimeout("stalled")], "timeout", "no data within the read timeout"),
        ([0.1, ROLE_EVENT, usage_event(1, 0), DONE_EVENT], "no_tokens", "without any output token"),
        ([0.1, token_event(), 2.0, token_event(), DONE_EVENT], "timeout", "longer than 1 s"),
    ],
)
def test_broken_streams_are_failed_requests(steps: list[Step], kind: str, words: str) -> None:
    report = run(config(requests=1, timeout=1.0), broken(steps))
    assert (report.completed, report.failed, report.error_rate) == (0, 1, 1.0)
    assert report.failures == {kind: 1}
    assert words in report.errors[0]


@pytest.mark.parametrize(
    "handler, kind",
    [
        (lambda _: httpx.Response(500, json={"object": "error", "message": "boom"}), "http_status"),
        (raising(httpx.ConnectError("Connection refused")), "connect"),
        (raising(httpx.ReadTimeout("no headers")), "timeout"),
    ],
)
def test_requests_that_never_stream_are_failed_requests(
    handler: Callable[[httpx.Request], httpx.Response], kind: str
) -> None:
    clock = FakeClock()
    report = asyncio.run(
        bench.run_async(config(requests=2), clock=clock, transport=httpx.MockTransport(handler), run_id="r1")
    )
    assert report.failures == {kind: 2} and report.completed == 0


def test_one_bad_request_among_good_ones_counts_in_error_rate() -> None:
    def respond(request: httpx.Request) -> Sequence[Step]:
        content = str(json.loads(request.content)["messages"][0]["content"])
        if content.startswith("r1-1 "):
            return [0.1, token_event(), event({"error": "overloaded"}), DONE_EVENT]
        return vllm_steps(0.1, 0.02, 4)

    report = run(config(requests=4), respond)
    assert (report.completed, report.failed) == (3, 1)
    assert report.error_rate == pytest.approx(0.25)
    assert report.measurement_problem() is None
    assert report.median_ttft_ms == pytest.approx(100.0)


def test_refused_warmup_aborts_before_measuring() -> None:
    transport = httpx.MockTransport(raising(httpx.ConnectError("Connection refused")))
    report = asyncio.run(bench.run_async(config(warmup=2, requests=50), clock=FakeClock(), transport=transport))
    assert report.aborted is not None and "all 2 warm-up requests failed" in report.aborted
    assert report.completed == 0 and report.failed == 0
    assert report.measurement_problem() == report.aborted


def test_mostly_refused_requests_are_a_measurement_problem() -> None:
    transport = httpx.MockTransport(raising(httpx.ConnectError("Connection refused")))
    report = asyncio.run(bench.run_async(config(requests=4), clock=FakeClock(), transport=transport))
    problem = report.measurement_problem()
    assert problem is not None and "4 of 4 requests could not connect" in problem


def test_a_run_fails_as_a_smoke_test_when_nothing_was_measured() -> None:
    transport = httpx.MockTransport(raising(httpx.ConnectError("Connection refused")))
    aborted = asyncio.run(bench.run_async(config(warmup=2), clock=FakeClock(), transport=transport))
    reason = aborted.failure_reason(max_error_rate=1.0)
    assert reason is not None and reason.startswith("nothing was measured: all 2 warm-up requests failed")


def test_a_run_where_no_request_completed_fails_whatever_the_error_rate_limit() -> None:
    transport = httpx.MockTransport(lambda _: httpx.Response(404, json={"message": "The model `m` does not exist."}))
    report = asyncio.run(bench.run_async(config(requests=2), clock=FakeClock(), transport=transport))
    reason = report.failure_reason(max_error_rate=1.0)
    assert reason is not None
    assert reason.startswith("no request completed: 2 of 2 requests failed (http_status 2), e.g. ")
    assert "HTTP 404" in reason and "\n" not in reason


def test_a_run_fails_when_its_error_rate_is_above_the_limit() -> None:
    def respond(request: httpx.Request) -> Sequence[Step]:
        content = str(json.loads(request.content)["messages"][0]["content"])
        if content.startswith("r1-1 "):
            return [0.1, token_event(), event({"error": "overloaded"}), DONE_EVENT]
        return vllm_steps(0.1, 0.02, 4)

    report = run(config(requests=4), respond)
    reason = report.failure_reason(max_error_rate=0.0)
    assert reason is not None and "error rate 0.2500 is above --max-error-rate 0: 1 of 4 requests failed" in reason
    assert "stream_error 1" in reason and "overloaded" in reason
    assert report.failure_reason(max_error_rate=0.25) is None
    assert run(config(), lambda _: vllm_steps(0.1, 0.02, 4)).failure_reason(max_error_rate=0.0) is None


def test_duration_stops_sending_new_requests() -> None:
    report = run(config(requests=None, duration=0.3), lambda _: vllm_steps(0.1, 0.02, 4))
    # Requests start at 0 and 0.16 s; at 0.32 s the 0.3 s budget is spent, so no third one.
    assert report.completed == 2
    assert report.duration == pytest.approx(0.32)


def test_a_stop_ends_the_measured_phase_and_lets_the_request_in_flight_finish() -> None:
    stop = early_stop.Stop()
    sent = 0

    def respond(request: httpx.Request) -> Sequence[Step]:
        nonlocal sent
        sent += 1
        if sent == 3:
            stop.request("SIGTERM")  # while the third request is on its way
        return vllm_steps(0.1, 0.02, 4)

    clock = FakeClock()
    cfg = config(requests=None, duration=3600.0)
    report = asyncio.run(bench.run_async(cfg, clock=clock, transport=streaming(clock, respond), run_id="r1", stop=stop))
    assert report.completed == 3 and report.failed == 0
    assert report.stopped_early == f"stopped by SIGTERM after {report.duration:.1f} s of measuring"
    assert "Stopped early:" in bench.format_table(report)


def test_open_loop_sends_every_arrival_and_respects_the_cap() -> None:
    transport = httpx.MockTransport(lambda _: httpx.Response(200, stream=Script(FakeClock(), vllm_steps(0.0, 0.0, 4))))
    cfg = config(requests=6, concurrency=2, request_rate=500.0)
    report = asyncio.run(bench.run_async(cfg, transport=transport))
    assert report.completed == 6 and report.max_concurrent_requests <= 2
    assert report.client.mean_in_flight is None  # not a closed loop: no target to keep


# --------------------------------------------------------------------------- the report


def test_table_json_and_html() -> None:
    report = run(config(), lambda _: vllm_steps(0.1, 0.02, 4, prompt_tokens=25))
    table = bench.format_table(report)
    for label in (
        "Successful requests:",
        "Output token throughput (tok/s):",
        "Median TPOT (ms):",
        "P99 ITL (ms):",
    ):
        assert label in table
    assert "Token counts from:" in table and "usage" in table
    assert bench.BenchReport.from_json(report.to_json()) == report
    page = bench_report.render_html(report)
    assert page.count("<svg") == 2 and "TTFT per request" in page and "TPOT per request" in page
    assert not re.search(r"<script|<link|src=|url\(", page)  # nothing fetched: it opens air-gapped


def test_save_writes_json_and_html_side_by_side(tmp_path: object) -> None:
    report = run(config(), lambda _: vllm_steps(0.1, 0.02, 4))
    json_path, html_path = bench.save(report, f"{tmp_path}/out/bench.json")
    assert bench.BenchReport.from_json(json_path.read_text()).completed == 3
    assert html_path.suffix == ".html" and "<svg" in html_path.read_text()


def test_save_to_a_path_that_cannot_be_written_is_a_usage_error(tmp_path: pathlib.Path) -> None:
    report = run(config(), lambda _: vllm_steps(0.1, 0.02, 4))
    (tmp_path / "file").write_text("")
    with pytest.raises(errors.UsageError, match="cannot write the benchmark report"):
        bench.save(report, tmp_path / "file" / "bench.json")


def test_html_of_a_run_without_completions_says_so() -> None:
    transport = httpx.MockTransport(lambda _: httpx.Response(500))
    report = asyncio.run(bench.run_async(config(requests=1), clock=FakeClock(), transport=transport))
    assert "no completed requests" in bench_report.render_html(report)
