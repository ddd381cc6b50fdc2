"""What users install is what works: the wheel and the sdist ship every module, template and data file.

Both artifacts are built without network from a copy of this checkout's files that git tracks or
would track (`python -m build --no-isolation`, which makes the sdist and then the wheel from the
unpacked sdist; and a wheel straight from the tree). A copy, because a build in the checkout reuses
its build/ and *.egg-info/ from earlier builds, which still held the modules a broken package list
dropped. Each wheel is installed into a venv of its own. That venv sees the dev venv's dependencies through a path
entry, but none of its `.pth` files: the dev venv's editable-install finder, which once quietly
supplied the orchestrator.engines that 0.1.0's wheel lacked, is never loaded. deployctl then runs
from there, outside the repo, so a missing module or data file fails here, by name, rather than on a
user's machine.
"""

from __future__ import annotations

import ast
import json
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass

import click
import pytest

import orchestrator
from orchestrator.cli import app as cli

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "orchestrator"
PROFILE = ROOT / "profiles" / "prod-tp4.yaml"


@dataclass(frozen=True)
class Installed:
    """A deployctl installed from one artifact into a venv of its own."""

    artifact: pathlib.Path
    venv: pathlib.Path

    @property
    def python(self) -> pathlib.Path:
        return self.venv / "bin" / "python"

    @property
    def deployctl(self) -> pathlib.Path:
        return self.venv / "bin" / "deployctl"

    def run(self, *args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.deployctl), *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1"},
            check=False,
        )

    def package_dir(self) -> pathlib.Path:
        probe = subprocess.run(
            [str(self.python), "-c", "import orchestrator; print(orchestrator.__file__)"],
            cwd="/",
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin"},
            check=False,
        )
        assert probe.returncode == 0, f"the installed deployctl does not import:\n{probe.stderr}"
        return pathlib.Path(probe.stdout.strip()).parent


def _run(*argv: str | pathlib.Path, cwd: pathlib.Path = ROOT) -> str:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(map(str, argv))} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout


def clean_copy(dest: pathlib.Path) -> pathlib.Path:
    """The checkout's files as a fresh clone plus uncommitted edits would have them: no build outputs."""
    listed = _run("git", "ls-files", "--cached", "--others", "--exclude-standard", "-z")
    for name in filter(None, listed.split("\0")):
        src, dst = ROOT / name, dest / name
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the work tree, not yet in the index
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst, follow_symlinks=False)
    return dest


def build(source: pathlib.Path, out: pathlib.Path, *kinds: str) -> None:
    """`python -m build` without isolation or network; kinds: "--sdist", "--wheel", or none for both."""
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, *kinds, source)


def install(artifact: pathlib.Path, venv: pathlib.Path) -> Installed:
    """A venv holding only deployctl from `artifact`; its dependencies are the dev venv's, by path."""
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    site = pathlib.Path(
        _run(venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()
    )
    # A plain path line: the dev venv's site-packages is searched, its .pth files are not run.
    (site / "_deployctl_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # --ignore-installed: a deployctl in the dev venv (the lowest-dependency job installs the wheel
    # there) is on the path and would count as installed; it must not be touched either.
    pip = (sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--quiet")
    _run(*pip, "--no-deps", "--ignore-installed", artifact)
    return Installed(artifact, venv)


def shipped_files(package_dir: pathlib.Path) -> set[str]:
    """Every file of an orchestrator package directory, relative to it, bytecode caches aside."""
    return {
        p.relative_to(package_dir).as_posix()
        for p in package_dir.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def missing_from(installed: pathlib.Path, source: pathlib.Path = PACKAGE) -> list[str]:
    """The files of the source package (modules, templates, data) that the installed package lacks."""
    return sorted(shipped_files(source) - shipped_files(installed))


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, pathlib.Path]]:
    out = tmp_path_factory.mktemp("dist")
    build(clean_copy(tmp_path_factory.mktemp("tree")), out)  # the sdist, then the wheel built from that sdist
    from_sdist = out / "from-sdist"
    from_sdist.mkdir()
    for wheel in out.glob("*.whl"):
        wheel.rename(from_sdist / wheel.name)
    build(clean_copy(tmp_path_factory.mktemp("tree")), out, "--wheel")  # and the wheel straight from the tree
    version = orchestrator.__version__
    yield {
        "sdist": out / f"deployctl-{version}.tar.gz",
        "wheel": out / f"deployctl-{version}-py3-none-any.whl",
        "wheel-from-sdist": from_sdist / f"deployctl-{version}-py3-none-any.whl",
    }


@pytest.fixture(scope="module", params=["wheel", "wheel-from-sdist"])
def installed(
    request: pytest.FixtureRequest, artifacts: dict[str, pathlib.Path], tmp_path_factory: pytest.TempPathFactory
) -> Installed:
    return install(artifacts[request.param], tmp_path_factory.mktemp(f"venv-{request.param}"))


def test_the_artifacts_are_named_by_the_one_version(artifacts: dict[str, pathlib.Path]) -> None:
    for path in artifacts.values():
        assert path.is_file(), f"{path.name} was not built"
    with tarfile.open(artifacts["sdist"]) as sdist:
        names = set(sdist.getnames())
    top = f"deployctl-{orchestrator.__version__}"
    assert f"{top}/pyproject.toml" in names and f"{top}/orchestrator/engines/__init__.py" in names


def test_the_installed_package_has_every_module_template_and_data_file_of_the_tree(installed: Installed) -> None:
    package = installed.package_dir()
    assert installed.venv in package.parents, f"the test must exercise the copy in {installed.venv}, not {package}"
    missing = missing_from(package)
    assert not missing, f"{installed.artifact.name} lacks these files of orchestrator/: {', '.join(missing)}"
    for must in ("py.typed", "engines/__init__.py", "manifests/_pod.j2", "manifests/rbac/deployctl.yaml.j2"):
        assert must in shipped_files(package)


def test_the_installed_package_has_no_editable_finder_on_its_path(installed: Installed) -> None:
    finders = _run(installed.python, "-c", "import sys; print([type(f).__name__ for f in sys.meta_path])")
    assert "_EditableFinder" not in finders and "editable" not in finders.lower()


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in sorted(group.commands.items()):
        yield (*prefix, name)
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))


