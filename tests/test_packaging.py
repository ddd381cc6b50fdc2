"""`pip install .` ships everything deployctl reads at run time: templates, catalog, flag lists.

The wheel is built from this checkout without network (no build isolation) and installed into a
bare target directory; deployctl then runs from there, outside the repo, so a missing data file
fails here rather than on a user's machine.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    wheel_dir = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheel_dir),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    wheel = next(wheel_dir.glob("deployctl-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for expected in (
        "orchestrator/manifests/deployment.yaml.j2",
        "orchestrator/manifests/rbac/deployctl.yaml.j2",
        "orchestrator/data/gpus.yaml",
        "orchestrator/data/profile.schema.json",
        "orchestrator/data/models/llama-3-70b.json",
        "orchestrator/data/vllm_flags/0.33.0.json",
        "orchestrator/kube/client.py",
    ):
        assert expected in names, f"{expected} is missing from the wheel"
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    return target


def _deployctl(target: pathlib.Path, cwd: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    code = f"import sys; sys.argv = ['deployctl', *{list(args)!r}]; from orchestrator.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
    )


def test_installed_wheel_validates_plans_and_renders_outside_the_repo(
    installed: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    probe = subprocess.run(
        [sys.executable, "-c", "import orchestrator; print(orchestrator.__file__)"],
        env={"PYTHONPATH": str(installed)},
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert probe.stdout.startswith(str(installed)), "the test must exercise the installed copy"
    profile = str(ROOT / "profiles" / "prod-tp4.yaml")
    assert _deployctl(installed, tmp_path, "validate", profile).returncode == 0
    plan = _deployctl(installed, tmp_path, "plan", profile, "--output", "json")
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["kv_bytes_per_token_per_gpu"] == 40960
    rendered = _deployctl(installed, tmp_path, "render", profile)
    assert rendered.returncode == 0, rendered.stderr
    in_repo = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "render", profile], capture_output=True, text=True, cwd=ROOT
    )
    assert rendered.stdout == in_repo.stdout
