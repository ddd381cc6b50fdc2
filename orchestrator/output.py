"""How deployctl prints: tables and bars for people, JSON/YAML for pipelines, progress for both.

On a terminal, progress is one updating line per phase; when stdout is not a TTY (CI logs) it is
plain timestamped lines on stderr; with ``--output json`` only the final object reaches stdout.
``NO_COLOR`` (non-empty) turns colour off; ``FORCE_COLOR`` (non-empty) turns it on without a terminal.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from orchestrator import yaml_text


def color_enabled(stream: TextIO) -> bool:
    """Colour on a terminal; ``NO_COLOR`` (non-empty, no-color.org) turns it off and wins;
    ``FORCE_COLOR`` (non-empty) turns it on without a terminal (CI logs that render ANSI)."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return stream.isatty() and os.environ.get("TERM") != "dumb"


def color_setting() -> bool | None:
    """For click.echo, which strips ANSI codes off a non-terminal: True with ``FORCE_COLOR``, False with
    ``NO_COLOR``, None (click decides by the stream) otherwise."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return None


def paint(text: str, color: str, stream: TextIO | None = None) -> str:
    codes = {"red": "31", "green": "32", "yellow": "33", "bold": "1", "dim": "2"}
    # sys.stdout looked up per call: CliRunner and redirect_stdout swap it after import.
    if not color_enabled(sys.stdout if stream is None else stream):
        return text
    return f"\033[{codes[color]}m{text}\033[0m"


def emit(data: object, fmt: str) -> str:
    """Serialise for --output json|yaml (deterministic)."""
    if fmt == "yaml":
        return yaml_text.safe_dump(data, sort_keys=True, default_flow_style=False, allow_unicode=True).rstrip()
    return json.dumps(data, indent=2, sort_keys=True, default=str)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [[("" if c is None else str(c)) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def bar(parts: Sequence[tuple[str, float]], total: float, width: int = 50) -> str:
    """A one-line stacked bar, e.g. weights / activations / KV / headroom of one GPU."""
    symbols = "█▓▒░·"
    out = ""
    for i, (_, value) in enumerate(parts):
        out += symbols[i % len(symbols)] * max(0, round(width * value / total)) if total > 0 else ""
    out = out[:width].ljust(width, " ")
    legend = "  ".join(f"{symbols[i % len(symbols)]} {label}" for i, (label, _) in enumerate(parts))
    return f"[{out}]\n {legend}"


class Progress:
    """The reporter handed to the pipeline: ``progress(phase, message)``."""

    def __init__(self, stream: TextIO | None = None, quiet: bool = False) -> None:
        # Looked up per instance, not bound at import: whoever swaps sys.stderr (click's
        # CliRunner, contextlib.redirect_stderr) must get the progress too.
        self.stream = sys.stderr if stream is None else stream
        self.quiet = quiet
        self.tty = self.stream.isatty()
        self.start = time.monotonic()
        self._block_lines = 0

    def __call__(self, phase: str, message: str) -> None:
        if self.quiet:
            return
        elapsed = time.monotonic() - self.start
        lines = message.splitlines() or [""]
        if self.tty and not message.startswith(("FAILED", "warning")):
            # Redraw the block in place: one line for the phase, one per replica below it.
            width = os.get_terminal_size(self.stream.fileno()).columns
            head = f"{paint(f'[{phase:>9}]', 'bold', self.stream)} {elapsed:6.1f}s  "
            block = [(head + lines[0])[: width + 20]] + [f"{'':>20}{line}"[:width] for line in lines[1:]]
            self._erase_block()
            self.stream.write("\n".join(block))
            self._block_lines = len(block)
        else:
            self.finish_line()
            stamp = dt.datetime.now(dt.timezone.utc).strftime("%H:%M:%SZ")
            prefix = f"{stamp} [{phase}] +{elapsed:.1f}s "
            self.stream.write("".join(f"{prefix}{line}\n" for line in lines))
        self.stream.flush()

    def _erase_block(self) -> None:
        if self._block_lines:
            # Up to the block's first line, then clear to the end of the screen.
            up = f"\033[{self._block_lines - 1}F" if self._block_lines > 1 else "\r"
            self.stream.write(up + "\033[J")

    def finish_line(self) -> None:
        if self._block_lines:
            self.stream.write("\n")
            self._block_lines = 0
