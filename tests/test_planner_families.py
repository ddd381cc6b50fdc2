"""The planner on today's model families (MLA, MoE with shared experts, MXFP4, sliding windows) against
public vLLM start-up logs, and its refusals where it has no rule.

Each log in tests/data/vllm_startup/families names its source and, in a ``# plan:`` line, the profile
that reproduces the run; the test plans it and compares with what that vLLM printed.
"""

from __future__ import annotations

import json
import pathlib
import re
from typing import Any

import pytest
from test_planner import codes, make_profile

from orchestrator import engines, errors
from orchestrator.catalog import config as model_config
from orchestrator.catalog import lookup as catalog
from orchestrator.catalog import quantization
from orchestrator.plan import planner

FAMILY_LOGS = sorted((pathlib.Path(__file__).parent / "data" / "vllm_startup" / "families").glob("*.log"))
# Every llm-d run logged "Defaulting max_num_seqs to 1024" on one H100 at --gpu-memory-utilization 0.95.
H100 = {"gpu": "H100-80GB", "utilization": 0.95, "max_num_seqs": 1024, "vllm_version": "0.19.0"}
GIB = 1 << 30


def _header(text: str, key: str) -> str | None:
    match = re.search(rf"^# {key}: (.*)$", text, re.MULTILINE)
    return match.group(1).strip() if match else None


def _profile_args(line: str) -> dict[str, Any]:
    args: dict[str, Any] = dict(H100)
    for item in line.split():
        key, value = item.split("=", 1)
        args[key] = int(value) if value.isdigit() else float(value) if re.fullmatch(r"\d+\.\d+", value) else value
    return args


@pytest.mark.parametrize("log", FAMILY_LOGS, ids=lambda p: p.stem)
def test_the_plan_matches_what_vllm_logged(log: pathlib.Path) -> None:
    text = log.read_text()
    plan_line, source = _header(text, "plan"), _header(text, "Source")
    assert plan_line and source and source.startswith("https://"), f"{log.name} must name its source and its plan"
    seen = engines.VLLM.parse_startup("pod", text)
    assert seen is not None and seen.weights_gib is not None
    plan = planner.plan(make_profile(**_profile_args(plan_line)))
    tolerance = float(_header(text, "weights-tolerance") or 0.02)
    assert plan.weights_gib_per_gpu == pytest.approx(seen.weights_gib, rel=tolerance), source
    if seen.kv_cache_tokens is not None:
        assert plan.kv_cache_tokens == pytest.approx(seen.kv_cache_tokens, rel=0.10), source
    refused = re.search(r"Available KV cache memory: -", text) is not None
    assert plan.verdict == ("does-not-fit" if refused else "fits"), source


def test_deepseek_v2_lite_kv_bytes_per_token_equal_vllms_latent_on_every_rank() -> None:
    # 27 layers × (kv_lora_rank 512 + qk_rope_head_dim 64) × 2 bytes: 31,104 B, what the llm-d log implies
    # (43.61 GiB / 1,505,552 tokens); at TP=2 every rank still holds the whole latent.
    for tp in (1, 2):
        plan = planner.plan(make_profile(architecture="deepseek-v2-lite", tp=tp, **_h100()))
        assert plan.kv_bytes_per_token_per_gpu == 27 * (512 + 64) * 2
    assert plan.inputs["attention"] == "mla"


def test_deepseek_moe_counts_shared_experts_and_the_first_dense_layer() -> None:
    arch = catalog.architecture("deepseek-v2-lite")
    assert (arch.experts.count, arch.experts.shared, arch.experts.dense_layers) == (64, 2 * 1408, 1)
    # About 15.7 B parameters, not the 2.7 B a dense reading of its intermediate_size gives.
    assert planner.plan(make_profile(architecture="deepseek-v2-lite", **_h100())).inputs["params"] > 15e9


