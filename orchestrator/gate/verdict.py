"""The SLO gate: a smoke-benchmark report and the profile's SLOs in, an ordered verdict out.

SLOs use vLLM's SLA syntax, a map ``metric → "<op><number>"`` (``{"p95_ttft_ms": "<=1500"}``),
over the metric names of :mod:`orchestrator.gate.metrics`. Verdicts are ordered and the worst check
wins (argo-rollouts' rule): Pass < Inconclusive < Error < Fail.

* Inconclusive: the numbers exist but cannot be trusted to judge the server: too few samples,
  the client was the bottleneck, or the prompts were not the length asked for.
  The release is held, neither promoted nor rolled back.
* Error: nothing was measured (refused connections, timeouts); the caller retries a few times.
* Fail: an SLO was missed, or a gated metric regressed past ``max_regression_pct`` against the
  previous release's stored report. Fail rolls back.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import TypedDict

from orchestrator import errors
from orchestrator.gate import bench_report
from orchestrator.profile import slo

METRIC_NAMES = slo.METRIC_NAMES
Condition = slo.Condition
parse_slo = slo.parse_slo
_LOWER_IS_BETTER = ("<=", "<")
# Counts of requests: a request fails or completes at any prompt length, so a run whose prompts
# missed the length asked for still judges these.
_LENGTH_INDEPENDENT = frozenset({"completed", "failed", "error_rate"})
_HIGHER_IS_BETTER = (">=", ">")


class Verdict(enum.IntEnum):
    """Ordered so that ``max()`` of several verdicts is the one that wins."""

    PASS = 0
    INCONCLUSIVE = 1
    ERROR = 2
    FAIL = 3

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclasses.dataclass(frozen=True)
class Check:
    """One row of the verdict table."""

    metric: str
    condition: str
    measured: float | None
    verdict: Verdict
    reason: str
    previous: float | None = None
    delta_pct: float | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "metric": self.metric,
            "condition": self.condition,
            "measured": self.measured,
            "verdict": self.verdict.label,
            "reason": self.reason,
            "previous": self.previous,
            "delta_pct": self.delta_pct,
        }


class BenchFacts(TypedDict, total=False):
    """The facts of a benchmark run a gate report keeps (``_bench_facts``); none when it could not run."""

    run_id: str
    started_at: str
    config: dict[str, object]
    client: dict[str, object]
    token_count_source: str
    prompt_tokens: dict[str, object]
    failures: dict[str, int]
    errors: list[str]


@dataclasses.dataclass(frozen=True)
class GateReport:
    """The verdict, its rows, and the measured metrics the next release compares itself with."""

    verdict: Verdict
    checks: tuple[Check, ...]
    metrics: dict[str, float | None]
    bench: BenchFacts  # run facts worth storing: run_id, config, client load, failures; empty when it did not run

    def summary(self) -> str:
        """One line: the verdict and the reasons of the rows that decided it."""
        if self.verdict is Verdict.PASS:
            return f"pass: all {len(self.checks)} checks passed"
        deciding = [c.reason for c in self.checks if c.verdict is self.verdict]
        return f"{self.verdict.label}: " + "; ".join(deciding)

    def client_bound(self) -> bool:
        """Whether the run is inconclusive because the benchmark client could not keep up."""
        return self.verdict is Verdict.INCONCLUSIVE and any(
            c.metric == "client_saturated" and c.verdict is Verdict.INCONCLUSIVE for c in self.checks
        )

    def to_json(self) -> dict[str, object]:
        return {
            "verdict": self.verdict.label,
            "summary": self.summary(),
            "checks": [c.to_json() for c in self.checks],
            "metrics": self.metrics,
            "bench": self.bench,
        }


def error_report(message: str) -> GateReport:
    """The verdict when the benchmark could not run at all (the caller caught an EndpointError)."""
    return GateReport(Verdict.ERROR, (Check("measurement", "server answers", None, Verdict.ERROR, message),), {}, {})


def evaluate(
    report: bench_report.BenchReport,
    slos: Mapping[str, object],
    min_samples: int,
    previous_report: bench_report.BenchReport | Mapping[str, object] | None = None,
    max_regression_pct: float | None = None,
    serving: float | None = None,
) -> GateReport:
    """Judge ``report`` against ``slos`` (strings or parsed), and against the previous release.

    ``serving`` is the revision's time to serving (slo.SERVING_METRIC) when a rollout was timed;
    without it an SLO on it has nothing to judge and is left out.

    ``previous_report`` is the previous release's BenchReport, its JSON, or the ``to_json()`` of
    its GateReport as stored in the release record.
    """
    conditions: dict[str, Condition] = {}
    for metric, condition in slos.items():
        if isinstance(condition, Condition):
            slo.check_metric(metric)
            conditions[metric] = condition
        else:
            conditions.update(slo.parse_slo({metric: condition}))
    measured = {name: _as_float(getattr(report, name)) for name in METRIC_NAMES}
    if serving is not None:
        measured[slo.SERVING_METRIC] = round(serving, 3)
    else:
        conditions.pop(slo.SERVING_METRIC, None)
    facts = _bench_facts(report)
    problem = report.measurement_problem()
    if problem is not None:
        rows = [Check("measurement", "requests are answered", None, Verdict.ERROR, f"not measured: {problem}")]
        rows += [Check(m, str(c), measured.get(m), Verdict.ERROR, f"{m}: not measured") for m, c in conditions.items()]
        return GateReport(Verdict.ERROR, tuple(rows), measured, facts)

    distrust = _distrust(report, min_samples)
    rows = [_samples_row(report, min_samples), _client_row(report), _prompt_length_row(report)]
    previous = _previous_metrics(previous_report)
    previous_note = _previous_note(previous_report)
    for metric, condition in conditions.items():
        value = measured.get(metric)
        before = previous.get(metric)
        delta = _delta_pct(value, before)
        # A failed request's kind and message are what the on-call engineer needs next, not just the rate.
        detail = report.failure_summary() if metric == "error_rate" and report.failed else None
        rows.append(_slo_row(metric, condition, value, distrust.get(metric), before, delta, detail))
        # A start is compared with its SLO only: the previous revision may have replaced no pod at all.
        if max_regression_pct is not None and previous_report is not None and metric != slo.SERVING_METRIC:
            rows.append(
                _regression_row(metric, condition, value, before, delta, max_regression_pct, distrust, previous_note)
            )
    return GateReport(max(r.verdict for r in rows), tuple(rows), measured, facts)


def _as_float(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _distrust(report: bench_report.BenchReport, min_samples: int) -> dict[str, str]:
    """Metric → why its value cannot decide the verdict; missing metrics are trusted."""
    reasons: dict[str, str] = {}
    attempted = report.completed + report.failed
    misfit = report.prompt_length_problem()
    for name in METRIC_NAMES:
        if name == "error_rate":
            # A client that cannot keep up slows requests down but does not make them fail.
            if attempted < min_samples:
                reasons[name] = f"only {attempted} requests ran, fewer than min_samples={min_samples}"
        elif report.completed < min_samples:
            reasons[name] = f"only {report.completed} requests completed, fewer than min_samples={min_samples}"
        elif report.client.saturated:
            reasons[name] = "client-bound run: " + "; ".join(report.client.reasons)
        elif misfit is not None and name not in _LENGTH_INDEPENDENT:
            # A latency or a throughput belongs to the prompt length it was measured at.
            reasons[name] = misfit
    return reasons


def _samples_row(report: bench_report.BenchReport, min_samples: int) -> Check:
    ok = report.completed >= min_samples
    reason = (
        f"{report.completed} completed requests"
        if ok
        else f"only {report.completed} completed requests, need {min_samples}: run more requests"
    )
    return Check(
        "completed",
        f">={min_samples}",
        float(report.completed),
        Verdict.PASS if ok else Verdict.INCONCLUSIVE,
        reason,
    )


def _client_row(report: bench_report.BenchReport) -> Check:
    load = report.client
    if not load.saturated:
        return Check("client_saturated", "no", 0.0, Verdict.PASS, "the client kept up with the load")
    return Check(
        "client_saturated",
        "no",
        1.0,
        Verdict.INCONCLUSIVE,
        "the client, not the server, may be what was measured: " + "; ".join(load.reasons),
    )


def _prompt_length_row(report: bench_report.BenchReport) -> Check:
    asked = report.config.input_tokens
    condition = f"{asked}±{bench_report.PROMPT_LENGTH_TOLERANCE:.0%}"
    sent = report.mean_prompt_tokens_sent
    if sent is None:
        return Check("prompt_tokens", condition, None, Verdict.PASS, "not compared: the server sent no usage")
    problem = report.prompt_length_problem()
    if problem is not None:
        return Check("prompt_tokens", condition, sent, Verdict.INCONCLUSIVE, problem)
    return Check("prompt_tokens", condition, sent, Verdict.PASS, f"prompts averaged {sent:.0f} tokens")


def _slo_row(
    metric: str,
    condition: Condition,
    value: float | None,
    distrust: str | None,
    previous: float | None,
    delta: float | None,
    detail: str | None = None,
) -> Check:
    if value is None:
        return Check(
            metric,
            str(condition),
            None,
            Verdict.INCONCLUSIVE,
            f"{metric}: no sample to measure it",
            previous,
            delta,
        )
    holds = condition.holds(value)
    outcome = f"{metric} = {value:.4g}, {'meets' if holds else 'misses'} {condition}"
    if detail is not None:
        outcome += f" ({errors.shorten(detail, 300)})"
    if distrust is not None:
        return Check(metric, str(condition), value, Verdict.INCONCLUSIVE, f"{outcome}, but {distrust}", previous, delta)
    return Check(metric, str(condition), value, Verdict.PASS if holds else Verdict.FAIL, outcome, previous, delta)


def _regression_row(
    metric: str,
    condition: Condition,
    value: float | None,
    previous: float | None,
    delta: float | None,
    limit: float,
    distrust: Mapping[str, str],
    previous_note: str | None,
) -> Check:
    name, cond = f"{metric} vs previous", f"worse by <={limit:g}%"
    if previous_note is not None:
        return Check(name, cond, value, Verdict.PASS, f"not compared: {previous_note}", previous, delta)
    if condition.op not in _LOWER_IS_BETTER + _HIGHER_IS_BETTER:
        return Check(name, cond, value, Verdict.PASS, f"not compared: {condition} has no better direction")
    if value is None or previous is None:
        return Check(name, cond, value, Verdict.PASS, "not compared: no value in one of the runs", previous, delta)
    if delta is None:
        return Check(name, cond, value, Verdict.PASS, "not compared: previous value was 0", previous, delta)
    worse_pct = delta if condition.op in _LOWER_IS_BETTER else -delta
    text = f"{metric} {value:.4g} vs {previous:.4g} before ({delta:+.1f}%)"
    if worse_pct <= limit:
        return Check(name, cond, value, Verdict.PASS, text, previous, delta)
    if metric in distrust:
        return Check(name, cond, value, Verdict.INCONCLUSIVE, f"{text}, but {distrust[metric]}", previous, delta)
    return Check(
        name,
        cond,
        value,
        Verdict.FAIL,
        f"{text}: worse by {worse_pct:.1f}%, limit {limit:g}%",
        previous,
        delta,
    )


def _delta_pct(value: float | None, previous: float | None) -> float | None:
    if value is None or previous is None or previous == 0:
        return None
    return (value - previous) / abs(previous) * 100.0


def _previous_metrics(previous: bench_report.BenchReport | Mapping[str, object] | None) -> dict[str, float]:
    if previous is None:
        return {}
    if isinstance(previous, bench_report.BenchReport):
        source: Mapping[str, object] = previous.model_dump()
    else:
        nested = previous.get("metrics")
        source = nested if isinstance(nested, Mapping) else previous
    return {name: value for name in slo.SLO_METRICS if (value := _as_float(source.get(name))) is not None}


def _previous_note(previous: bench_report.BenchReport | Mapping[str, object] | None) -> str | None:
    """Why the previous numbers should not be compared with, or None when they can be."""
    if previous is None:
        return "no previous release"
    if isinstance(previous, bench_report.BenchReport):
        return "the previous run was client-bound" if previous.client.saturated else None
    verdict = previous.get("verdict")
    if isinstance(verdict, str) and verdict != Verdict.PASS.label:
        return f"the previous release's gate verdict was {verdict}, so its numbers are no baseline"
    return _previous_length_note(previous)


def _previous_length_note(previous: Mapping[str, object]) -> str | None:
    """Why a stored gate report's latencies were measured at another prompt length, or None.

    Reports from before prompts were sized by the server's count keep no ``prompt_tokens``; their
    length is ``total_input_tokens / completed`` against the ``input_tokens`` their config asked.
    """
    bench = previous.get("bench")
    metrics = previous.get("metrics")
    if not isinstance(bench, Mapping) or not isinstance(metrics, Mapping):
        return None
    config = bench.get("config")
    asked = _as_float(config.get("input_tokens")) if isinstance(config, Mapping) else None
    total, completed = _as_float(metrics.get("total_input_tokens")), _as_float(metrics.get("completed"))
    if not asked or not total or not completed:
        return None
    sent = total / completed
    if abs(sent / asked - 1) <= bench_report.PROMPT_LENGTH_TOLERANCE:
        return None
    return f"the previous release's prompts averaged {sent:.0f} tokens where {asked:.0f} were asked"


def _bench_facts(report: bench_report.BenchReport) -> BenchFacts:
    return {
        "run_id": report.run_id,
        "started_at": report.started_at,
        "config": report.config.model_dump(),
        "client": report.client.model_dump(),
        "token_count_source": report.token_count_source,
        "prompt_tokens": {
            "asked": report.config.input_tokens,
            "sent_mean": report.mean_prompt_tokens_sent,
            "sizing": report.prompt_sizing,
        },
        "failures": report.failures,
        "errors": report.errors,
    }


def format_table(gate_report: GateReport) -> str:
    """The verdict as a fixed-width table for a terminal or a CI log."""
    header = ("check", "condition", "measured", "previous", "Δ%", "verdict")
    rows = [
        (
            c.metric,
            c.condition,
            _num(c.measured),
            _num(c.previous),
            "" if c.delta_pct is None else f"{c.delta_pct:+.1f}",
            c.verdict.label.upper(),
        )
        for c in gate_report.checks
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines += [f"{c.metric}: {c.reason}" for c in gate_report.checks if c.verdict is not Verdict.PASS]
    lines.append(f"verdict: {gate_report.summary()}")
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"
