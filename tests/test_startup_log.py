"""vLLM's start-up lines, read back from public GPU logs (tests/data/vllm_startup names each source),
and the warnings when the running engine disagrees with the plan. The other engines' lines are
tests/test_engines.py's."""

from __future__ import annotations

import pathlib

import pytest

from orchestrator import engines
from orchestrator.engines import startup_log

LOGS = pathlib.Path(__file__).parent / "data" / "vllm_startup"


def _log(name: str) -> str:
    return (LOGS / name).read_text()


def test_v1_kv_tokens_and_concurrency_are_read_with_thousands_separators() -> None:
    seen = engines.VLLM.parse_startup("pod-a", _log("gpu-qwen3-14b.log"))
    assert seen is not None
    assert (seen.device, seen.kv_cache_tokens, seen.max_model_len, seen.max_concurrency) == ("GPU", 42656, 32768, 1.30)
    assert seen.weights_gib is None and seen.load_seconds is None  # lines not in this excerpt stay unknown


def test_the_largest_rank_and_the_longest_load_count_and_gb_become_gib() -> None:
    seen = engines.VLLM.parse_startup("pod-a", _log("gpu-v0-tp8-load-time.log"))
    assert seen is not None
    assert seen.weights_gib == pytest.approx(19.5904e9 / 2**30, abs=1e-3)
    assert seen.load_seconds == pytest.approx(727.90)
    assert seen.kv_cache_tokens is None


def test_a_cpu_build_line_and_a_gib_memory_line_are_read() -> None:
    text = (
        "INFO [kv_cache_utils.py:1] CPU KV cache size: 174,752 tokens\n"
        "Model loading took 0.0068 GiB memory and 0.41 seconds\n"
    )
    seen = engines.VLLM.parse_startup("p", text)
    assert seen is not None and seen.device == "CPU" and seen.kv_cache_tokens == 174752
    assert (seen.weights_gib, seen.load_seconds) == (0.007, 0.41)


def test_a_log_without_vllm_lines_is_no_observation() -> None:
    assert engines.VLLM.parse_startup("p", "Traceback (most recent call last):\n  ...\n") is None


def test_kv_off_the_plan_by_more_than_ten_percent_and_too_little_concurrency_are_warned() -> None:
    seen = engines.VLLM.parse_startup("pod-a", _log("gpu-v1-pr13596.log"))
    assert seen is not None
    assert startup_log.warnings({"kv_cache_tokens": 2_000_000}, [seen], max_num_seqs=256) == []
    off = startup_log.warnings({"kv_cache_tokens": 1_500_000}, [seen], max_num_seqs=256)
    assert len(off) == 1 and "+36%" in off[0] and "1,500,000" in off[0]
    short = startup_log.warnings({"kv_cache_tokens": 2_000_000}, [seen], max_num_seqs=1024)
    assert len(short) == 1 and "997.08 sequences" in short[0] and "maxNumSeqs is 1024" in short[0]
