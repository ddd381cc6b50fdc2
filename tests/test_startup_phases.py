"""Each engine's start-up phases, read from public logs (tests/data/startup_phases names each source)."""

from __future__ import annotations

import pathlib
import re

import pytest

from orchestrator import engines
from orchestrator.engines import startup_phases

LOGS = pathlib.Path(__file__).parent / "data" / "startup_phases"


def _log(name: str) -> str:
    return (LOGS / name).read_text()


def test_every_fixture_names_its_public_source() -> None:
    for log in LOGS.glob("*.log"):
        assert re.search(r"^# Source( A)?: https://", log.read_text(), re.MULTILINE), log.name


def test_vllm_0_19_times_every_phase_of_its_start() -> None:
    assert engines.VLLM.phases(_log("vllm-0.19-llmd-llama31-8b.log")) == {
        "weights_read": 13.49,
        "model_load": 14.43,
        "dynamo": 4.29,
        "compile": 10.84,
        "profiling": 0.46,
        "cuda_graphs": 3.0,
        "engine_init": 21.45,
    }


def test_vllm_wordings_of_late_2025_are_read() -> None:
    # "Model loading took X GiB memory and Y seconds" with four decimals, "torch.compile takes".
    assert engines.VLLM.phases(_log("vllm-pr29335.log")) == {"model_load": 27.2, "dynamo": 6.07, "compile": 19.69}


def test_vllm_mid_2025_and_2026_init_engine_lines_are_read() -> None:
    older = engines.VLLM.phases(_log("vllm-runai-streamer-issue67.log"))
    assert older == {"compile": 45.81, "cuda_graphs": 37.0, "engine_init": 90.84}
    newer = engines.VLLM.phases(_log("vllm-pr39559-club3090.log"))
    # "init engine ... took 73.71 s (compilation: 9.82 s)"; the compile line of the other log excerpt.
    assert newer["engine_init"] == 73.71 and newer["compile"] == 1.61 and newer["profiling"] == 0.11


def test_sglang_graph_capture_takes_the_slowest_rank() -> None:
    assert engines.SGLANG.phases(_log("sglang-pr11830-pr4826-pr12978.log")) == {"cuda_graphs": 11.39}


def test_sglang_per_kind_graph_captures_add_up_and_weights_carry_their_time() -> None:
    text = (
        "[2026-02-01 10:00:00 TP0] Load weight end. elapsed=228.09 s, type=X, dtype=torch.bfloat16, avail mem=9 GB\n"
        "[2026-02-01 10:04:00 TP0] Capture target decode CUDA graph end. elapsed=16.40 s\n"
        "[2026-02-01 10:04:05 TP0] Capture target prefill CUDA graph end. elapsed=4.60 s\n"
    )
    assert engines.SGLANG.phases(text) == {"model_load": 228.09, "cuda_graphs": 21.0}


def test_tgi_shards_bound_the_start_by_the_slowest() -> None:
    assert engines.TGI.phases(_log("tgi-issue2828.log")) == {"shard_ready": 55.802}


def test_an_engine_without_timing_lines_reports_no_phase() -> None:
    assert engines.TRTLLM.phases(_log("vllm-0.19-llmd-llama31-8b.log")) == {}
    assert engines.VLLM.phases("nothing timed here\n") == {}


def test_an_unknown_phase_name_is_refused_where_an_engine_declares_it() -> None:
    with pytest.raises(ValueError, match="unknown start-up phase"):
        startup_phases.line("warp_drive", r"took (\d+)")


def test_the_summary_reads_in_start_order() -> None:
    summary = startup_phases.summary(engines.VLLM.phases(_log("vllm-0.19-llmd-llama31-8b.log")))
    assert summary.startswith("weights_read 13.5 s, model_load 14.4 s") and summary.endswith("engine_init 21.4 s")


def test_a_line_whose_figure_is_no_number_is_left_out_not_a_crash() -> None:
    text = (
        "Loading weights took . seconds\nLoading weights took 1.2.3 seconds\n"
        "init engine (profile, create kv cache, warmup model) took 2.5 s\n"
    )
    assert engines.VLLM.phases(text) == {"engine_init": 2.5}
