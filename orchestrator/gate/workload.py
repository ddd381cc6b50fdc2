"""What the smoke benchmark sends and when: its configuration, prompts, bodies and arrival times.

Every prompt starts with a nonce unique to the run and the request, so neither the prefix cache
nor a previous run's cache can serve any of it, followed by words drawn deterministically (from
the seed and the request number) from a fixed list of common English words. How many words make
the requested length depends on the model's tokenizer: a :class:`PromptSizing` says it, measured
from the server's own ``usage.prompt_tokens`` (:mod:`orchestrator.gate.calibrate`), so no tokenizer
is needed on the client. Without a measurement the estimate is one token per word, which holds
for Llama/GPT-style BPE vocabularies and can be several times off for others.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
from typing import Literal

import pydantic

from orchestrator import conventions, engines

Endpoint = conventions.Endpoint
CHAT_PATH, COMPLETIONS_PATH, ENDPOINTS = conventions.CHAT_PATH, conventions.COMPLETIONS_PATH, conventions.ENDPOINTS
# Measured on a 2-core machine (bench/bench_smoke.py, docs/benchmark.md): one client process keeps
# TTFT and TPOT within 5 %, unflagged, up to ~192 streams at 20 ms per token; 128 leaves a margin.
STREAMS_PER_PROCESS = 128

# Common English words; with a leading space each is one token in Llama 3, Mistral and GPT vocabularies.
_WORD_TEXT = """
the of and to in is that it for was on are as with his they at be this from have or by one had not
but what all were when we there can an your which their said if do will each about how up out them
then she many some so these would other into has more her two like him see time could no make than
first been its who now people my made over did down only way find use may water long little very
after words called just where most know get through back much before go good new write our used me
man too any day same right look think also around another came come work three word must because
does part even place well such here take why things help put years different away again off went old
number great tell men say small every found still between name should home big give air line set own
under read last never us left end along while might next sound below saw something thought both few
those always looked show large often together asked house don world going want school important
until form food keep children feet land side without boy once animals life enough took sometimes
four head above kind began almost live page got earth need far hand high year mother light parts
country father let night following picture being study second eyes soon times story boys since white
days ever paper hard near sentence better best across during today others however sure means knew
try told young miles sun ways
"""
WORDS = tuple(_WORD_TEXT.split())


@dataclasses.dataclass(frozen=True)
class PromptSizing:
    """How a request's prompt tokens grow with its words: ``overhead + tokens_per_word × words``.

    ``overhead`` is what a request costs with no words at all: the nonce, the chat template, the
    BOS token. ``source`` says where the two numbers come from, for the report.
    """

    overhead_tokens: float
    tokens_per_word: float
    source: str

    def words_for(self, input_tokens: int) -> int:
        """Words that make a prompt of about ``input_tokens`` tokens (at least one)."""
        return max(1, round((input_tokens - self.overhead_tokens) / self.tokens_per_word))

    def tokens_for(self, words: int) -> int:
        """The expected prompt tokens of a prompt of ``words`` words."""
        return max(1, round(self.overhead_tokens + self.tokens_per_word * words))

    def to_json(self) -> dict[str, object]:
        return {
            "overhead_tokens": round(self.overhead_tokens, 2),
            "tokens_per_word": round(self.tokens_per_word, 4),
            "source": self.source,
        }


# Hex digits and dashes split into short BPE pieces: about one token per two characters of the
# nonce ("1a2b3c4d-17"), and each word about one token.
ESTIMATE = PromptSizing(overhead_tokens=6.0, tokens_per_word=1.0, source="estimate: one token per word")


class BenchConfig(pydantic.BaseModel):
    """What to send and how hard; defaults are the profile's smoke defaults (design.md, "Gate")."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    url: str = pydantic.Field(description="Base URL of the OpenAI-compatible server, e.g. http://infer:8000.")
    model: str = pydantic.Field(min_length=1, description="Model name as /v1/models lists it.")
    engine: Literal["vllm", "tgi", "trtllm", "sglang"] = pydantic.Field(
        default="vllm", description="The server's engine: it decides the request's spelling of max_tokens."
    )
    endpoint: Endpoint = pydantic.Field(
        default=CHAT_PATH,
        description="The API path requests go to: chat messages, or a plain prompt as vLLM's bench sends.",
    )
    concurrency: int = pydantic.Field(
        default=64, ge=1, description="Streams kept in flight (closed loop), or the cap with request_rate."
    )
    requests: int | None = pydantic.Field(
        default=256,
        ge=1,
        description="Measured requests; None means unbounded, which needs duration. With duration, a cap.",
    )
    input_tokens: int = pydantic.Field(
        default=512,
        ge=1,
        description="Prompt length in tokens, as the server counts them (sized from its usage.prompt_tokens).",
    )
    output_tokens: int = pydantic.Field(
        default=256, ge=1, description="max_tokens, with ignore_eos so every request decodes exactly this many."
    )
    size_prompts: bool = pydantic.Field(
        default=True,
        description="Before measuring, ask the server how many tokens the words make (a few one-token "
        "requests, orchestrator.gate.calibrate); False sizes prompts at one token per word.",
    )
    warmup: int = pydantic.Field(
        default=8, ge=0, description="Unmeasured requests first: they open connections and warm server caches."
    )
    duration: float | None = pydantic.Field(
        default=None, gt=0, description="Seconds after which no new request is sent (in-flight ones finish)."
    )
    request_rate: float | None = pydantic.Field(
        default=None, gt=0, description="Requests/s of an open loop; None is a closed loop of `concurrency` streams."
    )
    burstiness: float = pydantic.Field(
        default=1.0, gt=0, description="Gamma shape of inter-arrival times: 1 is Poisson, <1 burstier, >1 smoother."
    )
    seed: int = pydantic.Field(default=0, description="Seeds prompt words and arrival times (not the nonce).")
    timeout: float = pydantic.Field(
        default=300.0, gt=0, description="Seconds one request may take end to end before it counts as failed."
    )
    stall_timeout: float = pydantic.Field(
        default=30.0, gt=0, description="Seconds of silence mid-stream after which a request counts as stalled."
    )
    processes: int | None = pydantic.Field(
        default=None,
        ge=1,
        description=f"Client processes; None: ceil(concurrency / {STREAMS_PER_PROCESS}), at most the cores.",
    )

    @pydantic.field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, got {value!r}")
        return value.rstrip("/")

    @pydantic.model_validator(mode="after")
    def _bounded(self) -> BenchConfig:
        if self.requests is None and self.duration is None:
            raise ValueError("set requests or duration (or both): an unbounded benchmark never ends")
        return self

    def process_count(self) -> int:
        """How many client processes this config runs in."""
        if self.processes is not None:
            return min(self.processes, self.concurrency)
        wanted = math.ceil(self.concurrency / STREAMS_PER_PROCESS)
        return max(1, min(wanted, os.cpu_count() or 1))


