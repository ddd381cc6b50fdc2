#!/usr/bin/env python3
"""Build tiny models of the families the planner sizes by their own rules, for the real-vLLM tier.

One directory per family under OUT_DIR, each a random-weight model with the tiny Llama's tokenizer
(``make_model.build_tokenizer``, same seed): vLLM loads it through the family's own model class, so
the KV cache it allocates on the CPU is vLLM's own rule for that family, which
e2e/test_real_vllm_families.py holds the planner's bytes per token against.

* ``qwen2-moe``: top-k experts with a shared expert and its gate (Qwen2MoeForCausalLM);
* ``deepseek-v2``: multi-head latent attention with MoE, shared experts and a first dense layer
  (DeepseekV2ForCausalLM);
* ``gemma2``: one sliding-window layer and one full-attention layer (Gemma2ForCausalLM).

Runs with the python of .cache/vllm-venv (it needs torch and transformers):
    .cache/vllm-venv/bin/python e2e/realvllm/make_family_models.py OUT_DIR
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import make_model

COMMON: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": make_model.MAX_POSITIONS,
    "tie_word_embeddings": False,
}


def qwen2_moe(vocab: int) -> Any:
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    config = Qwen2MoeConfig(
        vocab_size=vocab,
        moe_intermediate_size=64,
        shared_expert_intermediate_size=128,
        num_experts=4,
        num_experts_per_tok=2,
        decoder_sparse_step=1,
        **COMMON,
    )
    return Qwen2MoeForCausalLM(config)


def deepseek_v2(vocab: int) -> Any:
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM

    config = DeepseekV2Config(
        vocab_size=vocab,
        moe_intermediate_size=64,
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        first_k_dense_replace=1,
        kv_lora_rank=64,
        q_lora_rank=None,
        qk_rope_head_dim=16,
        qk_nope_head_dim=32,
        v_head_dim=32,
        topk_method="greedy",
        n_group=1,
        topk_group=1,
        **{**COMMON, "num_key_value_heads": 4},
    )
    return DeepseekV2ForCausalLM(config)


def gemma2(vocab: int) -> Any:
    from transformers import Gemma2Config, Gemma2ForCausalLM

    # vLLM's Gemma2ForCausalLM always ties the LM head to the embedding (it has no lm_head to load).
    config = Gemma2Config(vocab_size=vocab, head_dim=32, sliding_window=256, **{**COMMON, "tie_word_embeddings": True})
    return Gemma2ForCausalLM(config)


FAMILIES: dict[str, Callable[[int], Any]] = {"qwen2-moe": qwen2_moe, "deepseek-v2": deepseek_v2, "gemma2": gemma2}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("out_dir", type=Path, help="directory to write one model directory per family into")
    args = parser.parse_args()

    import torch

    tokenizer = make_model.build_tokenizer(random.Random(make_model.SEED))
    for name, build in FAMILIES.items():
        torch.manual_seed(make_model.SEED)
        model = build(len(tokenizer)).to(torch.bfloat16).eval()
        out = args.out_dir / name
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
        print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters, written to {out}")


if __name__ == "__main__":
    main()
