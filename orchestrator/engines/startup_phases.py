"""How long an engine's start-up phases took, as its own log says: the engine's share of time to serving.

Every engine times some of its phases in its log (vLLM: weights read, model loaded, torch.compile,
the profiling run, CUDA-graph capture, the whole engine init; SGLang: weights and graph capture;
TGI: each shard until ready). Each engine names its lines once (``Engine.phase_lines``); this
module reads them out of a pod's log. Pure: text in, seconds out.

Several ranks log the same phase; the slowest rank bounds the start, so a phase takes the largest
figure, unless its lines are parts of one phase (SGLang's graph capture per batch kind), which add up.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping
from typing import Literal

# The phases, in the order a start goes through them; an engine logs some of them.
PHASES = (
    "model_init",
    "weights_read",
    "model_load",
    "dynamo",
    "compile",
    "profiling",
    "cuda_graphs",
    "engine_init",
    "shard_ready",
)


@dataclasses.dataclass(frozen=True)
class PhaseLine:
    """One log line that times ``phase``: its first non-empty group is the seconds."""

    phase: str
    pattern: re.Pattern[str]
    combine: Literal["max", "sum"] = "max"  # several lines: the slowest rank, or the parts of one phase

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"unknown start-up phase {self.phase!r}; known: {', '.join(PHASES)}")


def line(phase: str, pattern: str, combine: Literal["max", "sum"] = "max") -> PhaseLine:
    return PhaseLine(phase, re.compile(pattern), combine)


def read(lines: Iterable[PhaseLine], text: str) -> dict[str, float]:
    """Seconds per phase that ``text`` (a pod's log) times, in PHASES order; a phase without a line is absent."""
    found: dict[str, float] = {}
    for spec in lines:
        seconds = [s for m in spec.pattern.finditer(text) if (s := _seconds(m)) is not None]
        if not seconds:
            continue
        value = sum(seconds) if spec.combine == "sum" else max(seconds)
        found[spec.phase] = max(found.get(spec.phase, 0.0), value)
    return {phase: round(found[phase], 3) for phase in PHASES if phase in found}


def _seconds(match: re.Match[str]) -> float | None:
    """The line's figure; None for one that is no number of seconds (``.``, ``1.2.3``, ``inf``)."""
    text = next((g for g in match.groups() if g is not None), "")
    try:
        seconds = float(text)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) else None


def summary(phases: Mapping[str, float]) -> str:
    """The phases as one line: ``weights_read 13.5 s, compile 10.8 s, engine_init 21.5 s``."""
    return ", ".join(f"{name} {seconds:.1f} s" for name, seconds in phases.items())
