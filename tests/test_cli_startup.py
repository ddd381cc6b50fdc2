"""The commands that need no cluster start without importing the cluster and network libraries.

`deployctl --help`, `validate` and `plan` run at every CI step and shell prompt; the kubernetes
client, httpx and Jinja2 (the renderer's templates) cost most of a cold start and none of these
commands uses them. Each case runs one command in a fresh interpreter and reads its ``sys.modules``
at exit: a behaviour test (what is imported), not a timed one (bench/bench_cli_startup.py times them).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROFILE = str(ROOT / "profiles" / "prod-tp4.yaml")
HEAVY = ("kubernetes", "httpx", "jinja2")

# Runs the command as the console script does, then prints every module it imported.
PROBE = """
import atexit, json, sys
atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))
from orchestrator.cli import main
sys.argv = ["deployctl", *sys.argv[1:]]
main()
"""


def modules_of(*argv: str) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env
    )
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "argv",
    [("--help",), ("validate", PROFILE), ("plan", PROFILE), ("apply", "--help")],
    ids=["help", "validate", "plan", "apply-help"],
)
def test_commands_without_a_cluster_do_not_import_kubernetes_httpx_or_jinja2(argv: tuple[str, ...]) -> None:
    modules = modules_of(*argv)
    assert "orchestrator.cli.app" in modules  # the probe saw the command run
    heavy = sorted({m.split(".")[0] for m in modules} & set(HEAVY))
    assert not heavy, f"deployctl {' '.join(argv)} imported {heavy}"


def test_help_does_not_build_the_profile_models() -> None:
    # The profile's pydantic models are most of validate's start-up; --help lists commands only.
    assert "orchestrator.profile.model" not in modules_of("--help")


@pytest.mark.parametrize("module", ["orchestrator", "orchestrator.cli"])
def test_python_dash_m_runs_deployctl(module: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("deployctl, version ")
