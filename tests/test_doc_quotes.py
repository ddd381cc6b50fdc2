"""What the docs quote from elsewhere is still what it quotes: validate's messages with their YAML
line numbers, and the local cluster's simulated nodes.

A quoted message names a line of `profiles/prod-tp4.yaml` (the pages' `my-profile.yaml` is a copy
of it with one mistake); an edit of that file moves the line, and these tests say so.
"""

from __future__ import annotations

import re
from pathlib import Path

import docblocks
import pytest
import yaml
from click.testing import CliRunner

from orchestrator.cli import app as cli

ROOT = docblocks.ROOT
EXAMPLE = ROOT / "profiles" / "prod-tp4.yaml"
NODES = ROOT / "e2e" / "cluster" / "nodes.yaml"


def _quoted(marker: str) -> list[tuple[str, str]]:
    """(where, line) of every line of a text block, in any page, that contains ``marker``."""
    return [
        (f"{block.page.relative_to(ROOT)}:{block.line + i}", line)
        for page in docblocks.pages()
        for block in docblocks.blocks(page)
        if block.lang == "text"
        for i, line in enumerate(block.lines)
        if marker in line
    ]


def _validate(path: Path) -> list[str]:
    result = CliRunner().invoke(cli.main, ["validate", str(path)], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    return result.output.splitlines()


def _shown_in(shown: str, output: list[str]) -> bool:
    want = " ".join(shown.split())
    if want.endswith(docblocks.ELISION):
        return any(" ".join(line.split()).startswith(want[: -len(docblocks.ELISION)].rstrip()) for line in output)
    return want in (" ".join(line.split()) for line in output)


TYPO = "engine.tensorParalelSize (line"
UNPINNED = "is not pinned by digest"


@pytest.mark.parametrize("where,line", _quoted(TYPO), ids=lambda v: v if ":" in v else "")
def test_a_quoted_unknown_key_error_is_what_validate_prints_for_the_copied_example(
    where: str, line: str, tmp_path: Path
) -> None:
    copy = tmp_path / "my-profile.yaml"
    copy.write_text(EXAMPLE.read_text().replace("tensorParallelSize:", "tensorParalelSize:"))
    output = _validate(copy)
    assert _shown_in(line, output), f"{where} shows {line.strip()!r}; validate prints:\n" + "\n".join(output)


@pytest.mark.parametrize("where,line", _quoted(UNPINNED), ids=lambda v: v if ":" in v else "")
def test_a_quoted_unpinned_image_error_is_what_validate_prints_for_the_copied_example(
    where: str, line: str, tmp_path: Path
) -> None:
    image = re.search(r"image '([^']+)'", line)
    assert image, f"{where}: the quote names no image"
    copy = tmp_path / "my-profile.yaml"
    copy.write_text(re.sub(r"(?m)^(  image: ).*$", rf"\g<1>{image.group(1)}", EXAMPLE.read_text()))
    output = _validate(copy)
    assert _shown_in(line, output), f"{where} shows {line.strip()!r}; validate prints:\n" + "\n".join(output)


def test_the_pages_quote_validates_messages() -> None:
    # A guard for the two tests above: they pass vacuously if the quotes are gone or reworded.
    assert len(_quoted(TYPO)) >= 2 and len(_quoted(UNPINNED)) >= 1


_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_NODE_GROUP = re.compile(r"(\w+) (\d+)-GPU (A100|H100)\S* ?(NVLink|PCIe)? nodes?")


def test_the_simulated_nodes_getting_started_lists_are_the_clusters() -> None:
    text = " ".join(line for _, line in docblocks.prose(docblocks.DOCS / "getting-started.md"))
    sentence = re.search(r"The nodes: (.*?one CPU node)", " ".join(text.split()))
    assert sentence, "docs/getting-started.md no longer lists the simulated nodes"
    nodes = [n for n in yaml.safe_load_all(NODES.read_text()) if n]
    counted = 0
    for words, gpus, family, link in _NODE_GROUP.findall(sentence.group(1)):
        matching = [
            n
            for n in nodes
            if family in n["metadata"]["labels"].get("nvidia.com/gpu.product", "")
            and n["status"]["allocatable"].get("nvidia.com/gpu") == gpus
            and (not link or (n["metadata"]["labels"].get("deployctl.dev/nvlink") == "true") == (link == "NVLink"))
        ]
        assert len(matching) == _WORDS[words], (
            f"the page says {words} {gpus}-GPU {family} {link}; nodes.yaml has {len(matching)}"
        )
        counted += len(matching)
    cpu = [n for n in nodes if "nvidia.com/gpu" not in n["status"]["allocatable"]]
    assert len(cpu) == 1 and counted + 1 == len(nodes), "the page's list leaves nodes out"


def _build_table() -> dict[str, int]:
    tables = [t for t in docblocks.tables(docblocks.DOCS / "testing.md") if t.header == ["tool", "seconds"]]
    assert len(tables) == 1, "docs/testing.md has no table of a fresh clone's build times"
    return {row[0]: int(row[1]) for row in tables[0].rows}


def test_the_fresh_build_table_times_every_binary_build_sh_builds() -> None:
    script = (ROOT / "e2e" / "cluster" / "build.sh").read_text()
    streams = re.findall(r'^STREAM_[A-Z]+="([^"]*)"$', script, re.MULTILINE)
    assert len(streams) == 2, "build.sh builds everything in two streams"
    # prometheus-crds and gateway-api-crds only download a module: build.sh prints no time for them;
    # the prometheus tool builds promtool.
    named = {"sim": ["vllm-sim"], "prometheus-crds": [], "gateway-api-crds": [], "prometheus": ["promtool"]}
    tools = {binary for t in " ".join(streams).split() for binary in named.get(t, [t])}
    assert set(_build_table()) == tools


def test_the_first_build_time_the_pages_state_is_the_measured_one() -> None:
    table = _build_table()
    total = sum(table.values())
    testing = " ".join(" ".join(line.split()) for _, line in docblocks.prose(docblocks.DOCS / "testing.md"))
    stated = re.search(
        r"In all (\d+) s, about (\d+) minutes: the control plane, kwok and the simulator (\d+) s", testing
    )
    assert stated, "docs/testing.md no longer sums the fresh build"
    assert int(stated.group(1)) == total and int(stated.group(2)) == round(total / 60)
    core = ("vllm-sim", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
    assert int(stated.group(3)) == sum(table[t] for t in core)
    for page in (ROOT / "README.md", docblocks.DOCS / "getting-started.md"):
        text = " ".join(page.read_text().split())
        minutes = re.findall(r"took (\d+) minutes on a busy 2-core machine", text)
        assert minutes == [str(round(total / 60))], f"{page.name} states {minutes} minutes; measured {total} s"
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"({round(sum(table[t] for t in core) / 60)} for the control plane, kwok and the simulator" in readme