def test_gpt_oss_120b_fits_one_h100_with_mxfp4_experts() -> None:
    plan = planner.plan(make_profile(architecture="gpt-oss-120b", **_h100(utilization=0.9)))
    assert plan.fits
    assert plan.weights_gib_per_gpu == pytest.approx(64.4, rel=0.05)
    assert plan.inputs["weights_dtype"] == "mxfp4"
    quant = plan.inputs["quantization"]
    assert quant is not None and quant["groups"] == ["experts"]  # attention, router, embeddings stay bf16


def test_gemma2_without_a_tie_key_is_tied_as_its_config_class_says() -> None:
    assert "tie_word_embeddings" not in (catalog._arch_texts()["gemma-2-9b"])
    assert catalog.architecture("gemma-2-9b").tie_word_embeddings


def test_sliding_window_layers_need_only_their_window_at_long_context_since_the_hybrid_manager() -> None:
    args = {"architecture": "gemma-2-9b", "max_model_len": 8192, **_h100()}
    hybrid = planner.plan(make_profile(**{**args, "max_batched_tokens": 512}))
    before = planner.plan(make_profile(**{**args, "max_batched_tokens": 512, "vllm_version": "0.9.2"}))
    disabled = planner.plan(
        make_profile(**{**args, "max_batched_tokens": 512, "extra_args": ("--disable-hybrid-kv-cache-manager",)})
    )
    # An 8192-token request takes 512 blocks in the full-attention group, and in the sliding group only
    # ceil((4096 - 1 + 512) / 16) + 1 = 289: 1024 blocks before the hybrid manager, 801 with it.
    assert hybrid.max_concurrency / before.max_concurrency == pytest.approx(1024 / 801, rel=0.01)
    assert disabled.max_concurrency == pytest.approx(before.max_concurrency, rel=0.02)


def test_hybrid_groups_pad_the_smaller_kind_like_vllm() -> None:
    # gpt-oss-20b: 12 sliding and 12 full layers, two groups of 12; at TP=2 a layer takes 1,024 B per token.
    plan = planner.plan(make_profile(architecture="gpt-oss-20b", tp=2, **_h100()))
    assert plan.kv_bytes_per_token_per_gpu == 24 * 1024
    assert plan.inputs["kv_layer_slots"] == 24


def test_an_unknown_model_type_is_refused_with_exit_3_and_the_escape_hatch(tmp_path: pathlib.Path) -> None:
    config = _jamba_config(tmp_path)
    profile = make_profile(config=str(config))
    with pytest.raises(errors.DoesNotFit) as refused:
        planner.check(profile, allow_unfit=True)
    assert refused.value.exit_code == errors.ExitCode.DOES_NOT_FIT
    assert "jamba" in refused.value.message and "model.measured" in refused.value.message


def test_model_measured_plans_a_model_without_a_rule(tmp_path: pathlib.Path) -> None:
    config = _jamba_config(tmp_path)
    profile = make_profile(config=str(config), measured={"weightsGiBPerGpu": 40.0, "kvBytesPerTokenPerGpu": 65536})
    plan = planner.plan(profile)
    assert plan.weights_gib_per_gpu == 40.0 and plan.kv_bytes_per_token_per_gpu == 65536
    assert plan.inputs["measured"] and plan.fits


def test_an_unknown_quantization_method_is_refused_not_sized_as_16_bit() -> None:
    with pytest.raises(model_config.UnsupportedArchitecture, match="hqq"):
        model_config.parse({**_llama(), "quantization_config": {"quant_method": "hqq"}}, "x")


