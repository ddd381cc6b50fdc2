"""How deployctl prints: tables and bars for people, JSON/YAML for pipelines, progress for both.

On a terminal, progress is one updating line per phase; when stdout is not a TTY (CI logs) it is
plain timestamped lines on stderr; with ``--output json`` only the final object reaches stdout.
``NO_COLOR`` turns colour off.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

import yaml


def color_enabled(stream: TextIO) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def paint(text: str, color: str, stream: TextIO = sys.stdout) -> str:
    codes = {"red": "31", "green": "32", "yellow": "33", "bold": "1", "dim": "2"}
    if not color_enabled(stream):
        return text
    return f"\033[{codes[color]}m{text}\033[0m"


def emit(data: Any, fmt: str) -> str:
    """Serialise for --output json|yaml (deterministic)."""
    if fmt == "yaml":
        return yaml.safe_dump(data, sort_keys=True, default_flow_style=False, allow_unicode=True).rstrip()
    return json.dumps(data, indent=2, sort_keys=True, default=str)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
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

    def __init__(self, stream: TextIO = sys.stderr, quiet: bool = False) -> None:
        self.stream = stream
        self.quiet = quiet
        self.tty = stream.isatty()
        self.start = time.monotonic()
        self._open_line = False

    def __call__(self, phase: str, message: str) -> None:
        if self.quiet:
            return
        elapsed = time.monotonic() - self.start
        first = message.splitlines()[0] if message else ""
        if self.tty and not message.startswith(("FAILED", "warning")):
            line = f"{paint(f'[{phase:>9}]', 'bold', self.stream)} {elapsed:6.1f}s  {first}"
            width = os.get_terminal_size(self.stream.fileno()).columns if self.tty else 120
            self.stream.write("\r\033[K" + line[: width + 20])
            self._open_line = True
        else:
            self.finish_line()
            stamp = dt.datetime.now(dt.timezone.utc).strftime("%H:%M:%SZ")
            self.stream.write(f"{stamp} [{phase}] +{elapsed:.1f}s {message}\n")
        self.stream.flush()

    def finish_line(self) -> None:
        if self._open_line:
            self.stream.write("\n")
            self._open_line = False
