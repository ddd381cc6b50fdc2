"""What the smoke benchmark sends and when: its configuration, prompts, bodies and arrival times.

Every prompt starts with a nonce unique to the run and the request, so neither the prefix cache
nor a previous run's cache can serve any of it, followed by words drawn deterministically (from
the seed and the request number) from a fixed list of common English words, each about one token
in Llama/GPT-style BPE vocabularies. No tokenizer is needed: the server's ``usage`` gives the
true counts, and docs/benchmark.md says how close the estimate is.
"""

from __future__ import annotations

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
_WORDS = tuple(_WORD_TEXT.split())


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
        default=512, ge=1, description="Prompt length in tokens (estimated: one per word; usage tells the truth)."
    )
    output_tokens: int = pydantic.Field(
        default=256, ge=1, description="max_tokens, with ignore_eos so every request decodes exactly this many."
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


def build_prompt(seed: int, index: int, nonce: str, input_tokens: int) -> tuple[str, int]:
    """The prompt of request ``index`` and its estimated token count.

    The nonce comes first so that no two prompts share even one KV-cache block; the rest is
    the same for a given (seed, index), so runs are comparable.
    """
    words = max(1, input_tokens - _estimate_tokens(nonce))
    rng = random.Random(f"{seed}:{index}")
    text = nonce + " " + " ".join(rng.choices(_WORDS, k=words))
    return text, words + _estimate_tokens(nonce)


def _estimate_tokens(nonce: str) -> int:
    # Hex digits and dashes split into short BPE pieces: about one token per two characters.
    return max(1, math.ceil(len(nonce) / 2))


def request_body(config: BenchConfig, prompt: str) -> bytes:
    """The JSON body of one streaming chat (or, for /v1/completions, plain prompt) request."""
    if config.endpoint == COMPLETIONS_PATH:
        # The legacy completions API has max_tokens only (max_completion_tokens is chat's).
        shaped: dict[str, object] = {"prompt": prompt, "max_tokens": config.output_tokens}
    else:
        shaped = {
            "messages": [{"role": "user", "content": prompt}],
            # The engine's names for the output limit: older servers read max_tokens, newer ones
            # max_completion_tokens, and TGI takes either but refuses both (a duplicate field).
            **dict.fromkeys(engines.get(config.engine).output_limit_fields, config.output_tokens),
        }
    return json.dumps(
        {
            "model": config.model,
            **shaped,
            "ignore_eos": True,
            "temperature": 0,
            "stream": True,
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
