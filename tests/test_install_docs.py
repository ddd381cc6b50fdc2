"""The install commands of docs/airgap.md and docs/real-cluster.md, and the Containerfile's, run as
written: a wheelhouse built from the checkout, a fresh virtual environment, no package index.

No test downloads anything. Where the docs build the wheelhouse "where pip reaches your index",
pip is pointed (PIP_NO_INDEX, PIP_FIND_LINKS) at a local directory instead: wheels repacked from
the distributions this test's own environment has installed (deployctl's runtime dependencies,
and setuptools and wheel for the build). pip then builds deployctl's wheel from a copy of the
checkout exactly as on a connected machine and copies the dependencies' wheels next to it. Only
that first line sees the local "index"; the install lines run with no index at all, as behind an
air gap. `~` is the test's own home directory.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

import docblocks
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import orchestrator

ROOT = docblocks.ROOT
CONTAINERFILE = ROOT / "Containerfile"
INSTALL_PAGES = [docblocks.DOCS / "airgap.md", docblocks.DOCS / "real-cluster.md"]
BUILD_REQUIREMENTS = ["setuptools", "wheel"]  # pyproject.toml's [build-system] requires
SKIP_COPY = {".git", ".venv", ".cache", "wheelhouse", "build", "out", "node_modules", ".mypy_cache", ".ruff_cache"}


def install_block(page: Path) -> docblocks.Block:
    """The page's block that makes the wheelhouse and installs from it."""
    found = [b for b in docblocks.blocks(page) if b.lang == "bash" and any("pip wheel" in line for line in b.lines)]
    assert len(found) == 1, f"{page.name}: expected one bash block with `pip wheel`, found {len(found)}"
    return found[0]


def _closure(names: list[str]) -> list[importlib.metadata.Distribution]:
    """The installed distributions ``names`` need at run time, themselves included."""
    seen: dict[str, importlib.metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        dist = importlib.metadata.distribution(name)
        seen[name] = dist
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def repack(dist: importlib.metadata.Distribution, into: Path) -> Path:
    """A wheel of an installed distribution, from the files its RECORD lists (scripts and
    bytecode left out: pip makes them again from entry_points.txt and the sources)."""
    info = next(PurePosixPath(p.parts[0]) for p in dist.files or [] if p.parts[0].endswith(".dist-info"))
    tags = [line.split(":", 1)[1].strip() for line in dist.read_text("WHEEL").splitlines() if line.startswith("Tag:")]
    parts = [sorted({t.split("-")[i] for t in tags}) for i in range(3)]
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    wheel = into / f"{name}-{dist.version}-{'-'.join('.'.join(p) for p in parts)}.whl"
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as out:
        for file in dist.files or []:
            path = file.as_posix()
            left_out = ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")
            if path.startswith("..") or "__pycache__" in file.parts or path.endswith(".pyc"):
                continue
            if PurePosixPath(path).parent == info and file.name in left_out:
                continue
            data = Path(str(file.locate())).read_bytes()
            out.writestr(path, data)
            writer.writerow([path, _record_hash(data), len(data)])
        writer.writerow([f"{info.as_posix()}/RECORD", "", ""])
        out.writestr(f"{info.as_posix()}/RECORD", record.getvalue())
    return wheel


@pytest.fixture(scope="module")
def local_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A find-links directory standing in for the package index: the wheels of deployctl's runtime
    dependencies and of its build backend, repacked from this environment."""
    into = tmp_path_factory.mktemp("local-index")
    runtime = [Requirement(r).name for r in importlib.metadata.requires("deployctl") or [] if "extra ==" not in r]
    for dist in _closure(runtime + BUILD_REQUIREMENTS):
        repack(dist, into)
    return into


def _run(line: str, cwd: Path, home: Path, extra_env: dict[str, str] | None = None) -> str:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUAL_ENV", "PYTHON"))},
        "HOME": str(home),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_CACHE_DIR": "1",  # a wheel pip has cached must not stand in for one the docs build
        **(extra_env or {}),
    }
    result = subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
    )
    assert result.returncode == 0, f"`{line}` exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def installed(local_index: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """(home, checkout copy, stdout of the last line) after the docs' install block ran there."""
    base = tmp_path_factory.mktemp("install")
    checkout, home = base / "checkout", base / "home"
    home.mkdir()
    shutil.copytree(ROOT, checkout, symlinks=True, ignore=lambda d, names: [n for n in names if n in SKIP_COPY])
    out = ""
    for line in install_block(INSTALL_PAGES[0]).lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        index = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(local_index)} if " pip wheel " in line else {}
        out = _run(line, checkout, home, index)
    return home, checkout, out


