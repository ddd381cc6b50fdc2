"""The post-deploy smoke benchmark: drive streaming chat requests, measure, report.

``run(config)`` sends ``warmup`` unmeasured requests, then either keeps ``concurrency`` streams
in flight (closed loop) or sends at ``request_rate`` (Poisson, or gamma with ``burstiness``,
never more than ``concurrency`` in flight), and returns a :class:`BenchReport` whose metrics use
vLLM ``bench serve`` names (:mod:`orchestrator.gate.metrics`). Above what one process can drive the
load is sharded across processes and the samples merged on the shared monotonic clock.

What is sent lives in :mod:`orchestrator.gate.workload`, the report and its renderings in
:mod:`orchestrator.gate.bench_report`; this module is the load generator that ties them together.
Its configuration comes from the command line or from a profile's ``gate.smoke`` section
(:mod:`orchestrator.gate.bench_config`); the command line may end a run early by a signal
(:mod:`orchestrator.gate.early_stop`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import itertools
import math
import multiprocessing
import queue
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from orchestrator import http
from orchestrator.gate import bench_report, calibrate, early_stop, metrics, stream, workload

if TYPE_CHECKING:
    import multiprocessing.synchronize


CHAT_PATH = workload.CHAT_PATH
LOOP_PROBE_INTERVAL_S = 0.01
_SHARD_START_TIMEOUT_S = 600.0

# The public API lives here; the pieces live in their own modules.
BenchConfig = workload.BenchConfig
BenchReport = bench_report.BenchReport
format_table = bench_report.format_table
save = bench_report.save

# --------------------------------------------------------------------------- one client process


@dataclasses.dataclass(frozen=True)
class _Shard:
    """The part of a run one process drives."""

    index: int
    stride: int  # number of shards
    concurrency: int
    request_indices: tuple[int, ...] | None  # None: unbounded, until the deadline
    warmup: int
    arrivals: tuple[float, ...] | None  # open loop only: send offsets of this shard's requests


@dataclasses.dataclass
class _ShardResult:
    samples: list[metrics.RequestSample]
    started: float
    ended: float
    cpu_seconds: float
    loop_lags: list[float]
    dispatch_lags: list[float]
    steady_until: float | None  # closed loop: when the first stream slot found no work left
    aborted: str | None = None
    first_token_at: float | None = None  # on the run's clock: the first token this shard's requests received
    stopped_by: str | None = None  # the signal that ended the measuring early (early_stop)


async def _probe_loop(lags: list[float], stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        before = loop.time()
        await asyncio.sleep(LOOP_PROBE_INTERVAL_S)
        lags.append(max(0.0, loop.time() - before - LOOP_PROBE_INTERVAL_S))


async def _warm_up(
    client: http.StreamClient,
    config: BenchConfig,
    shard: _Shard,
    run_id: str,
    sizing: workload.PromptSizing,
    outcomes: list[metrics.RequestSample],
) -> str | None:
    """Send the shard's warm-up requests into ``outcomes``; return why measuring is pointless, or None."""
    if shard.warmup == 0:
        return None
    pending = iter(range(shard.warmup))
    words = sizing.words_for(config.input_tokens)
    estimate = sizing.tokens_for(words)

    async def worker() -> None:
        for i in pending:
            prompt = workload.build_prompt(config.seed, -1 - i, f"{run_id}-w{shard.index}-{i}", words)
            body = workload.request_body(config, prompt)
            outcomes.append(await stream.send_one(client, body, estimate, config.timeout, config.endpoint))

    await asyncio.gather(*(worker() for _ in range(min(shard.warmup, shard.concurrency))))
    if all(s.failure in metrics.UNMEASURED_FAILURES for s in outcomes):
        return f"all {len(outcomes)} warm-up requests failed: {outcomes[0].error}"
    return None


