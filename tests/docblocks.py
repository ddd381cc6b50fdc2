"""The documentation as test data: its pages, links, the `deployctl` commands in its code blocks,
the output shown under them, and its prose: sentences and tables.

Used by tests/test_docs.py (no cluster: links, commands parse, offline commands run and print what
the page shows), tests/test_doc_claims.py (statements of fact checked against the code) and
e2e/test_demo.py (cluster commands print what the page shows, as in the demo).

Conventions the pages follow, so that the tests can read them:

- In a ```` ```console ```` block, a line starting with `$ ` is a command; the lines under it, up to
  the next `$ ` line, are its output. `…` alone on a line stands for lines left out; a line ending in
  `…` shows the start of a longer line. Shown lines are otherwise consecutive in the real output,
  which starts with the first shown line unless the output begins with `…`, and ends with the last
  unless it ends with `…`.
- In other blocks, a line starting with `deployctl` (also after `- `, `run: ` or `$ `) is a
  command. A line ending in `\\` continues on the next; so does an indented next line that starts
  with `[` or `--` (a synopsis such as `[--timeout S]`).
- A trailing `# … exit N …` comment gives the exit code an offline command must return (default 0).
- An HTML comment on the line right before a fence marks the block for the guide tests
  (e2e/test_real_cluster_guide.py, tests/test_real_cluster_docs.py): `<!-- guide: file=NAME -->`,
  the page tells the reader to save the block as NAME (offline commands then find it in their
  working directory); `<!-- guide: illustrative … -->`, the block needs what a local test cannot
  have (real GPUs, a registry, your node's name) and is not run.
- Offline commands (validate, plan, render, version, completion, anything with --help) are run. A
  cluster command whose output a console block shows must be one that `make demo` runs, with output
  it printed: e2e/test_demo.py compares them, with times, numbers, pod names and hashes masked.
  Other cluster commands belong in non-console blocks, where they are only parsed.

Statements of fact the pages make in forms tests/test_doc_claims.py checks:

- A block headed `out/ from PROFILE   out/ after FIELD: VALUE` lists, in two columns as `ls` sorts
  them, the files `deployctl render PROFILE --output-dir out/` leaves in out/, and those a second render with
  FIELD set to VALUE leaves; a listed file not named `NN-kind-name.yaml` is the user's own.
- A table with the columns `role`, `resources` and `verbs` (names in code spans) lists exactly what
  `deployctl render --format rbac` grants. A sentence naming deployctl's Role (or ClusterRole) says
  it grants each `` `verb` … on `resource` `` (or a verb and a kind in words: delete ConfigMaps) it
  names, and that it does not when `not`, `no` or `never` comes right before.
- A dotted name that starts with a profile section (`engine.port`) is a field path of the profile;
  a YAML block with profile sections only is a profile (or a piece of one).
- A clause (up to a `,`, `;`, `:` or `—`) naming a Secret and an environment variable (`HF_TOKEN`)
  says the pods get that variable from a Secret, or, after a `not`, `no` or `never`, that they don't.
- "N is vLLM's default" (also "vLLM's default X is N", "vLLM defaults to N") is about the `--flag`
  the sentence names and the vLLM version it names (else the profile's default version).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
ELISION = "…"

# Commands that need no cluster and are run for real; everything else is parsed with --help.
OFFLINE = {"validate", "plan", "render", "version", "completion"}
SHELL_OPERATORS = {">", ">>", "|", "&&", "||", ";", "2>", "2>&1", "&"}

_FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
_COMMAND = re.compile(r"^\s*(?:\$\s+|-\s+(?:run:\s+)?|run:\s+)?(deployctl(?:\s.*)?)$")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_MARKER = re.compile(r"<!--\s*(guide:.*?)\s*-->")


def pages() -> list[Path]:
    """Every page of the documentation: README.md and docs/*.md."""
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the first line inside the fence
    lang: str
    lines: list[str]
    marker: str = ""  # the `guide: …` HTML comment right before the fence, without `<!--`/`-->`

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    @property
    def file(self) -> str | None:
        """The name the page tells the reader to save the block as (`<!-- guide: file=NAME -->`)."""
        found = re.fullmatch(r"guide: file=(\S+)", self.marker)
        return found.group(1) if found else None

    @property
    def illustrative(self) -> bool:
        return self.marker.startswith("guide: illustrative")


@dataclass
class Command:
    page: Path
    line: int
    text: str  # from `deployctl` on, continuation lines joined, comment included
    console: bool
    output: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def words(self) -> list[str]:
        """The command's words, comment dropped, synopsis brackets removed, up to a shell operator."""
        words = []
        for word in shlex.split(self.text, comments=True):
            if word in SHELL_OPERATORS or word.startswith((">", "2>")):
                break
            word = _unbracket(word)
            if word and word != "...":
                words.append(word)
        return words

    @property
    def shell_line(self) -> str:
        """The command as a shell would run it: comment dropped, brackets kept out."""
        return " ".join(
            shlex.quote(w) if w not in SHELL_OPERATORS else w
            for w in (_unbracket(w) for w in shlex.split(self.text, comments=True))
            if w
        )

    @property
    def comment(self) -> str:
        return _split_comment(self.text)[1]

    @property
    def offline(self) -> bool:
        words = self.words
        sub = words[1] if len(words) > 1 else ""
        return sub in OFFLINE or any(w in ("--help", "-h", "--version") for w in words)

    @property
    def expected_exit(self) -> int:
        found = re.search(r"\bexit (\d+)", self.comment)
        return int(found.group(1)) if found else 0


def _unbracket(word: str) -> str:
    """A word without the brackets of a synopsis (`[--timeout`, `S]`, `[-o]`), keeping balanced ones that
    belong to the word (`placement.tolerations[1].key=x`, a YAML list `k=[{a: b}]`)."""
    if word.startswith("[") and word.endswith("]") and word.count("[") == word.count("]") == 1:
        return word[1:-1]
    while word.startswith("[") and word.count("[") > word.count("]"):
        word = word[1:]
    while word.endswith("]") and word.count("]") > word.count("["):
        word = word[:-1]
    return word


def _split_comment(text: str) -> tuple[str, str]:
    """(code, comment) of a shell line: the comment starts at a `#` that begins a word outside quotes."""
    quote = ""
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].rstrip(), text[i:]
    return text, ""


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of a page."""
    found: list[Block] = []
    current: Block | None = None
    fence = ""
    previous = ""
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        match = _FENCE.match(line)
        if current is None and match:
            fence = match.group(2)
            marker = _MARKER.fullmatch(previous.strip())
            current = Block(page, number + 1, match.group(3).lower(), [], marker.group(1) if marker else "")
        elif (
            current is not None
            and line.strip().startswith(fence[0] * len(fence))
            and not line.strip()[len(fence) :].strip()
        ):
            found.append(current)
            current = None
        elif current is not None:
            current.lines.append(line)
        previous = line
    return found


def commands(page: Path) -> list[Command]:
    """The `deployctl` commands in a page's code blocks, with the output console blocks show."""
    found: list[Command] = []
    for block in blocks(page):
        console = block.lang == "console"
        i = 0
        while i < len(block.lines):
            line = block.lines[i]
            if console:
                if not line.startswith("$ "):
                    i += 1
                    continue
                body = line[2:]
            else:
                body = line
            match = _COMMAND.match(body)
            if not match:
                i += 1
                continue
            text, start = match.group(1), i
            while text.rstrip().endswith("\\") and i + 1 < len(block.lines):
                i += 1
                text = text.rstrip()[:-1] + " " + block.lines[i].strip()
            while not console and i + 1 < len(block.lines) and re.match(r"^\s+(\[|--)", block.lines[i + 1]):
                i += 1
                text += " " + block.lines[i].strip()
            command = Command(page, block.line + start, text.strip(), console)
            i += 1
            if console:
                while i < len(block.lines) and not block.lines[i].startswith("$ "):
                    command.output.append(block.lines[i])
                    i += 1
            found.append(command)
    return found


def run_offline(command: Command, workdir: Path) -> subprocess.CompletedProcess[str]:
    """Run an offline command as a shell would, in ``workdir`` (where `profiles/` is the repo's).

    A kubeconfig that does not exist is set, so a command that tried to reach a cluster fails fast.
    The blocks the page tells the reader to save (`<!-- guide: file=NAME -->`) are saved there.
    """
    (workdir / "profiles").symlink_to(ROOT / "profiles")
    for block in blocks(command.page):
        if block.file:
            (workdir / block.file).write_text(block.text)
    venv_bin = Path(sys.executable).parent
    return subprocess.run(
        ["bash", "-c", command.shell_line],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "NO_COLOR": "1",
            "KUBECONFIG": "/nonexistent/kubeconfig",
            "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        },
    )


def transcript_commands(transcript: str) -> dict[str, list[list[str]]]:
    """The demo's transcript (e2e/demo.py's demo.log): command words → the outputs it printed."""
    found: dict[str, list[list[str]]] = {}
    current: list[str] | None = None
    for line in transcript.splitlines():
        if line.startswith("$ deployctl"):
            current = []
            found.setdefault(" ".join(shlex.split(line[2:])), []).append(current)
        elif current is not None and line.startswith("  [exit "):
            current = None
        elif current is not None and line.startswith("  "):
            current.append(line[2:])
    return found


# --- output ---------------------------------------------------------------------------------


def _plain(line: str) -> str:
    return " ".join(line.split())


_POD = re.compile(r"\b([a-z0-9]+(?:-[a-z0-9]+)*?)-[a-z0-9]{5,10}-[a-z0-9]{5}\b")
_HEX = re.compile(r"\b[0-9a-f]{12,}\b")
_DIGITS = re.compile(r"\d+")


def volatile(line: str) -> str:
    """A line with what differs between two runs on a cluster masked: pod names, hashes, numbers."""
    line = _POD.sub(r"\1-<pod>", line)
    line = _HEX.sub("<hex>", line)
    return _DIGITS.sub("0", _plain(line))


def mismatch(shown: list[str], actual: list[str], normalize: Callable[[str], str] | None = None) -> str | None:
    """Why ``shown`` (a page's output, with `…` elisions) is not what ``actual`` printed, or None."""
    norm = normalize or _plain
    have = [norm(line) for line in actual if line.strip()]
    segments: list[list[str]] = [[]]
    for line in shown:
        if not line.strip():
            continue
        if line.strip() == ELISION:
            segments.append([])
        else:
            segments[-1].append(norm(line))
    open_start = not segments[0]
    open_end = not segments[-1]
    segments = [s for s in segments if s]
    if not segments:
        return None

    def fits(segment: list[str], at: int) -> bool:
        if at + len(segment) > len(have):
            return False
        for want, got in zip(segment, have[at : at + len(segment)], strict=True):
            if want.endswith(ELISION):
                if not got.startswith(want[: -len(ELISION)].rstrip()):
                    return False
            elif want != got:
                return False
        return True

    cursor = 0
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if index == 0 and not open_start:
            candidates = [0]
        elif last and not open_end:
            candidates = [len(have) - len(segment)]
        else:
            candidates = list(range(cursor, len(have) - len(segment) + 1))
        at = next((c for c in candidates if c >= cursor and fits(segment, c)), None)
        if at is None:
            return f"the real output has no {segment[0]!r} where the page shows it:\n" + "\n".join(have)
        if index == 0 and not open_start and last and not open_end and at + len(segment) != len(have):
            return "the real output goes on after the last shown line (end it with …):\n" + "\n".join(have)
        cursor = at + len(segment)
    return None


# --- links ----------------------------------------------------------------------------------


def links(page: Path) -> list[tuple[int, str]]:
    """(line, target) of every Markdown link outside code blocks."""
    inside: set[int] = set()
    for block in blocks(page):
        inside.update(range(block.line - 1, block.line + len(block.lines) + 1))
    found = []
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        if number in inside:
            continue
        line = re.sub(r"`[^`]*`", "", line)  # code spans are not links
        found += [(number, m.group(1)) for m in _LINK.finditer(line)]
    return found


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the headings of a page."""
    inside: set[int] = set()
    for block in blocks(page):
        inside.update(range(block.line - 1, block.line + len(block.lines) + 1))
    seen: dict[str, int] = {}
    result = set()
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        match = _HEADING.match(line)
        if number in inside or not match:
            continue
        text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", match.group(2))
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


# --- prose ----------------------------------------------------------------------------------


@dataclass
class Table:
    page: Path
    line: int  # 1-based line of the header row
    header: list[str]  # lower-cased
    rows: list[list[str]]


_SENTENCE_END = re.compile(r"(?<!e\.g\.)(?<!i\.e\.)(?<!etc\.)(?<!vs\.)(?<=[.!?])\s+")
_CELL_BORDER = re.compile(r"(?<!\\)\|")
_BREAK = re.compile(r"^\s*(?:[|#]|[-*]\s|\d+\.\s)")  # a table row, heading or list item starts anew


def prose(page: Path) -> list[tuple[int, str]]:
    """(line, text) of every line outside code blocks."""
    inside: set[int] = set()
    for block in blocks(page):
        inside.update(range(block.line - 1, block.line + len(block.lines) + 1))
    return [(n, line) for n, line in enumerate(page.read_text().splitlines(), start=1) if n not in inside]


def sentences(page: Path) -> list[tuple[int, str]]:
    """(line it starts on, text) of every sentence of running text: no code blocks, headings or tables.

    Lines of a paragraph (or list item) are joined with spaces; a sentence ends at `.`, `!` or `?`
    before a space (not after e.g., i.e., etc. or vs.): see `split_sentences`.
    """
    found: list[tuple[int, str]] = []
    paragraph: list[tuple[int, str]] = []

    def flush() -> None:
        text, starts = "", []  # starts: (offset in text, line number) of each joined line
        for number, line in paragraph:
            starts.append((len(text), number))
            text += line.strip() + " "
        at = 0
        for sentence in split_sentences(text):
            at = text.index(sentence, at)
            found.append((max(n for offset, n in starts if offset <= at), sentence))
            at += len(sentence)
        paragraph.clear()

    last = 0
    for number, line in prose(page):
        if number != last + 1 or not line.strip() or _BREAK.match(line):
            flush()
        if line.strip() and not line.lstrip().startswith(("|", "#")):
            paragraph.append((number, line))
        last = number
    flush()
    return found


def split_sentences(text: str) -> list[str]:
    """The sentences of a text (a paragraph, a field description), as `sentences` cuts them."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def clauses(sentence: str) -> list[str]:
    """A sentence cut at `,`, `;`, `:`, `—` and its end: where a `not` stops applying."""
    return [c for c in re.split(r"[,;:—]\s+|[.!?]$", sentence) if c.strip()]


def tables(page: Path) -> list[Table]:
    """The Markdown tables of a page, cells stripped (separator row dropped, `\\|` kept in cells)."""
    found: list[Table] = []
    current: Table | None = None
    last = 0
    for number, line in prose(page):
        row = line.strip()
        if not row.startswith("|") or number != last + 1:
            current = None
        if row.startswith("|"):
            cells = [c.strip() for c in _CELL_BORDER.split(row.strip("|"))]
            if current is None:
                current = Table(page, number, [c.lower() for c in cells], [])
                found.append(current)
            elif not all(re.fullmatch(r":?-+:?", c) for c in cells):
                current.rows.append(cells)
        last = number
    return found
