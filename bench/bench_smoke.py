"""How accurate is the smoke benchmark, what does it cost, and how does it compare with a peer tool?

Against the vLLM simulator (e2e/sim, ground truth: first token at TTFT, then one every ITL), this
prints:

1. accuracy at 1, 64 and 256 streams: median TTFT and TPOT against the configured values (goal:
   within 5 % or 2 ms) and output throughput against what the settings imply;
2. client CPU seconds per 1,000 streamed tokens;
3. the most streams one client process drives without moving TPOT by more than 5 %;
4. GuideLLM (the peer, installed by bench/install_peer.sh into .cache/peer-venv) run against the
   same simulator with the same settings, side by side, including its CPU per 1,000 tokens;
5. each simulator fault mode and the gate verdict it earns.

Every run is bounded (a few seconds each, about three minutes in all) and talks only to 127.0.0.1.
Usage: ``python bench/bench_smoke.py [--skip-peer]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import pathlib
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from orchestrator import http
from orchestrator.gate import bench, workload
from orchestrator.gate import verdict as gate

ROOT = pathlib.Path(__file__).resolve().parent.parent
PEER = ROOT / ".cache" / "peer-venv" / "bin" / "guidellm"
PEER_TOKENIZER = ROOT / ".cache" / "peer-tokenizer"
TTFT_MS, ITL_MS = 100.0, 20.0
INPUT_TOKENS, OUTPUT_TOKENS = 128, 64
E2EL_S = (TTFT_MS + (OUTPUT_TOKENS - 1) * ITL_MS) / 1000
LEVELS = ((1, 5), (64, 128), (256, 512))  # (streams, requests): two full waves above one stream
SLO = {"median_ttft_ms": "<=150", "median_tpot_ms": "<=25", "error_rate": "<=0.01"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def simulator(*extra: str) -> Iterator[str]:
    """Start the simulator on a free loopback port; yield its URL; stop it with SIGTERM."""
    port = free_port()
    binary = ROOT / ".cache" / "bin" / "vllm-sim"
    command = [str(binary if binary.exists() else ROOT / "e2e" / "sim")]
    command += ["--port", str(port), "--model", "sim", "--ttft-ms", f"{TTFT_MS:g}", "--itl-ms", f"{ITL_MS:g}"]
    command += ["--max-num-seqs", "1024", *extra]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        if "refuse" not in extra:
            deadline = time.monotonic() + 120  # a cold e2e/sim builds the binary first
            while not http.check_health(url, timeout=1.0).ok and "health-fail" not in extra:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"simulator did not start: {proc.stderr.read().decode() if proc.stderr else ''}")
                time.sleep(0.1)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def ours(url: str, streams: int, requests: int, **overrides: Any) -> bench.BenchReport:
    fields: dict[str, Any] = {
        "url": url,
        "model": "sim",
        "concurrency": streams,
        "requests": requests,
        "input_tokens": INPUT_TOKENS,
        "output_tokens": OUTPUT_TOKENS,
        "warmup": min(streams, 16),
    }
    return bench.run(bench.BenchConfig.model_validate({**fields, **overrides}))


def implied_throughput(streams: int, requests: int) -> float:
    # Equal-length streams move in waves: ceil(requests / streams) waves of one e2el each.
    return requests * OUTPUT_TOKENS / (math.ceil(requests / streams) * E2EL_S)


def verdict(measured: float | None, target: float) -> str:
    if measured is None:
        return "n/a"
    off = measured - target
    ok = abs(off) <= max(0.05 * target, 2.0)
    return f"{measured:8.2f} ({off:+6.2f}, {'ok' if ok else 'MISS'})"


def cpu_per_k(report: bench.BenchReport) -> float:
    return report.client_cpu_seconds / max(1, report.total_output_tokens) * 1000


def section(title: str) -> None:
    print(f"\n== {title} ==", flush=True)


def accuracy(url: str) -> dict[int, bench.BenchReport]:
    section(
        f"accuracy: simulator TTFT {TTFT_MS:g} ms, ITL {ITL_MS:g} ms, {INPUT_TOKENS} in / {OUTPUT_TOKENS} out tokens"
    )
    print(
        f"{'streams':>7} {'procs':>5} {'reqs':>5}  {'median TTFT ms (vs ' + format(TTFT_MS, 'g') + ')':<28}"
        f"{'median TPOT ms (vs ' + format(ITL_MS, 'g') + ')':<28}{'out tok/s':>10} {'implied':>8} "
        f"{'CPU s/1k tok':>12}  client"
    )
    reports = {}
    for streams, requests in LEVELS:
        r = ours(url, streams, requests)
        reports[streams] = r
        client = "saturated: " + "; ".join(r.client.reasons) if r.client.saturated else "kept up"
        print(
            f"{streams:>7} {r.client.processes:>5} {r.completed:>5}  {verdict(r.median_ttft_ms, TTFT_MS):<28}"
            f"{verdict(r.median_tpot_ms, ITL_MS):<28}{r.output_throughput or 0:>10.0f} "
            f"{implied_throughput(streams, requests):>8.0f} {cpu_per_k(r):>12.3f}  {client}",
            flush=True,
        )
    return reports


def single_process_limit(url: str) -> None:
    section("one client process: how many streams before the numbers move")
    tpot_ok = timing_ok = kept_up = 0
    for streams in (128, 192, 256, 384, 512):
        r = ours(url, streams, 2 * streams, processes=1)
        tpot, ttft = r.median_tpot_ms or math.inf, r.median_ttft_ms or math.inf
        tpot_off, ttft_off = (tpot - ITL_MS) / ITL_MS * 100, (ttft - TTFT_MS) / TTFT_MS * 100
        tpot_ok = streams if abs(tpot_off) <= 5 else tpot_ok
        timing_ok = streams if abs(tpot_off) <= 5 and abs(ttft_off) <= 5 else timing_ok
        kept_up = streams if not r.client.saturated else kept_up
        load = "client-bound: " + "; ".join(r.client.reasons) if r.client.saturated else "kept up"
        print(
            f"{streams:>5} streams: median TPOT {tpot:6.2f} ms ({tpot_off:+5.1f} %), "
            f"median TTFT {ttft:7.1f} ms ({ttft_off:+5.1f} %), "
            f"CPU {r.client.cpu_utilization or 0:4.0%} of a core, "
            f"{load[:160]}",
            flush=True,
        )
    print(
        f"largest with TPOT within 5 %: {tpot_ok}; with TTFT and TPOT within 5 %: {timing_ok}; "
        f"not flagged client-bound: {kept_up} (STREAMS_PER_PROCESS = {workload.STREAMS_PER_PROCESS})"
    )


def run_peer(url: str, streams: int, requests: int) -> tuple[dict[str, Any], float, float]:
    """One GuideLLM run; returns its benchmark JSON, its CPU seconds (all processes) and wall seconds."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.update({"DO_NOT_TRACK": "1", "GUIDELLM__LOGGING__CONSOLE_LOG_LEVEL": "ERROR"})
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "peer.json"
        command = [
            str(PEER),
            "run",
            "--backend",
            f"kind=openai_http,target={url},model=sim",
            "--profile",
            f"kind=concurrent,streams={streams}",
            "--data",
            f"kind=synthetic_text,prompt_tokens={INPUT_TOKENS},output_tokens={OUTPUT_TOKENS}",
            "--tokenizer",
            f"kind=huggingface_auto,model={PEER_TOKENIZER}",
            "--constraint",
            f"kind=max_requests,count={requests}",
            "--output",
            f"kind=json,path={out}",
            "--disable-console",
        ]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        subprocess.run(command, env=env, check=True, timeout=300, stdout=subprocess.DEVNULL)
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return json.loads(out.read_text())["benchmarks"][0], cpu, wall