async def _measure(
    client: http.StreamClient,
    config: BenchConfig,
    shard: _Shard,
    run_id: str,
    sizing: workload.PromptSizing,
    started: float,
    stop: early_stop.Stop,
) -> tuple[list[metrics.RequestSample], list[float], float | None]:
    """The measured phase: returns samples, dispatch lags and (closed loop) the end of steady state.

    Past the deadline, or once ``stop`` is set, no new request is sent; those in flight finish.
    """
    clock = client.clock
    deadline = started + config.duration if config.duration is not None else math.inf
    samples: list[metrics.RequestSample] = []
    # Duration-only runs number requests without end; shards interleave so numbers stay unique.
    indices: Iterator[int] = (
        iter(shard.request_indices) if shard.request_indices is not None else itertools.count(shard.index, shard.stride)
    )

    words = sizing.words_for(config.input_tokens)
    estimate = sizing.tokens_for(words)

    async def one(index: int) -> None:
        prompt = workload.build_prompt(config.seed, index, f"{run_id}-{index}", words)
        body = workload.request_body(config, prompt)
        samples.append(await stream.send_one(client, body, estimate, config.timeout, config.endpoint))

    if shard.arrivals is None:
        # The first slot to run out of work ends the steady state: from then on fewer than
        # `concurrency` streams are in flight by design, so that tail is not judged.
        idle: list[float] = []

        async def worker() -> None:
            for index in indices:
                if clock() >= deadline or stop.is_set():
                    break
                await one(index)
            idle.append(clock())

        await asyncio.gather(*(worker() for _ in range(shard.concurrency)))
        return samples, [], min(idle)

    arrivals = zip(indices, shard.arrivals, strict=False)  # one number per arrival (see _plan)
    return samples, await _open_loop(one, arrivals, shard.concurrency, started, clock, stop), None


async def _open_loop(
    one: Callable[[int], Awaitable[None]],
    arrivals: Iterable[tuple[int, float]],
    concurrency: int,
    started: float,
    clock: Callable[[], float],
    stop: early_stop.Stop,
) -> list[float]:
    """Send request ``index`` at each arrival ``offset`` (at most ``concurrency`` in flight) until the
    arrivals run out or ``stop`` is set; return how late each send was."""
    slots = asyncio.Semaphore(concurrency)
    dispatch_lags: list[float] = []
    tasks: list[asyncio.Task[None]] = []

    async def capped(index: int) -> None:
        async with slots:
            await one(index)

    for index, offset in arrivals:
        delay = started + offset - clock()
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.event.wait(), delay)
        if stop.is_set():
            break
        # Waiting for a free slot is the cap working as asked, not the client falling behind.
        if not slots.locked():
            dispatch_lags.append(max(0.0, clock() - started - offset))
        tasks.append(asyncio.create_task(capped(index)))
    await asyncio.gather(*tasks)
    return dispatch_lags


async def _run_shard(
    config: BenchConfig,
    shard: _Shard,
    run_id: str,
    sizing: workload.PromptSizing,
    *,
    clock: Callable[[], float] = time.perf_counter,
    transport: Any = None,
    barrier: Callable[[], None] | None = None,
    api_key: str | None = None,
    stop: early_stop.Stop | None = None,
) -> _ShardResult:
    stop = stop or early_stop.Stop()
    read_timeout = min(config.stall_timeout, config.timeout)
    client = http.StreamClient(
        config.url, shard.concurrency, read_timeout=read_timeout, clock=clock, transport=transport, api_key=api_key
    )
    async with client:
        warm = list[metrics.RequestSample]()
        aborted = await _warm_up(client, config, shard, run_id, sizing, warm)
        if barrier is not None:
            barrier()  # every shard starts measuring at the same moment
        started = clock()
        if aborted:
            return _ShardResult([], started, started, 0.0, [], [], None, aborted, _first_token_at(warm))
        cpu_before = time.process_time()
        probe_done = asyncio.Event()
        lags: list[float] = []
        probe = asyncio.create_task(_probe_loop(lags, probe_done))
        samples, dispatch_lags, steady_until = await _measure(client, config, shard, run_id, sizing, started, stop)
        # Like vLLM: the run ends when the last answer is complete, not at its last token.
        ended = clock()
        cpu_seconds = time.process_time() - cpu_before
        probe_done.set()
        await probe
    first = _first_token_at([*warm, *samples])
    return _ShardResult(
        samples, started, ended, cpu_seconds, lags, dispatch_lags, steady_until, None, first, stop.signal_name
    )


def _first_token_at(samples: list[metrics.RequestSample]) -> float | None:
    """When the first output token any of ``samples`` received arrived (the run's clock); None without one."""
    firsts = [s.start + s.ttft for s in samples if s.ttft is not None]
    return min(firsts) if firsts else None


def _plan(config: BenchConfig) -> list[_Shard]:
    count = config.process_count()
    arrivals: list[float] | None = None
    total = config.requests
    if config.request_rate is not None:
        arrivals = workload.arrival_offsets(
            config.requests, config.request_rate, config.burstiness, config.seed, config.duration
        )
        total = len(arrivals)
    shards = []
    for i in range(count):
        concurrency = config.concurrency // count + (1 if i < config.concurrency % count else 0)
        warmup = config.warmup // count + (1 if i < config.warmup % count else 0)
        indices = tuple(range(i, total, count)) if total is not None else None
        shard_arrivals = tuple(arrivals[i::count]) if arrivals is not None else None
        shards.append(_Shard(i, count, concurrency, indices, warmup, shard_arrivals))
    return shards


