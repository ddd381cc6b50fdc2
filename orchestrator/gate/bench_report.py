"""The smoke benchmark's report: the model that is stored and gated, and its text and HTML forms.

The HTML page is self-contained (inline CSS and SVG, nothing fetched), so it opens on an
air-gapped workstation and can be attached to a release record or a CI run as it is.
"""

from __future__ import annotations

import html
import os
import pathlib
from collections.abc import Sequence

import pydantic

from orchestrator import errors
from orchestrator.gate import metrics, workload

ERROR_EXAMPLES = 10
# How far the prompts the server counted may stray from the length asked for before latencies
# measured at that length no longer judge the one asked for.
PROMPT_LENGTH_TOLERANCE = 0.10


class BenchReport(metrics.Metrics):
    """One smoke-benchmark run: the vLLM-named metrics plus what is needed to trust them."""

    config: workload.BenchConfig
    started_at: str = pydantic.Field(description="UTC ISO-8601 time the measured phase began.")
    run_id: str = pydantic.Field(description="The nonce prefix of this run's prompts.")
    client_cpu_seconds: float = pydantic.Field(description="CPU the client spent while measuring.")
    client: metrics.ClientLoad
    failures: dict[str, int] = pydantic.Field(description="Failed requests by FailureKind.")
    errors: list[str] = pydantic.Field(description=f"Up to {ERROR_EXAMPLES} distinct failure messages.")
    aborted: str | None = pydantic.Field(
        default=None, description="Why nothing was measured (every warm-up request failed to connect)."
    )
    stopped_early: str | None = pydantic.Field(
        default=None,
        description="Why no more requests were sent before `requests` or `duration` were reached: the signal "
        "(SIGINT, SIGTERM) and the seconds measured until then. The requests in flight were let finish.",
    )
    first_token_s: float | None = pydantic.Field(
        default=None,
        description="Seconds from the run's start, warm-up included, to the first output token any request "
        "received: on a server that just became healthy, the first token it ever served.",
    )
    ttfts_ms: list[float] = pydantic.Field(default_factory=list, description="TTFT of each completed request.")
    tpots_ms: list[float] = pydantic.Field(default_factory=list, description="TPOT of each completed request.")
    e2els_ms: list[float] = pydantic.Field(default_factory=list, description="E2EL of each completed request.")
    output_lens: list[int] = pydantic.Field(default_factory=list, description="Output tokens per completed request.")
    prompt_sizing: dict[str, object] | None = pydantic.Field(
        default=None,
        description="How prompts were sized: overhead_tokens, tokens_per_word and their source (server usage or "
        "the one-token-per-word estimate). None in reports made before sizing was measured.",
    )
    mean_prompt_tokens_sent: float | None = pydantic.Field(
        default=None, description="Mean usage.prompt_tokens of the measured requests; None when the server sent none."
    )

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)

    @classmethod
    def from_json(cls, text: str | bytes) -> BenchReport:
        return cls.model_validate_json(text)

    def measurement_problem(self) -> str | None:
        """Why these numbers cannot be trusted as a measurement of the server, or None."""
        if self.aborted:
            return self.aborted
        attempted = self.completed + self.failed
        refused = self.failures.get(metrics.FailureKind.UNAUTHORIZED.value, 0)
        if refused:
            # A key problem is never the model's fault, however few requests it hit.
            first = next((e for e in self.errors if "API key" in e), "no message")
            return f"{refused} of {attempted} requests were refused as unauthorized (e.g. {first})"
        transport = sum(self.failures.get(kind.value, 0) for kind in metrics.TRANSPORT_FAILURES)
        # A server that refuses or stalls most connections has not been measured; a few such
        # failures among many answers are the server's errors and count in error_rate instead.
        if attempted and transport * 2 > attempted:
            first = self.errors[0] if self.errors else "no message"
            return f"{transport} of {attempted} requests could not connect or timed out (e.g. {first})"
        return None

    def prompt_length_problem(self) -> str | None:
        """Why the prompts sent were not the length asked for (more than 10 % off), or None.

        Unknown lengths (no ``usage`` from the server) are no problem here: the report's
        ``token_count_source`` already says the counts are estimates.
        """
        sent, asked = self.mean_prompt_tokens_sent, self.config.input_tokens
        if sent is None or abs(sent / asked - 1) <= PROMPT_LENGTH_TOLERANCE:
            return None
        how = (self.prompt_sizing or {}).get("source", "unknown sizing")
        return (
            f"prompts averaged {sent:.0f} tokens by the server's usage where {asked} were asked "
            f"({(sent / asked - 1) * 100:+.0f}%, more than {PROMPT_LENGTH_TOLERANCE:.0%} off; sized by {how})"
        )

    def failure_reason(self, max_error_rate: float) -> str | None:
        """Why this run does not pass as a smoke test, in one line, or None.

        It fails when nothing could be measured, when no request completed, or when more than
        ``max_error_rate`` of the requests failed (0: any failed request fails the run).
        """
        unmeasured = self.measurement_problem()
        if unmeasured:
            return errors.shorten(f"nothing was measured: {unmeasured}", 600)
        attempted = self.completed + self.failed
        if self.completed == 0:
            why = self.failure_summary() if self.failed else "no request was sent"
            return errors.shorten(f"no request completed: {why}", 600)
        rate = self.failed / attempted  # error_rate, known not to be null here
        if rate > max_error_rate:
            return errors.shorten(
                f"error rate {rate:.4f} is above --max-error-rate {max_error_rate:g}: {self.failure_summary()}", 600
            )
        return None

    def failure_summary(self) -> str:
        """Which requests failed, by kind, with the first message: "1 of 8 requests failed (timeout 1), e.g. ..."."""
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(self.failures.items()))
        first = f", e.g. {self.errors[0]}" if self.errors else ""
        return f"{self.failed} of {self.completed + self.failed} requests failed ({kinds}){first}"