def build_prompt(seed: int, index: int, nonce: str, words: int) -> str:
    """The prompt of request ``index``: the nonce, then ``words`` words.

    The nonce comes first so that no two prompts share even one KV-cache block; the rest is
    the same for a given (seed, index), so runs are comparable.
    """
    rng = random.Random(f"{seed}:{index}")
    return nonce + " " + " ".join(rng.choices(WORDS, k=max(1, words)))


def request_body(config: BenchConfig, prompt: str, output_tokens: int | None = None) -> bytes:
    """The JSON body of one streaming chat (or, for /v1/completions, plain prompt) request.

    ``output_tokens`` replaces the configured output length (the sizing probes ask for one token).
    """
    limit = config.output_tokens if output_tokens is None else output_tokens
    if config.endpoint == COMPLETIONS_PATH:
        # The legacy completions API has max_tokens only (max_completion_tokens is chat's).
        shaped: dict[str, object] = {"prompt": prompt, "max_tokens": limit}
    else:
        shaped = {
            "messages": [{"role": "user", "content": prompt}],
            # The engine's names for the output limit: older servers read max_tokens, newer ones
            # max_completion_tokens, and TGI takes either but refuses both (a duplicate field).
            **dict.fromkeys(engines.get(config.engine).output_limit_fields, limit),
        }
    return json.dumps(
        {
            "model": config.model,
            **shaped,
            "ignore_eos": True,
            "temperature": 0,
            "stream": True,
            # Always asked for: SGLang's default is false, and the server's count is the truth.
            "stream_options": {"include_usage": True},
        }
    ).encode()


def arrival_offsets(
    count: int | None, rate: float, burstiness: float, seed: int, duration: float | None
) -> list[float]:
    """Send times (seconds from start) of an open loop: gamma inter-arrivals of mean 1/rate.

    As vLLM does, a fixed count is rescaled so the last arrival lands at count/rate exactly,
    which keeps throughput comparable across seeds. Arrivals past ``duration`` are dropped.
    """
    rng = random.Random(seed)
    scale = 1.0 / (rate * burstiness)
    offsets: list[float] = []
    t = 0.0
    while count is None or len(offsets) < count:
        t += rng.gammavariate(burstiness, scale)
        if count is None and duration is not None and t > duration:
            break
        offsets.append(t)
    if count is not None and offsets and offsets[-1] > 0:
        factor = (count / rate) / offsets[-1]
        offsets = [o * factor for o in offsets]
    if duration is not None:
        offsets = [o for o in offsets if o <= duration]
    return offsets
