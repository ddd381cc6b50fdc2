"""``--set key=value``: Helm-style overrides applied to a profile document before it is validated.

A key is a dotted path of the profile's YAML keys as written (camelCase), with ``[N]`` for a list
item and ``\\.`` for a dot inside a key (``metadata.labels.example\\.com/team=ml``). The value is read
as one YAML value, so ``32`` is a number and ``true`` a boolean; quote it to keep a string. Each
overridden path remembers the ``--set`` it came from, so a validation error names it instead of a
line of the file.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import yaml

from orchestrator import errors, yaml_text
from orchestrator.profile import strictyaml

_SEGMENT = re.compile(r"((?:[^.\[\]\\]|\\.)+)((?:\[\d+\])*)")
_INDEX = re.compile(r"\[(\d+)\]")


@dataclasses.dataclass(frozen=True)
class Override:
    path: strictyaml.Path
    value: object  # as YAML reads it
    text: str  # as the user typed it, for messages and the record


def parse(text: str) -> Override:
    """``engine.maxNumSeqs=32`` as the path ``("engine", "maxNumSeqs")`` and the value ``32``."""
    key, eq, raw = text.partition("=")
    if not eq or not key:
        raise errors.UsageError(
            f"--set {text}: expected KEY=VALUE with a dotted profile path, e.g. --set engine.maxNumSeqs=32"
        )
    path: list[str | int] = []
    for part in _split_dots(key):
        match = _SEGMENT.fullmatch(part)
        if match is None:
            raise errors.UsageError(
                f"--set {text}: {key!r} is not a profile path; write keys separated by dots and list items as "
                "[N], e.g. placement.tolerations[0].key"
            )
        path.append(match.group(1).replace("\\", ""))
        path.extend(int(i) for i in _INDEX.findall(match.group(2)))
    try:
        strictyaml.check_line_separators(raw)
        value = yaml.safe_load(raw) if raw.strip() else ""
    except strictyaml.YamlProblem as e:
        raise errors.UsageError(f"--set {key}: {e.message}") from e
    except (ValueError, RecursionError) as e:  # a number past Python's 4,300 digits, or [[[[… nested past the stack
        raise errors.UsageError(
            f"--set {errors.shorten(text, 60)}: the value is a number of more than 4,300 digits or is nested too "
            "deeply; no profile field takes that: quote it to pass a string"
        ) from e
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise errors.UsageError(
            f"--set {text}: the value is not valid YAML ({problem}); quote it to pass a string, "
            f"e.g. --set {key}='\"{raw}\"'"
        ) from e
    return Override(tuple(path), value, text)


def parse_all(texts: Sequence[str]) -> list[Override]:
    return [parse(t) for t in texts]


def _split_dots(key: str) -> list[str]:
    parts, current, escaped = [], "", False
    for ch in key:
        if escaped:
            current += "\\" + ch
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ".":
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return parts


# The default of a field the document does not write (a list's default items), by its path; None: none.
Defaults = Callable[[strictyaml.Path], object]


def apply(doc: strictyaml.Document, items: Sequence[Override], defaults: Defaults | None = None) -> strictyaml.Document:
    """A new document with each override set, in order; the overridden paths (and list items a ``--set``
    added) remember their ``--set``.

    ``[N]`` addresses the effective list: the file's, or, where the file writes none, the field's default
    (``placement.tolerations`` holds the ``nvidia.com/gpu`` toleration). One past the end adds an item and
    keeps the default ones; an index into a default item is refused, since it would silently change or drop
    a default the user never saw: replacing the list is said whole, ``--set 'KEY=[…]'``.
    """
    if not items:
        return doc
    data = {key: _copy(value) for key, value in doc.data.items()}
    origins = dict(doc.origins)
    seeded: dict[strictyaml.Path, int] = {}  # lists filled from their default -> how many default items
    for item in items:
        for added in _set(data, item, defaults or (lambda _path: None), seeded):
            origins.setdefault(added, f"--set {item.text}")
        origins[item.path] = f"--set {item.text}"
    return strictyaml.Document(data, doc.lines, origins)


def _copy(value: object) -> object:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _set(
    data: dict[str, object], item: Override, defaults: Defaults, seeded: dict[strictyaml.Path, int]
) -> list[strictyaml.Path]:
    """Set ``item`` in ``data``; return the paths of the list items it added."""
    # A walk through YAML data: a mapping or a list at each step, checked before it is indexed.
    node: Any = data
    added: list[strictyaml.Path] = []
    for depth, part in enumerate(item.path):
        last = depth == len(item.path) - 1
        nxt = item.path[depth + 1] if not last else None
        here = item.path[:depth]
        where = _dotted(here) or "the profile"
        if isinstance(part, int):
            if not isinstance(node, list):
                raise errors.UsageError(f"--set {item.text}: {where} is not a list, so [{part}] cannot index it")
            if part < seeded.get(here, 0):
                raise _default_item(item, here, node[: seeded[here]], part)
            if part > len(node):
                raise errors.UsageError(
                    f"--set {item.text}: {where} has {len(node)} item(s); set [{len(node)}] to add one, "
                    f"or an index below {len(node)} to change one"
                )
            if part == len(node):
                node.append(None)
                added.append(item.path[: depth + 1])
        elif not isinstance(node, dict):
            raise errors.UsageError(
                f"--set {item.text}: {where} holds a {type(node).__name__}, not a mapping, so it has no key {part!r}"
            )
        if last:
            node[part] = item.value
            return added
        child = node[part] if (isinstance(part, int) or part in node) else None
        if child is None:
            child = {}
            if isinstance(nxt, int):
                default = _copy(defaults(item.path[: depth + 1]) or [])
                if isinstance(default, list) and default:
                    seeded[item.path[: depth + 1]] = len(default)
                child = default
            node[part] = child
        node = child
    return added


def _default_item(item: Override, path: strictyaml.Path, default: list[object], index: int) -> errors.UsageError:
    shown = yaml.safe_dump(default, default_flow_style=True, sort_keys=False, width=1_000_000).strip()
    name = _dotted(path)
    return errors.UsageError(
        f"--set {item.text}: the profile does not write {name}, so it holds its default, {shown}, and [{index}] "
        f"would change that default item instead of adding yours. To add an item and keep the default, use "
        f"[{len(default)}] (e.g. --set {name}[{len(default)}].key=…); to replace the list on purpose, give it whole: "
        f"--set '{name}=[…]' (with the default item in it, if you still want it)"
    )


def _dotted(path: strictyaml.Path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def effective_text(data: Mapping[str, object], source: str, changes: Sequence[str]) -> str:
    """The effective profile as YAML, headed by what changed it, for the release record: the text
    parses to exactly the profile that was deployed, and says why it differs from the file."""
    # One comment line each, whatever the change holds: a newline in a value would end the comment
    # and leave the rest of it as YAML (json.dumps escapes it; plain values print as typed).
    shown = [json.dumps(change) if "\n" in change or "\r" in change else change for change in changes]
    source_shown = json.dumps(source) if "\n" in source or "\r" in source else source
    header = [f"# {source_shown}, as deployctl applied it:"] + [f"#   {change}" for change in shown]
    return (
        "\n".join(header)
        + "\n"
        + yaml_text.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)
    )
