"""docs/security.md's threat model is held to its tests: one row per actor, each naming e2e tests that exist.

The table is the page's promise to an auditor; a renamed or deleted test, or an actor without one,
would leave a row that nothing shows.
"""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "security.md"
MODULE = ROOT / "e2e" / "test_threat_model.py"
ACTORS = ["Profile author", "Namespace editor", "Cluster admin", "Controller ServiceAccount", "Network neighbour"]


def _rows() -> dict[str, list[str]]:
    text = DOC.read_text()
    section = text[text.index("## Threat model") :]
    section = section[: section.index("\n## ", 1)]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        match = re.match(r"\| \*\*([^*]+)\*\*", line)
        if match:
            cells = line.strip().strip("|").split(" | ")
            rows[match.group(1)] = re.findall(r"`(test_[a-z0-9_]+)`", cells[-1])
    return rows


def _tests_of(module: pathlib.Path) -> set[str]:
    tree = ast.parse(module.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_the_threat_model_has_one_row_per_actor_each_naming_a_test() -> None:
    rows = _rows()
    assert list(rows) == ACTORS
    assert all(rows[actor] for actor in ACTORS), rows


def test_every_test_the_threat_model_names_exists_and_every_threat_model_test_is_named() -> None:
    named = {test for tests in _rows().values() for test in tests}
    defined = _tests_of(MODULE)
    assert named - defined == set(), "the table names tests that do not exist"
    assert defined - named == set(), "tests of the threat model that the table does not name"


def test_the_threat_model_tests_run_in_a_restricted_namespace_as_the_actors_identities() -> None:
    """Every test of the module takes the ``actors`` fixture, which enforces `restricted` and binds
    deployctl to its rendered Role: a test without it would run as the cluster admin."""
    tree = ast.parse(MODULE.read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            assert "actors" in [a.arg for a in node.args.args], node.name
    source = MODULE.read_text()
    assert '"pod-security.kubernetes.io/{mode}": "restricted"' in source
    assert "render.rbac(env.namespace, DEPLOYER" in source
