"""How long do `deployctl --help`, `validate` and `plan` take from a cold process, next to `helm template`?

A CI step or an engineer at a prompt runs these once per invocation, so what counts is the wall
time of a fresh process: interpreter start, imports, reading the profile, the VRAM math,
printing. Each command runs ``--runs`` times, interleaved with the others (after one untimed
round, so every command finds the same warm OS file cache); the median and the minimum are
printed, with the ratio to ``helm template`` of charts/vllm-inference with the values
``deployctl render --format helm-values`` produces for the same profile, measured in the same run.
deployctl runs as ``python -m orchestrator`` from this checkout, whatever the venv has installed,
or as the console script ``--deployctl PATH`` names (``.cache/wheel-venv/bin/deployctl``: the wheel,
as users install it). Bytecode is written and used, as a pip-installed wheel has it, whatever
PYTHONDONTWRITEBYTECODE says in the calling shell.

A last row, ``floor``, is what no deployctl command can start under: a fresh interpreter importing
click, pydantic and yaml and doing nothing else (``-c "import click, pydantic, yaml"``). Its ratio
to helm says how much of a command's ratio its own code can still win back.

Goals (issue #24): ``validate`` and ``plan`` at most 2x ``helm template`` (medians), ``--help``
at most 150 ms. When one misses, or with ``--importtime``, the imports of ``deployctl validate``
are profiled (``python -X importtime``) and the costliest printed, so the fix (a lazy import) can
be aimed. helm is ``.cache/bin/helm`` (``bash e2e/cluster/build.sh helm``), else ``helm`` on PATH;
without either the comparison is skipped with a message and only the ``--help`` goal is judged.

Usage: ``python bench/bench_cli_startup.py [--runs N] [--profile PATH] [--importtime]``.
Bounded: about 4 x (runs + 1) short processes; nothing touches a cluster or the network.
Exit 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEPLOYCTL = [sys.executable, "-m", "orchestrator"]
BUILT_HELM = ROOT / ".cache" / "bin" / "helm"
CHART = ROOT / "charts" / "vllm-inference"
HELP_GOAL_MS = 150.0
HELM_RATIO_GOAL = 2.0  # validate and plan, median against helm template's median
RUN_TIMEOUT_S = 60.0
# This checkout's package first, not whichever one the venv installed (an editable install of another tree).
# Bytecode as an installed wheel has it: pip compiles on install, so a user never pays for compiling.
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "PYTHONPATH": str(ROOT)}
FLOOR = [sys.executable, "-c", "import click, pydantic, yaml"]


@dataclasses.dataclass(frozen=True)
class Timing:
    """Wall times in milliseconds of one command, one fresh process per sample, and the CPU time
    (user + system) of each: on a machine busy with other work, CPU time says what the wall time
    would be on an idle one better than the wall time does."""

    label: str
    samples: tuple[float, ...]
    cpu: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu)

    @property
    def min(self) -> float:
        return min(self.samples)


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _once(label: str, argv: list[str]) -> tuple[float, float]:
    """Wall and CPU milliseconds of one fresh process running ``argv``; a failure stops the benchmark."""
    cpu_before, start = _cpu_of_children(), time.perf_counter()
    proc = subprocess.run(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=RUN_TIMEOUT_S, cwd=ROOT, env=ENV
    )
    elapsed = (time.perf_counter() - start) * 1000
    if proc.returncode != 0:
        raise SystemExit(f"{label}: exit {proc.returncode}: {proc.stderr.decode(errors='replace')[-1500:]}")
    return elapsed, (_cpu_of_children() - cpu_before) * 1000


def time_commands(commands: dict[str, list[str]], runs: int) -> list[Timing]:
    """Each command once untimed, then ``runs`` rounds of one run of each, interleaved.

    Interleaving spreads a burst of load from elsewhere on the machine over all the commands
    instead of letting it land on one, so the ratios stay fair on a shared machine.
    """
    samples: dict[str, list[tuple[float, float]]] = {label: [] for label in commands}
    for round_ in range(runs + 1):
        for label, argv in commands.items():
            measured = _once(label, argv)
            if round_:
                samples[label].append(measured)
    return [
        Timing(label, tuple(wall for wall, _ in values), tuple(cpu for _, cpu in values))
        for label, values in samples.items()
    ]


def find_helm() -> str | None:
    """The helm binary: the one e2e/cluster/build.sh builds, else helm on PATH, else None."""
    if BUILT_HELM.exists():
        return str(BUILT_HELM)
    return shutil.which("helm")


def helm_values(profile: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """Write ``deployctl render PROFILE --format helm-values`` to ``out``."""
    proc = subprocess.run(
        [*DEPLOYCTL, "render", str(profile), "--format", "helm-values"],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=ROOT,
        env=ENV,
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
        env=ENV,
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


def judge(timings: list[Timing], helm: Timing | None) -> list[str]:
    """Print each command's figures and its goal; return the labels of the goals missed."""
    columns = f"{'median ms':>10} {'min ms':>8} {'cpu ms':>7} {'x helm (median)':>16} {'x helm (cpu)':>13}"
    print(f"{'command':<20} {columns}  goal")
    missed = []
    for t in timings:
        ratio = (
            f"{t.median / helm.median:>16.1f} {t.cpu_median / helm.cpu_median:>13.1f}"
            if helm
            else f"{'-':>16} {'-':>13}"
        )
        goal = ""
        if t.label == "deployctl --help":
            met = t.median <= HELP_GOAL_MS
            goal = f"<= {HELP_GOAL_MS:.0f} ms: {'met' if met else 'MISSED'}"
        elif t.label.startswith("deployctl") and helm is not None:
            met = t.median <= HELM_RATIO_GOAL * helm.median
            goal = f"<= {HELM_RATIO_GOAL:g}x helm: {'met' if met else 'MISSED'}"
        else:
            met = True
        if not met:
            missed.append(t.label)
        print(f"{t.label:<20} {t.median:>10.0f} {t.min:>8.0f} {t.cpu_median:>7.0f} {ratio}  {goal}")
    return missed


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs per command (default 10)")
    parser.add_argument("--profile", type=pathlib.Path, default=ROOT / "profiles" / "prod-tp4.yaml")
    parser.add_argument("--importtime", action="store_true", help="profile imports even when the goals are met")
    parser.add_argument(
        "--deployctl",
        type=pathlib.Path,
        help="an installed deployctl console script to time instead of this checkout's `python -m orchestrator`",
    )
    args = parser.parse_args()
    profile = args.profile.resolve()
    deployctl = [str(args.deployctl.resolve())] if args.deployctl else DEPLOYCTL
    commands = {
        "deployctl --help": [*deployctl, "--help"],
        "deployctl validate": [*deployctl, "validate", str(profile)],
        "deployctl plan": [*deployctl, "plan", str(profile)],
        "floor": FLOOR,
    }
    helm = find_helm()
    if helm is None:
        print(
            f"helm not found ({BUILT_HELM.relative_to(ROOT)} or on PATH): the comparison with helm template is "
            "skipped; build it with `bash e2e/cluster/build.sh helm` (needs Go)\n"
        )
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        if helm is not None:
            values = helm_values(profile, pathlib.Path(tmp) / "values.yaml")
            commands["helm template"] = [helm, "template", "bench", str(CHART), "-f", str(values)]
        timings = time_commands(commands, args.runs)
    helm_timing = timings[-1] if helm is not None else None
    where = f"{profile.relative_to(ROOT)}; deployctl: {' '.join(deployctl)}"
    print(f"cold start, {args.runs} fresh processes each ({where}):\n")
    missed = judge(timings, helm_timing)
    if missed or args.importtime:
        print("\ncostliest imports of `deployctl validate` (python -X importtime; cumulative includes children):\n")
        print(f"{'cumulative ms':>14} {'self ms':>8}  module")
        for cumulative, own, name in import_costs(["validate", str(profile)], top=15):
            print(f"{cumulative:>14.1f} {own:>8.1f}  {name}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
