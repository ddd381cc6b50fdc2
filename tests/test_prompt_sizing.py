"""The smoke run sends the prompt lengths it claims: sized by the server's usage, judged when it did not.

The fake server counts tokens the way a small vocabulary does (three per word, plus a chat template
and the nonce), so the one-token-per-word estimate would send prompts three times too long; the
sizing probes must find the words that make the length asked for, and the report and the gate must
say how far the prompts sent were from it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import httpx
import pytest
from streamfakes import FakeClock, Script, vllm_steps
from test_gate import SLO, report, row

from orchestrator.gate import bench, bench_report, verdict, workload

TEMPLATE_TOKENS, NONCE_TOKENS, TOKENS_PER_WORD = 12, 5, 3


def counted(request: httpx.Request) -> int:
    """The fake tokenizer: the template, the nonce, three tokens per word."""
    content = str(json.loads(request.content)["messages"][0]["content"])
    _nonce, _, words = content.partition(" ")
    return TEMPLATE_TOKENS + NONCE_TOKENS + TOKENS_PER_WORD * len(words.split())


def run(
    config: bench.BenchConfig,
    respond_usage: bool = True,
    seen: list[httpx.Request] | None = None,
    refuse: Callable[[int, str], bool] = lambda number, content: False,
    first_ttft: float = 0.1,
) -> bench.BenchReport:
    """A run against the fake server; ``refuse(n, content)`` makes the n-th request (from 0) a 503."""
    clock = FakeClock()
    count = [0]

    def respond(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        number, count[0] = count[0], count[0] + 1
        content = str(json.loads(request.content)["messages"][0]["content"])
        if refuse(number, content):
            return httpx.Response(503, json={"object": "error", "message": "loading"})
        limit = json.loads(request.content)["max_tokens"]
        usage = counted(request) if respond_usage else None
        steps = vllm_steps(first_ttft if number == 0 else 0.1, 0.02, limit, usage)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Script(clock, steps))

    transport = httpx.MockTransport(respond)
    return asyncio.run(bench.run_async(config, clock=clock, transport=transport, run_id="r1"))


def config(**overrides: object) -> bench.BenchConfig:
    base: dict[str, object] = {"url": "http://infer.test:8000", "model": "m", "concurrency": 2}
    base.update(requests=8, input_tokens=512, output_tokens=4, warmup=2)
    base.update(overrides)
    return bench.BenchConfig.model_validate(base)


def test_prompts_are_sized_by_the_servers_usage_and_hit_the_length_asked() -> None:
    seen: list[httpx.Request] = []
    result = run(config(), seen=seen)
    probes = [r for r in seen if json.loads(r.content)["max_tokens"] == 1]
    assert probes and len(probes) < len(seen)  # one-token probes first, then warm-up and measured requests
    assert result.prompt_sizing is not None
    assert result.prompt_sizing["tokens_per_word"] == pytest.approx(TOKENS_PER_WORD)
    assert result.prompt_sizing["overhead_tokens"] == TEMPLATE_TOKENS + NONCE_TOKENS
    assert str(result.prompt_sizing["source"]).startswith("server usage")
    assert result.mean_prompt_tokens_sent == pytest.approx(512, abs=TOKENS_PER_WORD)
    assert result.prompt_length_problem() is None
    assert "512 / 51" in bench_report.format_table(result)  # asked / sent


def test_without_sizing_the_small_vocabulary_sends_three_times_the_length_and_the_run_says_so() -> None:
    result = run(config(size_prompts=False))
    assert result.mean_prompt_tokens_sent is not None and result.mean_prompt_tokens_sent > 3 * 480
    problem = result.prompt_length_problem()
    assert problem is not None and "where 512 were asked" in problem and "one token per word" in problem
    assert "Prompt length:" in bench_report.format_table(result)


def test_a_server_without_usage_keeps_the_estimate_and_says_why() -> None:
    result = run(config(), respond_usage=False)
    assert result.prompt_sizing is not None
    assert "not measured: the server sent no usage.prompt_tokens" in str(result.prompt_sizing["source"])
    assert result.mean_prompt_tokens_sent is None and result.prompt_length_problem() is None
    assert result.completed == 8


def test_a_length_below_one_word_and_the_overhead_is_reported_not_hidden() -> None:
    result = run(config(input_tokens=4))
    assert result.mean_prompt_tokens_sent == TEMPLATE_TOKENS + NONCE_TOKENS + TOKENS_PER_WORD
    assert result.prompt_length_problem() is not None


def off_length(sent: float) -> bench.BenchReport:
    sizing = workload.ESTIMATE.to_json()
    return report(mean_prompt_tokens_sent=sent, prompt_sizing=sizing, p95_ttft_ms=2000.0)


def test_the_gate_is_inconclusive_when_the_prompts_were_off_length_even_on_a_missed_ttft() -> None:
    # TTFT at three times the prompt length says nothing about TTFT at the length asked for.
    result = verdict.evaluate(off_length(3.1 * 512), SLO, min_samples=16)
    assert result.verdict is verdict.Verdict.INCONCLUSIVE
    assert row(result, "prompt_tokens").verdict is verdict.Verdict.INCONCLUSIVE
    assert row(result, "p95_ttft_ms").verdict is verdict.Verdict.INCONCLUSIVE
    assert "+210%" in row(result, "prompt_tokens").reason
    facts = result.to_json()["bench"]
    assert isinstance(facts, dict) and facts["prompt_tokens"]["asked"] == 512  # type: ignore[index]


def test_within_ten_percent_the_gate_judges_and_failed_requests_fail_at_any_length() -> None:
    assert verdict.evaluate(off_length(0.91 * 512), SLO, min_samples=16).verdict is verdict.Verdict.FAIL
    failing = off_length(3 * 512).model_copy(update={"failed": 30, "error_rate": 30 / 286, "p95_ttft_ms": 900.0})
    result = verdict.evaluate(failing, SLO, min_samples=16)
    assert row(result, "error_rate").verdict is verdict.Verdict.FAIL and result.verdict is verdict.Verdict.FAIL


def test_a_refused_overhead_probe_is_sent_once_more_and_the_sizing_still_measured() -> None:
    # A server that just turned healthy may refuse its first request.
    result = run(config(), refuse=lambda number, _: number == 0)
    assert result.prompt_sizing is not None and str(result.prompt_sizing["source"]).startswith("server usage")
    assert result.prompt_length_problem() is None


def test_a_refused_slice_leaves_the_others_to_measure_the_words() -> None:
    result = run(config(), refuse=lambda _, content: content.startswith("r1-p3 "))
    assert result.prompt_sizing is not None
    assert result.prompt_sizing["source"] == "server usage.prompt_tokens of 6 probes"
    assert result.prompt_sizing["tokens_per_word"] == pytest.approx(TOKENS_PER_WORD)
    assert result.prompt_length_problem() is None


def test_without_the_overhead_no_slice_is_sent_and_the_estimate_says_why() -> None:
    seen: list[httpx.Request] = []
    result = run(config(warmup=0), seen=seen, refuse=lambda _, content: content == "r1-p0")
    assert result.prompt_sizing is not None and "HTTP 503" in str(result.prompt_sizing["source"])
    probes = [r for r in seen if json.loads(r.content)["max_tokens"] == 1]
    assert len(probes) == 2  # the overhead probe and its one retry; no slice without an overhead


def test_the_first_token_of_a_fresh_server_is_the_first_probes(ttft: float = 3.0) -> None:
    # Time to serving ends at the first token the server ever sent: here a sizing probe's.
    result = run(config(), first_ttft=ttft)
    assert result.first_token_s == pytest.approx(ttft)


def test_counts_of_requests_are_judged_at_any_length() -> None:
    failing = off_length(3 * 512).model_copy(update={"failed": 3})
    result = verdict.evaluate(failing, {"failed": "<=0"}, min_samples=16)
    assert row(result, "failed").verdict is verdict.Verdict.FAIL


def test_a_previous_release_measured_at_another_length_is_no_baseline() -> None:
    # A record from before sizing: 3x the asked length by its own total_input_tokens.
    before = verdict.evaluate(report(total_input_tokens=256 * 1536), SLO, min_samples=16).to_json()
    result = verdict.evaluate(report(), SLO, min_samples=16, previous_report=before, max_regression_pct=10)
    compared = row(result, "p95_ttft_ms vs previous")
    assert compared.verdict is verdict.Verdict.PASS
    assert "not compared: the previous release's prompts averaged 1536 tokens where 512 were asked" in compared.reason