def test_the_air_gap_and_real_cluster_pages_install_the_same_way() -> None:
    airgap, guide = (install_block(page) for page in INSTALL_PAGES)
    assert airgap.lines == guide.lines, "docs/airgap.md and docs/real-cluster.md give different install commands"
    assert any("--no-index" in line for line in airgap.lines), "the install must not need an index"


def test_the_documented_install_gives_a_working_deployctl_outside_the_checkout(
    installed: tuple[Path, Path, str], tmp_path: Path
) -> None:
    home, checkout, version_output = installed
    assert orchestrator.__version__ in version_output
    wheels = sorted(p.name for p in (checkout / "wheelhouse").glob("*.whl"))
    assert f"deployctl-{orchestrator.__version__}-py3-none-any.whl" in wheels
    assert any(w.startswith("pydantic_core-") for w in wheels), f"no dependency wheels in the wheelhouse: {wheels}"
    venv = home / ".venvs" / "deployctl"
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import orchestrator; print(orchestrator.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "site-packages" in where and str(ROOT) not in where, where
    result = subprocess.run(
        [str(venv / "bin" / "deployctl"), "validate", str(ROOT / "profiles" / "prod-tp4.yaml")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "KUBECONFIG": "/nonexistent/kubeconfig", "NO_COLOR": "1"},
    )
    assert result.returncode == 0 and "valid; fits" in result.stdout, result.stdout + result.stderr


def containerfile_install() -> tuple[str, str, str]:
    """(command, wheel directory in the image, its source in the build context) of the
    Containerfile's one RUN line, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", CONTAINERFILE.read_text())
    runs = [line[4:].strip() for line in text.splitlines() if line.startswith("RUN ")]
    assert len(runs) == 1, f"the Containerfile has {len(runs)} RUN lines; this test reads one"
    words = shlex.split(runs[0])
    mounts = [dict(kv.split("=", 1) for kv in w.split("=", 1)[1].split(",")) for w in words if w.startswith("--mount=")]
    assert len(mounts) == 1 and mounts[0]["type"] == "bind", f"expected one bind mount of the wheels: {runs[0]}"
    command = " ".join(shlex.quote(w) for w in words if not w.startswith("--mount="))
    return command, mounts[0]["target"], mounts[0]["source"]


def test_the_containerfile_installs_only_from_the_wheelhouse() -> None:
    command, target, source = containerfile_install()
    words = shlex.split(command)
    assert words[:4] == ["python", "-m", "pip", "install"], command
    assert "--no-index" in words and words[words.index("--find-links") + 1] == target, command
    assert not any(w.startswith(("/src", ".")) or w.endswith(".toml") for w in words), "installs from source"
    # The build context's wheelhouse is the one the docs build.
    assert f"--wheel-dir {source} " in install_block(INSTALL_PAGES[0]).text
    assert "COPY" not in CONTAINERFILE.read_text().split("FROM", 1)[1], "wheels or sources copied into a layer"
    assert re.search(r"^FROM \$\{BASE:\?", CONTAINERFILE.read_text(), re.M), "the base must be a required build arg"


def test_the_containerfiles_install_line_works_outside_a_container(
    installed: tuple[Path, Path, str], tmp_path: Path
) -> None:
    _, checkout, _ = installed
    command, target, source = containerfile_install()
    venv = tmp_path / "image"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    line = command.replace(target, str(checkout / source))
    result = subprocess.run(
        ["bash", "-c", line],
        cwd=tmp_path,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("PIP_")},
            "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",  # the image's `python`
            "PIP_NO_CACHE_DIR": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        },
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    version = subprocess.run([str(venv / "bin" / "deployctl"), "--version"], capture_output=True, text=True)
    assert orchestrator.__version__ in version.stdout, version.stdout + version.stderr
