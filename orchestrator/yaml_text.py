"""Writing YAML that every reader reads back as written: the one dumper deployctl uses.

YAML 1.1 (PyYAML, and the Go YAML that kubectl and Helm use) reads U+0085, U+2028 and U+2029 as line
breaks, and folds them into a space or a newline; YAML 1.2 and JSON read them as text. PyYAML writes
them raw, so a value holding one changed on its way through a rendered manifest or a record. This
dumper writes such a string double-quoted, where they are escapes (``\\N``, ``\\L``, ``\\P``).
"""

from __future__ import annotations

import yaml

LINE_SEPARATORS = {
    "\x85": "U+0085 (next line)",
    "\u2028": "U+2028 (line separator)",
    "\u2029": "U+2029 (paragraph separator)",
}


class _Dumper(yaml.SafeDumper):
    """SafeDumper whose strings that hold a line separator are written double-quoted and escaped."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = '"' if any(char in value for char in LINE_SEPARATORS) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def safe_dump(
    data: object, *, sort_keys: bool, default_flow_style: bool, allow_unicode: bool, width: int | None = None
) -> str:
    """``yaml.safe_dump`` that keeps line separators exact."""
    text: str = yaml.dump(
        data,
        Dumper=_Dumper,
        sort_keys=sort_keys,
        default_flow_style=default_flow_style,
        allow_unicode=allow_unicode,
        width=width,
    )
    return text
