"""The memory terms of one GPU's share of a model: weights, parameters and the activation peak.

Counted from the model's config (``orchestrator.catalog``) and its split across GPUs
(``orchestrator.plan.layout``); the planner sums them into a GPU's budget, its findings use them to
try other splits. Fitted on vLLM start-up logs (docs/capacity.md).
"""

from __future__ import annotations

import math

from orchestrator.catalog import lookup as catalog
from orchestrator.plan import layout

GIB = 1 << 30
VOCAB_PADDING = 64  # VocabParallelEmbedding pads the vocabulary to a multiple of 64 before sharding

# vLLM's profile run ends with a dummy sampler pass over max_num_seqs rows of full-vocabulary float32
# logits; the logged torch peak is ~3.85 such tensors (logits, probabilities, sort/top-p buffers). Fitted
# on vLLM 0.19.0 H100 logs: 1.89 GiB for 1024 × 128256 (Llama 3.1 8B), 2.21 GiB for 1024 × 152064 (Qwen2.5
# 7B), 2.29 GiB for Qwen2.5 72B.
SAMPLER_FP32_COPIES = 3.85
# The forward pass of max_num_batched_tokens tokens peaks in the MLP: the gate/up projection (2 × I), its
# SiLU-and-multiply output (I), and about four hidden-size tensors (residual, normed input, attention
# output, MLP output) alive around it.
HIDDEN_COPIES = 4


def layer_params_per_gpu(split: layout.Split) -> tuple[float, float]:
    """(quantizable linear weights, 16-bit weights) of one decoder layer on one GPU."""
    a = split.arch
    h, hd = a.hidden_size, a.head_dim
    q_out = split.q_heads_per_gpu * hd
    kv_out = split.kv_heads_per_gpu * hd
    linear = h * q_out + 2 * h * kv_out + q_out * h
    sixteen_bit = 2 * h  # input and post-attention RMSNorm, replicated on every GPU
    if a.qkv_bias:
        sixteen_bit += q_out + 2 * kv_out
    if a.is_moe:
        linear += a.num_local_experts * 3 * h * split.mlp_width_per_gpu
        sixteen_bit += h * a.num_local_experts  # the router stays 16-bit and is replicated
    else:
        linear += 3 * h * split.mlp_width_per_gpu
    return float(linear), float(sixteen_bit)


def weights_bytes_per_gpu(split: layout.Split) -> float:
    """Weight bytes on the heaviest GPU: its share of the layers plus embedding and/or LM head."""
    a = split.arch
    linear, sixteen_bit = layer_params_per_gpu(split)
    layers = split.layers_per_gpu * (linear * split.weight_bytes + sixteen_bit * 2)
    padded_vocab = math.ceil(a.vocab_size / VOCAB_PADDING) * VOCAB_PADDING
    # Embedding and LM head stay 16-bit in fp8/int8/int4 checkpoints (that is ~1 GiB on 70B models).
    table = math.ceil(padded_vocab / split.tp) * a.hidden_size * 2
    final_norm = a.hidden_size * 2
    if split.pp == 1:
        ends = table + (0 if a.tie_word_embeddings else table) + final_norm
    else:
        # The first stage holds the embedding, the last the LM head (its own copy even when tied).
        ends = table + final_norm
    # The rotary cos/sin cache: max_position_embeddings × head_dim in the model dtype.
    rope = a.max_position_embeddings * a.head_dim * 2
    return layers + ends + rope


def params_total(arch: catalog.ModelArch) -> int:
    whole = layout.Split(arch, 1, 1, 1.0, 2)
    linear, sixteen_bit = layer_params_per_gpu(whole)
    table = arch.vocab_size * arch.hidden_size
    tables = table if arch.tie_word_embeddings else 2 * table
    return int(arch.num_hidden_layers * (linear + sixteen_bit) + tables + arch.hidden_size)


def activation_bytes(split: layout.Split, batched_tokens: int, max_num_seqs: int) -> float:
    """Peak transient memory of vLLM's profile run: the bigger of forward pass and dummy sampler."""
    a = split.arch
    width = split.mlp_width_per_gpu
    if a.is_moe:
        # fused_moe keeps per-(token, expert) caches of 2·I, I and H for the top-k experts of each token.
        per_token = a.num_experts_per_tok * (3 * width + a.hidden_size) + HIDDEN_COPIES * a.hidden_size
    else:
        per_token = 3 * width + HIDDEN_COPIES * a.hidden_size
    forward = batched_tokens * per_token * layout.ACTIVATION_BYTES
    sampler_rows = min(max_num_seqs, batched_tokens)
    sampler = SAMPLER_FP32_COPIES * sampler_rows * a.vocab_size * 4
    return max(forward, sampler)