@pytest.mark.parametrize(
    ("block", "scheme", "bytes_per_weight"),
    [
        ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}, "int4", 0.5 + 2.5 / 128),
        ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "int4", 0.5 + 2.5 / 128),
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8", 1 + 4 / 128**2),
        ({"quant_method": "fp8"}, "fp8", 1.0),
        ({"quant_method": "mxfp4"}, "mxfp4", 0.53125),
        ({"load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, "int4", 0.5625),
        (
            {
                "quant_method": "compressed-tensors",
                "format": "float-quantized",
                "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}},
                "ignore": ["lm_head"],
            },
            "fp8",
            1.0,
        ),
    ],
)
def test_quantization_configs_are_read_with_their_scales(
    block: dict[str, Any], scheme: str, bytes_per_weight: float
) -> None:
    quant = quantization.parse(block, "x")
    assert quant is not None
    assert (quant.scheme, quant.bytes_per_weight) == (scheme, pytest.approx(bytes_per_weight))


def test_awq_checkpoint_with_weights_dtype_auto_is_sized_as_int4() -> None:
    arch = model_config.parse(
        {**_llama(), "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}, "x"
    )
    assert arch.quantization is not None and arch.quantization.scheme == "int4"


def test_an_explicit_weights_dtype_that_disagrees_with_the_config_is_a_warning() -> None:
    plan = planner.plan(make_profile(architecture="gpt-oss-20b", weights_dtype="bf16", **_h100()))
    f = codes(plan)["weights-dtype-overrides-config"]
    assert f.severity == "warning" and "mxfp4" in f.message
    assert plan.inputs["weights_dtype"] == "bf16"


def test_mxfp4_on_a_dense_model_is_sized_16_bit_and_says_so() -> None:
    dense = planner.plan(make_profile(architecture="llama-3-8b", weights_dtype="mxfp4"))
    assert dense.weights_gib_per_gpu == pytest.approx(
        planner.plan(make_profile(architecture="llama-3-8b")).weights_gib_per_gpu
    )
    assert "dense" in codes(dense)["weights-dtype-overrides-config"].message


def test_a_deficit_is_said_as_a_deficit_not_a_negative_cache() -> None:
    # Weights 32.9 GiB fit the 35.5 GiB budget, but activations, NCCL and CUDA graphs take the rest and more.
    plan = planner.plan(make_profile(architecture="llama-3-70b", tp=4, gpu="A100-40GB", gpus_per_node=8))
    assert plan.kv_cache_gib_per_gpu < 0
    messages = " ".join(f.message for f in plan.findings)
    assert "short by" in messages and "-" + f"{abs(plan.kv_cache_gib_per_gpu):.2f}" not in messages


def test_other_engines_refuse_families_whose_kv_rule_is_vllms_only() -> None:
    profile = make_profile(architecture="deepseek-v2-lite", **_h100())
    sglang = profile.model_copy(update={"engine": profile.engine.model_copy(update={"kind": "sglang"})})
    assert codes(planner.plan(sglang))["no-sizing-rule"].severity == "error"


def _jamba_config(tmp_path: pathlib.Path) -> pathlib.Path:
    """A config.json of a model_type the planner has no rule for (a state-space hybrid)."""
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps({**_llama(), "model_type": "jamba", "vocab_size": 65536, "max_position_embeddings": 32768})
    )
    return config


def _h100(**override: Any) -> dict[str, Any]:
    return {**H100, **override}


def _llama() -> dict[str, Any]:
    return {
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
    }


@pytest.mark.parametrize("architecture", ["gemma-2-9b", "deepseek-v2-lite", "gpt-oss-20b"])
def test_calibration_from_a_live_deploy_lands_on_what_vllm_logged_for_every_family(architecture: str) -> None:
    profile = make_profile(architecture=architecture, **_h100())
    planned = planner.plan(profile)
    observed = int(planned.kv_cache_tokens * 0.8)  # the engine logged a fifth fewer tokens than planned
    calibration = planner.calibrate(planned.to_json(), observed, "llm revision 1")
    assert calibration.overhead_gib > 0
    again = planner.plan(profile, calibration)
    # The planner's bytes per token count the hybrid groups (or the latent), so the memory the logged
    # tokens take is what the next plan leaves for KV: the next plan says what vLLM said.
    assert again.kv_cache_tokens == pytest.approx(observed, rel=0.002)
