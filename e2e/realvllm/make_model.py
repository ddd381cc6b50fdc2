#!/usr/bin/env python3
"""Build the tiny model the real-vLLM test tier serves: a random-weight Llama and its tokenizer.

Everything is made here, from a fixed seed, so a build needs no network and two builds are byte
for byte the same: a 2-layer ``LlamaForCausalLM`` (hidden size 128, 4 query heads sharing 2 KV
heads, 2048 positions) saved as safetensors, and a byte-level BPE tokenizer trained on generated
text, saved as a Hugging Face fast tokenizer with BOS/EOS tokens and a chat template so that
``/v1/chat/completions`` works. The weights are random: the model produces fluent-looking noise,
at the speed and with the API of a real one.

Runs with the python of .cache/vllm-venv (it needs torch, transformers and tokenizers):
    .cache/vllm-venv/bin/python e2e/realvllm/make_model.py OUT_DIR
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

SEED = 1234
VOCAB_SIZE = 1024  # target; small so the embeddings stay small (the model is ~1.6 MB)
MAX_POSITIONS = 2048  # the model's context length; --max-model-len above it is an error in vLLM

BOS, EOS, PAD = "<s>", "</s>", "<pad>"
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]

# A prompt is "<s><|user|>hello<|end|><|assistant|>"; the model's own <|end|> or </s> ends the reply.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)

_WORDS = (  # noqa: SIM905 (one string reads better than 80 quoted words)
    "the a an model server token request latency throughput replica node cluster gpu cpu memory "
    "cache deploy rollout gate bench profile engine batch prompt reply stream chunk queue slot page "
    "block is are was runs serves waits fails passes scales loads starts stops returns answers "
    "measures fast slow small large ready healthy busy idle first last next every each no some many "
    "and or but if then when while because so to of in on at for with from by over under"
).split()


def corpus(rng: random.Random, sentences: int = 4000) -> list[str]:
    """Generated text with words, numbers, punctuation, JSON and code, for the BPE merges."""
    lines = []
    for _ in range(sentences):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 16))]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 100000)))
        line = " ".join(words)
        line = line[0].upper() + line[1:] + rng.choice([".", ".", "!", "?", ",", ":"])
        if rng.random() < 0.1:
            line = json.dumps({rng.choice(_WORDS): rng.choice(_WORDS), "n": rng.randint(0, 999)})
        if rng.random() < 0.05:
            line = f"def {rng.choice(_WORDS)}_{rng.choice(_WORDS)}(x):\n    return x * {rng.randint(1, 9)}"
        lines.append(line)
    return lines


def build_tokenizer(rng: random.Random) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[BOS, EOS, PAD, *ROLE_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(rng), trainer=trainer)
    # A plain completion prompt starts with BOS, as Llama's does; chat prompts get it from the template.
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, tok.token_to_id(BOS))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=ROLE_TOKENS,
        model_max_length=MAX_POSITIONS,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )


def invisible_token_ids(tokenizer: Any) -> list[int]:
    """Tokens that decode to no visible text on their own: special tokens, partial UTF-8, blanks."""
    invisible = []
    for token_id in range(len(tokenizer)):
        text = tokenizer.decode([token_id], skip_special_tokens=True)
        if not text.strip() or "\ufffd" in text:
            invisible.append(token_id)
    return invisible


def build_model(tokenizer: Any, seed: int) -> Any:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # GQA, as in the models we deploy
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-5,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=[tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|end|>")],
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        # Random weights under greedy decoding settle on one token; if that token shows no text
        # (a special token, a lone byte of a multi-byte character), every streamed delta is empty
        # and the smoke gate rightly counts the request as failed. Zero output rows give those
        # tokens logit 0, which the best of ~1,000 random logits beats, so every reply has text.
        for token_id in invisible_token_ids(tokenizer):
            model.lm_head.weight[token_id].zero_()
    model = model.to(torch.bfloat16).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id
    )
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", type=Path, help="directory to write the model into (created)")
    parser.add_argument("--seed", type=int, default=SEED, help="seed of the text, the merges and the weights")
    args = parser.parse_args()

    tokenizer = build_tokenizer(random.Random(args.seed))
    model = build_model(tokenizer, args.seed)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out_dir, safe_serialization=True)
    tokenizer.save_pretrained(args.out_dir)
    # transformers 5 writes the template to chat_template.jinja; older readers (and people) look for
    # it in tokenizer_config.json, so it goes there too.
    config_path = args.out_dir / "tokenizer_config.json"
    tokenizer_config = json.loads(config_path.read_text())
    tokenizer_config["chat_template"] = CHAT_TEMPLATE
    config_path.write_text(json.dumps(tokenizer_config, indent=2, sort_keys=True) + "\n")
    n_params = sum(p.numel() for p in model.parameters())
    print(f"tiny model: {n_params} parameters, vocab {len(tokenizer)}, written to {args.out_dir}")


if __name__ == "__main__":
    main()