COMMANDS = list(_commands(cli.main))


def test_every_command_s_help_runs_from_the_installed_package(installed: Installed, tmp_path: pathlib.Path) -> None:
    assert len(COMMANDS) >= 15, COMMANDS
    failed = {}
    for command in [(), *COMMANDS]:
        done = installed.run(*command, "--help", cwd=tmp_path)
        if done.returncode != 0 or "Usage:" not in done.stdout:
            failed[" ".join(command) or "(top)"] = f"exit {done.returncode}: {done.stderr[-600:]}"
    assert not failed, "deployctl ... --help failed from the installed package:\n" + "\n".join(
        f"{command}: {why}" for command, why in failed.items()
    )


def test_the_installed_package_validates_plans_and_renders_outside_the_repo(
    installed: Installed, tmp_path: pathlib.Path
) -> None:
    profile = tmp_path / "prod-tp4.yaml"
    shutil.copy(PROFILE, profile)
    validated = installed.run("validate", str(profile), cwd=tmp_path)
    assert validated.returncode == 0, validated.stderr
    plan = installed.run("plan", str(profile), "--output", "json", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["kv_bytes_per_token_per_gpu"] == 40960
    for fmt in ("manifests", "rbac", "crd", "helm-values"):
        rendered = installed.run("render", str(profile), "--format", fmt, cwd=tmp_path)
        assert rendered.returncode == 0, f"render --format {fmt}: {rendered.stderr}"
        in_repo = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "render", str(profile), "--format", fmt],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=False,
        )
        assert rendered.stdout == in_repo.stdout, f"render --format {fmt} differs between installed and checkout"


def test_a_wheel_built_without_a_data_file_is_caught_by_name(tmp_path: pathlib.Path) -> None:
    """The check above compares trees, so a package-data glob that misses files fails naming them."""
    tree = clean_copy(tmp_path / "tree")
    pyproject = tree / "pyproject.toml"
    text = pyproject.read_text()
    assert '"orchestrator.manifests" = ["*.j2", "rbac/*.j2"]' in text
    pyproject.write_text(
        text.replace('"orchestrator.manifests" = ["*.j2", "rbac/*.j2"]', '"orchestrator.manifests" = ["*.j2"]')
    )
    build(tree, tmp_path / "dist", "--wheel")
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    unpacked = tmp_path / "unpacked"
    zipfile.ZipFile(wheel).extractall(unpacked)
    assert missing_from(unpacked / "orchestrator", tree / "orchestrator") == [
        "manifests/rbac/_controller_namespace.j2",
        "manifests/rbac/_rules.j2",
        "manifests/rbac/deployctl.yaml.j2",
    ]


def _e2e_guard(python: pathlib.Path, cwd: pathlib.Path, env: dict[str, str]) -> list[str]:
    code = f"import sys; sys.path.insert(0, {str(ROOT / 'e2e')!r}); import shipped; print(shipped.problems())"
    done = subprocess.run([str(python), "-c", code], cwd=cwd, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    found: list[str] = ast.literal_eval(done.stdout)
    return found


def test_the_e2e_guard_accepts_an_installed_wheel_and_names_a_checkout(
    installed: Installed, tmp_path: pathlib.Path
) -> None:
    assert _e2e_guard(installed.python, tmp_path, {"PATH": "/usr/bin:/bin"}) == []
    found = _e2e_guard(installed.python, tmp_path, {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert any("PYTHONPATH is set" in p for p in found) and any("from the checkout" in p for p in found), found
    # The dev venv's editable install, the way `python -m pytest e2e` from the repo would run it.
    found = _e2e_guard(pathlib.Path(sys.executable), ROOT, {"PATH": "/usr/bin:/bin"})
    assert any("from the checkout" in p for p in found), found
