"""A Hugging Face config.json read into the facts the planner sizes a model by, one family at a time.

The family comes from the config's ``model_type``; each family has its own reading of the config
(which keys name the experts, whether the embedding is tied when the key is absent, which layers
attend through a sliding window) with the source it was read from. A ``model_type`` without a
family here is refused (:class:`UnsupportedArchitecture`), never sized as a dense Llama.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from orchestrator.catalog import quantization

# vLLM treats these rope types as not stretching the context beyond max_position_embeddings
# (vllm/config/model.py, _get_and_verify_max_len).
_ROPE_TYPES_WITHOUT_SCALING = {"default", "su", "longrope", "llama3", "mrope"}

Attention = Literal["gqa", "mla"]


class ConfigError(ValueError):
    """A config.json (or catalog file) lacks a field the VRAM math needs, or is not JSON."""


class UnsupportedArchitecture(ValueError):
    """A config whose architecture or quantization the planner has no sizing rule for."""


@dataclass(frozen=True)
class Family:
    """What one ``model_type`` means for the sizing rules, and where that was read."""

    name: str  # as docs/capacity.md's table names it
    tied_by_default: bool  # tie_word_embeddings when config.json leaves it out (the config class default)
    norms_per_layer: int = 2  # RMSNorm weights of hidden size in each decoder layer
    qk_norm: bool = False  # per-head RMSNorm on q and k (head_dim each)
    qkv_bias: bool = False  # a bias on q, k and v even when the config does not say attention_bias
    o_bias: bool = False  # a bias on the output projection too
    source: str = ""


_FAMILIES: dict[str, Family] = {
    "llama": Family("dense (Llama)", False, source="transformers LlamaConfig; vllm/model_executor/models/llama.py"),
    "mistral": Family("dense, sliding window when set (Mistral)", False, source="MistralConfig; models/llama.py"),
    "qwen2": Family("dense (Qwen2/2.5)", False, qkv_bias=True, source="Qwen2Config; models/qwen2.py"),
    "qwen3": Family("dense, q/k norm (Qwen3)", False, qk_norm=True, source="Qwen3Config; models/qwen3.py"),
    "mixtral": Family("top-k MoE (Mixtral)", False, source="MixtralConfig; models/mixtral.py"),
    "qwen2_moe": Family(
        "top-k MoE with a shared expert (Qwen1.5/2-MoE)",
        False,
        qkv_bias=True,
        source="Qwen2MoeConfig; models/qwen2_moe.py",
    ),
    "qwen3_moe": Family("top-k MoE (Qwen3-MoE)", False, qk_norm=True, source="Qwen3MoeConfig; models/qwen3_moe.py"),
    "deepseek_v2": Family(
        "MLA + MoE with shared experts (DeepSeek-V2)", False, source="DeepseekV2Config; models/deepseek_v2.py"
    ),
    "deepseek_v3": Family(
        "MLA + MoE with shared experts (DeepSeek-V3/R1)", False, source="DeepseekV3Config; models/deepseek_v2.py"
    ),
    "gemma": Family("dense, tied (Gemma)", True, source="GemmaConfig (tie_word_embeddings=True); models/gemma.py"),
    "gemma2": Family(
        "dense, tied, every other layer a sliding window (Gemma-2)",
        True,
        norms_per_layer=4,
        source="Gemma2Config (tied; layer_types: sliding on even layers); models/gemma2.py",
    ),
    "gemma3_text": Family(
        "dense, tied, five sliding-window layers to one full (Gemma-3)",
        True,
        norms_per_layer=4,
        qk_norm=True,
        source="Gemma3TextConfig (tied; sliding_window_pattern 6); models/gemma3.py",
    ),
    "gpt_oss": Family(
        "top-k MoE, MXFP4 experts, alternating sliding window (gpt-oss)",
        False,
        qkv_bias=True,
        o_bias=True,
        source="GptOssConfig; models/gpt_oss.py; quantization/mxfp4.py",
    ),
}


@dataclass(frozen=True)
class Experts:
    """A mixture-of-experts layer's experts (all zero: a dense model)."""

    count: int = 0  # routed experts per layer
    per_token: int = 0  # chosen for each token
    width: int = 0  # moe_intermediate_size; 0: the config's intermediate_size
    shared: int = 0  # all shared experts of a layer together
    dense_layers: int = 0  # the first layers, with a dense MLP of intermediate_size


