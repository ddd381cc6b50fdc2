"""Per-request samples in, benchmark metrics out: vLLM ``bench serve`` names and formulas.

Pure functions over plain data, so every number is checked against hand-computed values.
Formulas (vLLM ``vllm/benchmarks/serve.py``, ``calculate_metrics``):

* ``ttft``: send → first chunk carrying output; ``e2el``: send → last such chunk.
* ``itl``: gaps between consecutive output chunks, pooled over all requests.
* ``tpot``: per request ``(e2el − ttft) / (output_tokens − 1)``, only where output_tokens > 1.
* ``*_throughput``: totals over successful requests divided by the benchmark ``duration``.
* ``mean``/``median``/``std``/``pNN``: numpy's defaults (population std, linear-interpolated
  percentiles), reported in milliseconds. Where vLLM reports 0 for an empty sample we report
  ``null``: "not measured" must not read as "0 ms" to an SLO gate.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence

import pydantic

# Thresholds of the client-saturation signal. Above them the client, not the server, may be
# what the latencies measure (see docs/benchmark.md, "Is the client the bottleneck?").
# Set from bench/bench_smoke.py runs against the simulator (docs/benchmark.md has the figures).
CPU_SATURATION = 0.90  # fraction of one core per client process
# p99 oversleep of a 10 ms timer: how late a timestamp can be. Streams of equal length finish
# in step, so every ~e2el a burst of N answers and N sends lands at once; a few tens of ms of
# lag in those bursts is normal and leaves medians and TPOT intact, 50 ms moves p99s.
LOOP_LAG_LIMIT_MS = 50.0
# Closed loop: mean requests on the wire / target while requests remained. The send burst
# above costs a few percent even when the client keeps up; below 90 % the server is under-loaded.
IN_FLIGHT_RATIO = 0.90
DISPATCH_LAG_LIMIT_MS = 50.0  # open loop: p99 of (actual send - scheduled arrival), uncapped slots


class FailureKind(str, enum.Enum):
    """Why a request failed; CONNECT, TIMEOUT and UNAUTHORIZED mean "could not measure", the rest are server faults."""

    CONNECT = "connect"  # connection refused or unreachable
    TIMEOUT = "timeout"  # stalled stream (read timeout) or the per-request deadline passed
    HTTP_STATUS = "http_status"  # a non-200 answer
    STREAM_ERROR = "stream_error"  # an {"error": ...} event inside a 200 stream
    PROTOCOL = "protocol"  # dropped connection, malformed event, stream ended without [DONE]
    NO_TOKENS = "no_tokens"  # a complete stream that carried no output
    # HTTP 401/403: the server wants another API key. Our credentials, not the model, are wrong.
    UNAUTHORIZED = "unauthorized"


TRANSPORT_FAILURES = frozenset({FailureKind.CONNECT, FailureKind.TIMEOUT})
# Failures that say nothing about the model: the server was not reached, or refused our key.
UNMEASURED_FAILURES = TRANSPORT_FAILURES | {FailureKind.UNAUTHORIZED}


@dataclasses.dataclass(slots=True)
class RequestSample:
    """One request as the client saw it; times in seconds on the benchmark's clock."""

    start: float  # when the request went onto the wire (when it was issued, where that is unknown)
    prompt_tokens_estimate: int
    send_delay: float = 0.0  # issued → on the wire: the client's own send queue
    end: float | None = None  # when the client was done with it (answer complete or failed)
    ttft: float | None = None
    latency: float | None = None  # send → last output chunk (vLLM's "latency", our e2el)
    itl: list[float] = dataclasses.field(default_factory=list)
    token_chunks: int = 0
    completion_tokens: int | None = None  # usage.completion_tokens, when the server sent it
    prompt_tokens: int | None = None  # usage.prompt_tokens, when the server sent it
    failure: FailureKind | None = None
    error: str = ""

    @property
    def success(self) -> bool:
        return self.failure is None and self.ttft is not None and self.latency is not None

    @property
    def output_tokens(self) -> int:
        """Tokens from usage when present; otherwise one per output chunk (a lower bound)."""
        return self.completion_tokens if self.completion_tokens is not None else self.token_chunks

    @property
    def tpot(self) -> float | None:
        """(e2el - ttft) / (output_tokens - 1) in seconds; None below two output tokens."""
        if self.latency is None or self.ttft is None or self.output_tokens < 2:
            return None
        return (self.latency - self.ttft) / (self.output_tokens - 1)

    @property
    def input_tokens(self) -> int:
        return self.prompt_tokens if self.prompt_tokens is not None else self.prompt_tokens_estimate


