"""docs/architecture.md's rooms, floors and modules are what scripts/architecture_doc.py writes now.

The generator reads pyproject.toml's import-linter contracts and the docstrings; a contract, a
module or a subpackage docstring changed without `make docs-architecture` fails here, in CI.
"""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys
from types import ModuleType

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("architecture_doc", ROOT / "scripts" / "architecture_doc.py")
    assert spec and spec.loader
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    return generator


def test_the_committed_architecture_doc_is_what_the_generator_writes_now() -> None:
    run = subprocess.run(
        [sys.executable, "scripts/architecture_doc.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr


def test_a_stale_doc_fails_the_check_with_one_line() -> None:
    generator = _generator()
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    stale = doc.replace("| `cli/` |", "| `commands/` |")
    assert generator.generate(stale, (ROOT / "pyproject.toml").read_text(encoding="utf-8")) == doc


def test_every_subpackage_is_a_room_and_every_module_has_a_row() -> None:
    generator = _generator()
    text = generator.generated((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    package = ROOT / "orchestrator"
    for sub in (p for p in package.iterdir() if (p / "__init__.py").is_file() and p.name != "manifests"):
        assert f"| `{sub.name}/` |" in text
        for module in sub.glob("*.py"):
            if not module.stem.startswith("__"):
                assert f"| `{sub.name}.{module.stem}` |" in text


def test_the_rooms_follow_the_package_contracts_floors_top_first() -> None:
    generator = _generator()
    contract = {
        "name": "stages",
        "type": "layers",
        "containers": ["orchestrator"],
        "layers": ["cli", "apply | gate", "errors"],
    }
    rows = [line.split("|")[1].strip() for line in generator.rooms(contract)][2:]
    assert rows == ["`cli/`", "`apply/`", "`gate/`", "`orchestrator/` itself"]
    assert "Independent: none of `a`, `b` imports another." in list(
        generator.floors([{"name": "n", "type": "independence", "modules": ["a", "b"]}])
    )


def test_a_doc_without_the_markers_is_refused() -> None:
    with pytest.raises(SystemExit, match="marker"):
        _generator().generate("# Architecture\n", "")
