"""The documentation cannot rot: pages are reachable, links resolve, the generated reference is
current, and every `deployctl` command in a code block parses; the offline ones run, exit as
documented and print what the page shows. No cluster, no network (cluster commands are parsed with
`--help`, which click handles only after every option has parsed, so a wrong option still fails).

Conventions for writing pages so these tests can read them: tests/docblocks.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import docblocks
import pytest

ROOT = docblocks.ROOT
DEPLOYCTL = str(Path(sys.executable).parent / "deployctl")
COMMANDS = [c for page in docblocks.pages() if page.exists() for c in docblocks.commands(page)]


def test_every_docs_page_is_linked_from_an_index() -> None:
    linked = set()
    for index in (ROOT / "README.md", ROOT / "docs" / "README.md"):
        for _, target in docblocks.links(index):
            linked.add((index.parent / target.split("#")[0]).resolve())
    orphans = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.resolve() not in linked]
    assert not orphans, f"docs pages linked from neither README.md nor docs/README.md: {orphans}"


def test_every_relative_link_resolves() -> None:
    broken = []
    for page in docblocks.pages():
        for line, target in docblocks.links(page):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path_part, _, anchor = target.partition("#")
            path = (page.parent / path_part).resolve() if path_part else page
            where = f"{page.relative_to(ROOT)}:{line}: {target}"
            if not path.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in docblocks.anchors(path):
                broken.append(f"{where} (no heading with that anchor)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_generated_profile_reference_is_current() -> None:
    result = subprocess.run(
        [sys.executable, "scripts/gen_profile_reference.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_docs_show_commands() -> None:
    # A guard for the parser: if it found nothing, every test below would pass vacuously.
    assert len(COMMANDS) >= 30
    assert any(c.offline and c.output for c in COMMANDS)


@pytest.mark.parametrize("command", [c for c in COMMANDS if not c.offline], ids=lambda c: c.where)
def test_cluster_command_parses(command: docblocks.Command) -> None:
    words = command.words
    result = subprocess.run([DEPLOYCTL, *words[1:], "--help"], capture_output=True, text=True, timeout=60, env=_env())
    assert result.returncode == 0, f"{command.where}: `{command.text}` does not parse:\n{result.stderr}"


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.offline], ids=lambda c: c.where)
def test_offline_command_runs_as_documented(command: docblocks.Command, tmp_path: Path) -> None:
    result = docblocks.run_offline(command, tmp_path)
    assert result.returncode == command.expected_exit, (
        f"{command.where}: `{command.text}` exited {result.returncode}, "
        f"the page says {command.expected_exit}:\n{result.stdout}"
    )
    if command.output:
        problem = docblocks.mismatch(command.output, result.stdout.splitlines())
        assert problem is None, f"{command.where}: `{command.text}`: {problem}"


def test_help_check_still_rejects_an_unknown_option() -> None:
    # The premise of test_cluster_command_parses: click parses every option before --help acts.
    result = subprocess.run(
        [DEPLOYCTL, "status", "llama3-70b", "--no-such-option", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
    )
    assert result.returncode != 0 and "no-such-option" in result.stderr


def test_output_matching_follows_the_page_conventions() -> None:
    actual = ["a", "b", "c long line", "d"]
    assert docblocks.mismatch(["a", "…", "d"], actual) is None
    assert docblocks.mismatch(["a", "b", "c long …", "…"], actual) is None
    assert docblocks.mismatch(["…", "c long line", "d"], actual) is None
    assert docblocks.mismatch(["a", "c long line", "…"], actual) is not None  # a gap without …
    assert docblocks.mismatch(["b", "…"], actual) is not None  # output starts earlier
    assert docblocks.mismatch(["a", "b"], actual) is not None  # output goes on
    assert docblocks.mismatch(["…", "d", "c long line"], actual) is not None  # order
    pod = "12:01:02Z [rollout] +1.5s llama3-70b-84b8f76847-8k6dk: ready on gpu-a100-nvl-1"
    other = "09:11:59Z [rollout] +13.2s llama3-70b-84b8f76847-hxxtg: ready on gpu-a100-nvl-0"
    assert docblocks.volatile(pod) == docblocks.volatile(other)


def _env() -> dict[str, str]:
    # A kubeconfig that does not exist: a command that tried to reach a cluster would fail fast.
    return {**os.environ, "NO_COLOR": "1", "KUBECONFIG": "/nonexistent/kubeconfig"}
