"""Size the benchmark's prompts with the server's own token counts, before anything is measured.

A word costs one token in Llama/GPT-style vocabularies and three or more in small ones, and the
chat template adds tokens of its own, so a prompt built from the word count alone can be several
times longer than asked (docs/benchmark.md has the figures). Instead of a tokenizer, which the
client would have to download or be given, a few one-token requests ask the server: one with the
nonce alone (the overhead: nonce, template, BOS) and one for each slice of the word list, whose
``usage.prompt_tokens`` over all slices give the mean tokens of a word drawn from that list.
Prompts drawn uniformly from the list then average the requested length; ``BenchReport`` says by
how much they missed it.
"""

from __future__ import annotations

import asyncio

from orchestrator import http
from orchestrator.gate import metrics, stream, workload

# Slices of the word list: each probe stays short (about 45 words), well inside any context length.
_SLICES = 6


async def calibrate(client: http.StreamClient, config: workload.BenchConfig, run_id: str) -> workload.PromptSizing:
    """The server's prompt sizing, or the one-token-per-word estimate where it does not say.

    Every probe asks for one output token; a probe that fails or whose answer carries no
    ``usage.prompt_tokens`` leaves the estimate in place, with the reason in its ``source``.
    """
    words = workload.WORDS
    size = -(-len(words) // _SLICES)
    slices = [words[i : i + size] for i in range(0, len(words), size)]
    prompts = [f"{run_id}-s"] + [f"{run_id}-s{i} " + " ".join(part) for i, part in enumerate(slices)]
    limit = asyncio.Semaphore(max(1, min(config.concurrency, len(prompts))))

    async def probe(prompt: str) -> metrics.RequestSample:
        async with limit:
            body = workload.request_body(config, prompt, output_tokens=1)
            return await stream.send_one(client, body, 0, config.timeout, config.endpoint)

    samples = await asyncio.gather(*(probe(p) for p in prompts))
    counts = [s.prompt_tokens for s in samples]
    if any(c is None for c in counts):
        failed = next(s for s in samples if s.prompt_tokens is None)
        why = failed.error or "the server sent no usage.prompt_tokens"
        return workload.PromptSizing(
            workload.ESTIMATE.overhead_tokens,
            workload.ESTIMATE.tokens_per_word,
            f"{workload.ESTIMATE.source} (not measured: {why})",
        )
    overhead, *sliced = [float(c) for c in counts if c is not None]
    per_word = (sum(sliced) - overhead * len(sliced)) / len(words)
    if per_word <= 0:
        return workload.PromptSizing(
            workload.ESTIMATE.overhead_tokens,
            workload.ESTIMATE.tokens_per_word,
            f"{workload.ESTIMATE.source} (not measured: the server counted no tokens for the words)",
        )
    return workload.PromptSizing(overhead, per_word, f"server usage.prompt_tokens of {len(prompts)} probes")