@dataclasses.dataclass(frozen=True, slots=True)
class Summary:
    """mean, median, std, p95 and p99 of one sample, in milliseconds; all None when it is empty."""

    mean: float | None
    median: float | None
    std: float | None
    p95: float | None
    p99: float | None


def percentile(sorted_values: Sequence[float], pct: float) -> float:
    """numpy's default (linear) percentile of an already sorted, non-empty sequence."""
    if not sorted_values:
        raise ValueError("percentile of an empty sample")
    rank = (len(sorted_values) - 1) * pct / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (rank - low)


def summarize(seconds: Sequence[float]) -> Summary:
    """Summary statistics of a sample given in seconds, reported in milliseconds."""
    if not seconds:
        return Summary(None, None, None, None, None)
    values = sorted(s * 1000.0 for s in seconds)
    mean = math.fsum(values) / len(values)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
    return Summary(
        mean=mean,
        median=percentile(values, 50),
        std=std,
        p95=percentile(values, 95),
        p99=percentile(values, 99),
    )


class Metrics(pydantic.BaseModel):
    """The numbers of one benchmark run; names match ``vllm bench serve --save-result`` JSON."""

    model_config = pydantic.ConfigDict(extra="forbid")

    completed: int = pydantic.Field(description="Requests that streamed output and ended with [DONE].")
    failed: int = pydantic.Field(description="Requests that did not complete (any FailureKind).")
    duration: float = pydantic.Field(description="Seconds from the first measured send to the last answer.")
    total_input_tokens: int = pydantic.Field(description="usage.prompt_tokens summed (estimate if absent).")
    total_output_tokens: int = pydantic.Field(description="usage.completion_tokens summed, see token_count_source.")
    request_throughput: float | None = pydantic.Field(description="completed / duration, requests/s.")
    output_throughput: float | None = pydantic.Field(description="total_output_tokens / duration, tokens/s.")
    total_token_throughput: float | None = pydantic.Field(
        description="(total_input_tokens + total_output_tokens) / duration, tokens/s."
    )
    max_output_tokens_per_s: float | None = pydantic.Field(
        description="Most output chunks received in one 1-second bucket (vLLM counts chunks here too)."
    )
    max_concurrent_requests: int = pydantic.Field(
        description="Peak number of successful requests in flight at once (sweep over [send, last token))."
    )
    mean_ttft_ms: float | None = None
    median_ttft_ms: float | None = None
    std_ttft_ms: float | None = None
    p95_ttft_ms: float | None = None
    p99_ttft_ms: float | None = None
    mean_tpot_ms: float | None = None
    median_tpot_ms: float | None = None
    std_tpot_ms: float | None = None
    p95_tpot_ms: float | None = None
    p99_tpot_ms: float | None = None
    mean_itl_ms: float | None = None
    median_itl_ms: float | None = None
    std_itl_ms: float | None = None
    p95_itl_ms: float | None = None
    p99_itl_ms: float | None = None
    mean_e2el_ms: float | None = None
    median_e2el_ms: float | None = None
    std_e2el_ms: float | None = None
    p95_e2el_ms: float | None = None
    p99_e2el_ms: float | None = None
    error_rate: float | None = pydantic.Field(description="failed / (completed + failed); null if none ran.")
    median_decode_tok_s_per_stream: float | None = pydantic.Field(
        description="1000 / median_tpot_ms: the decode speed one user sees."
    )
    token_count_source: str = pydantic.Field(
        description="'usage' when every completed request reported usage.completion_tokens, else what fell back."
    )


