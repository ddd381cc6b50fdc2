"""What an engine's own /metrics says about a window of live traffic, read from two scrapes.

A canary step reads every serving pod's metrics at the start and at the end of its analysis window
(``orchestrator.gate.canary_analysis`` judges them). Between the two, counters grew and histograms
filled; the difference is the window's traffic, the way Prometheus' ``increase()`` and
``histogram_quantile()`` read it, computed here so that no Prometheus is needed (the air-gap
default). A pod that restarted inside the window reset its counters: its end value is then the
window's whole count, as ``increase()`` assumes. Which family and labels answer each question is the
engine version's metric table's (``orchestrator.engines.metric_table``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from orchestrator.engines import metric_table
from orchestrator.gate import exposition

Families = Mapping[str, exposition.Family]


@dataclasses.dataclass(frozen=True)
class Scrape:
    """One pod's /metrics at one moment: which side it serves, and what it said."""

    pod: str
    track: str  # "canary" or "stable"
    families: Families


def _samples(families: Families, series: metric_table.Series, suffix: str = "") -> list[exposition.Sample]:
    """The samples of ``series`` (its family, with ``suffix``, under its matchers). prometheus_client names
    a counter's samples ``x_total`` whether or not the table's family name has the suffix."""
    base = series.family.name + suffix
    names = {base, base.removesuffix("_total"), base + "_total"} if not suffix else {base}
    found = []
    for family in families.values():
        for sample in family.samples:
            if sample.name in names and series.matches(sample.labels):
                found.append(sample)
    return found


def counter(families: Families, series: metric_table.Series, suffix: str = "") -> float:
    """The sum of the series' samples (a counter, or a histogram's ``_count`` with ``suffix``)."""
    return sum(s.value for s in _samples(families, series, suffix))


def buckets(families: Families, series: metric_table.Series) -> dict[float, float]:
    """A histogram's cumulative bucket counts by upper bound, summed over the series' samples."""
    out: dict[float, float] = {}
    for sample in _samples(families, series, "_bucket"):
        bound = float(sample.labels.get("le", "nan"))
        if not math.isnan(bound):
            out[bound] = out.get(bound, 0.0) + sample.value
    return out


def increase(start: float, end: float) -> float:
    """A counter's growth over the window; a smaller end value means the pod restarted (a reset)."""
    return end - start if end >= start else end


def bucket_increase(start: Mapping[float, float], end: Mapping[float, float]) -> dict[float, float]:
    """Each bucket's growth; a reset in any bucket (the pod restarted) takes the end counts whole."""
    reset = any(end.get(bound, 0.0) < count for bound, count in start.items())
    return dict(end) if reset else {bound: count - start.get(bound, 0.0) for bound, count in end.items()}


def histogram_quantile(q: float, cumulative: Mapping[float, float]) -> float:
    """The ``q`` quantile of cumulative bucket counts, as Prometheus computes it: linear inside the
    bucket the rank falls in, the lowest bucket starting at 0, and the upper bound of the second
    highest bucket when the rank falls in +Inf. NaN with no observation."""
    bounds = sorted(cumulative)
    if not bounds or not math.isinf(bounds[-1]):
        return math.nan
    total = cumulative[bounds[-1]]
    if total <= 0:
        return math.nan
    rank = q * total
    previous_bound, previous_count = 0.0, 0.0
    for bound in bounds:
        count = cumulative[bound]
        if count >= rank:
            if math.isinf(bound):
                return previous_bound
            if bound <= 0 or count == previous_count:
                return bound
            return previous_bound + (bound - previous_bound) * (rank - previous_count) / (count - previous_count)
        previous_bound, previous_count = bound, count
    return previous_bound


@dataclasses.dataclass(frozen=True)
class Window:
    """One side's traffic over the window, summed over its pods."""

    pods: tuple[str, ...]
    succeeded: float | None  # None: the engine has no such counter
    failed: float | None
    ended: float | None  # requests that ended, from the end-to-end histogram's count
    histograms: Mapping[str, dict[float, float]]  # role -> bucket increases

    @property
    def requests(self) -> float:
        """Requests answered in the window: successes and failures, else what the latency histogram counted."""
        if self.succeeded is not None and self.failed is not None:
            return self.succeeded + self.failed
        return self.ended or 0.0

    @property
    def error_rate(self) -> float | None:
        if self.succeeded is None or self.failed is None:
            return None
        total = self.succeeded + self.failed
        return self.failed / total if total else math.nan

    def latency_ms(self, stat: str, latency: str) -> float:
        """``stat`` (median, p95, p99) of ``latency`` (ttft, itl, e2el) in milliseconds; NaN without one."""
        cumulative = self.histograms.get(metric_table.LATENCY_ROLES[latency])
        if cumulative is None:
            return math.nan
        return histogram_quantile(metric_table.STAT_QUANTILES[stat], cumulative) * 1000


def window(table: metric_table.MetricTable, start: Sequence[Scrape], end: Sequence[Scrape], track: str) -> Window:
    """The traffic of ``track``'s pods between two rounds of scrapes. A pod scraped only at the end
    (it started inside the window) counts from zero; one scraped only at the start counts nothing."""
    before = {s.pod: s.families for s in start if s.track == track}
    after = {s.pod: s.families for s in end if s.track == track}
    empty: Families = {}

    def grown(role: str, suffix: str = "") -> float | None:
        series = table.role(role)
        if series is None:
            return None
        return sum(
            increase(counter(before.get(pod, empty), series, suffix), counter(families, series, suffix))
            for pod, families in after.items()
        )

    histograms: dict[str, dict[float, float]] = {}
    for role in set(metric_table.LATENCY_ROLES.values()):
        series = table.role(role)
        if series is None:
            continue
        summed: dict[float, float] = {}
        for pod, families in after.items():
            for bound, count in bucket_increase(
                buckets(before.get(pod, empty), series), buckets(families, series)
            ).items():
                summed[bound] = summed.get(bound, 0.0) + count
        histograms[role] = summed
    return Window(
        pods=tuple(sorted(after)),
        succeeded=grown("succeeded"),
        failed=grown("failed"),
        ended=grown("e2e", "_count"),
        histograms=histograms,
    )
