"""What vLLM says about its memory at start-up, read from a pod's log, and how it compares with the plan.

vLLM prints the same lines on GPU and CPU builds (``vllm/v1/core/kv_cache_utils.py``,
``gpu_model_runner.py``)::

    GPU KV cache size: 42,656 tokens                       (CPU KV cache size: … on the CPU build)
    Maximum concurrency for 32,768 tokens per request: 1.30x
    Model loading took 27.6 GiB memory and 9.8 seconds      (older: "Loading model weights took 14.99 GB")

Every production deploy thereby checks the planner: the observation is stored beside the plan in
the release record, and a KV cache more than ``KV_TOLERANCE`` off the plan, or a concurrency at
``maxModelLen`` below ``maxNumSeqs``, is said as a warning. Pure: text in, data out.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

KV_TOLERANCE = 0.10  # the planner is held to ±4.5 % on published logs; 10 % means the plan is wrong

_KV = re.compile(r"\b(GPU|CPU|XPU|TPU)? ?KV cache size: ([\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_LOADING = re.compile(
    r"(?:Model loading|Loading model weights) took ([\d.]+) ?(GiB|GB)(?: memory)?(?: and ([\d.]+) ?s(?:econds)?)?"
)


@dataclasses.dataclass(frozen=True)
class Observation:
    """What one pod's vLLM logged; a field is None when its line was not in the log."""

    pod: str
    device: str | None  # GPU, CPU, …: the word before "KV cache size"
    kv_cache_tokens: int | None
    max_model_len: int | None  # the L of "Maximum concurrency for L tokens per request"
    max_concurrency: float | None
    weights_gib: float | None  # the largest rank's, when several ranks log
    load_seconds: float | None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def parse(pod: str, text: str) -> Observation | None:
    """The start-up figures in ``text``, or None when it holds none of the lines (not vLLM, or not started)."""
    kv = _KV.search(text)
    concurrency = _CONCURRENCY.search(text)
    loads = _LOADING.findall(text)
    if kv is None and concurrency is None and not loads:
        return None
    weights = [float(size) * (1.0 if unit == "GiB" else 1e9 / 2**30) for size, unit, _ in loads]
    seconds = [float(s) for _, _, s in loads if s]
    return Observation(
        pod=pod,
        device=(kv.group(1) if kv else None),
        kv_cache_tokens=_int(kv.group(2)) if kv else None,
        max_model_len=_int(concurrency.group(1)) if concurrency else None,
        max_concurrency=float(concurrency.group(2)) if concurrency else None,
        weights_gib=round(max(weights), 3) if weights else None,
        load_seconds=round(max(seconds), 2) if seconds else None,
    )


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def warnings(plan: Mapping[str, Any], observations: Iterable[Observation], max_num_seqs: int) -> list[str]:
    """Where the running engine disagrees with the plan (``Plan.to_json()``), in plain words."""
    out: list[str] = []
    planned = plan.get("kv_cache_tokens")
    for seen in observations:
        if seen.kv_cache_tokens is not None and isinstance(planned, int) and planned > 0:
            off = seen.kv_cache_tokens / planned - 1
            if abs(off) > KV_TOLERANCE:
                out.append(
                    f"pod {seen.pod}: vLLM reports a KV cache of {seen.kv_cache_tokens:,} tokens, {off:+.0%} off the "
                    f"plan's {planned:,}; the planner's figures do not hold for this model, GPU or vLLM version "
                    "(`deployctl plan --calibrate-from` uses the observation)"
                )
        if seen.max_concurrency is not None and max_num_seqs > 0 and seen.max_concurrency < max_num_seqs:
            out.append(
                f"pod {seen.pod}: vLLM can hold {seen.max_concurrency:.2f} sequences of {seen.max_model_len or '?'} "
                f"tokens at once but maxNumSeqs is {max_num_seqs}: long requests will be preempted"
            )
    return out


def load_seconds(observations: Iterable[Mapping[str, Any]]) -> float | None:
    """The longest observed load time in stored observations (to size the next startup probe)."""
    seconds = [o["load_seconds"] for o in observations if isinstance(o.get("load_seconds"), (int, float))]
    return max(seconds) if seconds else None