_FAMILIES = (
    ("ttft", "TTFT", "Time to First Token"),
    ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
    ("itl", "ITL", "Inter-token Latency"),
    ("e2el", "E2EL", "End-to-end Latency"),
)


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "n/a" if value is None else format(value, spec)


def format_table(report: BenchReport) -> str:
    """The report as text, laid out like ``vllm bench serve`` prints it, plus our own lines."""
    rows: list[tuple[str, str]] = [
        ("Successful requests:", str(report.completed)),
        ("Failed requests:", str(report.failed)),
        ("Maximum request concurrency:", str(report.config.concurrency)),
    ]
    if report.config.request_rate is not None:
        rows.append(("Request rate configured (RPS):", _fmt(report.config.request_rate)))
    rows += [
        ("Benchmark duration (s):", _fmt(report.duration)),
        ("Total input tokens:", str(report.total_input_tokens)),
        ("Total generated tokens:", str(report.total_output_tokens)),
        ("Request throughput (req/s):", _fmt(report.request_throughput)),
        ("Output token throughput (tok/s):", _fmt(report.output_throughput)),
        ("Peak output token throughput (tok/s):", _fmt(report.max_output_tokens_per_s)),
        ("Peak concurrent requests:", str(report.max_concurrent_requests)),
        ("Total token throughput (tok/s):", _fmt(report.total_token_throughput)),
    ]
    lines = ["{:=^60}".format(" Serving Benchmark Result ")]
    lines += [f"{label:<44} {value}" for label, value in rows]
    for key, short, header in _FAMILIES:
        lines.append(f"{header:-^60}")
        for stat, label in (("mean", "Mean"), ("median", "Median"), ("p95", "P95"), ("p99", "P99")):
            lines.append(f"{label + ' ' + short + ' (ms):':<44} {_fmt(getattr(report, f'{stat}_{key}_ms'))}")
    lines.append("{:-^60}".format("deployctl"))
    lines += [
        f"{'Error rate:':<44} {_fmt(report.error_rate, '.4f')}",
        f"{'Median decode speed per stream (tok/s):':<44} {_fmt(report.median_decode_tok_s_per_stream)}",
        f"{'Token counts from:':<44} {report.token_count_source}",
        f"{'Prompt tokens asked / sent (mean):':<44} {prompt_lengths(report)}",
        f"{'Client CPU (s):':<44} {report.client_cpu_seconds:.2f} in {report.client.processes} process(es)",
        f"{'Client saturated:':<44} {'yes' if report.client.saturated else 'no'}",
    ]
    lines += [f"  - {reason}" for reason in report.client.reasons]
    if report.failures:
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(report.failures.items()))
        lines.append(f"{'Failures:':<44} {kinds}")
        lines += [f"  - {message}" for message in report.errors[:3]]
    if (problem := report.prompt_length_problem()) is not None:
        lines.append(f"{'Prompt length:':<44} inconclusive: {problem}")
    if report.aborted:
        lines.append(f"{'Aborted:':<44} {report.aborted}")
    if report.stopped_early:
        lines.append(f"{'Stopped early:':<44} {report.stopped_early}")
    lines.append("=" * 60)
    return "\n".join(lines)


def prompt_lengths(report: BenchReport) -> str:
    """ "512 / 509.3 (sized by ...)": the length asked for, the server's mean count, and the sizing."""
    sent = "n/a (no usage)" if report.mean_prompt_tokens_sent is None else f"{report.mean_prompt_tokens_sent:.1f}"
    how = (report.prompt_sizing or {}).get("source")
    return f"{report.config.input_tokens} / {sent}" + (f" (sized by {how})" if how else "")


def save(report: BenchReport, path: str | os.PathLike[str]) -> tuple[pathlib.Path, pathlib.Path]:
    """Write the report as JSON at ``path`` and as a self-contained HTML page beside it (.html)."""
    json_path = pathlib.Path(path)
    html_path = json_path.with_suffix(".html")
    try:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(report.to_json() + "\n", encoding="utf-8")
        html_path.write_text(render_html(report), encoding="utf-8")
    except OSError as e:
        raise errors.UsageError(
            f"cannot write the benchmark report to {json_path} ({e.strerror or e}); "
            "choose a path in a writable directory"
        ) from e
    return json_path, html_path


