"""Strict YAML reading for profiles: one plain mapping, no tricks, and the line of every key.

Profiles are small, hand-written documents, so anything unusual is more likely a mistake or an
attack than a feature: aliases (the "billion laughs" bomb), duplicate keys (the last silently
wins in PyYAML), several documents, binary data, huge files and deep nesting are all refused.
Every value's source line is kept so validation errors can point at the line to fix.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

import yaml

from orchestrator import yaml_text

MAX_BYTES = 1024 * 1024  # a real profile is a few KiB; more is a mistake or an attack
MAX_DEPTH = 32

Path = tuple[str | int, ...]
_PLAIN_COLLECTION_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")
_MERGE_TAG = "tag:yaml.org,2002:merge"
# YAML 1.1 (PyYAML, and Go's YAML for kubectl) reads these as line breaks and folds them into a
# space or a newline; YAML 1.2 and JSON read them as text. A raw one would mean different values to
# different readers, so it is refused; written escaped ("\u2028" in double quotes) it is exact.
LINE_SEPARATORS = yaml_text.LINE_SEPARATORS


class YamlProblem(ValueError):
    """The text is not an acceptable profile document; ``line`` is 1-based when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


@dataclasses.dataclass(frozen=True)
class Document:
    data: dict[str, object]
    lines: dict[Path, int]  # path of a key or list item -> 1-based line
    # Paths set from outside the text (``--set``, ``-n``) -> what set them, for messages.
    origins: dict[Path, str] = dataclasses.field(default_factory=dict)
    # Scalars YAML read as something other than a string (true, yes, 1.0, 2024-01-01) -> the text as
    # written, so a message can show `yes`, not the True it became.
    scalars: dict[Path, str] = dataclasses.field(default_factory=dict)

    def origin_of(self, path: Path) -> str | None:
        """What set ``path`` or one of its parents from outside the text, if anything did."""
        for cut in range(len(path), 0, -1):
            origin = self.origins.get(tuple(path[:cut]))
            if origin is not None:
                return origin
        return None

    def line_of(self, path: Path) -> int | None:
        """The line of ``path`` or, when it is absent (a missing field), of its nearest parent."""
        for cut in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:cut]))
            if line is not None:
                return line
        return None


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader that refuses anchors/aliases at compose time, before any expansion happens."""

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise YamlProblem(
                "YAML aliases (*name) are not allowed in a profile; write the value out in full",
                event.start_mark.line + 1,
            )
        node = super().compose_node(parent, index)
        if node is not None and getattr(node, "anchor", None):
            raise YamlProblem("YAML anchors (&name) are not allowed in a profile", node.start_mark.line + 1)
        return node


def parse(raw: bytes) -> Document:
    """Parse profile bytes into plain data plus a line map, or raise YamlProblem."""
    if len(raw) > MAX_BYTES:
        raise YamlProblem(f"the file is over {MAX_BYTES:,} bytes; a profile must be under {MAX_BYTES:,} bytes")
    if b"\x00" in raw:
        raise YamlProblem("the file contains NUL bytes: it is binary, not a YAML profile")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise YamlProblem(f"the file is not UTF-8 text (byte {e.start}); save it as UTF-8") from e
    if not text.strip():
        raise YamlProblem("the file is empty; start from one of the examples in profiles/")
    check_line_separators(text)
    loader = _NoAliasLoader(text)
    try:
        if not loader.check_node():
            raise YamlProblem("the file holds no YAML document")
        root = loader.get_node()
        if loader.check_node():
            raise YamlProblem("the file holds several YAML documents (---); a profile is one document")
    except yaml.MarkedYAMLError as e:
        line = e.problem_mark.line + 1 if e.problem_mark else None
        raise YamlProblem(f"YAML syntax error: {e.problem or e}", line) from e
    except yaml.YAMLError as e:
        raise YamlProblem(f"YAML error: {e}") from e
    except RecursionError as e:
        raise YamlProblem("the document is nested too deeply to be a profile") from e
    finally:
        loader.dispose()
    if not isinstance(root, yaml.MappingNode):
        kind = "a list" if isinstance(root, yaml.SequenceNode) else "a single value"
        raise YamlProblem(f"the document is {kind}; a profile is a mapping with apiVersion, kind, …", 1)
    lines: dict[Path, int] = {(): root.start_mark.line + 1}
    scalars: dict[Path, str] = {}
    data = _convert(root, (), lines, loader, scalars)
    assert isinstance(data, dict)
    return Document(data=data, lines=lines, scalars=scalars)


def quoting_hint(doc: Document, path: Path, value: object) -> str | None:
    """For a value YAML read as a boolean, number, date or null where a string is wanted: the
    message that says so and how to quote it; None for any other value."""
    kind = _YAML_KINDS.get(type(value))
    if kind is None:
        return None
    written = doc.scalars.get(tuple(path))
    if written is None:  # set from outside the text (--set, an object read from the cluster): the text is gone
        shown = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        return f"YAML reads the value as {kind} ({shown}); quote it to keep it a string"
    if not written:
        return f'an empty value is {kind} in YAML; write a string, or quote an empty one: ""'
    return f'`{written}` is {kind} in YAML; quote it: "{written}"'


_YAML_KINDS: dict[type, str] = {
    bool: "a boolean",
    int: "a number",
    float: "a number",
    datetime.date: "a date",
    datetime.datetime: "a timestamp",
    type(None): "null",
}


def _convert(
    node: yaml.Node, path: Path, lines: dict[Path, int], loader: yaml.SafeLoader, scalars: dict[Path, str]
) -> object:
    if len(path) > MAX_DEPTH:
        raise YamlProblem(f"the document nests deeper than {MAX_DEPTH} levels", node.start_mark.line + 1)
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.tag not in _PLAIN_COLLECTION_TAGS:
        # A tag such as !!set or !!python/object asks for a type a profile never holds.
        raise YamlProblem(
            f"YAML tag {node.tag!r} is not allowed in a profile; write a plain mapping or list",
            node.start_mark.line + 1,
        )
    if isinstance(node, yaml.MappingNode):
        out: dict[str, object] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise YamlProblem("mapping keys must be plain strings", key_node.start_mark.line + 1)
            line = key_node.start_mark.line + 1
            if key_node.tag == _MERGE_TAG:
                raise YamlProblem("YAML merge keys (<<) are not allowed in a profile; write the keys out in full", line)
            key = str(_construct(key_node, loader))
            if key in out:
                where = ".".join(str(p) for p in (*path, key))
                raise YamlProblem(
                    f"duplicate key {where!r} (first on line {lines[(*path, key)]}); keep one of them", line
                )
            lines[(*path, key)] = line
            out[key] = _convert(value_node, (*path, key), lines, loader, scalars)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + 1
            items.append(_convert(item, (*path, index), lines, loader, scalars))
        return items
    value = _construct(node, loader)
    if not isinstance(value, str) and isinstance(node, yaml.ScalarNode):
        scalars[path] = node.value
    return value


def _construct(node: yaml.Node, loader: yaml.SafeLoader) -> object:
    try:
        return loader.construct_object(node, deep=True)
    except yaml.YAMLError as e:
        raise YamlProblem(f"cannot read value: {e}", node.start_mark.line + 1) from e
    except ValueError as e:
        # Python refuses to convert an integer of more than 4,300 digits (CVE-2020-10735): no profile
        # number is that long.
        raise YamlProblem(
            f"the number {node.value[:20]}… ({len(node.value):,} characters) is too long to be a profile value; "
            "write a number of at most a few digits, or quote it to make it a string",
            node.start_mark.line + 1,
        ) from e


def check_line_separators(text: str) -> None:
    """Refuse a raw U+0085, U+2028 or U+2029 (:data:`LINE_SEPARATORS`), naming its line."""
    for char, name in LINE_SEPARATORS.items():
        at = text.find(char)
        if at >= 0:
            line = text.count("\n", 0, at) + 1
            raise YamlProblem(
                f"the text holds a raw {name}, which YAML readers disagree on (a line break or a character); "
                f'write it escaped inside double quotes ("\\u{ord(char):04x}") or remove it',
                line,
            )


def dump(data: Mapping[str, object]) -> str:
    """Deterministic YAML for data we wrote ourselves (sorted keys, block style)."""
    return yaml_text.safe_dump(dict(data), sort_keys=True, default_flow_style=False, allow_unicode=True)
