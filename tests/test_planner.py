"""The VRAM planner against published vLLM start-up logs, the KV-cache arithmetic, and every finding."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator import errors
from orchestrator.catalog import lookup as catalog
from orchestrator.plan import layout, planner
from orchestrator.profile import model as profile_schema

DATA = pathlib.Path(__file__).parent / "data"
IMAGE = "registry.internal/vllm/vllm-openai@sha256:" + "0" * 64
GIB = 1 << 30


def make_profile(
    *,
    architecture: str | None = None,
    config: str | None = None,
    gpu: str | None = "H100-80GB",
    memory_gib: float | None = None,
    fp8: bool | None = None,
    tp: int = 1,
    pp: int = 1,
    utilization: float = 0.9,
    max_model_len: int = 8192,
    max_num_seqs: int = 256,
    max_batched_tokens: int | None = None,
    kv_cache_dtype: str = "auto",
    weights_dtype: str = "auto",
    vllm_version: str = "0.33.0",
    extra_args: tuple[str, ...] = (),
    gpus_per_node: int = 8,
    interconnect: str = "nvlink",
    node_interconnect: str | None = None,
    nodes_per_copy: int | None = None,
    allow_cross_node_tp: bool = False,
    measured: dict[str, float] | None = None,
) -> profile_schema.Profile:
    model: dict[str, Any] = {"name": "m", "source": {"pvc": "models"}, "weightsDtype": weights_dtype}
    if measured is not None:
        model["measured"] = measured
    if architecture:
        model["architecture"] = architecture
    else:
        model["config"] = config
    hardware: dict[str, Any] = {"gpusPerNode": gpus_per_node, "interconnect": interconnect}
    for key, value in (("gpu", gpu), ("memoryGiB", memory_gib), ("fp8", fp8), ("nodeInterconnect", node_interconnect)):
        if value is not None:
            hardware[key] = value
    engine: dict[str, Any] = {
        "image": IMAGE,
        "vllmVersion": vllm_version,
        "tensorParallelSize": tp,
        "pipelineParallelSize": pp,
        "maxModelLen": max_model_len,
        "maxNumSeqs": max_num_seqs,
        "kvCacheDtype": kv_cache_dtype,
        "gpuMemoryUtilization": utilization,
        "extraArgs": list(extra_args),
        "allowCrossNodeTP": allow_cross_node_tp,
    }
    if max_batched_tokens is not None:
        engine["maxNumBatchedTokens"] = max_batched_tokens
    doc = {
        "apiVersion": "deployctl/v1",
        "kind": "InferenceProfile",
        "metadata": {"name": "t"},
        "model": model,
        "engine": engine,
        "hardware": hardware,
    }
    if nodes_per_copy is not None:
        doc["placement"] = {"nodesPerCopy": nodes_per_copy}
    profile = profile_schema.Profile.model_validate(doc)
    profile._base_dir = DATA
    return profile


def codes(plan: planner.Plan) -> dict[str, planner.Finding]:
    return {f.code: f for f in plan.findings}


# --- published vLLM start-up logs ----------------------------------------------------------------

LLM_D = (
    "https://github.com/llm-d-incubation/llm-d-planner/blob/d3121e059da88662db39a926a3ead964be97359b/"
    "accuracy/results/v0.19.0/logs/"
)


@dataclasses.dataclass(frozen=True)
class Datapoint:
    """One vLLM start-up as logged: the configuration it ran and the three numbers it printed."""

    name: str
    source: str
    profile: dict[str, Any]  # keyword arguments of make_profile reproducing the run
    weights_gib: float  # "Model loading took X GiB memory"
    kv_tokens: int  # "GPU KV cache size: N tokens"
    kv_gib: float | None  # "Available KV cache memory: X GiB" (None: logged by a different rank)


# Every run below logged "Defaulting max_num_seqs to 1024" (vLLM's H100 default when the flag is
# absent) and "max_num_batched_tokens=8192"; vLLM 0.19.0 did not yet reserve CUDA-graph memory.
_H100_V019 = {"gpu": "H100-80GB", "utilization": 0.95, "max_num_seqs": 1024, "vllm_version": "0.19.0"}
_LLAMA31_8B = {"config": "llama-3.1-8b.json", **_H100_V019}

DATAPOINTS = [
    Datapoint(
        "llama-3.1-8b h100 tp1",
        LLM_D + "meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--8192.log",
        _LLAMA31_8B,
        weights_gib=14.99,
        kv_tokens=476_016,
        kv_gib=58.11,
    ),
    Datapoint(
        "llama-3.1-8b h100 tp2",
        LLM_D + "meta-llama-llama-3-1-8b---h100-80gb--tp2pp1dp1--8192.log",
        {**_LLAMA31_8B, "tp": 2},
        weights_gib=7.51,
        kv_tokens=1_044_688,
        kv_gib=63.76,
    ),
    Datapoint(
        "llama-3.1-8b h100 tp4",
        LLM_D + "meta-llama-llama-3-1-8b---h100-80gb--tp4pp1dp1--8192.log",
        {**_LLAMA31_8B, "tp": 4},
        weights_gib=3.77,
        kv_tokens=2_209_792,
        kv_gib=67.44,
    ),
    Datapoint(
        # The logged "Available KV cache memory" (66.54 GiB) is stage 0's; the token count is the minimum
        # over stages, i.e. the last stage's (LM head and sampler), which is the one the planner sizes.
        "llama-3.1-8b h100 pp2",
        LLM_D + "meta-llama-llama-3-1-8b---h100-80gb--tp1pp2dp1--8192.log",
        {**_LLAMA31_8B, "pp": 2},
        weights_gib=7.51,
        kv_tokens=1_075_312,
        kv_gib=None,
    ),
    Datapoint(
        "llama-3.1-8b h100 fp8 kv",
        LLM_D + "meta-llama---h100-80gb--tp1pp1dp1--8192-dtbf16-kvfp8.log",
        {**_LLAMA31_8B, "kv_cache_dtype": "fp8"},
        weights_gib=14.99,
        kv_tokens=952_032,
        kv_gib=58.11,
    ),
    Datapoint(
        "mixtral-8x7b h100 tp2",
        LLM_D + "mistralai-mixtral-8x7b-i--h100-80gb--tp2pp1dp1--8192.log",
        {"architecture": "mixtral-8x7b", "tp": 2, **_H100_V019},
        weights_gib=43.51,
        kv_tokens=465_936,
        kv_gib=28.44,
    ),
    Datapoint(
        "qwen2.5-72b h100 tp2",
        LLM_D + "qwen-qwen2-5-72b-instruc--h100-80gb--tp2pp1dp1--8192.log",
        {"architecture": "qwen2.5-72b", "tp": 2, **_H100_V019},
        weights_gib=67.8,
        kv_tokens=19_920,
        kv_gib=3.04,
    ),
    Datapoint(
        # RedHatAI/Llama-3.3-70B-Instruct-fp8-dynamic: Llama 3 70B architecture, fp8 linear layers,
        # 16-bit embedding and LM head.
        "llama-3.3-70b fp8 h100 tp2",
        LLM_D + "fp8dyn-llama-3-3-70b--h100-80gb--tp2pp1dp1--8192.log",
        {"architecture": "llama-3-70b", "weights_dtype": "fp8", "tp": 2, **_H100_V019},
        weights_gib=33.88,
        kv_tokens=244_304,
        kv_gib=37.28,
    ),
    Datapoint(
        "llama-3.3-70b fp8 h100 tp4",
        LLM_D + "fp8dyn-llama-3-3-70b--h100-80gb--tp4pp1dp1--8192.log",
        {"architecture": "llama-3-70b", "weights_dtype": "fp8", "tp": 4, **_H100_V019},
        weights_gib=16.96,
        kv_tokens=708_992,
        kv_gib=54.09,
    ),
    Datapoint(
        # GCE a2-highgpu-1g (one A100 40GB), vLLM 0.15.1, the LLM class with enforce_eager=True and the
        # model's full 131072-token context; logged max_num_batched_tokens=8192, A100 max_num_seqs 256.
        "llama-3.1-8b a100-40gb eager 128k",
        "https://github.com/ilseokoh/vllm-gce/blob/ede8ee4e36cf1ed10471b3ff38514159f71dfa58/README.md",
        {
            "config": "llama-3.1-8b.json",
            "gpu": "A100-40GB",
            "max_model_len": 131072,
            "max_batched_tokens": 8192,
            "vllm_version": "0.15.1",
            "extra_args": ("--enforce-eager",),
        },
        weights_gib=14.99,
        kv_tokens=157_936,
        kv_gib=19.28,
    ),
]


@pytest.mark.parametrize("dp", DATAPOINTS, ids=lambda dp: dp.name)
def test_planner_reproduces_published_vllm_startup_logs(dp: Datapoint) -> None:
    plan = planner.plan(make_profile(**dp.profile))
    assert plan.weights_gib_per_gpu == pytest.approx(dp.weights_gib, rel=0.02), dp.source
    assert plan.kv_cache_tokens == pytest.approx(dp.kv_tokens, rel=0.10), dp.source
    if dp.kv_gib is not None:
        assert plan.kv_cache_gib_per_gpu == pytest.approx(dp.kv_gib, rel=0.10), dp.source


def test_calibration_is_much_tighter_than_the_tolerance_on_the_single_gpu_runs() -> None:
    # A drift here means a constant changed; the 10 % tolerance alone would hide it.
    plan = planner.plan(make_profile(**DATAPOINTS[0].profile))
    assert plan.kv_cache_tokens == pytest.approx(476_016, rel=0.005)


# --- KV-cache arithmetic ---------------------------------------------------------------------------


def test_llama3_70b_kv_is_320_kib_per_token_from_kv_heads_not_attention_heads() -> None:
    plan = planner.plan(make_profile(architecture="llama-3-70b", tp=4))
    assert plan.kv_bytes_per_token_model == 320 * 1024  # 2 × 80 layers × 8 KV heads × 128 × 2 bytes
    # Counting the 64 attention heads instead (no GQA) would be 8× that: the published trap.
    assert plan.kv_bytes_per_token_model * 8 == 2 * 80 * 64 * 128 * 2
    assert plan.kv_bytes_per_token_per_gpu == 80 * 1024  # TP=4 splits the 8 KV heads 2 per GPU
    assert 8192 * plan.kv_bytes_per_token_model / GIB == 2.5  # one 8K sequence, whole model


def test_fp8_kv_halves_bytes_per_token_and_doubles_tokens() -> None:
    fp16 = planner.plan(make_profile(architecture="llama-3-70b", tp=4))
    fp8 = planner.plan(make_profile(architecture="llama-3-70b", tp=4, kv_cache_dtype="fp8"))
    assert fp8.kv_bytes_per_token_per_gpu * 2 == fp16.kv_bytes_per_token_per_gpu
    assert fp8.kv_cache_gib_per_gpu == fp16.kv_cache_gib_per_gpu  # the memory is the same, only denser
    assert abs(fp8.kv_cache_tokens - 2 * fp16.kv_cache_tokens) <= 16


def test_kv_heads_are_replicated_when_tp_exceeds_them() -> None:
    # 8 KV heads over 16 GPUs: each GPU keeps a whole head, so per-GPU KV does not halve from TP=8.
    tp8 = planner.plan(make_profile(architecture="llama-3-70b", tp=8))
    tp16 = planner.plan(make_profile(architecture="llama-3-70b", tp=16, gpus_per_node=16))
    assert tp8.inputs["kv_heads_per_gpu"] == tp16.inputs["kv_heads_per_gpu"] == 1
    assert tp16.kv_bytes_per_token_per_gpu == tp8.kv_bytes_per_token_per_gpu == 2 * 80 * 1 * 128 * 2


def test_tokens_are_whole_16_token_blocks() -> None:
    plan = planner.plan(make_profile(architecture="llama-3-8b"))
    assert plan.kv_cache_tokens % 16 == 0
    assert plan.kv_cache_tokens == plan.kv_cache_blocks * 16
    assert plan.kv_cache_blocks == int(plan.kv_cache_gib_per_gpu * GIB // (16 * plan.kv_bytes_per_token_per_gpu))


def test_concurrency_counts_whole_blocks_per_request_like_vllm() -> None:
    # 1000 tokens need ceil(1000/16) = 63 blocks; vLLM logs blocks/63 as the concurrency, and since 0.20
    # that × 1000 as "GPU KV cache size"; 0.19 logged the pool, blocks × 16 (476,016 tokens at
    # max_model_len 2048, 4096 and 8192 alike in the llm-d Llama-3.1-8B logs).
    plan = planner.plan(make_profile(architecture="llama-3-8b", max_model_len=1000))
    assert plan.max_concurrency == pytest.approx(plan.kv_cache_blocks / 63)
    assert plan.kv_cache_tokens == int(plan.kv_cache_blocks / 63 * 1000)
    before = planner.plan(make_profile(architecture="llama-3-8b", max_model_len=1000, vllm_version="0.19.0"))
    assert before.kv_cache_tokens == before.kv_cache_blocks * 16


def test_fp8_checkpoint_keeps_embedding_and_lm_head_in_16_bit() -> None:
    plan = planner.plan(make_profile(architecture="llama-3-70b", weights_dtype="fp8"))
    all_one_byte = plan.inputs["params"] / GIB
    table = 128256 * 8192  # embedding, and the LM head again
    assert plan.weights_gib_per_gpu == pytest.approx(all_one_byte + 2 * table / GIB, abs=0.05)
    assert plan.weights_gib_per_gpu - all_one_byte > 1.9  # the ~2 GiB a naive "1 byte/param" misses


def test_parameter_counts_match_the_published_model_sizes() -> None:
    expected = {
        "llama-3-8b": 8.03e9,
        "llama-3-70b": 70.55e9,
        "llama-3.1-405b": 405.85e9,
        "mixtral-8x7b": 46.70e9,
        "qwen2.5-72b": 72.71e9,
        "llama-2-70b": 68.98e9,
    }
    for arch, params in expected.items():
        plan = planner.plan(make_profile(architecture=arch, tp=8))
        assert plan.inputs["params"] == pytest.approx(params, rel=0.002), arch


def test_cuda_graph_memory_is_reserved_from_vllm_0_21_and_not_with_enforce_eager() -> None:
    new = planner.plan(make_profile(architecture="llama-3-8b", vllm_version="0.33.0"))
    old = planner.plan(make_profile(architecture="llama-3-8b", vllm_version="0.19.0"))
    eager = planner.plan(make_profile(architecture="llama-3-8b", extra_args=("--enforce-eager",)))
    assert new.memory.cuda_graphs_gib > 0.5
    assert old.memory.cuda_graphs_gib == eager.memory.cuda_graphs_gib == 0
    assert old.kv_cache_gib_per_gpu - new.kv_cache_gib_per_gpu == pytest.approx(new.memory.cuda_graphs_gib)


@pytest.mark.parametrize(
    ("gpu", "memory_gib", "expected"),
    [
        ("A100-80GB", None, 2048),
        ("H100-80GB", None, 8192),
        ("H200", None, 8192),
        ("L40S", None, 2048),
        (None, 180.0, 16384),
    ],
)
def test_default_batched_tokens_follow_vllm_by_gpu(gpu: str | None, memory_gib: float | None, expected: int) -> None:
    plan = planner.plan(make_profile(architecture="llama-3-8b", gpu=gpu, memory_gib=memory_gib))
    assert plan.inputs["max_num_batched_tokens"] == expected


def test_memory_split_adds_up_to_the_total() -> None:
    m = planner.plan(make_profile(architecture="llama-3-70b", tp=4)).memory
    parts = m.weights_gib + m.activation_peak_gib + m.non_torch_gib + m.cuda_graphs_gib + m.kv_cache_gib
    assert parts + m.headroom_gib == pytest.approx(m.total_gib)
    assert m.budget_gib == pytest.approx(m.total_gib * 0.9)


def test_memory_override_and_fp8_override_replace_the_catalog() -> None:
    plan = planner.plan(
        make_profile(architecture="llama-3-8b", gpu="A100-80GB", memory_gib=40.0, fp8=True, kv_cache_dtype="fp8")
    )
    assert plan.memory.total_gib == 40.0
    assert "fp8-kv-without-native-fp8" not in codes(plan)


def test_model_config_path_is_read_relative_to_the_profile() -> None:
    plan = planner.plan(make_profile(config="llama-3.1-8b.json"))
    assert plan.inputs["model"].endswith("llama-3.1-8b.json")
    assert plan.inputs["layers"] == 32


def test_unreadable_model_config_is_an_invalid_profile() -> None:
    with pytest.raises(errors.InvalidProfile, match=r"model\.config"):
        planner.plan(make_profile(config="does-not-exist.json"))


def test_plan_json_has_the_documented_keys() -> None:
    doc = planner.plan(make_profile(architecture="llama-3-8b")).to_json()
    assert {
        "fits",
        "weights_gib_per_gpu",
        "kv_bytes_per_token_per_gpu",
        "kv_cache_gib_per_gpu",
        "kv_cache_tokens",
        "max_concurrency",
        "findings",
        "memory_per_gpu",
        "inputs",
    } <= doc.keys()
    assert {
        "total_gib",
        "budget_gib",
        "weights_gib",
        "activation_peak_gib",
        "non_torch_gib",
        "cuda_graphs_gib",
        "kv_cache_gib",
        "headroom_gib",
    } == doc["memory_per_gpu"].keys()
    inputs = doc["inputs"].keys()
    assert {"params", "layers", "kv_heads", "head_dim", "weights_dtype", "kv_cache_dtype"} <= inputs


@settings(max_examples=40, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    low=st.floats(min_value=0.5, max_value=0.94),
    step=st.floats(min_value=0.0, max_value=0.05),
    fp8=st.booleans(),
)
def test_more_utilization_never_means_fewer_tokens(tp: int, low: float, step: float, fp8: bool) -> None:
    kv = "fp8" if fp8 else "auto"
    a = planner.plan(make_profile(architecture="llama-3-70b", tp=tp, utilization=low, kv_cache_dtype=kv))
    b = planner.plan(make_profile(architecture="llama-3-70b", tp=tp, utilization=low + step, kv_cache_dtype=kv))
    assert b.kv_cache_tokens >= a.kv_cache_tokens
    assert a.kv_cache_tokens % 16 == 0


# --- findings --------------------------------------------------------------------------------------


def test_tp_that_does_not_divide_the_heads_is_invalid_and_lists_valid_values() -> None:
    f = codes(planner.plan(make_profile(architecture="llama-3-70b", tp=3)))["tp-not-divisor"]
    assert f.severity == "invalid"
    assert f.field == "engine.tensorParallelSize"
    assert "1, 2, 4, 8, 16, 32 or 64" in f.message


def test_valid_tp_values_need_kv_heads_to_split_or_replicate_evenly() -> None:
    # 48 attention heads, 6 KV heads: TP 4 divides the heads but can neither split nor replicate 6 KV heads.
    arch = catalog.parse_config(
        {
            "model_type": "llama",
            "hidden_size": 6144,
            "intermediate_size": 24576,
            "num_hidden_layers": 40,
            "num_attention_heads": 48,
            "num_key_value_heads": 6,
            "vocab_size": 32000,
            "max_position_embeddings": 4096,
        },
        "six-kv-heads",
    )
    assert layout.valid_tensor_parallel_sizes(arch, 16) == [1, 2, 3, 6, 12]


def test_weights_that_do_not_fit_are_an_error_naming_the_fix() -> None:
    plan = planner.plan(make_profile(architecture="llama-3-70b", tp=1))
    f = codes(plan)["weights-do-not-fit"]
    assert (f.severity, f.field) == ("error", "engine.tensorParallelSize")
    assert "131.4 GiB" in f.message and "tensorParallelSize 4" in f.message
    assert not plan.fits


def test_kv_too_small_for_one_sequence_is_an_error_with_a_fix() -> None:
    plan = planner.plan(
        make_profile(architecture="llama-2-70b", gpu="A100-40GB", tp=4, max_model_len=4096, gpus_per_node=4)
    )
    f = codes(plan)["kv-too-small"]
    assert (f.severity, f.field) == ("error", "engine.maxModelLen")
    assert "gpuMemoryUtilization 0.93" in f.message
    assert not plan.fits


def test_kv_too_small_suggests_fp8_and_a_shorter_context_when_they_help() -> None:
    plan = planner.plan(
        make_profile(architecture="llama-3-70b", gpu="A100-80GB", tp=2, max_model_len=8192, utilization=0.8924)
    )
    f = codes(plan)["kv-too-small"]
    assert "kvCacheDtype fp8" in f.message and "maxModelLen ≤" in f.message


def test_max_num_seqs_above_full_context_capacity_warns_with_fp8_and_shorter_context() -> None:
    plan = planner.plan(make_profile(architecture="llama-3-70b", gpu="A100-80GB", tp=4, max_num_seqs=256))
    f = codes(plan)["max-num-seqs-above-kv"]
    assert (f.severity, f.field) == ("warning", "engine.maxNumSeqs")
    assert "fp8 KV cache holds" in f.message and "at maxModelLen 4096" in f.message
    assert plan.fits


def test_tp_times_pp_above_gpus_per_node_spans_nodes_with_stages_across_them() -> None:
    # No longer refused: TP=4 fills each 4-GPU node and the two pipeline stages sit one per node.
    plan = planner.plan(make_profile(architecture="llama-3-70b", tp=4, pp=2, gpus_per_node=4, node_interconnect="roce"))
    assert (plan.inputs["nodes_per_copy"], plan.inputs["gpus_per_pod"], plan.inputs["gpus_per_replica"]) == (2, 4, 8)
    assert {"exceeds-node", "cross-node-tp", "uneven-node-split"}.isdisjoint(codes(plan))
    assert plan.fits


def test_tp_above_two_over_pcie_warns() -> None:
    assert "tp-over-pcie" in codes(planner.plan(make_profile(architecture="llama-3-70b", tp=4, interconnect="pcie")))
    assert "tp-over-pcie" not in codes(planner.plan(make_profile(architecture="llama-3-8b", tp=2, interconnect="pcie")))


def test_fp8_kv_on_ampere_warns_and_says_how_vllm_runs_it() -> None:
    f = codes(planner.plan(make_profile(architecture="llama-3-70b", gpu="A100-80GB", tp=4, kv_cache_dtype="fp8")))[
        "fp8-kv-without-native-fp8"
    ]
    assert f.severity == "warning" and "FlashInfer or Triton" in f.message
    hopper = planner.plan(make_profile(architecture="llama-3-70b", gpu="H100-80GB", tp=4, kv_cache_dtype="fp8"))
    assert "fp8-kv-without-native-fp8" not in codes(hopper)


@pytest.mark.parametrize("version", ["0.19.0", "0.32.0", "0.33.0"])
def test_the_fp8_kv_warning_names_the_profiles_vllm_version(version: str) -> None:
    plan = planner.plan(
        make_profile(architecture="llama-3-8b", gpu="A100-80GB", kv_cache_dtype="fp8", vllm_version=version)
    )
    message = codes(plan)["fp8-kv-without-native-fp8"].message
    assert f"vLLM {version} runs it" in message
    # Another version is not said to be 0.33; only where the behaviour was read from is.
    assert ("0.33's source" in message) == (version != "0.33.0")


def test_fp8_weights_on_ampere_are_noted() -> None:
    plan = planner.plan(make_profile(architecture="llama-3-70b", gpu="A100-80GB", tp=2, weights_dtype="fp8"))
    assert codes(plan)["fp8-weights-without-native-fp8"].severity == "info"


def test_max_model_len_above_the_model_is_invalid() -> None:
    f = codes(planner.plan(make_profile(architecture="llama-3-70b", tp=4, max_model_len=16384)))[
        "max-model-len-above-model"
    ]
    assert f.severity == "invalid" and "8192" in f.message and "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in f.message
    assert "max-model-len-above-model" not in codes(
        planner.plan(make_profile(config="llama-3.1-8b.json", max_model_len=131072))
    )


def test_pipeline_stages_beyond_layers_are_invalid() -> None:
    plan = planner.plan(make_profile(architecture="llama-3-8b", pp=64, gpus_per_node=64))
    assert codes(plan)["pp-exceeds-layers"].severity == "invalid"


def test_findings_come_worst_first() -> None:
    plan = planner.plan(make_profile(architecture="llama-3-70b", tp=3, interconnect="pcie", gpus_per_node=2))
    severities = [f.severity for f in plan.findings]
    assert severities == sorted(severities, key=lambda s: -planner.SEVERITY_ORDER[s])
    assert plan.worst_severity == "invalid"


def test_a_comfortable_profile_has_no_findings() -> None:
    plan = planner.plan(make_profile(architecture="llama-3-8b", max_num_seqs=32))
    assert plan.findings == ()
    assert plan.fits and plan.worst_severity is None


def test_several_hundred_8k_sequences_at_tp4_is_not_what_llama3_70b_gets() -> None:
    # The public claim for 4×A100-80GB; vLLM's own accounting gives about 55 at 16-bit, 110 with fp8 KV.
    fp16 = planner.plan(make_profile(architecture="llama-3-70b", gpu="A100-80GB", tp=4))
    fp8 = planner.plan(make_profile(architecture="llama-3-70b", gpu="A100-80GB", tp=4, kv_cache_dtype="fp8"))
    assert 40 < fp16.max_concurrency < 70
    assert 80 < fp8.max_concurrency < 140
