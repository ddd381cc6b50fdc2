#!/usr/bin/env python3
"""Generate orchestrator/data/engine_flags/<engine>/<version>.json: every option a serving engine accepts.

The tables have the shape of orchestrator/data/vllm_flags/*.json (format 2), plus ``engine`` and
``dialect`` (the command-line library whose rules apply); orchestrator/engines/flags.py checks a
profile's extraArgs against them. Each is read from the engine's own published definitions, as text:
no engine is installed or imported (none would import without its GPU stack anyway).

``sglang VERSION [--wheel PATH]`` (``python -m sglang.launch_server`` / ``sglang serve``; argparse)
    The PyPI wheel (pip-downloaded alone when no --wheel is given; an sdist works too). SGLang's
    ``ServerArgs.add_cli_args`` in ``sglang/srt/server_args.py`` builds a plain
    ``argparse.ArgumentParser`` in two ways, and both are read with ``ast``:

    * ``add_cli_args_from_dataclass(parser, ServerArgs)`` (from 0.5.2x): one option per field of
      the namespace classes listed in ``_INPUT_NAMESPACES`` (``sglang/srt/arg_groups/fields/``)
      whose annotation is ``A[T, "help"]`` or ``A[T, Arg(...)]``. This script re-does what
      ``arg_groups/arg_utils.py`` does with a field: ``--field-name`` (or ``Arg.cli_name``) plus
      ``Arg.aliases``; ``Arg.action`` as given; ``Literal[...]`` → choices; ``list[X]`` →
      ``nargs="+"``; ``bool`` → store_true; other scalars → ``type=int/float/str`` (any other
      annotation → str), ``Arg.type_parser`` replacing it; ``Arg(no_cli=True)`` → no option.
    * ``parser.add_argument("--flag", type=..., choices=..., action=..., nargs=...)`` calls made
      directly in ``add_cli_args`` (older versions register every option this way).

    ``choices=`` naming a module-level constant (``ATTENTION_BACKEND_CHOICES``, ``Backend.ALL``) is
    followed through the imports inside the wheel; choices computed at run time (a registry, an
    environment variable) are left out: not checked. Plugins can add to SGLang's choice lists.

``tgi VERSION --source launcher/src/main.rs`` (``text-generation-launcher``; clap 4 derive)
    The ``#[derive(Parser)] struct Args`` of the launcher: each field with ``long`` becomes
    ``--kebab-case-name`` (``long = "x"`` names it), ``short`` the field's first letter (or the one
    given); ``default_value`` is the default; ``bool`` is a switch (``ArgAction::SetTrue``: no value,
    no ``--no-`` form); ``Option<T>`` is optional; ``Vec<T>`` repeats (append), with
    ``value_delimiter`` splitting a value; a field whose type is an enum deriving ``ValueEnum`` takes
    one of its variants, kebab-cased unless ``#[clap(name = "...")]``/``#[value(name = "...")]``
    renames it (clap 4 picks the enum parser with or without ``value_enum``). clap adds ``--help``/
    ``-h`` and, with ``#[clap(version)]``, ``--version``/``-V``.

``trtllm VERSION --source tensorrt_llm/commands/serve.py`` (``trtllm-serve``; click)
    The ``@click.option`` decorators of the ``@click.command("serve")`` function (the command
    ``trtllm-serve MODEL`` runs; ``--command`` picks another). Declarations are taken as written
    (click does not turn ``--tp_size`` into ``--tp-size``); a bare identifier is the dest;
    ``is_flag=True`` and ``"--x/--no-x"`` are switches; ``multiple=True`` repeats;
    ``type=click.Choice([...])`` (or a ``click.Choice`` subclass defined in the file that takes
    ``(choices, aliases)``) gives choices; ``type=int/float/str``; ``click.Path`` and other types are
    "other". click adds ``--help``.

Every option of a table is {names, negations, dest, action, switch, nargs, type, choices?, default?,
nullable?} as in the vLLM tables; ``type`` is one of bool/int/float/str/json/other, or null when the
source does not pin it down (never guessed). clap's ``value_delimiter`` is kept as ``delimiter``.

Usage:
    python scripts/gen_engine_flags.py sglang 0.5.23                 # pip-downloads the wheel
    python scripts/gen_engine_flags.py sglang 0.5.23 --wheel PATH
    python scripts/gen_engine_flags.py tgi 3.3.7 --source main.rs --source-note "..."
    python scripts/gen_engine_flags.py trtllm 1.2.1 --source serve.py -o /tmp/t.json
"""

from __future__ import annotations

import argparse
import ast
import pathlib
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from gen_vllm_flags import write  # one option per line: the vLLM tables' layout

