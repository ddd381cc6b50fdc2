"""A canary step's verdict on a window of live traffic: the canary beside the stable copies.

Each metric of ``rollout.canary.maxRatio`` compares the canary's value with the stable copies' over
the same window (the stable error rate counts as at least ``ERROR_RATE_FLOOR``), and each live metric
of ``gate.smoke.slo`` holds the canary to its absolute ceiling or floor. Fewer requests than the
step's ``minRequests`` on either side is inconclusive, whatever the numbers say: two slow requests are
no regression and two fast ones no proof. The verdict carries its evidence, which goes into the
release record as it is (``to_json``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Literal

from orchestrator.engines import metric_table
from orchestrator.gate import live_metrics
from orchestrator.profile import canary as profile_canary
from orchestrator.profile import slo as slo_language

Verdict = Literal["pass", "fail", "inconclusive"]


@dataclasses.dataclass(frozen=True)
class Check:
    """One comparison: the canary's value against a limit, from a ratio to stable or from an SLO."""

    metric: str
    canary: float
    limit: float
    source: str  # "ratio 1.2 to stable 310" or "slo <=1500"
    passed: bool

    def to_json(self) -> dict[str, object]:
        return {
            "metric": self.metric,
            "canary": _number(self.canary),
            "limit": _number(self.limit),
            "source": self.source,
            "passed": self.passed,
        }


@dataclasses.dataclass(frozen=True)
class Analysis:
    verdict: Verdict
    reason: str  # one sentence: what decided it
    window_s: float
    canary: live_metrics.Window
    stable: live_metrics.Window
    checks: tuple[Check, ...]

    @property
    def canary_share(self) -> float:
        """The canary's share of the requests both sides answered (about c/n behind a Service)."""
        total = self.canary.requests + self.stable.requests
        return self.canary.requests / total if total else math.nan

    def to_json(self) -> dict[str, object]:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "window_s": self.window_s,
            "canary_share": _number(self.canary_share),
            "canary": _side(self.canary),
            "stable": _side(self.stable),
            "checks": [c.to_json() for c in self.checks],
        }


def analyse(
    table: metric_table.MetricTable,
    start: list[live_metrics.Scrape],
    end: list[live_metrics.Scrape],
    window_s: float,
    spec: profile_canary.CanarySpec,
    min_requests: int,
    slo: Mapping[str, slo_language.Condition],
    *,
    stable_expected: bool = True,
) -> Analysis:
    """Judge one window: ``start`` and ``end`` are the pods' scrapes at its two ends. A canary no pod
    of which answered fails (what cannot be observed is not promoted); stable copies that exist
    (``stable_expected``) but did not answer, or a window no check could judge, are inconclusive."""
    canary = live_metrics.window(table, start, end, "canary")
    stable = live_metrics.window(table, start, end, "stable")

    def decided(verdict: Verdict, reason: str, checks: tuple[Check, ...] = ()) -> Analysis:
        return Analysis(verdict, reason, window_s, canary, stable, checks)

    short = [(side, w) for side, w in (("canary", canary), ("stable", stable)) if w.pods and w.requests < min_requests]
    if not canary.pods:
        return decided("fail", "no canary pod answered its metrics in the window")
    if stable_expected and not stable.pods:
        return decided("inconclusive", "no stable pod answered its metrics in the window")
    if short:
        side, w = short[0]
        return decided(
            "inconclusive",
            f"the {side} copies answered {w.requests:g} requests in the window, fewer than minRequests {min_requests}",
        )
    checks = tuple(_ratio_checks(spec, canary, stable) + _slo_checks(slo, canary))
    if not checks:
        return decided(
            "inconclusive", "no check could judge the window: the engine's metrics answer none of maxRatio and the SLOs"
        )
    failed = [c for c in checks if not c.passed]
    if failed:
        worst = failed[0]
        return decided(
            "fail", f"{worst.metric} {_number(worst.canary)} is over {_number(worst.limit)} ({worst.source})", checks
        )
    return decided("pass", f"{len(checks)} checks held over {window_s:g} s of live traffic", checks)


def measure(window: live_metrics.Window, metric: str) -> float | None:
    """A live metric of ``window`` (``error_rate``, ``p95_ttft_ms`` …); None where the engine has no series."""
    if metric == "error_rate":
        return window.error_rate
    stat, _, rest = metric.partition("_")
    latency = rest.removesuffix("_ms")
    if metric_table.LATENCY_ROLES[latency] not in window.histograms:
        return None
    return window.latency_ms(stat, latency)


def _ratio_checks(
    spec: profile_canary.CanarySpec, canary: live_metrics.Window, stable: live_metrics.Window
) -> list[Check]:
    if not stable.pods:
        return []  # a canary that replaced the only copy: the SLOs alone judge it
    checks = []
    for metric, ratio in spec.maxRatio.items():
        ours, theirs = measure(canary, metric), measure(stable, metric)
        if ours is None or theirs is None or math.isnan(ours) or math.isnan(theirs):
            continue  # the engine has no such series, or a side observed none
        if metric == "error_rate":
            theirs = max(theirs, profile_canary.ERROR_RATE_FLOOR)
        limit = ratio * theirs
        checks.append(Check(metric, ours, limit, f"ratio {ratio:g} to stable {_number(theirs)}", ours <= limit))
    return checks


def _slo_checks(slo: Mapping[str, slo_language.Condition], canary: live_metrics.Window) -> list[Check]:
    checks = []
    for metric, condition in slo.items():
        if metric not in slo_language.LIVE_METRICS:
            continue
        value = measure(canary, metric)
        if value is None or math.isnan(value):
            continue
        checks.append(Check(metric, value, condition.threshold, f"slo {condition}", condition.holds(value)))
    return checks


def _side(window: live_metrics.Window) -> dict[str, object]:
    out: dict[str, object] = {"pods": list(window.pods), "requests": window.requests}
    for metric in slo_language.LIVE_METRICS:
        value = measure(window, metric)
        if value is not None:
            out[metric] = _number(value)
    return out


def _number(value: float) -> float | None:
    """JSON has no NaN: a value nobody observed is null."""
    return None if math.isnan(value) else round(value, 6)
