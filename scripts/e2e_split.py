"""`make test`'s e2e step: the suite as two pytest processes at once, each on a local cluster of its
own (a state directory and ports apart, as the demo's), so the suite's waiting overlaps.

The files are split by their seconds in e2e/durations.json (from the junit files an earlier run
left in .cache/e2e-junit-a.xml and -b.xml), the real-vLLM files all on the first process: one vLLM
server at a time keeps the CPU engine's timings what they are alone. Each process's output is printed
as it comes, every line prefixed with its half ("a| ", "b| "), so a CI log that ends early still shows
where each half was; it is also kept in .cache/e2e-<a|b>.log. The exit code is the worse of the two.
Extra arguments go to both pytests.

Two bounds turn a hang into a failure that names itself: each test has E2E_TEST_TIMEOUT_S (pytest-
timeout, which prints every thread's stack), and the whole step E2E_DEADLINE_S, after which both
halves are stopped and the step fails; the defaults sit well inside CI's 90 minutes.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from typing import IO

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


def _relay(name: str, stream: IO[str], log: IO[str]) -> None:
    for line in stream:
        log.write(line)
        log.flush()
        sys.stdout.write(f"{name}| {line}")
        sys.stdout.flush()


def _stop(proc: subprocess.Popen[str]) -> None:
    """pytest runs the e2e conftest's clean-up (cluster down, servers stopped) on SIGINT."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main() -> int:
    files = sorted(p.name for p in (ROOT / "e2e").glob("test_*.py"))
    known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    a, b = split(files, known)
    extra_args = sys.argv[1:]
    pytest = os.environ.get("E2E_PYTEST_BIN", str(ROOT / ".cache/wheel-venv/bin/pytest"))
    test_timeout = os.environ.get("E2E_TEST_TIMEOUT_S", "900")
    deadline = time.monotonic() + float(os.environ.get("E2E_DEADLINE_S", "3300"))
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    runs = []
    for name, chosen, extra in (
        ("a", a, {}),
        ("b", b, {f"DEPLOYCTL_CLUSTER_{k}_PORT": str(v) for k, v in PORTS_B.items()}),
    ):
        env = {**base, **extra, "E2E_CLUSTER_STATE_DIR": f".cache/cluster-{name}", "PYTHONUNBUFFERED": "1"}
        junit = f"--junitxml=.cache/e2e-junit-{name}.xml"
        argv = [pytest, *(f"e2e/{f}" for f in chosen), "--durations=20", f"--timeout={test_timeout}", junit]
        proc = subprocess.Popen(
            [*argv, *extra_args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        log = (ROOT / f".cache/e2e-{name}.log").open("w")
        relay = threading.Thread(target=_relay, args=(name, proc.stdout, log), daemon=True)
        relay.start()
        runs.append((name, proc, relay, time.monotonic()))
    codes = {}
    for name, proc, relay, started in runs:
        try:
            codes[name] = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"e2e part {name}: still running at the deadline (E2E_DEADLINE_S); stopping both", flush=True)
            for _, other, _, _ in runs:
                _stop(other)
            codes[name] = 124
        relay.join(timeout=30)
        print(f"e2e part {name}: exit {codes[name]} after {time.monotonic() - started:.0f} s", flush=True)
    # 5: pytest collected nothing, as one half may when PYTEST_ARGS selects a few tests.
    return max(0 if code == 5 else code for code in codes.values())


if __name__ == "__main__":
    sys.exit(main())