REPO = pathlib.Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "orchestrator" / "data" / "engine_flags"
FORMAT = 2
ENGINES = ("sglang", "tgi", "trtllm")
DIALECTS = {"sglang": "argparse", "tgi": "clap", "trtllm": "click"}
KINDS = {
    "bool": "a switch",
    "int": "an integer (int(); clap: the field's Rust integer type)",
    "float": "a number (float())",
    "str": "any string",
    "json": "JSON (json.loads())",
    "other": "a type callable this script does not model: not checked",
}
NOTES = {
    "argparse": (
        "argparse (allow_abbrev): a unique prefix of a long flag is accepted, --x=value and --x value both "
        "work; no positional arguments. Per option: names take its value or switch it on, negations switch it "
        "off; type is the kind of value (null: not known, not checked); nullable: 'None' and '' also mean "
        "unset. Choice lists that plugins can extend list the built-in ones. defaults repeats each option's "
        "default by its first name."
    ),
    "clap": (
        "clap 4: flags exactly as listed (no prefixes, no underscores for dashes), --x=value, --x value, -xVALUE "
        "and -x value; a switch takes no value and has no --no- form; delimiter: one value may hold several, "
        "split on it; a value starting with '-' is read as a flag. type is the kind of value (null: not known). "
        "Every option can also be set by its environment variable (not recorded). defaults repeats each "
        "option's default by its first name."
    ),
    "click": (
        "click: flags exactly as declared (underscores stay underscores: --tp_size, not --tp-size), no prefixes; "
        "--x=value and --x value; negations are the --no- halves of --x/--no-x pairs; multiple options repeat "
        "(action append). type is the kind of value (null: not known). defaults repeats each option's default "
        "by its first name."
    ),
}
LITERAL = object()  # marks "not a literal" for the constant resolver


