"""How long do `deployctl validate` and `deployctl plan` take from a cold process, next to `helm template`?

A CI step or an engineer at a prompt runs these once per invocation, so what counts is the wall
time of a fresh process: interpreter start, imports, reading the profile, the VRAM math,
printing. Each command runs ``--runs`` times, interleaved with the others (after one untimed
round, so every command finds the same warm OS file cache); the median and the minimum are
printed, with the ratio to ``helm template`` of charts/vllm-inference with the values
``deployctl render --format helm-values`` produces for the same profile, measured in the same run.

Goal: validate and plan under 300 ms (median). When one misses it, or with ``--importtime``,
the imports of ``deployctl validate`` are profiled (``python -X importtime``) and the costliest
printed, so the fix (a lazy import) can be aimed.

Usage: ``python bench/bench_cli_startup.py [--runs N] [--profile PATH] [--importtime]``.
Bounded: about 3 × (runs + 1) short processes; nothing touches a cluster or the network.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
VENV_BIN = pathlib.Path(sys.executable).parent
DEPLOYCTL = VENV_BIN / "deployctl"
HELM = ROOT / ".cache" / "bin" / "helm"
CHART = ROOT / "charts" / "vllm-inference"
GOAL_MS = 300.0
RUN_TIMEOUT_S = 60.0


@dataclasses.dataclass(frozen=True)
class Timing:
    """Wall times in milliseconds of one command, one fresh process per sample."""

    label: str
    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)


def _once(label: str, argv: list[str]) -> float:
    """Wall milliseconds of one fresh process running ``argv``; a failure stops the benchmark."""
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=RUN_TIMEOUT_S, cwd=ROOT)
    elapsed = (time.perf_counter() - start) * 1000
    if proc.returncode != 0:
        raise SystemExit(f"{label}: exit {proc.returncode}: {proc.stderr.decode(errors='replace')[-1500:]}")
    return elapsed


def time_commands(commands: dict[str, list[str]], runs: int) -> list[Timing]:
    """Each command once untimed, then ``runs`` rounds of one run of each, interleaved.

    Interleaving spreads a burst of load from elsewhere on the machine over all the commands
    instead of letting it land on one, so the ratios stay fair on a shared machine.
    """
    samples: dict[str, list[float]] = {label: [] for label in commands}
    for round_ in range(runs + 1):
        for label, argv in commands.items():
            elapsed = _once(label, argv)
            if round_:
                samples[label].append(elapsed)
    return [Timing(label, tuple(values)) for label, values in samples.items()]


def ensure_helm() -> None:
    """Build helm into .cache/bin when missing or stale (costs ~0.1 s when up to date)."""
    build = subprocess.run(["bash", str(ROOT / "e2e" / "cluster" / "build.sh"), "helm"], cwd=ROOT)
    if build.returncode != 0 or not HELM.exists():
        raise SystemExit(f"helm is missing at {HELM}: `bash e2e/cluster/build.sh helm` failed (needs Go >= 1.26)")


def helm_values(profile: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """Write ``deployctl render PROFILE --format helm-values`` to ``out``."""
    proc = subprocess.run(
        [str(DEPLOYCTL), "render", str(profile), "--format", "helm-values"],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        raise SystemExit(f"deployctl render --format helm-values failed ({proc.returncode}): {proc.stderr}")
    out.write_text(proc.stdout)
    return out


def import_costs(argv: list[str], top: int) -> list[tuple[float, float, str]]:
    """(cumulative ms, self ms, module) of the costliest imports of ``deployctl ARGV``."""
    code = "import sys; from orchestrator.cli import main; sys.argv = ['deployctl', *sys.argv[1:]]; main()"
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code, *argv],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=ROOT,
    )
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        self_us, cumulative_us, name = line.removeprefix("import time:").split("|")
        depth = (len(name) - len(name.lstrip()) - 1) // 2  # the tree is drawn by two spaces a level
        if depth <= 1:  # a top-level import, or one a top-level import pulled in directly
            rows.append((int(cumulative_us) / 1000, int(self_us) / 1000, name.strip()))
    return sorted(rows, reverse=True)[:top]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs per command (default 10)")
    parser.add_argument("--profile", type=pathlib.Path, default=ROOT / "profiles" / "prod-tp4.yaml")
    parser.add_argument("--importtime", action="store_true", help="profile imports even when the goal is met")
    args = parser.parse_args()
    if not DEPLOYCTL.exists():
        raise SystemExit(f"{DEPLOYCTL} is missing: run `make venv`")
    ensure_helm()
    profile = args.profile.resolve()
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        values = helm_values(profile, pathlib.Path(tmp) / "values.yaml")
        timings = time_commands(
            {
                "deployctl validate": [str(DEPLOYCTL), "validate", str(profile)],
                "deployctl plan": [str(DEPLOYCTL), "plan", str(profile)],
                "helm template": [str(HELM), "template", "bench", str(CHART), "-f", str(values)],
            },
            args.runs,
        )
    helm = timings[-1]
    print(f"cold start, {args.runs} fresh processes each ({profile.relative_to(ROOT)}):\n")
    print(f"{'command':<20} {'median ms':>10} {'min ms':>8} {'× helm (median)':>16} {'× helm (min)':>13}  goal")
    missed = []
    for t in timings:
        goal = ""
        if t.label.startswith("deployctl"):
            met = t.median < GOAL_MS
            goal = f"< {GOAL_MS:.0f} ms: {'met' if met else 'MISSED'}"
            if not met:
                missed.append(t.label)
        print(
            f"{t.label:<20} {t.median:>10.0f} {t.min:>8.0f} {t.median / helm.median:>16.1f} "
            f"{t.min / helm.min:>13.1f}  {goal}"
        )
    if missed or args.importtime:
        print("\ncostliest imports of `deployctl validate` (python -X importtime; cumulative includes children):\n")
        print(f"{'cumulative ms':>14} {'self ms':>8}  module")
        for cumulative, own, name in import_costs(["validate", str(profile)], top=15):
            print(f"{cumulative:>14.1f} {own:>8.1f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