def render_html(report: BenchReport) -> str:
    """One HTML page with inline CSS and SVG: nothing external is loaded, so it opens air-gapped."""
    cfg = report.config
    e = html.escape
    summary_rows = "".join(
        f"<tr><th>{e(header)}</th>"
        + "".join(
            f"<td>{_fmt(getattr(report, f'{stat}_{key}_ms'))}</td>" for stat in ("mean", "median", "std", "p95", "p99")
        )
        + "</tr>"
        for key, _, header in _FAMILIES
    )
    facts = [
        ("completed / failed", f"{report.completed} / {report.failed}"),
        ("duration (s)", _fmt(report.duration)),
        ("output throughput (tok/s)", _fmt(report.output_throughput)),
        ("request throughput (req/s)", _fmt(report.request_throughput)),
        ("error rate", _fmt(report.error_rate, ".4f")),
        ("token counts from", report.token_count_source),
        ("prompt tokens asked / sent (mean)", prompt_lengths(report)),
        ("client CPU (s)", f"{report.client_cpu_seconds:.2f} in {report.client.processes} process(es)"),
        ("client saturated", "; ".join(report.client.reasons) or "no"),
    ]
    if report.aborted:
        facts.append(("aborted", report.aborted))
    if report.stopped_early:
        facts.append(("stopped early", report.stopped_early))
    fact_rows = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in facts)
    loop = "closed loop" if cfg.request_rate is None else f"{cfg.request_rate:g} req/s, burstiness {cfg.burstiness:g}"
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>deployctl bench: {e(cfg.model)}</title><style>"
        "body{font:14px system-ui,sans-serif;margin:2em;color:#222}"
        "table{border-collapse:collapse;margin:1em 0}"
        "th,td{border:1px solid #ccc;padding:.3em .6em;text-align:right}"
        "th{text-align:left;background:#f4f4f4}svg{display:block;margin:1em 0}</style></head><body>"
        f"<h1>Smoke benchmark: {e(cfg.model)}</h1>"
        f"<p>{e(cfg.url)} · {cfg.concurrency} streams, {loop} · "
        f"{cfg.input_tokens} in / {cfg.output_tokens} out tokens · "
        f"started {e(report.started_at)} · run {e(report.run_id)}</p>"
        f"<table>{fact_rows}</table>"
        "<table><tr><th>ms</th><th>mean</th><th>median</th><th>std</th><th>p95</th><th>p99</th></tr>"
        f"{summary_rows}</table>"
        + _histogram_svg(report.ttfts_ms, "TTFT per request (ms)")
        + _histogram_svg(report.tpots_ms, "TPOT per request (ms)")
        + "</body></html>\n"
    )


def _histogram_svg(values: Sequence[float], title: str, bins: int = 30) -> str:
    width, height, left, bottom, top = 640, 220, 50, 30, 24
    plot_w, plot_h = width - left - 10, height - bottom - top
    head = f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">'
    label = f'<text x="{left}" y="16" font-weight="bold">{html.escape(title)}</text>'
    if not values:
        return f'{head}{label}<text x="{left}" y="{top + 40}">no completed requests</text></svg>'
    ordered = sorted(values)
    low, high = ordered[0], ordered[-1]
    span = (high - low) or max(abs(high), 1.0) * 0.01
    counts = [0] * bins
    for v in ordered:
        counts[min(bins - 1, int((v - low) / span * bins))] += 1
    tallest = max(counts)
    bar_w = plot_w / bins
    parts = [head, label]
    for i, n in enumerate(counts):
        h = plot_h * n / tallest
        parts.append(
            f'<rect x="{left + i * bar_w:.1f}" y="{top + plot_h - h:.1f}" width="{bar_w - 1:.1f}" '
            f'height="{h:.1f}" fill="#4a7bb7"><title>{n} requests</title></rect>'
        )
    base = top + plot_h
    parts.append(f'<line x1="{left}" y1="{base}" x2="{left + plot_w}" y2="{base}" stroke="#333"/>')
    parts.append(f'<text x="{left - 4}" y="{top + 10}" text-anchor="end" font-size="11">{tallest}</text>')
    for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
        x = left + plot_w * frac
        tick = low + span * frac
        parts.append(f'<text x="{x:.1f}" y="{base + 16}" text-anchor="middle" font-size="11">{tick:.1f}</text>')
    for name, pct, colour in (("p50", 50, "#2a2"), ("p95", 95, "#d80"), ("p99", 99, "#c22")):
        value = metrics.percentile(ordered, pct)
        x = left + plot_w * (value - low) / span
        parts.append(
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{base}" '
            f'stroke="{colour}" stroke-dasharray="4 3"/>'
            f'<text x="{x + 3:.1f}" y="{top + 10}" font-size="11" fill="{colour}">{name} {value:.1f}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
