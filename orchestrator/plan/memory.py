"""The memory terms of one GPU's share of a model: weights, KV bytes per token and the activation peak.

Counted from the model's config (``orchestrator.catalog.config``), one rule per architecture family,
and its split across GPUs (``orchestrator.plan.layout``); the planner sums them into a GPU's budget,
its findings use them to try other splits. Fitted on vLLM start-up logs (docs/capacity.md).

* Attention: grouped-query (and multi-head) attention splits its KV heads across the tensor-parallel
  ranks; multi-head latent attention (DeepSeek-V2/V3) caches one latent of ``kv_lora_rank +
  qk_rope_head_dim`` per token and layer, the same whole latent on every rank
  (``vllm/model_executor/layers/attention`` MLA, ``MLAAttentionSpec``).
* MLP: dense, or top-k experts (each expert's width split across the ranks) with shared experts and
  the first dense layers where the family has them.
* Linear weights are stored as the checkpoint's quantization says (``catalog.quantization``);
  embeddings, LM head, norms and routers stay 16-bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.catalog import config as catalog
from orchestrator.catalog import quantization
from orchestrator.plan import layout

GIB = 1 << 30
VOCAB_PADDING = 64  # VocabParallelEmbedding pads the vocabulary to a multiple of 64 before sharding
SIXTEEN_BIT = 2  # bytes of a weight vLLM keeps in the model dtype (fp32 checkpoints are served in 16 bits)

# vLLM's profile run ends with a dummy sampler pass over max_num_seqs rows of full-vocabulary float32
# logits; the logged torch peak is ~3.85 such tensors (logits, probabilities, sort/top-p buffers). Fitted
# on vLLM 0.19.0 H100 logs: 1.89 GiB for 1024 × 128256 (Llama 3.1 8B), 2.21 GiB for 1024 × 152064 (Qwen2.5
# 7B), 2.29 GiB for Qwen2.5 72B.
SAMPLER_FP32_COPIES = 3.85
# The forward pass of max_num_batched_tokens tokens peaks in the MLP: the gate/up projection (2 × I), its
# SiLU-and-multiply output (I), and about four hidden-size tensors (residual, normed input, attention
# output, MLP output) alive around it.
HIDDEN_COPIES = 4


@dataclass(frozen=True)
class LayerParams:
    """The parameters of one decoder layer on one GPU, by how they may be stored."""

    attention: float  # linear weights of the attention block
    mlp: float  # linear weights of a dense MLP, or of the shared experts of a MoE layer
    experts: float  # linear weights of the routed experts
    sixteen_bit: float  # norms, biases, routers: always in the model dtype

    def bytes(self, quant: quantization.Quantization | None) -> float:
        """The layer's bytes with its linear weights stored as ``quant`` says (None: 16-bit)."""

        def stored(params: float, group: quantization.Group) -> float:
            if quant is not None and group in quant.groups:
                return params * quant.bytes_per_weight
            return params * SIXTEEN_BIT

        linear = stored(self.attention, "attention") + stored(self.mlp, "mlp") + stored(self.experts, "experts")
        return linear + self.sixteen_bit * SIXTEEN_BIT

    @property
    def total(self) -> float:
        return self.attention + self.mlp + self.experts + self.sixteen_bit


def attention_params(split: layout.Split) -> tuple[float, float]:
    """(linear, 16-bit) parameters of one layer's attention on one GPU."""
    a, tp = split.arch, split.tp
    h = a.hidden_size
    if a.mla is not None:
        m, heads = a.mla, math.ceil(a.num_attention_heads / tp)
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank:  # a low-rank q (V3): down-projection replicated, up-projection split
            q = h * m.q_lora_rank + m.q_lora_rank * heads * qk
        else:
            q = h * heads * qk
        kv_up = _kv_up(a, heads)
        # kv_a_proj (replicated) writes the latent; kv_b_proj expands it, and vLLM's MLA backend keeps
        # 16-bit absorbed copies of it (W_UK, W_UV) after loading, so it counts twice.
        linear = q + h * (m.kv_lora_rank + m.qk_rope_head_dim) + kv_up + heads * m.v_head_dim * h
        sixteen_bit = kv_up + m.kv_lora_rank + m.q_lora_rank  # the absorbed copies, kv_a and q_a norms
        return float(linear), float(sixteen_bit)
    hd = a.head_dim
    q_out, kv_out = split.q_heads_per_gpu * hd, split.kv_heads_per_gpu * hd
    linear = h * q_out + 2 * h * kv_out + q_out * h
    sixteen_bit = (q_out + 2 * kv_out if a.qkv_bias else 0) + (h if a.o_bias else 0) + (2 * hd if a.qk_norm else 0)
    return float(linear), float(sixteen_bit)


def _kv_up(a: catalog.ModelArch, heads: int) -> int:
    """kv_b_proj's parameters for ``heads`` heads: the latent up to each head's k (no rope) and v."""
    assert a.mla is not None
    return a.mla.kv_lora_rank * heads * (a.mla.qk_nope_head_dim + a.mla.v_head_dim)