def compute(samples: Sequence[RequestSample], duration: float) -> Metrics:
    """Metrics of one run from its measured (not warm-up) samples and its duration in seconds."""
    done = [s for s in samples if s.success]
    failed = len(samples) - len(done)
    total_in = sum(s.input_tokens for s in done)
    total_out = sum(s.output_tokens for s in done)
    ttfts = [s.ttft for s in done if s.ttft is not None]
    e2els = [s.latency for s in done if s.latency is not None]
    itls = [gap for s in done for gap in s.itl]
    tpots = [tpot for s in done if (tpot := s.tpot) is not None]
    fields: dict[str, float | None] = {}
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        summary = summarize(values)
        for stat in ("mean", "median", "std", "p95", "p99"):
            fields[f"{stat}_{name}_ms"] = getattr(summary, stat)
    median_tpot = fields["median_tpot_ms"]

    def per_second(amount: float) -> float | None:
        return amount / duration if duration > 0 else None

    return Metrics(
        completed=len(done),
        failed=failed,
        duration=duration,
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        request_throughput=per_second(len(done)),
        output_throughput=per_second(total_out),
        total_token_throughput=per_second(total_in + total_out),
        max_output_tokens_per_s=_peak_chunks_per_second(done),
        max_concurrent_requests=peak_concurrency(done),
        error_rate=failed / len(samples) if samples else None,
        median_decode_tok_s_per_stream=1000.0 / median_tpot if median_tpot else None,
        token_count_source=token_count_source(done),
        **fields,
    )


def mean_prompt_tokens(samples: Sequence[RequestSample]) -> float | None:
    """Mean ``usage.prompt_tokens`` of the samples whose server counted them; None when none did."""
    counted = [s.prompt_tokens for s in samples if s.prompt_tokens is not None]
    return math.fsum(counted) / len(counted) if counted else None


def peak_concurrency(done: Sequence[RequestSample]) -> int:
    """Most requests in flight at once, over half-open intervals [send, last token)."""
    events: list[tuple[float, int]] = []
    for s in done:
        if s.latency is not None:
            events.append((s.start, 1))
            events.append((s.start + s.latency, -1))
    # At equal times the departure (-1) sorts first, so back-to-back requests do not overlap.
    events.sort()
    current = peak = 0
    for _, delta in events:
        current += delta
        peak = max(peak, current)
    return peak


def mean_in_flight(samples: Sequence[RequestSample], window_start: float, window_end: float) -> float | None:
    """Time-weighted number of requests on the wire during [window_start, window_end]."""
    window = window_end - window_start
    if window <= 0:
        return None
    covered = math.fsum(
        max(0.0, min(s.end, window_end) - max(s.start, window_start)) for s in samples if s.end is not None
    )
    return covered / window


def _peak_chunks_per_second(done: Sequence[RequestSample]) -> float | None:
    if not done:
        return None
    origin = min(s.start for s in done)
    buckets: dict[int, int] = {}
    for s in done:
        if s.ttft is None:
            continue
        t = s.start + s.ttft
        buckets[int(t - origin)] = buckets.get(int(t - origin), 0) + 1
        for gap in s.itl:
            t += gap
            buckets[int(t - origin)] = buckets.get(int(t - origin), 0) + 1
    return float(max(buckets.values())) if buckets else None


def token_count_source(done: Sequence[RequestSample]) -> str:
    """Say where total_output_tokens came from, so a chunk-count fallback is never silent."""
    if not done:
        return "none (no completed request)"
    missing = sum(1 for s in done if s.completion_tokens is None)
    if missing == 0:
        return "usage"
    if missing == len(done):
        return "chunks (no request reported usage.completion_tokens; one token per chunk is a lower bound)"
    return (
        f"usage, chunks for {missing} of {len(done)} requests without usage.completion_tokens "
        "(one token per chunk is a lower bound)"
    )


