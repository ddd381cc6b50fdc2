"""Write a small word-level Hugging Face tokenizer for the peer benchmark tool (GuideLLM).

GuideLLM sizes its synthetic prompts with a tokenizer, and nothing may be downloaded here. This
builds one from Faker's English word list (GuideLLM's synthetic text comes from Faker): one token
per word and one per punctuation mark, which is exactly how the simulator counts prompt tokens,
so both tools send prompts of the length asked for. Runs under the peer's venv:

    .cache/peer-venv/bin/python bench/peer_tokenizer.py .cache/peer-tokenizer
"""

from __future__ import annotations

import sys

from faker.providers.lorem.en_US import Provider
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast


def main(out_dir: str) -> None:
    words = sorted(set(Provider.word_list) | {w.capitalize() for w in Provider.word_list})
    vocab = {"[UNK]": 0}
    for piece in [*words, ".", ",", "!", "?", ";", ":", "-", "'"]:
        vocab.setdefault(piece, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    # The WordPiece decoder joins words with spaces and glues punctuation back on.
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]", model_max_length=1_000_000)
    fast.save_pretrained(out_dir)
    print(f"wrote a {len(vocab)}-entry word-level tokenizer to {out_dir}")


if __name__ == "__main__":
    main(sys.argv[1])
