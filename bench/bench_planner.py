"""How long does the planner take per case, in process, for every model family it sizes?

`deployctl plan` must stay offline and quick enough to run on every commit of a profile repository:
the goal (issue #25) is at most 50 ms in process per case. Each case is one catalog architecture on
one H100-80GB at the TP its weights need, planned ``--runs`` times after one untimed run (which
reads the catalog file); the median and the worst are printed, next to a dense Llama 3 8B plan as
the reference the families are compared with (the ratio column), since no other planner runs
offline here.

Usage: ``python bench/bench_planner.py [--runs N]``. Pure CPU, no cluster, no network. Exit 1 when a
case's median is over the goal.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator import errors  # noqa: E402
from orchestrator.catalog import lookup as catalog  # noqa: E402
from orchestrator.plan import planner  # noqa: E402
from orchestrator.profile import model as profile_schema  # noqa: E402

GOAL_MS = 50.0
REFERENCE = "llama-3-8b"
IMAGE = "registry.internal/vllm/vllm-openai@sha256:" + "0" * 64


def case(architecture: str, tp: int) -> profile_schema.Profile:
    return profile_schema.Profile.model_validate(
        {
            "apiVersion": "deployctl/v1",
            "kind": "InferenceProfile",
            "metadata": {"name": "bench"},
            "model": {"name": "m", "architecture": architecture, "source": {"pvc": "models"}},
            "engine": {"image": IMAGE, "tensorParallelSize": tp, "maxModelLen": 4096, "maxNumSeqs": 256},
            "hardware": {"gpu": "H100-80GB", "gpusPerNode": 8},
        }
    )


def smallest_tp(architecture: str) -> int:
    """The smallest TP at which the weights leave room for a KV cache."""
    for tp in (1, 2, 4, 8):
        try:
            plan = planner.plan(case(architecture, tp))
        except errors.DeployctlError:  # a TP the model cannot take: try the next
            continue
        if plan.kv_cache_gib_per_gpu > 0 and not any(f.severity == "invalid" for f in plan.findings):
            return tp
    return 8


def time_case(profile: profile_schema.Profile, runs: int) -> list[float]:
    planner.plan(profile)  # untimed: reads and caches the catalog file
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        planner.plan(profile)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50, help="timed plans per case (default 50)")
    args = parser.parse_args()
    reference = statistics.median(time_case(case(REFERENCE, 1), args.runs))
    print(f"planner.plan in process, {args.runs} runs per case, H100-80GB, maxModelLen 4096:\n")
    print(f"{'architecture':<22} {'TP':>3} {'median ms':>10} {'max ms':>8} {'x ' + REFERENCE:>15}  goal")
    missed = []
    for key in catalog.architecture_keys():
        tp = smallest_tp(key)
        samples = time_case(case(key, tp), args.runs)
        median = statistics.median(samples)
        met = median <= GOAL_MS
        if not met:
            missed.append(key)
        print(
            f"{key:<22} {tp:>3} {median:>10.2f} {max(samples):>8.2f} {median / reference:>15.2f}  "
            f"<= {GOAL_MS:.0f} ms: {'met' if met else 'MISSED'}"
        )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
