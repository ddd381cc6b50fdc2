"""What an engine said about its memory at start-up, read from a pod's log, and how it compares with the plan.

Each engine parses its own lines (``orchestrator.engines``: vLLM's "GPU KV cache size: N tokens",
SGLang's "KV Cache is allocated. #tokens: N", ...) into an ``Observation``. Every production deploy
thereby checks the planner: the observation is stored beside the plan in the release record, and a
KV cache more than ``KV_TOLERANCE`` off the plan, or a concurrency at ``maxModelLen`` below
``maxNumSeqs``, is said as a warning. Pure: data in, data out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

KV_TOLERANCE = 0.10  # the planner is held to ±4.5 % on published logs; 10 % means the plan is wrong


@dataclasses.dataclass(frozen=True)
class Observation:
    """What one pod's engine logged; a field is None when its line was not in the log."""

    pod: str
    device: str | None  # GPU, CPU, …: where the engine says its KV cache lives, when it says so
    kv_cache_tokens: int | None
    max_model_len: int | None = None  # the sequence length the engine states its concurrency for
    max_concurrency: float | None = None
    weights_gib: float | None = None  # the largest rank's, when several ranks log
    load_seconds: float | None = None

    def to_json(self) -> dict[str, str | int | float | None]:
        return dataclasses.asdict(self)


def number(text: str) -> int:
    """An integer as engines log it: ``42,656`` or ``42656``."""
    return int(text.replace(",", ""))


def warnings(
    plan: Mapping[str, object], observations: Iterable[Observation], max_num_seqs: int, engine: str = "vLLM"
) -> list[str]:
    """Where the running engine disagrees with the plan (``Plan.to_json()``), in plain words."""
    out: list[str] = []
    planned = plan.get("kv_cache_tokens")
    for seen in observations:
        if seen.kv_cache_tokens is not None and isinstance(planned, int) and planned > 0:
            off = seen.kv_cache_tokens / planned - 1
            if abs(off) > KV_TOLERANCE:
                out.append(
                    f"pod {seen.pod}: {engine} reports a KV cache of {seen.kv_cache_tokens:,} tokens, {off:+.0%} off "
                    f"the plan's {planned:,}; the planner's figures do not hold for this model, GPU or engine version "
                    "(`deployctl plan --calibrate-from` uses the observation)"
                )
        if seen.max_concurrency is not None and max_num_seqs > 0 and seen.max_concurrency < max_num_seqs:
            out.append(
                f"pod {seen.pod}: {engine} can hold {seen.max_concurrency:.2f} sequences of "
                f"{seen.max_model_len or '?'} tokens at once but maxNumSeqs is {max_num_seqs}: long requests will be "
                "preempted"
            )
    return out