def layer_params_per_gpu(split: layout.Split, *, moe_layer: bool = True) -> LayerParams:
    """One decoder layer on one GPU (``moe_layer`` False: one of a MoE model's first dense layers)."""
    a, tp = split.arch, split.tp
    h = a.hidden_size
    attention, sixteen_bit = attention_params(split)
    sixteen_bit += a.norms_per_layer * h
    if not a.is_moe or not moe_layer:
        return LayerParams(attention, 3.0 * h * math.ceil(a.intermediate_size / tp), 0.0, sixteen_bit)
    experts = a.experts.count * 3 * _expert_hidden(split) * _expert_width(split)
    shared = 3 * h * math.ceil(a.experts.shared / tp)
    sixteen_bit += h * a.experts.count  # the router stays 16-bit and is replicated
    if a.experts.shared and a.model_type == "qwen2_moe":
        sixteen_bit += h  # shared_expert_gate
    if a.o_bias:  # gpt-oss: a router bias and biases on every expert's projections
        sixteen_bit += a.experts.count * (1 + 2 * split.mlp_width_per_gpu + h)
    return LayerParams(attention, float(shared), float(experts), sixteen_bit)


def _mxfp4_experts(split: layout.Split) -> bool:
    return split.quant is not None and split.quant.scheme == "mxfp4" and "experts" in split.quant.groups


def _expert_hidden(split: layout.Split) -> int:
    # vLLM's MXFP4 MoE kernels lay the experts out padded: the hidden size to a multiple of 256 and each
    # rank's expert width to a multiple of 128 (gpt-oss-120b at TP=1 logs 64.38 GiB, 60.8 GiB unpadded).
    return _round_up(split.arch.hidden_size, 256) if _mxfp4_experts(split) else split.arch.hidden_size


def _expert_width(split: layout.Split) -> int:
    width = split.mlp_width_per_gpu
    return _round_up(width, 128) if _mxfp4_experts(split) else width


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def weights_bytes_per_gpu(split: layout.Split) -> float:
    """Weight bytes on the heaviest GPU: its share of the layers plus embedding and/or LM head."""
    a = split.arch
    # A MoE model's dense first layers are lighter: the heaviest stage holds as many MoE layers as it can.
    moe_layers = (
        split.layers_per_gpu
        if not a.is_moe
        else min(split.layers_per_gpu, a.num_hidden_layers - a.experts.dense_layers)
    )
    dense_layers = split.layers_per_gpu - moe_layers
    layers = moe_layers * layer_params_per_gpu(split).bytes(split.quant)
    layers += dense_layers * layer_params_per_gpu(split, moe_layer=False).bytes(split.quant)
    padded_vocab = math.ceil(a.vocab_size / VOCAB_PADDING) * VOCAB_PADDING
    # Embedding and LM head stay 16-bit in quantized checkpoints (that is ~1 GiB on 70B models).
    table = math.ceil(padded_vocab / split.tp) * a.hidden_size * SIXTEEN_BIT
    final_norm = a.hidden_size * SIXTEEN_BIT
    if split.pp == 1:
        ends = table + (0 if a.tie_word_embeddings else table) + final_norm
    else:
        # The first stage holds the embedding, the last the LM head (its own copy even when tied).
        ends = table + final_norm
    # The rotary cos/sin cache: max_position_embeddings × the rotated dimension in the model dtype.
    rope = a.max_position_embeddings * (a.mla.qk_rope_head_dim if a.mla else a.head_dim) * SIXTEEN_BIT
    encoder = math.ceil(a.encoder_params / split.tp) * SIXTEEN_BIT  # a vision tower, on the first stage
    return layers + ends + rope + encoder


def params_total(arch: catalog.ModelArch) -> int:
    whole = layout.Split(arch, 1, 1, None, 2)
    moe = layer_params_per_gpu(whole).total
    dense = layer_params_per_gpu(whole, moe_layer=False).total
    if arch.mla is not None:  # the absorbed copies are vLLM's, not the checkpoint's
        kv_up = _kv_up(arch, arch.num_attention_heads)
        moe, dense = moe - kv_up, dense - kv_up
    table = arch.vocab_size * arch.hidden_size
    tables = table if arch.tie_word_embeddings else 2 * table
    moe_layers = arch.num_hidden_layers - arch.experts.dense_layers if arch.is_moe else arch.num_hidden_layers
    layers = moe_layers * moe + (arch.num_hidden_layers - moe_layers) * dense
    return int(layers + tables + arch.hidden_size + arch.encoder_params)


def kv_bytes_per_layer(split: layout.Split) -> int:
    """KV-cache bytes one token takes in one attention layer on one GPU."""
    a = split.arch
    if a.mla is not None:
        return (a.mla.kv_lora_rank + a.mla.qk_rope_head_dim) * split.kv_bytes  # the whole latent, on every rank
    return 2 * split.kv_heads_per_gpu * a.head_dim * split.kv_bytes


def activation_bytes(split: layout.Split, batched_tokens: int, max_num_seqs: int) -> float:
    """Peak transient memory of vLLM's profile run: the bigger of forward pass and dummy sampler."""
    a = split.arch
    width = split.mlp_width_per_gpu
    if a.is_moe:
        # fused_moe keeps per-(token, expert) caches of 2·I, I and H for the top-k experts of each token.
        per_token = a.experts.per_token * (3 * width + a.hidden_size) + HIDDEN_COPIES * a.hidden_size
    else:
        per_token = 3 * width + HIDDEN_COPIES * a.hidden_size
    forward = batched_tokens * per_token * layout.ACTIVATION_BYTES
    sampler_rows = min(max_num_seqs, batched_tokens)
    sampler = SAMPLER_FP32_COPIES * sampler_rows * a.vocab_size * 4
    return max(forward, sampler)
