"""The model and GPU catalog: shipped data, config.json parsing, and GPU node labels."""

from __future__ import annotations

import json
import pathlib

import pytest

from orchestrator.catalog import lookup as catalog


def test_catalog_lists_the_architectures_and_gpus_the_profile_validator_accepts() -> None:
    assert {"llama-3-70b", "llama-3-8b", "mixtral-8x7b", "qwen2.5-72b", "deepseek-v2-lite", "gpt-oss-120b"} <= set(
        catalog.architecture_keys()
    )
    assert catalog.architecture_keys() == sorted(catalog.architecture_keys())
    assert {"A100-40GB", "A100-80GB", "H100-80GB", "H100-NVL", "H200", "L40S", "A10"} <= set(catalog.gpu_keys())
    assert catalog.gpu_keys() == sorted(catalog.gpu_keys())


@pytest.mark.parametrize("key", catalog.architecture_keys())
def test_every_catalog_architecture_parses(key: str) -> None:
    arch = catalog.architecture(key)
    assert arch.num_attention_heads % arch.num_key_value_heads == 0
    assert arch.family and (arch.attention == "mla" or arch.head_dim in (64, 128, 256))  # every one has a rule
    assert json.loads(catalog._arch_texts()[key])["_source"].startswith("https://huggingface.co/")


def test_llama3_70b_facts_are_the_published_config() -> None:
    a = catalog.architecture("llama-3-70b")
    assert (a.hidden_size, a.intermediate_size, a.num_hidden_layers) == (8192, 28672, 80)
    assert (a.num_attention_heads, a.num_key_value_heads, a.vocab_size) == (64, 8, 128256)
    assert (a.max_position_embeddings, a.torch_dtype, a.tie_word_embeddings) == (8192, "bfloat16", False)


def test_mixtral_is_moe_and_qwen2_has_qkv_bias() -> None:
    mixtral = catalog.architecture("mixtral-8x7b")
    assert mixtral.is_moe and (mixtral.experts.count, mixtral.experts.per_token) == (8, 2)
    assert catalog.architecture("qwen2.5-72b").qkv_bias
    assert not catalog.architecture("llama-3-8b").is_moe


def test_llama2_70b_is_fp16_with_a_4k_context() -> None:
    a = catalog.architecture("llama-2-70b")
    assert (a.torch_dtype, a.max_model_len, a.vocab_size) == ("float16", 4096, 32000)


def test_gpu_memory_is_what_cuda_reports_not_the_marketing_figure() -> None:
    assert catalog.gpu("H100-80GB").memory_gib == pytest.approx(79.2, abs=0.1)
    assert catalog.gpu("A100-80GB").memory_gib == pytest.approx(79.2, abs=0.1)
    assert catalog.gpu("A100-40GB").memory_gib == pytest.approx(39.4, abs=0.1)


def test_native_fp8_only_on_hopper_and_ada() -> None:
    fp8 = {k for k in catalog.gpu_keys() if catalog.gpu(k).fp8}
    assert fp8 == {"H100-80GB", "H100-NVL", "H200", "L40S"}


@pytest.mark.parametrize(
    ("label", "key"),
    [
        ("NVIDIA-A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA-A100-80GB-PCIe", "A100-80GB"),
        ("NVIDIA-A100-PCIE-80GB", "A100-80GB"),
        ("NVIDIA-H100-80GB-HBM3", "H100-80GB"),
        ("NVIDIA-A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA-L40S", "L40S"),
        ("NVIDIA-H200", "H200"),
    ],
)
def test_gpu_feature_discovery_labels_map_to_catalog_gpus(label: str, key: str) -> None:
    gpu = catalog.gpu_for_product_label(label)
    assert gpu is not None and gpu.key == key
    assert catalog.gpu_for_product_label("NVIDIA-Tesla-T4") is None


def test_no_product_label_belongs_to_two_gpus() -> None:
    labels = [label for k in catalog.gpu_keys() for label in catalog.gpu(k).product_labels]
    assert len(labels) == len(set(labels))


def test_unknown_keys_name_the_known_ones() -> None:
    with pytest.raises(KeyError, match="llama-3-70b"):
        catalog.architecture("llama-4")
    with pytest.raises(KeyError, match="H100-80GB"):
        catalog.gpu("H300")


def _write(tmp_path: pathlib.Path, data: object) -> pathlib.Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


def test_config_without_kv_heads_is_multi_head_attention(tmp_path: pathlib.Path) -> None:
    arch = catalog.load_config(
        _write(
            tmp_path,
            {
                "model_type": "llama",
                "hidden_size": 4096,
                "intermediate_size": 11008,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "vocab_size": 32000,
                "max_position_embeddings": 4096,
                "dtype": "float16",
            },
        )
    )
    assert arch.num_key_value_heads == 32 and arch.torch_dtype == "float16"


def test_explicit_head_dim_and_yarn_rope_scaling_are_honoured(tmp_path: pathlib.Path) -> None:
    arch = catalog.load_config(
        _write(
            tmp_path,
            {
                "model_type": "qwen3",
                "hidden_size": 5120,
                "intermediate_size": 25600,
                "num_hidden_layers": 64,
                "num_attention_heads": 64,
                "num_key_value_heads": 8,
                "head_dim": 128,
                "vocab_size": 151936,
                "max_position_embeddings": 40960,
                "rope_scaling": {
                    "rope_type": "yarn",
                    "factor": 4.0,
                    "original_max_position_embeddings": 32768,
                },
            },
        )
    )
    assert arch.head_dim == 128  # not 5120 / 64 = 80
    assert arch.max_model_len == 131072


def test_llama3_rope_scaling_does_not_stretch_the_context() -> None:
    arch = catalog.architecture("llama-3.1-405b")
    assert arch.max_model_len == arch.max_position_embeddings == 131072


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"hidden_size": 4096}', "num_attention_heads"),
        ('{"text_config": {}}', "multimodal"),
    ],
)
def test_bad_configs_say_what_is_wrong(tmp_path: pathlib.Path, content: str, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(catalog.ConfigError, match=message):
        catalog.load_config(path)


def test_missing_config_file_is_a_config_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(catalog.ConfigError, match="cannot read"):
        catalog.load_config(tmp_path / "nope.json")


def test_h200_catalog_entry_matches_a_reading_off_a_real_h200() -> None:
    """tests/data/gpu_facts_h200.json is scripts/gpu_facts.py's output on an H200 (2026-11-29,
    driver 580.159.04, torch 2.11.0+cu130): total memory as CUDA reports it, and native fp8."""
    reading = json.loads((pathlib.Path(__file__).parent / "data" / "gpu_facts_h200.json").read_text())
    h200 = catalog.gpu("H200")
    assert reading["device"] == "NVIDIA H200"
    assert abs(h200.memory_gib - reading["total_gib"]) / reading["total_gib"] < 0.0005
    assert h200.fp8 is reading["fp8_matmul"] is True