def _opt(
    names: list[str],
    dest: str,
    *,
    negations: list[str] | None = None,
    action: str = "store",
    nargs: int | str | None = None,
    kind: str | None = "str",
    choices: list[Any] | None = None,
    default: Any = LITERAL,
    nullable: bool = False,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One table entry, keys in the vLLM tables' order."""
    switch = nargs == 0
    entry: dict[str, Any] = {
        "names": names,
        "negations": negations or [],
        "dest": dest,
        "action": action,
        "switch": switch,
        "nargs": nargs,
        "type": "bool" if switch else kind,
    }
    if nullable and not switch:
        entry["nullable"] = True
    if choices is not None and not switch:
        entry["choices"] = choices
    if default is not LITERAL:
        entry["default"] = default
    if extra:
        entry.update(extra)
    return entry


def _jsonable(value: Any) -> Any:
    """``value`` if JSON can hold it, else LITERAL."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else LITERAL
    if isinstance(value, (list, tuple)):
        items = [_jsonable(v) for v in value]
        return LITERAL if any(i is LITERAL for i in items) else items
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        mapping = {k: _jsonable(v) for k, v in value.items()}
        return LITERAL if any(v is LITERAL for v in mapping.values()) else mapping
    return LITERAL


# --- SGLang: the wheel's Python files, read with ast ---------------------------------------------------------


class PySource:
    """The .py files of a wheel or sdist, parsed on demand, and constants followed through imports."""

    def __init__(self, files: dict[str, bytes], label: str) -> None:
        self.files = files  # "sglang/srt/server_args.py" → bytes
        self.label = label
        self._trees: dict[str, ast.Module | None] = {}

    @classmethod
    def from_archive(cls, path: pathlib.Path, package: str = "sglang") -> PySource:
        files: dict[str, bytes] = {}
        pattern = re.compile(rf"(?:^|/)({package}/.*\.py)$")
        if path.suffix == ".whl" or zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                for name in z.namelist():
                    m = pattern.search(name)
                    if m and "/python/" not in name.replace(m.group(1), ""):
                        files.setdefault(m.group(1), z.read(name))
        else:
            with tarfile.open(path) as t:
                for member in t.getmembers():
                    m = pattern.search(member.name)
                    f = t.extractfile(member) if m and member.isfile() else None
                    if m and f is not None:
                        files.setdefault(m.group(1), f.read())
        if not files:
            raise SystemExit(f"{path.name} holds no {package}/*.py files")
        return cls(files, path.name)

    @classmethod
    def from_texts(cls, texts: dict[str, str], label: str = "inline") -> PySource:
        """Module dotted name → source text (tests)."""
        return cls({k.replace(".", "/") + ".py": v.encode() for k, v in texts.items()}, label)

    def module(self, dotted: str) -> ast.Module | None:
        if dotted not in self._trees:
            base = dotted.replace(".", "/")
            data = self.files.get(base + ".py", self.files.get(base + "/__init__.py"))
            self._trees[dotted] = ast.parse(data) if data is not None else None
        return self._trees[dotted]

    def lookup(self, module: str, name: str, depth: int = 0) -> tuple[str, ast.AST] | None:
        """Where ``name`` of ``module`` is bound at module level: (module, value expr or ClassDef)."""
        tree = self.module(module)
        if tree is None or depth > 8:
            return None
        found: tuple[str, ast.AST] | None = None
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                found = (module, node)
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                found = (module, node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                if node.value is not None:
                    found = (module, node.value)
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        plain = module.replace(".", "/") + ".py" in self.files
                        source = _absolute(module, node.module, node.level, plain)
                        found = self.lookup(source, alias.name, depth + 1) if source else None
        return found

    def value(self, module: str, node: ast.AST | None, scope: ast.ClassDef | None = None, depth: int = 0) -> Any:
        """The literal ``node`` evaluates to (lists, tuples, dicts, strings, numbers, names of such), or LITERAL."""
        if node is None or depth > 12:
            return LITERAL
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items: list[Any] = []
            for elt in node.elts:
                if isinstance(elt, ast.Starred):
                    inner = self.value(module, elt.value, scope, depth + 1)
                    if not isinstance(inner, (list, tuple)):
                        return LITERAL
                    items += list(inner)
                else:
                    items.append(self.value(module, elt, scope, depth + 1))
            if any(i is LITERAL for i in items):
                return LITERAL
            return sorted(set(items), key=repr) if isinstance(node, ast.Set) else items
        if isinstance(node, ast.Dict):
            keys = [self.value(module, k, scope, depth + 1) for k in node.keys]
            vals = [self.value(module, v, scope, depth + 1) for v in node.values]
            if any(x is LITERAL for x in keys + vals):
                return LITERAL
            return dict(zip(keys, vals, strict=True))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = self.value(module, node.operand, scope, depth + 1)
            return -inner if isinstance(inner, (int, float)) and not isinstance(inner, bool) else LITERAL
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left = self.value(module, node.left, scope, depth + 1)
            right = self.value(module, node.right, scope, depth + 1)
            if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
                return list(left) + list(right)
            if isinstance(left, str) and isinstance(right, str):
                return left + right
            return LITERAL
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 1:
            if node.func.id in ("list", "tuple", "sorted", "set", "frozenset") and not node.keywords:
                inner = self.value(module, node.args[0], scope, depth + 1)
                if isinstance(inner, (list, tuple)):
                    return (
                        sorted(set(inner), key=repr) if node.func.id in ("set", "frozenset", "sorted") else list(inner)
                    )
                if isinstance(inner, dict) and node.func.id in ("list", "tuple"):
                    return list(inner)
            return LITERAL
        if isinstance(node, ast.Name):
            if scope is not None:
                for stmt in scope.body:
                    if isinstance(stmt, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id == node.id for t in stmt.targets
                    ):
                        return self.value(module, stmt.value, scope, depth + 1)
            where = self.lookup(module, node.id)
            if where is None or isinstance(where[1], ast.ClassDef):
                return LITERAL
            return self.value(where[0], where[1], None, depth + 1)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            where = self.lookup(module, node.value.id)
            if where is not None and isinstance(where[1], ast.ClassDef):
                cls = where[1]
                for stmt in cls.body:
                    if isinstance(stmt, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id == node.attr for t in stmt.targets
                    ):
                        return self.value(where[0], stmt.value, cls, depth + 1)
                    if (
                        isinstance(stmt, ast.AnnAssign)
                        and isinstance(stmt.target, ast.Name)
                        and stmt.target.id == node.attr
                        and stmt.value is not None
                    ):
                        return self.value(where[0], stmt.value, cls, depth + 1)
        return LITERAL


def _absolute(module: str, target: str | None, level: int, is_plain_module: bool) -> str | None:
    if level == 0:
        return target
    parts = module.split(".")
    base = parts[: len(parts) - level] if is_plain_module else parts[: len(parts) - level + 1]
    return ".".join(base + ([target] if target else [])) or None


_SCALARS = {"str": "str", "int": "int", "float": "float", "bool": "bool"}
# argparse type callables SGLang uses, by name: the kind of value each accepts.
_SGLANG_TYPES = {
    "str": ("str", False),
    "int": ("int", False),
    "float": ("float", False),
    "json.loads": ("json", False),
    "json_list_type": ("json", False),  # orjson.loads
    "nullable_str": ("str", True),  # "" and "None" → None
}
# Custom argparse actions in sglang/srt/arg_groups/argparse_actions.py: their nargs when not given.
_SGLANG_ACTIONS = {
    "DeprecatedAction": 0,
    "DeprecatedStoreTrueAction": 0,
    "DeprecatedStoreConstAction": 0,
    "DeprecatedAliasStoreAction": None,
    "LoRAPathAction": None,
}


def _type_kind(text: str) -> tuple[str | None, bool]:
    if text in _SGLANG_TYPES:
        return _SGLANG_TYPES[text]
    return ("other", False)


class _Annotation:
    """What argparse is given for a field's inner annotation (arg_utils.add_cli_args_from_dataclass)."""

    def __init__(self, src: PySource, module: str, node: ast.expr) -> None:
        self.literal: list[Any] | None = None
        self.list_of: str | None = None  # element kind of list[X]
        self.scalar = "other"  # "bool", "int", "float", "str" or "other" (→ str)
        node = self._unwrap_optional(src, module, node)
        name = _subscript_name(node)
        if name == "Literal" and isinstance(node, ast.Subscript):
            values = src.value(module, node.slice)
            self.literal = list(values) if isinstance(values, (list, tuple)) else [values]
            if any(v is LITERAL for v in self.literal):
                self.literal = None
        elif name in ("list", "List") and isinstance(node, ast.Subscript):
            self.list_of = _SCALARS.get(ast.unparse(node.slice), "str")
        elif isinstance(node, ast.Name) and node.id in _SCALARS:
            self.scalar = node.id
        elif isinstance(node, ast.Name):  # an alias of Literal[...] or Optional[...]?
            where = src.lookup(module, node.id)
            if where is not None and isinstance(where[1], ast.Subscript):
                alias = _Annotation(src, where[0], where[1])
                self.literal, self.list_of, self.scalar = alias.literal, alias.list_of, alias.scalar

    @staticmethod
    def _unwrap_optional(src: PySource, module: str, node: ast.expr) -> ast.expr:
        name = _subscript_name(node)
        if name == "Optional" and isinstance(node, ast.Subscript):
            return node.slice
        members: list[ast.expr] = []
        if name == "Union" and isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple):
            members = list(node.slice.elts)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            members = [node.left, node.right]
        rest = [
            m for m in members if not (isinstance(m, ast.Constant) and m.value is None) and ast.unparse(m) != "None"
        ]
        if members and len(rest) == 1 and len(members) == 2:
            return rest[0]
        return node


def _subscript_name(node: ast.expr) -> str | None:
    base = node.value if isinstance(node, ast.Subscript) else None
    if isinstance(base, ast.Name):
        return base.id
    if isinstance(base, ast.Attribute):
        return base.attr
    return None