@dataclass(frozen=True)
class LatentAttention:
    """Multi-head latent attention: each token caches one latent of kv_lora_rank plus its rope part."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int


# transformers' Gemma3TextConfig defaults: the published multimodal configs' text_config leaves these out.
_GEMMA3_TEXT_DEFAULTS: dict[str, object] = {
    "vocab_size": 262208,
    "max_position_embeddings": 131072,
    "head_dim": 256,
    "sliding_window": 4096,
    "sliding_window_pattern": 6,
    "tie_word_embeddings": True,
}


def _gemma3_multimodal(data: Mapping[str, object], source: str, *, measured: bool) -> ModelArch:
    """Gemma-3 4B-27B: the language model of text_config (with Gemma3TextConfig's defaults) plus the
    SigLIP vision tower and projector vLLM loads beside it, in 16 bits."""
    text = data["text_config"]
    assert isinstance(text, Mapping)
    merged = {**_GEMMA3_TEXT_DEFAULTS, **text, "model_type": "gemma3_text"}
    merged.setdefault("torch_dtype", data.get("torch_dtype") or data.get("dtype") or "bfloat16")
    arch = parse(merged, source, measured=measured)
    vision = data.get("vision_config")
    if not isinstance(vision, Mapping):
        raise ConfigError(f"{source}: a Gemma-3 multimodal config without vision_config")
    return dataclasses.replace(arch, encoder_params=_siglip_params(vision, arch.hidden_size, source))


def _siglip_params(vision: Mapping[str, object], text_hidden: int, source: str) -> int:
    """Parameters of a SigLIP vision tower (transformers SiglipVisionModel, no pooling head) and
    Gemma-3's projector into the text model's hidden size."""
    h, inner = _int(vision, "hidden_size", source), _int(vision, "intermediate_size", source)
    layers, patch = _int(vision, "num_hidden_layers", source), _int(vision, "patch_size", source)
    image = _int(vision, "image_size", source)
    per_layer = 4 * (h * h + h) + 2 * h * inner + inner + h + 2 * 2 * h  # q, k, v, o; fc1, fc2; two LayerNorms
    embeddings = 3 * patch * patch * h + h + (image // patch) ** 2 * h
    projector = h * text_hidden + h
    return layers * per_layer + embeddings + 2 * h + projector


@dataclass(frozen=True)
class ModelArch:
    """The architecture facts of one decoder-only model, as its config.json states them."""

    source: str  # catalog key or file path, for messages
    model_type: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    torch_dtype: str
    max_position_embeddings: int
    max_model_len: int  # the longest context vLLM accepts without VLLM_ALLOW_LONG_MAX_MODEL_LEN
    experts: Experts = Experts()  # none: a dense model
    qkv_bias: bool = False
    o_bias: bool = False
    norms_per_layer: int = 2
    qk_norm: bool = False
    mla: LatentAttention | None = None  # multi-head latent attention; None: grouped-query (or multi-head)
    windows: tuple[int, ...] = ()  # per layer: its sliding window, 0 for full attention; () all full
    quantization: quantization.Quantization | None = None
    family: str = ""
    encoder_params: int = 0  # a multimodal model's vision tower and projector, 16-bit, split over TP

    @property
    def is_moe(self) -> bool:
        return self.experts.count > 0

    @property
    def attention(self) -> Attention:
        return "mla" if self.mla else "gqa"

    @property
    def sliding_layers(self) -> int:
        return sum(1 for w in self.windows if w)


# A model_type without a family, for a profile that states its measured sizes (model.measured): the
# config then gives only the shape (layers, heads) the layout checks read.
_MEASURED = Family("not in the planner's families: sized by model.measured", False)


def parse(data: Mapping[str, object], source: str, *, measured: bool = False) -> ModelArch:
    """A ModelArch from a parsed config.json; ConfigError or UnsupportedArchitecture say what is wrong.

    ``measured``: the profile states the weights and KV bytes per token, so a model_type or
    quantization without a rule is read for its shape only instead of refused."""
    if data.get("model_type") == "gemma3" and isinstance(data.get("text_config"), Mapping):
        return _gemma3_multimodal(data, source, measured=measured)
    if "text_config" in data and "hidden_size" not in data:
        raise ConfigError(
            f"{source}: multimodal configs (with text_config) are not supported by the planner, but Gemma-3's; "
            "give the language model's own config.json"
        )
    hidden = _int(data, "hidden_size", source)
    heads = _int(data, "num_attention_heads", source)
    layers = _int(data, "num_hidden_layers", source)
    max_pos = _int(data, "max_position_embeddings", source)
    model_type = str(data.get("model_type") or "")
    family = _family(model_type, source, measured=measured)
    quant = _quantization(data, source, measured=measured)
    tied = data.get("tie_word_embeddings")
    return ModelArch(
        source=source,
        model_type=model_type,
        hidden_size=hidden,
        intermediate_size=_int(data, "intermediate_size", source),
        num_hidden_layers=layers,
        num_attention_heads=heads,
        # Multi-head attention configs (older models) omit num_key_value_heads: every head has its own KV.
        num_key_value_heads=_int(data, "num_key_value_heads", source) if "num_key_value_heads" in data else heads,
        head_dim=_int(data, "head_dim", source) if data.get("head_dim") else hidden // heads,
        vocab_size=_int(data, "vocab_size", source),
        tie_word_embeddings=family.tied_by_default if tied is None else bool(tied),
        # transformers ≥4.56 writes "dtype"; older configs write "torch_dtype".
        torch_dtype=str(data.get("torch_dtype") or data.get("dtype") or "bfloat16"),
        max_position_embeddings=max_pos,
        max_model_len=_derived_max_len(data, max_pos),
        qkv_bias=family.qkv_bias or bool(data.get("attention_bias", False)),
        o_bias=family.o_bias,
        norms_per_layer=family.norms_per_layer,
        qk_norm=family.qk_norm,
        windows=() if family is _MEASURED else _windows(data, model_type, layers, source),
        quantization=quant,
        family=family.name,
        experts=_moe(data, model_type, source),
        mla=_mla(data, model_type, source),
    )


def _family(model_type: str, source: str, *, measured: bool) -> Family:
    family = _FAMILIES.get(model_type) or (_MEASURED if measured else None)
    if family is None:
        known = ", ".join(sorted(_FAMILIES))
        raise UnsupportedArchitecture(
            f"{source}: model_type {model_type or '(none)'!r} has no sizing rule in deployctl's planner (it sizes "
            f"{known}); a guess from another family could be wrong by several times"
        )
    return family


def _quantization(data: Mapping[str, object], source: str, *, measured: bool) -> quantization.Quantization | None:
    try:
        return quantization.parse(data.get("quantization_config"), source)
    except quantization.UnknownQuantization as e:
        if not measured:
            raise UnsupportedArchitecture(str(e)) from e
        return None  # the measured weights already say what the checkpoint takes


def _moe(data: Mapping[str, object], model_type: str, source: str) -> Experts:
    """The experts of a MoE config, under each family's key names; no experts for a dense model."""
    experts = _count(data.get("n_routed_experts") or data.get("num_local_experts") or data.get("num_experts"), source)
    if not experts:
        return Experts()
    width = _count(data.get("moe_intermediate_size"), source)
    per_token = _count(data.get("num_experts_per_tok") or data.get("experts_per_token"), source)
    if model_type in ("deepseek_v2", "deepseek_v3"):
        # n_shared_experts of moe_intermediate_size each; the first first_k_dense_replace layers are dense
        # (moe_layer_freq 1 in every published config).
        if _count(data.get("moe_layer_freq") or 1, source) != 1:
            raise UnsupportedArchitecture(f"{source}: moe_layer_freq other than 1 has no sizing rule")
        shared = _count(data.get("n_shared_experts"), source) * width
        return Experts(experts, per_token, width, shared, _count(data.get("first_k_dense_replace"), source))
    if model_type == "qwen2_moe":
        if _count(data.get("decoder_sparse_step") or 1, source) != 1 or data.get("mlp_only_layers"):
            raise UnsupportedArchitecture(f"{source}: decoder_sparse_step or mlp_only_layers has no sizing rule")
        return Experts(experts, per_token, width, _count(data.get("shared_expert_intermediate_size"), source))
    return Experts(experts, per_token, width)


def _mla(data: Mapping[str, object], model_type: str, source: str) -> LatentAttention | None:
    """Multi-head latent attention (DeepSeek-V2/V3): each token caches one latent of kv_lora_rank plus
    its rope part, shared by all heads; None for any other attention."""
    if model_type not in ("deepseek_v2", "deepseek_v3") or not data.get("kv_lora_rank"):
        return None
    return LatentAttention(
        kv_lora_rank=_int(data, "kv_lora_rank", source),
        qk_rope_head_dim=_int(data, "qk_rope_head_dim", source),
        qk_nope_head_dim=_int(data, "qk_nope_head_dim", source),
        v_head_dim=_int(data, "v_head_dim", source),
        q_lora_rank=_count(data.get("q_lora_rank"), source),
    )


def _windows(data: Mapping[str, object], model_type: str, layers: int, source: str) -> tuple[int, ...]:
    """Each layer's sliding window (0: full attention); () when every layer attends in full."""
    window = _count(data.get("sliding_window"), source)
    types = data.get("layer_types")
    if model_type in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe") and not data.get("use_sliding_window"):
        return ()  # Qwen configs carry a sliding_window they do not use unless use_sliding_window
    if not window:
        return ()
    if isinstance(types, Sequence) and not isinstance(types, str):
        if len(types) != layers:
            raise ConfigError(f"{source}: layer_types has {len(types)} entries for {layers} layers")
        return tuple(window if t == "sliding_attention" else 0 for t in types)
    if model_type == "gemma2":  # transformers Gemma2Config: layer i slides when (i + 1) % 2
        return tuple(window if (i + 1) % 2 else 0 for i in range(layers))
    if model_type == "gemma3_text":
        pattern = _count(data.get("sliding_window_pattern") or 6, source)
        return tuple(window if (i + 1) % pattern else 0 for i in range(layers))
    if model_type in ("mistral", "mixtral", "llama"):
        return (window,) * layers  # Mistral-7B-v0.1: every layer slides over 4096 tokens
    raise UnsupportedArchitecture(f"{source}: a sliding_window on model_type {model_type!r} has no sizing rule")


def _int(data: Mapping[str, object], key: str, source: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{source}: field {key!r} must be a positive integer (got {value!r})")
    return value


def _count(value: object, source: str) -> int:
    """An optional count of a config.json (experts, a MoE size) as int() reads it; absent, 0 or null: 0."""
    if not value:
        return 0
    if isinstance(value, bool):
        raise ConfigError(f"{source}: {value!r} is not a number")
    if isinstance(value, int | float | str):
        try:
            return int(value)
        except ValueError as e:
            raise ConfigError(f"{source}: {value!r} is not a number") from e
    raise ConfigError(f"{source}: {value!r} is not a number")


def _derived_max_len(data: Mapping[str, object], max_pos: int) -> int:
    """The context limit vLLM derives: max_position_embeddings, stretched by a scaling rope."""
    rope = data.get("rope_scaling") or {}
    if not isinstance(rope, dict):
        return max_pos
    rope_type = str(rope.get("rope_type") or rope.get("type") or "default")
    factor = rope.get("factor")
    if rope_type in _ROPE_TYPES_WITHOUT_SCALING or not isinstance(factor, int | float):
        return max_pos
    original = _count(rope.get("original_max_position_embeddings"), "rope_scaling")
    base = (original or max_pos) if rope_type == "yarn" else max_pos
    return math.floor(base * factor)
