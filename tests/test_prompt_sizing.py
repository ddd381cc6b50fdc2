"""The smoke run sends the prompt lengths it claims: sized by the server's usage, judged when it did not.

The fake server counts tokens the way a small vocabulary does (three per word, plus a chat template
and the nonce), so the one-token-per-word estimate would send prompts three times too long; the
sizing probes must find the words that make the length asked for, and the report and the gate must
say how far the prompts sent were from it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import httpx
import pytest
from streamfakes import FakeClock, Step, streaming, vllm_steps
from test_gate import SLO, report, row

from orchestrator.gate import bench, bench_report, verdict, workload

TEMPLATE_TOKENS, NONCE_TOKENS, TOKENS_PER_WORD = 12, 5, 3


def counted(request: httpx.Request) -> int:
    """The fake tokenizer: the template, the nonce, three tokens per word."""
    content = str(json.loads(request.content)["messages"][0]["content"])
    _nonce, _, words = content.partition(" ")
    return TEMPLATE_TOKENS + NONCE_TOKENS + TOKENS_PER_WORD * len(words.split())


def run(
    config: bench.BenchConfig, respond_usage: bool = True, seen: list[httpx.Request] | None = None
) -> bench.BenchReport:
    clock = FakeClock()

    def respond(request: httpx.Request) -> Sequence[Step]:
        if seen is not None:
            seen.append(request)
        limit = json.loads(request.content)["max_tokens"]
        return vllm_steps(0.1, 0.02, limit, prompt_tokens=counted(request) if respond_usage else None)

    transport = streaming(clock, respond)
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
