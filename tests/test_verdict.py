"""One verdict per profile: validate, plan, render and apply agree on it and on its exit code.

"Fits" is derived from the planner's worst finding (planner.check owns the refusal); render
refuses what apply would refuse unless --force, and then says so in the objects; an SLO the gate
cannot read is refused at validate time; a missing argument prints click's own message.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import click.testing
import pytest
import yaml

from orchestrator import conventions
from orchestrator.cli import app as cli
from orchestrator.errors import ExitCode
from orchestrator.plan import planner
from orchestrator.profile import model as profile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROD = ROOT / "profiles" / "prod-tp4.yaml"


def run(*args: str) -> click.testing.Result:
    return click.testing.CliRunner().invoke(cli.main, list(args), prog_name="deployctl", env={"NO_COLOR": "1"})


def variant(tmp_path: pathlib.Path, **changes: Any) -> pathlib.Path:
    """prod-tp4 with dotted-path changes, e.g. {"engine.tensorParallelSize": 16}."""
    doc = yaml.safe_load(PROD.read_text())
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        node = doc
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# Copies the planner says cannot run on these nodes (an "error" finding), whatever else is fine.
DOES_NOT_FIT = {
    "405B at TP=16 on 8-GPU nodes": {
        "model.architecture": "llama-3.1-405b",
        "engine.tensorParallelSize": 16,
        "engine.kvCacheDtype": "auto",
        "hardware.gpu": "H100-80GB",
        "hardware.gpusPerNode": 8,
    },
    "TP=4 on 2-GPU nodes": {"hardware.gpusPerNode": 2},
    "weights larger than the GPUs": {"engine.tensorParallelSize": 1},
}


@pytest.mark.parametrize("case", sorted(DOES_NOT_FIT))
def test_every_profile_command_gives_the_same_does_not_fit_verdict(tmp_path: pathlib.Path, case: str) -> None:
    path = variant(tmp_path, **DOES_NOT_FIT[case])
    prof = profile.load(str(path))
    assert planner.plan(prof).verdict == "does-not-fit"
    validated = run("validate", str(path))
    assert validated.exit_code == ExitCode.DOES_NOT_FIT, validated.output
    assert "does NOT fit" in validated.stdout and " fits " not in validated.stdout
    assert json.loads(run("validate", str(path), "--output", "json").stdout)["verdict"] == "does-not-fit"
    assert run("plan", str(path)).exit_code == ExitCode.DOES_NOT_FIT
    out = tmp_path / "out"
    rendered = run("render", str(path), "--output-dir", str(out))
    assert rendered.exit_code == ExitCode.DOES_NOT_FIT, rendered.output
    assert not out.exists(), "render wrote manifests apply would refuse"
    assert "line" in rendered.stderr and "does not fit" in rendered.stderr
    applied = run("apply", str(path), "--kubeconfig", str(tmp_path / "never-read"))
    assert applied.exit_code == ExitCode.DOES_NOT_FIT, applied.output  # refused before any connection


def test_a_fitting_profile_is_fits_everywhere(tmp_path: pathlib.Path) -> None:
    assert run("validate", str(PROD)).exit_code == ExitCode.OK
    assert run("plan", str(PROD)).exit_code == ExitCode.OK
    assert run("render", str(PROD), "--output-dir", str(tmp_path / "out")).exit_code == ExitCode.OK
    objects = [yaml.safe_load(p.read_text()) for p in sorted((tmp_path / "out").glob("*.yaml"))]
    assert all(conventions.FIT_VERDICT_ANNOTATION not in (o["metadata"].get("annotations") or {}) for o in objects)


def test_render_force_writes_the_verdict_into_every_object_and_warns(tmp_path: pathlib.Path) -> None:
    path = variant(tmp_path, **DOES_NOT_FIT["TP=4 on 2-GPU nodes"])
    out = tmp_path / "out"
    result = run("render", str(path), "--output-dir", str(out), "--force")
    assert result.exit_code == ExitCode.OK, result.output
    assert "warning" in result.stderr and "--force" in result.stderr
    objects = [yaml.safe_load(p.read_text()) for p in sorted(out.glob("*.yaml"))]
    assert objects
    for obj in objects:
        verdict = obj["metadata"]["annotations"][conventions.FIT_VERDICT_ANNOTATION]
        assert verdict.startswith("does-not-fit") and "a node has 2" in verdict


def test_render_force_does_not_pass_an_invalid_profile(tmp_path: pathlib.Path) -> None:
    path = variant(tmp_path, **{"engine.tensorParallelSize": 3})  # does not divide the heads: vLLM refuses
    result = run("render", str(path), "--force")
    assert result.exit_code == ExitCode.INVALID_PROFILE, result.output


@pytest.mark.parametrize(
    ("slo", "expected"),
    [
        ({"p95_ttft": "<=1500"}, "did you mean 'p95_ttft_ms'"),
        ({"median_tpot_ms": "40"}, "is not a condition"),
        ({"throughput": ">=10"}, "unknown metric"),
    ],
)
def test_an_slo_the_gate_cannot_read_is_refused_by_validate(
    tmp_path: pathlib.Path, slo: dict[str, str], expected: str
) -> None:
    path = variant(tmp_path, **{"gate.smoke.slo": slo})
    result = run("validate", str(path))
    assert result.exit_code == ExitCode.INVALID_PROFILE, result.output
    assert expected in result.stderr and "gate.smoke.slo" in result.stderr and "line" in result.stderr


@pytest.mark.parametrize(
    "args",
    [["validate"], ["apply"], ["status"], ["completion"], ["audit", "export"], ["bench", "--model", "m"]],
)
def test_a_missing_argument_is_named_not_a_blank_error(args: list[str]) -> None:
    result = run(*args)
    assert result.exit_code == ExitCode.USAGE, result.output
    error_line = next(line for line in result.stderr.splitlines() if line.startswith("Error:"))
    assert error_line.strip() != "Error:" and "Missing" in error_line, result.stderr