class ClientLoad(pydantic.BaseModel):
    """Could the client drive the load it was asked for? If not, latencies measure the client."""

    model_config = pydantic.ConfigDict(extra="forbid")

    processes: int = pydantic.Field(description="Client processes the load was sharded across.")
    target_in_flight: int = pydantic.Field(description="Streams asked for (--concurrency).")
    mean_in_flight: float | None = pydantic.Field(
        description="Closed loop: time-weighted streams in flight while requests remained to be sent."
    )
    cpu_seconds: float = pydantic.Field(description="User+system CPU of all client processes while measuring.")
    cpu_utilization: float | None = pydantic.Field(
        description="cpu_seconds / (duration × processes): 1.0 is one saturated core per process."
    )
    loop_lag_p99_ms: float | None = pydantic.Field(description="p99 oversleep of a 10 ms event-loop timer.")
    dispatch_lag_p99_ms: float | None = pydantic.Field(
        description="Open loop: p99 of send time minus scheduled arrival (uncapped slots only)."
    )
    send_delay_p99_ms: float | None = pydantic.Field(
        description="p99 of issue → on the wire. Not charged to the server (latencies start on the wire), "
        "but a long send queue means the client lagged behind the load it was asked for."
    )
    saturated: bool = pydantic.Field(description="True when any signal crossed its threshold.")
    reasons: list[str] = pydantic.Field(description="Which signals crossed, in words.")


def client_load(
    *,
    processes: int,
    target_in_flight: int,
    mean_in_flight: float | None,
    cpu_seconds: float,
    duration: float,
    loop_lags: Sequence[float],
    dispatch_lags: Sequence[float],
    send_delays: Sequence[float],
) -> ClientLoad:
    """Judge whether the client kept up; lags are in seconds."""
    utilization = cpu_seconds / (duration * processes) if duration > 0 else None
    lag_p99 = percentile(sorted(loop_lags), 99) * 1000 if loop_lags else None
    dispatch_p99 = percentile(sorted(dispatch_lags), 99) * 1000 if dispatch_lags else None
    reasons: list[str] = []
    if utilization is not None and utilization >= CPU_SATURATION:
        reasons.append(
            f"client CPU at {utilization:.0%} of a core per process (limit {CPU_SATURATION:.0%}): "
            "use more --processes or a machine with more cores"
        )
    if lag_p99 is not None and lag_p99 > LOOP_LAG_LIMIT_MS:
        reasons.append(
            f"event loop late by {lag_p99:.1f} ms at p99 (limit {LOOP_LAG_LIMIT_MS:g} ms): timestamps are taken late"
        )
    if mean_in_flight is not None and mean_in_flight < IN_FLIGHT_RATIO * target_in_flight:
        reasons.append(
            f"kept {mean_in_flight:.1f} of {target_in_flight} streams in flight on average "
            f"(limit {IN_FLIGHT_RATIO:.0%})"
        )
    if dispatch_p99 is not None and dispatch_p99 > DISPATCH_LAG_LIMIT_MS:
        reasons.append(
            f"sent requests {dispatch_p99:.0f} ms after their scheduled arrival at p99 "
            f"(limit {DISPATCH_LAG_LIMIT_MS:g} ms)"
        )
    return ClientLoad(
        processes=processes,
        target_in_flight=target_in_flight,
        mean_in_flight=mean_in_flight,
        cpu_seconds=cpu_seconds,
        cpu_utilization=utilization,
        loop_lag_p99_ms=lag_p99,
        dispatch_lag_p99_ms=dispatch_p99,
        send_delay_p99_ms=percentile(sorted(send_delays), 99) * 1000 if send_delays else None,
        saturated=bool(reasons),
        reasons=reasons,
    )
