"""The SLO language: vLLM's SLA syntax, a map ``metric → "<op><number>"``, over the metric names
that the gate measures (the numeric fields of :class:`orchestrator.gate.metrics.Metrics`).

One parser for the profile (so `deployctl validate` refuses a typo with a did-you-mean, before
anything touches a cluster) and for the gate (which judges what was measured against it).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import operator
from collections.abc import Callable, Mapping

OPERATORS = ("<=", ">=", "==", "<", ">")  # two-character operators first: "<=" must not parse as "<"
_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "==": operator.eq,
    "<": operator.lt,
    ">": operator.gt,
}
_LATENCIES = tuple(
    f"{stat}_{latency}_ms"
    for latency in ("ttft", "tpot", "itl", "e2el")
    for stat in ("mean", "median", "std", "p95", "p99")
)
# The names of vLLM's `bench serve --save-result` JSON, in gate.metrics.Metrics' field order. The
# profile's floor holds them so `validate` checks an SLO without importing the gate; the gate's
# Metrics model declares the same numeric fields, and tests/test_gate.py holds the two equal.
METRIC_NAMES = (
    "completed",
    "failed",
    "duration",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    *_LATENCIES,
    "error_rate",
    "median_decode_tok_s_per_stream",
)
# Not the benchmark's: the revision's time from the write to the smoke run's first token, which
# verify measures around the gate (orchestrator.apply.time_to_serving) and judges with the same SLO language.
SERVING_METRIC = "time_to_serving_s"
# What live traffic measures from an engine's own histograms and counters, in the same names: the
# canary's analysis judges these (its ratios to the stable copies, and the SLOs above among them).
LIVE_METRICS = (
    *(f"{stat}_{latency}_ms" for latency in ("ttft", "itl", "e2el") for stat in ("median", "p95", "p99")),
    "error_rate",
)
SLO_METRICS = (*METRIC_NAMES, SERVING_METRIC)


@dataclasses.dataclass(frozen=True)
class Condition:
    """One SLO condition, e.g. ``<=1500``."""

    op: str
    threshold: float

    def holds(self, value: float) -> bool:
        return _COMPARE[self.op](value, self.threshold)

    def __str__(self) -> str:
        return f"{self.op}{self.threshold:g}"


def parse_condition(metric: str, text: object) -> Condition:
    """Parse ``"<=1500"``; the ValueError names the metric and the operators allowed."""
    raw = str(text).strip() if isinstance(text, str) else None
    op = next((o for o in OPERATORS if raw is not None and raw.startswith(o)), None)
    threshold = math.nan
    if raw is not None and op is not None:
        try:
            threshold = float(raw[len(op) :].strip())
        except ValueError:
            threshold = math.nan
    if op is None or not math.isfinite(threshold):
        raise ValueError(
            f"slo {metric}: {text!r} is not a condition; write one of the operators "
            f'{", ".join(OPERATORS)} followed by a number, e.g. "<=1500"'
        )
    return Condition(op, threshold)


def check_metric(metric: str) -> None:
    """ValueError with a did-you-mean when ``metric`` is not a metric the gate measures."""
    if metric not in SLO_METRICS:
        close = difflib.get_close_matches(metric, SLO_METRICS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"slo: unknown metric {metric!r}{hint}; the metrics are: {', '.join(SLO_METRICS)}")


def parse_slo(mapping: Mapping[str, object]) -> dict[str, Condition]:
    """Parse a whole SLO map; a ValueError names the bad metric and what is allowed instead."""
    parsed: dict[str, Condition] = {}
    for metric, text in mapping.items():
        check_metric(metric)
        parsed[metric] = parse_condition(metric, text)
    return parsed
