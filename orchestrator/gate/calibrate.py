"""Size the benchmark's prompts with the server's own token counts, before anything is measured.

A word costs one token in Llama/GPT-style vocabularies and three or more in small ones, and the
chat template adds tokens of its own, so a prompt built from the word count alone can be several
times longer than asked (docs/benchmark.md has the figures). Instead of a tokenizer, which the
client would have to download or be given, a few one-token requests ask the server: one with the
nonce alone (the overhead: nonce, template, BOS) and one for each slice of the word list, whose
``usage.prompt_tokens`` over the slices give the mean tokens of a word drawn from that list.
Prompts drawn uniformly from the list then average the requested length; ``BenchReport`` says by
how much they missed it.
"""

from __future__ import annotations

import asyncio
import dataclasses

from orchestrator import http
from orchestrator.gate import metrics, stream, workload

# Slices of the word list: each probe stays short (about 45 words), well inside any context length.
_SLICES = 6


@dataclasses.dataclass(frozen=True)
class Sizing:
    """The sizing, and the probes' samples: their first token is the server's first, on a fresh one."""

    sizing: workload.PromptSizing
    probes: list[metrics.RequestSample]


async def calibrate(client: http.StreamClient, config: workload.BenchConfig, run_id: str) -> Sizing:
    """The server's prompt sizing, or the one-token-per-word estimate where it does not say.

    Every probe asks for one output token, and every probe's nonce has the same shape, so the
    nonce costs the same in each and cancels out. The overhead probe goes first, once more if it
    fails (a server that just turned healthy may refuse one request): without it nothing can be
    measured and no slice is sent. Slices that fail are left out; one answered slice is enough.
    """
    words = workload.WORDS
    size = -(-len(words) // _SLICES)
    slices = [words[i : i + size] for i in range(0, len(words), size)]

    async def probe(number: int, text: str) -> metrics.RequestSample:
        body = workload.request_body(config, f"{run_id}-p{number} {text}".rstrip(), output_tokens=1)
        return await stream.send_one(client, body, 0, config.timeout, config.endpoint)

    sent = [await probe(0, "")]
    if sent[0].prompt_tokens is None:
        sent.append(await probe(0, ""))
    overhead = sent[-1].prompt_tokens
    if overhead is None:
        return Sizing(_estimate(sent[-1]), sent)
    limit = asyncio.Semaphore(max(1, min(config.concurrency, len(slices))))

    async def capped(number: int, text: str) -> metrics.RequestSample:
        async with limit:
            return await probe(number, text)

    answered = await asyncio.gather(*(capped(i, " ".join(part)) for i, part in enumerate(slices, start=1)))
    sent += answered
    counted = [(s.prompt_tokens, len(part)) for s, part in zip(answered, slices, strict=True) if s.prompt_tokens]
    if not counted:
        return Sizing(_estimate(answered[0]), sent)
    per_word = sum(tokens - overhead for tokens, _ in counted) / sum(n for _, n in counted)
    if per_word <= 0:
        return Sizing(_estimate(None, "the server counted no tokens for the words"), sent)
    source = f"server usage.prompt_tokens of {1 + len(counted)} probes"
    return Sizing(workload.PromptSizing(float(overhead), per_word, source), sent)


def _estimate(failed: metrics.RequestSample | None, why: str = "") -> workload.PromptSizing:
    if failed is not None:
        why = failed.error or "the server sent no usage.prompt_tokens"
    estimate = workload.ESTIMATE
    return workload.PromptSizing(
        estimate.overhead_tokens, estimate.tokens_per_word, f"{estimate.source} (not measured: {why})"
    )