def _call_name(node: ast.expr) -> str:
    return ast.unparse(node.func).rsplit(".", 1)[-1] if isinstance(node, ast.Call) else ""


def _struct_fields(
    src: PySource, module: str, cls: ast.ClassDef, depth: int = 0
) -> Iterator[tuple[str, ast.AnnAssign]]:
    """A record class's annotated fields, inherited ones first (msgspec.structs.fields order)."""
    for base in cls.bases:
        if isinstance(base, ast.Name) and depth < 8:
            where = src.lookup(module, base.id)
            if where is not None and isinstance(where[1], ast.ClassDef):
                yield from _struct_fields(src, where[0], where[1], depth + 1)
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if "ClassVar" in ast.unparse(stmt.annotation):
                continue
            yield module, stmt


def dataclass_options(src: PySource, module: str, cls: ast.ClassDef) -> list[dict[str, Any]]:
    """The options add_cli_args_from_dataclass registers for the fields of ``cls`` (defined in ``module``)."""
    options = []
    for where, stmt in _struct_fields(src, module, cls):
        assert isinstance(stmt.target, ast.Name)
        name = stmt.target.id
        ann = stmt.annotation
        if _subscript_name(ann) not in ("A", "Annotated") or not isinstance(ann, ast.Subscript):
            continue
        parts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        inner, meta = parts[0], None
        for part in parts[1:]:
            if isinstance(part, ast.Call) and _call_name(part) == "Arg":
                meta = {kw.arg: kw.value for kw in part.keywords if kw.arg}
                if part.args:  # Arg("help") positionally
                    meta.setdefault("help", part.args[0])
                break
            if isinstance(part, (ast.Constant, ast.JoinedStr, ast.BinOp)) and not (
                isinstance(part, ast.Constant) and not isinstance(part.value, str)
            ):
                meta = {}
                break
        if meta is None:
            continue  # no Arg and no help string: not a CLI option
        if src.value(where, meta.get("no_cli")) is True:
            continue
        cli_name = src.value(where, meta.get("cli_name")) if "cli_name" in meta else None
        if not isinstance(cli_name, str):
            cli_name = "--" + name.replace("_", "-")
        aliases = src.value(where, meta["aliases"]) if "aliases" in meta else []
        if not isinstance(aliases, list):
            raise SystemExit(f"{cls.name}.{name}: aliases are not a literal list; adapt the script")
        names = [cli_name, *aliases]
        default: Any = LITERAL
        if stmt.value is not None:
            value = stmt.value
            if isinstance(value, ast.Call) and _call_name(value) == "field":
                kw = {k.arg: k.value for k in value.keywords}
                if "default" in kw:
                    value = kw["default"]
                elif "default_factory" in kw and ast.unparse(kw["default_factory"]) in ("list", "dict"):
                    value = ast.List(elts=[]) if ast.unparse(kw["default_factory"]) == "list" else ast.Dict([], [])
            default = _jsonable(src.value(where, value))
        required = stmt.value is None and src.value(where, meta.get("required")) is not False

        choices = src.value(where, meta["choices"]) if "choices" in meta else None
        choices = None if choices is LITERAL else choices
        type_parser = ast.unparse(meta["type_parser"]) if "type_parser" in meta else None
        nargs = src.value(where, meta["nargs"]) if "nargs" in meta else None
        extra = {"required": True} if required else None

        if "action" in meta and ast.unparse(meta["action"]) not in ("None",):
            action_text = ast.unparse(meta["action"]).strip("'\"")
            kwargs: dict[str, Any] = {}  # the literal ones; type= is read by _action_kwarg_type
            action_kwargs = meta.get("action_kwargs")
            if isinstance(action_kwargs, ast.Dict):
                for k, v in zip(action_kwargs.keys, action_kwargs.values, strict=True):
                    if isinstance(k, ast.Constant) and k.value != "type":
                        kwargs[str(k.value)] = src.value(where, v)
            if "BooleanOptionalAction" in action_text:
                options.append(
                    _opt(
                        names,
                        name,
                        negations=["--" + "no-" + n[2:] for n in names if n.startswith("--")],
                        action="boolean",
                        nargs=0,
                        default=default,
                    )
                )
            elif action_text in ("store_true", "store_false"):
                options.append(_opt(names, name, action=action_text, nargs=0, default=default))
            else:
                short = action_text.rsplit(".", 1)[-1]
                if short not in _SGLANG_ACTIONS:
                    raise SystemExit(f"{cls.name}.{name}: unknown action {action_text}; adapt the script")
                options.append(
                    _opt(
                        names,
                        name,
                        action="custom",
                        nargs=kwargs.get("nargs", _SGLANG_ACTIONS[short]),
                        kind=_action_kwarg_type(meta.get("action_kwargs")) or "str",
                        default=default,
                        extra=extra,
                    )
                )
            continue

        ann_info = _Annotation(src, where, inner)
        if ann_info.literal is not None:
            first = ann_info.literal[0] if ann_info.literal else ""
            kind, nullable = (
                _type_kind(type_parser) if type_parser else (_SCALARS.get(type(first).__name__, "str"), False)
            )
            if kind == "bool":
                kind = "other"  # type=bool on a value: argparse's bool("False") is True; not modelled
            options.append(
                _opt(
                    names,
                    name,
                    kind=kind,
                    nullable=nullable,
                    choices=choices or ann_info.literal,
                    default=default,
                    extra=extra,
                )
            )
            continue
        if ann_info.list_of is not None and type_parser is None:
            kind = ann_info.list_of if ann_info.list_of in ("int", "float", "str") else "str"
            options.append(
                _opt(names, name, nargs=nargs or "+", kind=kind, choices=choices, default=default, extra=extra)
            )
            continue
        if ann_info.scalar == "bool":
            options.append(_opt(names, name, action="store_true", nargs=0, default=default))
            continue
        if type_parser:
            kind, nullable = _type_kind(type_parser)
        else:
            kind, nullable = (ann_info.scalar if ann_info.scalar in ("int", "float", "str") else "str"), False
        options.append(
            _opt(
                names,
                name,
                nargs=nargs,
                kind=kind,
                nullable=nullable,
                choices=choices or None,
                default=default,
                extra=extra,
            )
        )
    return options


