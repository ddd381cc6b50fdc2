"""`make test`'s e2e step: the suite as two pytest processes at once, each on a local cluster of its
own (a state directory and ports apart, as the demo's), so the suite's waiting overlaps.

The files are split by their seconds in e2e/durations.json (from the junit files an earlier run
left in .cache/e2e-junit-a.xml and -b.xml), the real-vLLM files all on the first process: one vLLM
server at a time keeps the CPU engine's timings what they are alone. Each process's output goes to
.cache/e2e-<a|b>.log and is printed when it ends; the exit code is the worse of the two. Extra
arguments go to both pytests.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
PINNED_A = {"test_real_vllm.py", "test_real_vllm_families.py", "test_real_flags.py", "test_engine_modes.py"}
PORTS_B = {
    "ETCD": 25790, "ETCD_PEER": 25791, "APISERVER": 62430, "KWOK": 62431, "CONTROLLER_MANAGER": 62432,
    "SCHEDULER": 62433, "RAY_OPERATOR_METRICS": 62434, "RAY_OPERATOR_PROBE": 62435,
    "SOURCE_CONTROLLER_METRICS": 62436, "SOURCE_CONTROLLER_HEALTH": 62437, "SOURCE_CONTROLLER_STORAGE": 62438,
    "KUSTOMIZE_CONTROLLER_METRICS": 62439, "KUSTOMIZE_CONTROLLER_HEALTH": 62440,
}  # fmt: skip


def split(files: list[str], known: dict[str, float]) -> tuple[list[str], list[str]]:
    a = [f for f in files if f in PINNED_A]
    b: list[str] = []
    load = {"a": sum(known.get(f, 30.0) for f in a), "b": 0.0}
    for f in sorted((f for f in files if f not in PINNED_A), key=lambda f: -known.get(f, 30.0)):
        side = "a" if load["a"] <= load["b"] else "b"
        (a if side == "a" else b).append(f)
        load[side] += known.get(f, 30.0)
    return a, b


DURATIONS = ROOT / "e2e" / "durations.json"


def main() -> int:
    files = sorted(p.name for p in (ROOT / "e2e").glob("test_*.py"))
    known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    a, b = split(files, known)
    extra_args = sys.argv[1:]
    pytest = os.environ.get("E2E_PYTEST_BIN", str(ROOT / ".cache/wheel-venv/bin/pytest"))
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    runs = []
    for name, chosen, extra in (
        ("a", a, {}),
        ("b", b, {f"DEPLOYCTL_CLUSTER_{k}_PORT": str(v) for k, v in PORTS_B.items()}),
    ):
        env = {**base, **extra, "E2E_CLUSTER_STATE_DIR": f".cache/cluster-{name}"}
        log = (ROOT / f".cache/e2e-{name}.log").open("w")
        junit = f"--junitxml=.cache/e2e-junit-{name}.xml"
        argv = [pytest, *(f"e2e/{f}" for f in chosen), "--durations=20", junit, *extra_args]
        runs.append(
            (name, subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT), time.monotonic())
        )
    codes = {}
    for name, proc, started in runs:
        codes[name] = proc.wait()
        print((ROOT / f".cache/e2e-{name}.log").read_text(), flush=True)
        print(f"e2e part {name}: exit {codes[name]} after {time.monotonic() - started:.0f} s", flush=True)
    # 5: pytest collected nothing, as one half may when PYTEST_ARGS selects a few tests.
    return max(0 if code == 5 else code for code in codes.values())


if __name__ == "__main__":
    sys.exit(main())