def _shard_process(
    config_json: str,
    shard: _Shard,
    run_id: str,
    sizing: workload.PromptSizing,
    barrier: multiprocessing.synchronize.Barrier,
    results: multiprocessing.Queue[tuple[int, _ShardResult]],
    api_key: str | None,
    stop_on_signals: bool,
) -> None:
    config = BenchConfig.model_validate_json(config_json)

    def wait() -> None:
        barrier.wait(_SHARD_START_TIMEOUT_S)

    async def shard_run() -> _ShardResult:
        stop = early_stop.Stop()
        with early_stop.on_signals(stop, keep=True) if stop_on_signals else contextlib.nullcontext():
            return await _run_shard(config, shard, run_id, sizing, barrier=wait, api_key=api_key, stop=stop)

    results.put((shard.index, asyncio.run(shard_run())))


def _run_sharded(
    config: BenchConfig,
    shards: Sequence[_Shard],
    run_id: str,
    sizing: workload.PromptSizing,
    api_key: str | None,
    stop_on_signals: bool,
) -> list[_ShardResult]:
    # spawn, not fork: the caller may hold threads (Kubernetes watches) that fork would copy half-done.
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(shards))
    results: multiprocessing.Queue[tuple[int, _ShardResult]] = ctx.Queue()
    procs = [
        ctx.Process(
            target=_shard_process,
            # The key goes to the child as an argument, never in the config, which reports keep.
            args=(config.model_dump_json(), shard, run_id, sizing, barrier, results, api_key, stop_on_signals),
            name=f"deployctl-bench-{shard.index}",
            daemon=True,
        )
        for shard in shards
    ]
    for proc in procs:
        proc.start()
    collected: dict[int, _ShardResult] = {}
    stopped: list[str] = []  # the signal the parent was sent, which the shards were passed as SIGTERM
    forwarding = early_stop.forwarded_to(procs, stopped) if stop_on_signals else contextlib.nullcontext()
    with forwarding:
        try:
            while len(collected) < len(shards):
                try:
                    index, result = results.get(timeout=1.0)
                except queue.Empty:
                    dead = [p for p in procs if p.exitcode not in (None, 0)]
                    if dead:
                        barrier.abort()
                        raise RuntimeError(
                            f"benchmark client process {dead[0].name} exited with code {dead[0].exitcode}; "
                            "its traceback is on stderr"
                        ) from None
                    continue
                collected[index] = result
        finally:
            for proc in procs:
                proc.join(timeout=5.0)
                if proc.is_alive():
                    proc.terminate()
    ordered = [collected[i] for i in range(len(shards))]
    return [dataclasses.replace(r, stopped_by=stopped[0]) for r in ordered] if stopped else ordered


# --------------------------------------------------------------------------- the run


async def run_async(
    config: BenchConfig,
    *,
    clock: Callable[[], float] = time.perf_counter,
    transport: Any = None,
    run_id: str | None = None,
    api_key: str | None = None,
    stop: early_stop.Stop | None = None,
) -> BenchReport:
    """One run in the current event loop and process (``processes`` is ignored).

    ``clock`` and ``transport`` (an ``httpx`` transport, handed through to :mod:`orchestrator.http`)
    let tests replace time and the network; ``run_id`` fixes the nonce prefix. ``api_key`` is sent
    as a Bearer token and kept out of the report. Once ``stop`` is set no new measured request is
    sent, and the report says the run stopped early.
    """
    run_id = run_id or secrets.token_hex(4)
    [shard] = _plan(config.model_copy(update={"processes": 1}))
    began = clock()
    sized = await _sizing(config, run_id, clock=clock, transport=transport, api_key=api_key)
    wall = datetime.datetime.now(datetime.timezone.utc)
    result = await _run_shard(
        config, shard, run_id, sized.sizing, clock=clock, transport=transport, api_key=api_key, stop=stop
    )
    return _report(config, run_id, wall, [result], sized, began)