def _action_kwarg_type(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Dict):
        for k, v in zip(node.keys, node.values, strict=True):
            if isinstance(k, ast.Constant) and k.value == "type":
                return _type_kind(ast.unparse(v))[0]
    return None


def add_argument_options(
    src: PySource, module: str, func: ast.FunctionDef, field_defaults: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The options of ``parser.add_argument(...)`` calls in ``func`` (SGLang's add_cli_args)."""
    field_defaults = field_defaults or {}
    local_names = {
        t.id for n in ast.walk(func) if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
    }
    options = []
    for node in ast.walk(func):
        if not (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
        ):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not names or len(names) != len(node.args):
            raise SystemExit(f"line {node.lineno}: add_argument with computed names; adapt the script")
        if not any(n.startswith("-") for n in names):
            raise SystemExit(f"line {node.lineno}: positional argument {names[0]}; adapt the script")
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        longs = [n for n in names if n.startswith("--")] or names
        dest_node = kw.get("dest")
        dest = str(dest_node.value) if isinstance(dest_node, ast.Constant) else longs[0].lstrip("-").replace("-", "_")

        default: Any = LITERAL
        if "default" in kw:
            d = kw["default"]
            if isinstance(d, ast.Call) and _call_name(d) == "_declared_default" and d.args:
                field_name = src.value(module, d.args[0])
                default = field_defaults.get(field_name, LITERAL) if isinstance(field_name, str) else LITERAL
            else:
                default = _jsonable(src.value(module, d))
        choices: Any = None
        if "choices" in kw:
            c = kw["choices"]
            uses_local = any(isinstance(n, ast.Name) and n.id in local_names for n in ast.walk(c))
            choices = None if uses_local else src.value(module, c)  # a local list may be added to at run time
            choices = list(choices) if isinstance(choices, (list, tuple)) else None
        nargs: Any = src.value(module, kw["nargs"]) if "nargs" in kw else LITERAL
        action = ast.unparse(kw["action"]).strip("'\"") if "action" in kw else "store"
        short_action = action.rsplit(".", 1)[-1]
        kind, nullable = _type_kind(ast.unparse(kw["type"])) if "type" in kw else ("str", False)

        if "BooleanOptionalAction" in action:
            negs = ["--no-" + n[2:] for n in names if n.startswith("--")]
            options.append(_opt(names, dest, negations=negs, action="boolean", nargs=0, default=default))
        elif action in ("store_true", "store_false", "store_const", "count", "help", "version"):
            options.append(_opt(names, dest, action=action, nargs=0, default=default))
        elif action in ("store", "append", "extend"):
            options.append(
                _opt(
                    names,
                    dest,
                    action=action,
                    nargs=None if nargs is LITERAL else nargs,
                    kind=kind,
                    nullable=nullable,
                    choices=choices,
                    default=default,
                )
            )
        elif short_action in _SGLANG_ACTIONS:
            n = _SGLANG_ACTIONS[short_action] if nargs is LITERAL else nargs
            options.append(
                _opt(
                    names,
                    dest,
                    action="custom",
                    nargs=n,
                    kind=kind,
                    nullable=nullable,
                    choices=choices,
                    default=default,
                )
            )
        else:
            options.append(
                _opt(
                    names, dest, action="custom", nargs=None if nargs is LITERAL else nargs, kind=None, default=default
                )
            )
    return options


def sglang_options(src: PySource, module: str = "sglang.srt.server_args") -> list[dict[str, Any]]:
    tree = src.module(module)
    if tree is None:
        raise SystemExit(f"{src.label} has no {module}")
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs"), None)
    if cls is None:
        raise SystemExit(f"{module} defines no ServerArgs; adapt the script")
    func = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args"), None)
    if func is None:
        raise SystemExit("ServerArgs has no add_cli_args; adapt the script")
    options: list[dict[str, Any]] = []
    from_dataclass = any(
        isinstance(n, ast.Call) and _call_name(n) == "add_cli_args_from_dataclass" for n in ast.walk(func)
    )
    if from_dataclass:
        # ServerArgs' own annotated fields, then those of every _INPUT_NAMESPACES class.
        classes: list[tuple[str, ast.ClassDef]] = [(module, cls)]
        spaces = src.lookup(module, "_INPUT_NAMESPACES")
        if spaces is None or not isinstance(spaces[1], (ast.List, ast.Tuple)):
            raise SystemExit("add_cli_args_from_dataclass without an _INPUT_NAMESPACES list; adapt the script")
        for elt in spaces[1].elts:
            found = src.lookup(module, ast.unparse(elt)) if isinstance(elt, ast.Name) else None
            if found is None or not isinstance(found[1], ast.ClassDef):
                raise SystemExit(f"namespace {ast.unparse(elt)} not found in {src.label}; adapt the script")
            classes.append((found[0], found[1]))
        for where, c in classes:
            options += dataclass_options(src, where, c)
    defaults = {o["dest"]: o["default"] for o in options if "default" in o}
    options += add_argument_options(src, module, func, defaults)
    options.append(_opt(["--help", "-h"], "help", action="help", nargs=0))  # argparse adds it
    return options


def download_sglang(version: str, into: pathlib.Path) -> pathlib.Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", f"sglang=={version}", "--no-deps", "-d", str(into)], check=True
    )
    found = sorted(into.glob(f"sglang-{version}*"))
    if not found:
        raise SystemExit(f"pip downloaded no sglang {version} into {into}")
    return found[0]


# --- TGI: the launcher's clap Args struct ---------------------------------------------------------------------

_RUST_INTS = {"u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize"}


def _rust_kind(ty: str) -> str | None:
    if ty in _RUST_INTS:
        return "int"
    if ty in ("f32", "f64"):
        return "float"
    if ty in ("String", "PathBuf", "OsString"):
        return "str"
    return None


def _kebab(name: str) -> str:
    """clap's kebab-case of a Rust identifier: field names (snake) and variant names (Camel)."""
    name = name.removeprefix("r#")
    if "_" in name or name.islower():
        return name.replace("_", "-").lower()
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", name).lower()


def _attrs(text: str) -> list[str]:
    """The argument lists of #[clap(...)]/#[arg(...)]/#[value(...)]/#[command(...)] attributes in ``text``."""
    found = []
    for m in re.finditer(r"#\[(clap|arg|value|command)\(", text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            if text[i] == '"':
                i = text.index('"', i + 1) if '"' in text[i + 1 :] else len(text)
                while text[i - 1] == "\\":
                    i = text.index('"', i + 1)
            elif text[i] == "(":
                depth += 1
            elif text[i] == ")":
                depth -= 1
            i += 1
        found.append(text[m.end() : i - 1])
    return found


def _attr_items(args: str) -> dict[str, str | bool]:
    """``long, short = 'p', default_value = "x"`` → {"long": True, "short": "p", "default_value": "x"}."""
    items: dict[str, str | bool] = {}
    for m in re.finditer(r'(\w+)\s*(?:=\s*("(?:[^"\\]|\\.)*"|\'.\'|[^,]+))?\s*(?:,|$)', args.strip()):
        key, value = m.group(1), m.group(2)
        if value is None:
            items[key] = True
        else:
            value = value.strip()
            items[key] = value[1:-1] if value[:1] in "\"'" else value
    return items


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(
        re.sub(r"//.*$", "", line) if '"' not in line.split("//")[0] else line for line in text.splitlines()
    )


def _value_enums(text: str) -> dict[str, list[str]]:
    """Enums deriving ValueEnum → their values as clap spells them."""
    enums: dict[str, list[str]] = {}
    for m in re.finditer(
        r"#\[derive\(([^)]*)\)\]\s*((?:#\[[^\]]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?enum\s+(\w+)\s*\{", text
    ):
        if "ValueEnum" not in m.group(1):
            continue
        enum_attrs = _attrs(m.group(2))
        rename = next((_attr_items(a).get("rename_all") for a in enum_attrs if "rename_all" in a), None)
        body_start = m.end()
        depth, i = 1, body_start
        while depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        body = text[body_start : i - 1]
        values = []
        pending: list[str] = []
        for line in body.splitlines():
            line = line.strip()
            if line.startswith("#["):
                if not line.endswith("]"):
                    raise SystemExit(f"enum {m.group(3)}: a multi-line attribute ({line}); adapt the script")
                pending.append(line)
                continue
            vm = re.match(r"(\w+)\s*(?:=\s*[^,]+)?,?$", line)
            if not vm:
                continue
            items: dict[str, str | bool] = {}
            for a in _attrs(" ".join(pending)):
                items.update(_attr_items(a))
            pending = []
            if items.get("skip"):
                continue
            name = items.get("name")
            if isinstance(name, str):
                values.append(name)
            elif rename in (None, "kebab-case", "kebab_case"):
                values.append(_kebab(vm.group(1)))
            elif rename in ("lowercase", "lower"):
                values.append(vm.group(1).lower())
            elif rename in ("snake_case",):
                values.append(_kebab(vm.group(1)).replace("-", "_"))
            else:
                raise SystemExit(f"enum {m.group(3)}: rename_all = {rename!r} not modelled; adapt the script")
        enums[m.group(3)] = values
    return enums


def clap_options(text: str, struct: str = "Args") -> tuple[list[dict[str, Any]], list[str]]:
    """The options of the clap ``#[derive(Parser)] struct`` named ``struct``, and notes on what was odd."""
    text = _strip_comments(text)
    enums = _value_enums(text)
    m = re.search(r"((?:#\[[^\n]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?struct\s+" + re.escape(struct) + r"\s*\{", text)
    if not m:
        raise SystemExit(f"no struct {struct} in the source; adapt the script")
    struct_attrs: dict[str, str | bool] = {}
    for a in _attrs(m.group(1)):
        struct_attrs.update(_attr_items(a))
    depth, i = 1, m.end()
    while depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    body = text[m.end() : i - 1]
    options: list[dict[str, Any]] = []
    notes: list[str] = []
    shorts: dict[str, str] = {}
    for fm in re.finditer(r"((?:\s*#\[[^\n]*\]\s*)*)\s*(?:pub(?:\([^)]*\))?\s+)?(r#)?(\w+)\s*:\s*([^,\n]+?)\s*,", body):
        items: dict[str, str | bool] = {}
        for a in _attrs(fm.group(1)):
            items.update(_attr_items(a))
        field, ty = fm.group(3), re.sub(r"\s+", "", fm.group(4))
        if items.get("skip") or items.get("flatten") or items.get("subcommand"):
            if items.get("flatten") or items.get("subcommand"):
                raise SystemExit(f"{struct}.{field}: flatten/subcommand not modelled; adapt the script")
            continue
        if not items.get("long") and not items.get("short"):
            raise SystemExit(f"{struct}.{field} is positional; adapt the script")
        long = items.get("long")
        names = []
        if long:
            names.append("--" + (long if isinstance(long, str) else _kebab(field)))
        short = items.get("short")
        if short:
            letter = short if isinstance(short, str) else field[0]
            if letter in shorts:
                notes.append(
                    f"-{letter} is derived for both {shorts[letter]} and --{_kebab(field)}; clap's debug build refuses "
                    f"the duplicate, a release build matches the first: -{letter} is recorded for {shorts[letter]} only"
                )
            else:
                shorts[letter] = names[0] if names else field
                names.append("-" + letter)
        optional = ty.startswith("Option<")
        inner = ty[len("Option<") : -1] if optional else ty
        repeated = inner.startswith("Vec<")
        inner = inner[len("Vec<") : -1] if repeated else inner
        action = items.get("action")
        default_raw = items.get("default_value")
        extra: dict[str, Any] = {}
        if isinstance(items.get("value_delimiter"), str):
            extra["delimiter"] = items["value_delimiter"]
        if inner == "bool" and not optional and not repeated and action in (None, True, "ArgAction::SetTrue"):
            options.append(_opt(names, field, action="store_true", nargs=0, default=False))
            continue
        if action not in (None, True, "ArgAction::Set", "ArgAction::Append"):
            raise SystemExit(f"{struct}.{field}: action {action} not modelled; adapt the script")
        choices: list[Any] | None = None
        if inner == "bool":
            kind: str | None = "str"
            choices = ["true", "false"]  # clap's BoolValueParser
        elif inner in enums:
            kind, choices = "str", enums[inner]
        else:
            kind = _rust_kind(inner)
            if kind is None:
                notes.append(f"--{_kebab(field)}: type {inner} not modelled (not checked)")
        if items.get("value_enum") and inner not in enums and inner != "bool":
            raise SystemExit(f"{struct}.{field}: value_enum type {inner} has no ValueEnum enum here; adapt the script")
        default: Any = LITERAL
        if isinstance(default_raw, str):
            default = default_raw
            if kind in ("int", "float") and re.fullmatch(r"[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?", default_raw):
                default = float(default_raw) if kind == "float" else int(float(default_raw))
        elif not optional and not repeated:
            extra["required"] = True
        options.append(
            _opt(
                names,
                field,
                action="append" if repeated else "store",
                nargs=None,
                kind=kind,
                choices=choices,
                default=default,
                extra=extra or None,
            )
        )
    options.append(_opt(["--help", "-h"], "help", action="help", nargs=0))
    if struct_attrs.get("version"):
        options.append(_opt(["--version", "-V"], "version", action="version", nargs=0))
    return options, notes


# --- TensorRT-LLM: click options of trtllm-serve's serve command ---------------------------------------------


def click_options(text: str, command: str = "serve") -> tuple[list[dict[str, Any]], list[str]]:
    """The options of the function decorated ``@click.command(command)`` in ``text``; notes on what was odd."""
    tree = ast.parse(text)
    src = PySource.from_texts({"serve": text})
    choice_classes = {
        n.name
        for n in tree.body
        if isinstance(n, ast.ClassDef) and any(ast.unparse(b) in ("click.Choice", "Choice") for b in n.bases)
    }
    func = None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                if (
                    isinstance(dec, ast.Call)
                    and ast.unparse(dec.func) in ("click.command", "command")
                    and (
                        (dec.args and isinstance(dec.args[0], ast.Constant) and dec.args[0].value == command)
                        or (not dec.args and node.name == command)
                    )
                ):
                    func = node
    if func is None:
        raise SystemExit(f"no @click.command({command!r}) in the source; adapt the script")
    options: list[dict[str, Any]] = []
    notes: list[str] = []
    for dec in reversed(func.decorator_list):  # click applies them bottom-up; the order is cosmetic here
        if not (isinstance(dec, ast.Call) and ast.unparse(dec.func) in ("click.option", "option")):
            continue
        decls = [a.value for a in dec.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if len(decls) != len(dec.args):
            raise SystemExit(f"line {dec.lineno}: computed option declarations; adapt the script")
        kw = {k.arg: k.value for k in dec.keywords if k.arg}
        names: list[str] = []
        negations: list[str] = []
        dest = None
        for d in decls:
            if d.isidentifier():
                dest = d
            elif "/" in d:
                on, off = (s.strip() for s in d.split("/", 1))
                names.append(on)
                negations.append(off)
            else:
                names.append(d)
        if dest is None:  # click: the longest-prefixed name, dashes as underscores
            ranked = sorted(names, key=lambda s: -len(s) + len(s.lstrip("-")))
            dest = ranked[0].lstrip("-").replace("-", "_").lower()
        is_flag = src.value("serve", kw.get("is_flag")) is True or bool(negations)
        multiple = src.value("serve", kw.get("multiple")) is True
        default = _jsonable(src.value("serve", kw["default"])) if "default" in kw else LITERAL
        if "default" in kw and default is LITERAL:
            notes.append(f"{names[0]}: default {ast.unparse(kw['default'])} is computed (not recorded)")
        if is_flag or src.value("serve", kw.get("count")) is True:
            action = (
                "count" if src.value("serve", kw.get("count")) is True else ("boolean" if negations else "store_true")
            )
            options.append(_opt(names, dest, negations=negations, action=action, nargs=0, default=default))
            continue
        kind: str | None = "str"
        choices: list[Any] | None = None
        if "type" in kw:
            t = kw["type"]
            text_t = ast.unparse(t)
            if text_t in ("int", "click.INT"):
                kind = "int"
            elif text_t in ("float", "click.FLOAT"):
                kind = "float"
            elif text_t in ("str", "click.STRING"):
                kind = "str"
            elif isinstance(t, ast.Call) and (_call_name(t) == "Choice" or _call_name(t) in choice_classes):
                listed = src.value("serve", t.args[0]) if t.args else LITERAL
                aliases = src.value("serve", t.args[1]) if _call_name(t) in choice_classes and len(t.args) > 1 else {}
                if isinstance(listed, (list, tuple)) and isinstance(aliases, dict):
                    choices = list(listed) + [a for a in aliases if a not in listed]
                else:
                    notes.append(
                        f"{names[0]}: choices {ast.unparse(t.args[0]) if t.args else '?'} are computed (not checked)"
                    )
            else:
                kind = "other"
        nargs = src.value("serve", kw["nargs"]) if "nargs" in kw else None
        if nargs is LITERAL:
            nargs, kind = None, None
        if isinstance(nargs, int) and nargs == 1:
            nargs = None
        options.append(
            _opt(
                names,
                dest,
                action="append" if multiple else "store",
                nargs=nargs,
                kind=kind,
                choices=choices,
                default=default,
            )
        )
    options.append(_opt(["--help"], "help", action="help", nargs=0))
    return options, notes


# --- the table ------------------------------------------------------------------------------------------------


def table(
    engine: str, version: str, source: str, options: list[dict[str, Any]], notes: list[str], cmd: str
) -> dict[str, Any]:
    options = sorted(options, key=lambda o: (o["names"][0].lstrip("-").lower(), o["names"][0]))
    seen: set[str] = set()
    for opt in options:
        for name in opt["names"] + opt["negations"]:
            if name in seen:
                raise SystemExit(f"{name} is registered twice; the generator misread the source")
            seen.add(name)

    def first(o: dict[str, Any]) -> str:
        return str(next((n for n in o["names"] if n.startswith("--")), o["names"][0]))

    return {
        "engine": engine,
        "dialect": DIALECTS[engine],
        "version": version,
        "format": FORMAT,
        "generated_by": cmd,
        "source": source,
        "notes": " ".join([NOTES[DIALECTS[engine]], *(n.rstrip(".") + "." for n in notes)]),
        "kinds": KINDS,
        "flags": sorted(seen),
        "switches": sorted(n for o in options if o["switch"] for n in o["names"] + o["negations"]),
        "defaults": {
            first(o): o["default"] for o in options if "default" in o and o["action"] not in ("help", "version")
        },
        "options": options,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("engine", choices=ENGINES)
    ap.add_argument("version", help="the engine release the source belongs to, e.g. 0.5.23")
    ap.add_argument("--wheel", type=pathlib.Path, help="sglang: a wheel or sdist you already have")
    ap.add_argument("--source", type=pathlib.Path, help="tgi: launcher/src/main.rs; trtllm: commands/serve.py")
    ap.add_argument("--source-note", help="where --source came from (repository, commit, path): goes into 'source'")
    ap.add_argument("--command", default="serve", help="trtllm: the click command to read (default: serve)")
    ap.add_argument("-o", "--output", type=pathlib.Path, help="write here instead of the data directory")
    args = ap.parse_args()
    cmd = f"scripts/gen_engine_flags.py {args.engine} {args.version}" + (
        " --wheel ..." if args.wheel else " --source ..." if args.source else ""
    )
    notes: list[str] = []
    if args.engine == "sglang":
        with tempfile.TemporaryDirectory() as tmp:
            archive = args.wheel or download_sglang(args.version, pathlib.Path(tmp))
            src = PySource.from_archive(archive)
            options = sglang_options(src)
        source = (
            f"{archive.name}: sglang/srt/server_args.py (ServerArgs.add_cli_args: add_cli_args_from_dataclass over "
            "_INPUT_NAMESPACES, sglang/srt/arg_groups/fields/*.py, plus its own add_argument calls); choice lists "
            "from sglang/srt/arg_groups/choices.py and the modules they are imported from"
        )
    else:
        if args.source is None:
            ap.error(f"{args.engine} needs --source")
        text = args.source.read_text(encoding="utf-8")
        if args.engine == "tgi":
            options, notes = clap_options(text)
            what = "launcher/src/main.rs (struct Args, clap derive)"
        else:
            options, notes = click_options(text, args.command)
            what = (
                f"tensorrt_llm/commands/serve.py (@click.command({args.command!r}), the default command of "
                "trtllm-serve)"
            )
        source = f"{args.source_note or args.source.name}: {what}"
    doc = table(args.engine, args.version, source, options, notes, cmd)
    write(doc, args.output or OUT_DIR / args.engine / f"{args.version}.json")


if __name__ == "__main__":
    main()