def peer_median(result: dict[str, Any], name: str) -> float:
    return float(result["metrics"][name]["successful"]["median"])


def side_by_side(url: str, reports: dict[int, bench.BenchReport]) -> None:
    section("side by side with GuideLLM (same simulator, same settings)")
    if not PEER.exists():
        print(f"GuideLLM is not installed ({PEER} missing): run bench/install_peer.sh, then this again.")
        return
    print("GuideLLM's 'ITL' is (e2el - ttft) / (tokens - 1), vLLM's and our TPOT; its 'TPOT' divides by all tokens.")
    print(f"{'streams':>7}  {'TTFT med ms ours/peer':>22}  {'TPOT med ms ours/peer':>22}  {'out tok/s ours/peer':>20}")
    for streams, requests in LEVELS:
        result, _, _ = run_peer(url, streams, requests)
        r = reports[streams]
        out_tput = float(result["metrics"]["output_tokens_per_second"]["successful"]["mean"])
        print(
            f"{streams:>7}  {r.median_ttft_ms or math.nan:>10.2f} / "
            f"{peer_median(result, 'time_to_first_token_ms'):<9.2f}"
            f"  {r.median_tpot_ms or math.nan:>10.2f} / {peer_median(result, 'inter_token_latency_ms'):<9.2f}"
            f"  {r.output_throughput or 0:>9.0f} / {out_tput:<8.0f}",
            flush=True,
        )
    # CPU per token from the difference of a short and a long run, so that start-up (imports,
    # process spawning, tokenizer loading) cancels out for both tools.
    streams, short, long = 64, 128, 384
    peer_short, peer_long = run_peer(url, streams, short), run_peer(url, streams, long)
    peer_cpu = (peer_long[1] - peer_short[1]) / ((long - short) * OUTPUT_TOKENS) * 1000
    ours_short, ours_long = ours(url, streams, short), ours(url, streams, long)
    ours_cpu = (ours_long.client_cpu_seconds - ours_short.client_cpu_seconds) / (
        (ours_long.total_output_tokens - ours_short.total_output_tokens) or 1
    )
    print(
        f"client CPU per 1,000 streamed tokens at {streams} streams (long minus short run): "
        f"ours {ours_cpu * 1000:.3f} s, GuideLLM {peer_cpu:.3f} s; "
        f"GuideLLM start-up and {short} requests took {peer_short[1]:.1f} CPU s "
        f"over {peer_short[2]:.1f} s wall"
    )


def faults() -> None:
    section("simulator faults and the gate verdicts they earn (4 streams, 16 requests)")
    for fault in ("none", "refuse", "http500", "error-event", "no-done", "stall"):
        with simulator("--fault", fault) as url:
            r = ours(url, 4, 16, warmup=2, stall_timeout=1.0)
        result = gate.evaluate(r, SLO, min_samples=8)
        print(f"{fault:>12}: failures {r.failures or '{}'} -> {result.summary()[:150]}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-peer", action="store_true", help="do not run GuideLLM even if installed")
    args = parser.parse_args()
    started = time.monotonic()
    with simulator() as url:
        reports = accuracy(url)
        single_process_limit(url)
        if not args.skip_peer:
            side_by_side(url, reports)
    faults()
    print(f"\nbench_smoke: done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":  # the guard also keeps spawned client processes from re-running main()
    sys.exit(main())