async def _sizing(
    config: BenchConfig,
    run_id: str,
    *,
    clock: Callable[[], float] = time.perf_counter,
    transport: Any = None,
    api_key: str | None = None,
) -> calibrate.Sizing:
    """How many words make ``config.input_tokens`` on this server (:mod:`orchestrator.gate.calibrate`)."""
    if not config.size_prompts:
        return calibrate.Sizing(workload.ESTIMATE, [])
    read_timeout = min(config.stall_timeout, config.timeout)
    client = http.StreamClient(
        config.url, config.concurrency, read_timeout=read_timeout, clock=clock, transport=transport, api_key=api_key
    )
    async with client:
        return await calibrate.calibrate(client, config, run_id)


def run(config: BenchConfig, *, api_key: str | None = None, stop_on_signals: bool = False) -> BenchReport:
    """Run the benchmark and return its report; server failures are in the report, never raised.

    ``api_key`` (the server's ``--api-key``) is not part of ``config`` on purpose: the config is
    stored with every report, and a key must never be. With ``stop_on_signals`` (the command line),
    the first SIGINT or SIGTERM ends the run early with its report (:mod:`orchestrator.gate.early_stop`).
    """
    http.check_url(config.url)  # fail once here, not once per client process
    shards = _plan(config)
    if len(shards) == 1:
        return asyncio.run(_run_single(config, api_key, stop_on_signals))
    run_id = secrets.token_hex(4)
    # perf_counter is the system's monotonic clock: the shards' samples are on it too.
    began = time.perf_counter()
    sized = asyncio.run(_sizing(config, run_id, api_key=api_key))
    wall = datetime.datetime.now(datetime.timezone.utc)
    results = _run_sharded(config, shards, run_id, sized.sizing, api_key, stop_on_signals)
    return _report(config, run_id, wall, results, sized, began)


async def _run_single(config: BenchConfig, api_key: str | None, stop_on_signals: bool) -> BenchReport:
    stop = early_stop.Stop()
    with early_stop.on_signals(stop) if stop_on_signals else contextlib.nullcontext():
        return await run_async(config, api_key=api_key, stop=stop)


def _report(
    config: BenchConfig,
    run_id: str,
    wall: datetime.datetime,
    results: Sequence[_ShardResult],
    sized: calibrate.Sizing,
    began: float,
) -> BenchReport:
    samples = [s for r in results for s in r.samples]
    started = min(r.started for r in results)
    duration = max(r.ended for r in results) - started
    computed = metrics.compute(samples, duration)
    cpu = sum(r.cpu_seconds for r in results)
    steady = [r.steady_until for r in results if r.steady_until is not None]
    load = metrics.client_load(
        processes=len(results),
        target_in_flight=min(config.concurrency, config.requests or config.concurrency),
        mean_in_flight=metrics.mean_in_flight(samples, started, min(steady)) if steady else None,
        cpu_seconds=cpu,
        duration=duration,
        loop_lags=[lag for r in results for lag in r.loop_lags],
        dispatch_lags=[lag for r in results for lag in r.dispatch_lags],
        send_delays=[s.send_delay for s in samples],
    )
    failures: dict[str, int] = {}
    examples: list[str] = []
    for s in samples:
        if s.failure is not None:
            failures[s.failure.value] = failures.get(s.failure.value, 0) + 1
            if s.error not in examples and len(examples) < bench_report.ERROR_EXAMPLES:
                examples.append(s.error)
    done = [s for s in samples if s.success]
    aborted = next((r.aborted for r in results if r.aborted), None)
    stopped_by = next((r.stopped_by for r in results if r.stopped_by), None)
    # The first token the server ever sent in this run, sizing probes included: on a server that
    # just became healthy that is its first token served (time to serving ends there).
    probe_first = _first_token_at(sized.probes)
    firsts = [t for t in (probe_first, *(r.first_token_at for r in results)) if t is not None]
    return BenchReport(
        first_token_s=max(0.0, min(firsts) - began) if firsts else None,
        **computed.model_dump(),
        config=config,
        started_at=wall.isoformat(timespec="seconds"),
        run_id=run_id,
        client_cpu_seconds=cpu,
        client=load,
        failures=failures,
        errors=examples,
        aborted=aborted,
        stopped_early=f"stopped by {stopped_by} after {duration:.1f} s of measuring" if stopped_by else None,
        ttfts_ms=[(s.ttft or 0.0) * 1000 for s in done],
        tpots_ms=[tpot * 1000 for s in done if (tpot := s.tpot) is not None],
        e2els_ms=[(s.latency or 0.0) * 1000 for s in done],
        output_lens=[s.output_tokens for s in done],
        prompt_sizing=sized.sizing.to_json(),
        mean_prompt_tokens_sent=metrics.mean_prompt_tokens(samples),
    )
