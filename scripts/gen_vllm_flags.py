#!/usr/bin/env python3
"""Generate orchestrator/data/vllm_flags/<version>.json: every option `vllm serve` accepts in that version.

Each table lists every option string (aliases and ``--no-…`` forms included) and, per option, what
vLLM's argparse does with it: the value's type, the choices, ``nargs``, whether it is a switch, its
default and, for the JSON config flags (``--compilation-config``), the keys the config accepts.
orchestrator/engines/vllm_flags.py checks a profile's extraArgs against it. Two ways to make one:

``--from-parser`` (the installed vLLM, .cache/vllm-venv)
    Runs vLLM's own ``make_arg_parser(FlexibleArgumentParser())`` in the vLLM venv (this script
    re-runs itself there; it needs the standard library only) and walks the parser's actions:
    every registered option string, the action class, and the type callable, classified by what
    it is (``optional_type(int)`` → int that also takes "None", ``human_readable_int`` →
    int_human, a config dataclass → config with its fields). This is the table to trust.

``VERSION [--wheel PATH]`` (any released version: the CUDA wheel from PyPI, read, not imported)
    Reads the source with ``ast`` (neither torch nor a GPU is needed), and re-does what
    ``get_kwargs`` does with each config field's annotation:

    * ``vllm/engine/arg_utils.py``: ``EngineArgs.add_cli_args`` and ``AsyncEngineArgs.add_cli_args``
      call ``group.add_argument("--flag", "-f", **kwargs_of_a_config_field)``;
    * ``make_arg_parser`` in ``vllm/entrypoints/{openai,common,launchers}/cli_args.py`` adds a few
      flags by hand and one ``--kebab-case`` flag per field of the ``FrontendArgs`` dataclass;
    * the config dataclasses under ``vllm/config/`` give the field types and defaults.

    A field typed ``bool`` gets ``argparse.BooleanOptionalAction``: ``--x`` and ``--no-x``. From
    0.33 vLLM's parser registers ``EnableDisableAction`` in its place (utils/argparse_utils.py),
    which adds ``--disable-x`` to ``--enable-x`` and the reverse, but no ``--no-`` form of the
    added inverse: ``--no-disable-log-requests`` does not exist. A type the source does not pin
    down (a lambda, an override this script does not follow) is recorded as null: not checked.

``--compare A.json B.json`` prints where two tables disagree (a source-read table against a
parser one); it exits 1 when the option strings, switches, types, choices or nargs differ.

Usage:
    python scripts/gen_vllm_flags.py --from-parser             # the installed vLLM's own parser
    python scripts/gen_vllm_flags.py 0.33.0                    # pip-downloads the wheel into a temp dir
    python scripts/gen_vllm_flags.py 0.33.0 --wheel PATH       # use a wheel you already have
    python scripts/gen_vllm_flags.py 0.34.0 --from-help F -o T # from `vllm serve --help=all` text (no types)
    python scripts/gen_vllm_flags.py 0.32.0 --wheel W -o /tmp/src.json && \\
        python scripts/gen_vllm_flags.py --compare /tmp/src.json orchestrator/data/vllm_flags/0.32.0.json
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from typing import Any

from orchestrator.engines import vllm_help

REPO = pathlib.Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "orchestrator" / "data" / "vllm_flags"
ARG_UTILS = "vllm/engine/arg_utils.py"
ARGPARSE_UTILS = "vllm/utils/argparse_utils.py"
CLI_ARGS = (
    "vllm/entrypoints/common/cli_args.py",
    "vllm/entrypoints/launchers/cli_args.py",
    "vllm/entrypoints/openai/cli_args.py",
)
CONFIG_DIR = "vllm/config/"
# The table's format, header and layout are the package's (orchestrator/engines/vllm_help.py), shared with
# `deployctl engine-flags import`, which reads the same tables from `vllm serve --help=all` offline.
FORMAT = vllm_help.FORMAT
NOTES = vllm_help.NOTES
KINDS = vllm_help.KINDS


# --- the installed vLLM's own parser -----------------------------------------------------------------------


def dump_parser(out: pathlib.Path) -> None:
    """Write the table of the vLLM importable here (run inside the vLLM venv)."""
    import dataclasses
    import enum
    import importlib
    import inspect

    cli_args: Any = None
    for path in CLI_ARGS:
        try:
            cli_args = importlib.import_module(path.removesuffix(".py").replace("/", "."))
            break
        except ImportError:
            continue
    if cli_args is None:
        raise SystemExit(f"none of {CLI_ARGS} imports: the layout changed; adapt the script")
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found]
    from vllm.version import __version__  # type: ignore[import-not-found]

    missing = object()

    def jsonable(value: Any) -> Any:
        if isinstance(value, enum.Enum):
            value = value.value
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float):
            return value if value == value and abs(value) != float("inf") else missing
        if isinstance(value, (list, tuple, set, frozenset)):
            items = [jsonable(v) for v in value]
            if any(i is missing for i in items):
                return missing
            return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            mapping = {k: jsonable(v) for k, v in value.items()}
            return missing if any(i is missing for i in mapping.values()) else mapping
        return missing

    def closure(fn: Any) -> dict[str, Any]:
        cells = getattr(fn, "__closure__", None) or ()
        return dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in cells), strict=True))

    def config_keys(cls: Any) -> list[str] | None:
        """The fields of a config dataclass, if it refuses any other key (pydantic forbids extras)."""
        from pydantic import TypeAdapter, ValidationError

        try:
            TypeAdapter(cls).validate_python({"__deployctl_probe__": 1})
        except ValidationError as e:
            if any(err["type"] in ("unexpected_keyword_argument", "extra_forbidden") for err in e.errors()):
                return sorted(f.name for f in dataclasses.fields(cls) if f.init)
        except Exception:
            return None
        return None

    def classify(fn: Any) -> dict[str, Any]:
        """The kind of value a type callable accepts: {"type": kind, ...}."""
        if fn is None or fn is str:
            return {"type": "str"}
        if fn is int:
            return {"type": "int"}
        if fn is float:
            return {"type": "float"}
        if fn is json.loads:
            return {"type": "json"}
        name = getattr(fn, "__qualname__", "")
        if name == "human_readable_int":
            return {"type": "int_human"}
        if name == "human_readable_int_or_auto":
            return {"type": "int_human_auto"}
        if name == "union_dict_and_str":
            return {"type": "json_or_str"}
        if name.endswith("_optional_type"):
            return {**classify(closure(fn)["return_type"]), "nullable": True}
        if name.endswith("_parse_type"):
            return classify(closure(fn)["return_type"])
        if name.endswith("parse_dataclass"):
            cls = fn.__defaults__[0]
            found: dict[str, Any] = {"type": "config", "config": cls.__name__}
            keys = config_keys(cls)
            if keys is not None:
                found["keys"] = keys
            return found
        if "<lambda>" in name:
            src = inspect.getsource(fn)
            if ".lower()" in src and 'replace("-", "_")' in src:
                return {"type": "str", "transform": "lower_underscore"}
        return {"type": "other"}

    action_kinds = {
        "_StoreAction": "store",
        "_StoreTrueAction": "store_true",
        "_StoreFalseAction": "store_false",
        "_StoreConstAction": "store_const",
        "BooleanOptionalAction": "boolean",
        "EnableDisableAction": "boolean",
        "_AppendAction": "append",
        "_HelpAction": "help",
        "_CountAction": "count",
        "_VersionAction": "version",
    }
    parser = cli_args.make_arg_parser(FlexibleArgumentParser())
    varies = platform_dependent(str(importlib.import_module("vllm.engine.arg_utils").__file__), cli_args.__file__)
    registered: dict[int, list[str]] = {}
    for string, action in parser._option_string_actions.items():
        registered.setdefault(id(action), []).append(string)
    options = []
    for action in parser._actions:
        if not action.option_strings:
            continue  # the positional model_tag
        strings = registered[id(action)]
        kind = action_kinds.get(type(action).__name__, "custom")
        if hasattr(action, "negative_option_strings"):  # vLLM's EnableDisableAction
            negations = [s for s in strings if s in action.negative_option_strings]
        elif kind == "boolean":
            negations = [s for s in strings if s.startswith("--no-") and "--" + s[5:] in strings]
        else:
            negations = []
        entry: dict[str, Any] = {
            "names": [s for s in strings if s not in negations],
            "negations": negations,
            "dest": action.dest,
            "action": kind,
            "switch": action.nargs == 0,
            "nargs": action.nargs,
        }
        entry.update({"type": "bool"} if action.nargs == 0 else classify(action.type))
        if action.choices is not None and not varies & set(strings):
            choices = jsonable(list(action.choices))
            entry["choices"] = None if choices is missing else choices
        elif varies & set(strings):
            entry["platform"] = True  # the choices here are this machine's (CPU), not a GPU node's
        const = jsonable(action.const)
        if action.nargs == "?" and const is not missing:
            entry["const"] = const
        default = jsonable(action.default)
        if default is not missing and action.default is not argparse.SUPPRESS:
            entry["default"] = default
        options.append(entry)
    source = f"vLLM's own parser: {cli_args.__name__}.make_arg_parser(FlexibleArgumentParser()), vllm {__version__}"
    out.write_text(json.dumps({"version": __version__, "source": source, "options": options}), encoding="utf-8")


def platform_dependent(*paths: str) -> set[str]:
    """Options whose add_argument call reads ``current_platform`` (choices that differ on a GPU node)."""
    found: set[str] = set()
    for path in paths:
        tree = ast.parse(pathlib.Path(path).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"
                and any("current_platform" in ast.unparse(kw.value) for kw in node.keywords)
            ):
                found |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return found


def from_parser(python: pathlib.Path, vllm_source: pathlib.Path | None) -> dict[str, Any]:
    """Run dump_parser in the vLLM venv (environment() of e2e/realvllm/server.py keeps caches in .cache)."""
    spec = importlib.util.spec_from_file_location("realvllm_server", REPO / "e2e" / "realvllm" / "server.py")
    assert spec and spec.loader
    server = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(server)
    env = server.environment()
    if vllm_source is not None:  # another version's python files, unpacked from its wheel: a check only
        env["PYTHONPATH"] = str(vllm_source.resolve())
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "parser.json"
        subprocess.run(
            [str(python), str(pathlib.Path(__file__).resolve()), "--dump-parser", str(out)],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,  # vLLM logs to stdout
        )
        dumped: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    dumped["generated_by"] = "scripts/gen_vllm_flags.py --from-parser"
    return dumped


# --- the wheel's source --------------------------------------------------------------------------------------


def download_wheel(version: str, into: pathlib.Path) -> pathlib.Path:
    """Fetch the vLLM wheel alone (no dependencies); the platform flags pick the CUDA x86-64 build."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        f"vllm=={version}",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        "--abi",
        "abi3",
        "--abi",
        "cp312",
        "--abi",
        "none",
        "-d",
        str(into),
    ]
    for tag in (
        "manylinux_2_35_x86_64",
        "manylinux_2_31_x86_64",
        "manylinux_2_28_x86_64",
        "manylinux2014_x86_64",
        "manylinux1_x86_64",
    ):
        cmd += ["--platform", tag]
    subprocess.run(cmd, check=True)
    wheels = sorted(into.glob(f"vllm-{version}-*.whl"))
    if not wheels:
        raise SystemExit(f"pip downloaded no vllm {version} wheel into {into}")
    return wheels[0]


class Source:
    """The Python files of one wheel that define the CLI, parsed once."""

    def __init__(self, wheel: pathlib.Path) -> None:
        with zipfile.ZipFile(wheel) as z:
            names = set(z.namelist())
            self.arg_utils = ast.parse(z.read(ARG_UTILS))
            cli = next((n for n in CLI_ARGS if n in names), None)
            if cli is None:
                raise SystemExit(f"{wheel.name} has none of {CLI_ARGS}: the layout changed; adapt the script")
            self.cli_args = ast.parse(z.read(cli))
            self.cli_path = cli
            argparse_utils = z.read(ARGPARSE_UTILS).decode() if ARGPARSE_UTILS in names else ""
            # 0.33 swaps BooleanOptionalAction for EnableDisableAction in every FlexibleArgumentParser.
            self.enable_disable = bool(
                re.search(r"register\(\s*\"action\",\s*BooleanOptionalAction,\s*EnableDisableAction", argparse_utils)
            )
            self.classes: dict[str, ast.ClassDef] = {}
            self.aliases: dict[str, ast.expr] = {}
            for name in sorted(names):
                if name.startswith(CONFIG_DIR) and name.endswith(".py"):
                    self._collect(ast.parse(z.read(name)))
            self._collect(self.arg_utils)
            self._collect(self.cli_args)
            # The rest of the package, for type aliases and classes the annotations import from elsewhere.
            self._texts = {
                n: z.read(n).decode("utf-8", "replace")
                for n in sorted(names)
                if n.startswith("vllm/") and n.endswith(".py") and not n.startswith(CONFIG_DIR)
            }
        self._searched: set[str] = set()

    def find(self, name: str) -> bool:
        """Whether ``name`` is a class or type alias defined anywhere in the package (parsing where it is)."""
        if name in self.classes or name in self.aliases:
            return True
        if name in self._searched:
            return False
        self._searched.add(name)
        pattern = re.compile(rf"^(class {name}\b|{name}\s*(:[^=\n]*)?=)", re.MULTILINE)
        for path, text in self._texts.items():
            if pattern.search(text):
                self._collect(ast.parse(text, filename=path))
        return name in self.classes or name in self.aliases

    def _collect(self, tree: ast.Module) -> None:
        for node in _module_level(tree.body):
            if isinstance(node, ast.ClassDef):
                self.classes.setdefault(node.name, node)
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.aliases.setdefault(node.targets[0].id, node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                self.aliases.setdefault(node.target.id, node.value)  # X: TypeAlias = …, X: Final = "…"

    def fields(self, cls: str) -> dict[str, ast.AnnAssign]:
        """Annotated class-level fields of ``cls`` and its bases found in the same sources."""
        node = self.classes.get(cls)
        if node is None:
            return {}
        out: dict[str, ast.AnnAssign] = {}
        for base in node.bases:
            if isinstance(base, ast.Name):
                out.update(self.fields(base.id))
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            if "ClassVar" not in ast.unparse(stmt.annotation):
                out[stmt.target.id] = stmt
        return out

    def is_dataclass(self, cls: str) -> bool:
        node = self.classes.get(cls)
        if node is None:
            return False
        decorators = {ast.unparse(d).split("(")[0].rsplit(".", 1)[-1] for d in node.decorator_list}
        return bool(decorators & {"config", "dataclass"})

    def is_dict(self, cls: str) -> bool:
        node = self.classes.get(cls)
        return node is not None and any(ast.unparse(b).split("[")[0] in ("dict", "Dict") for b in node.bases)

    def config_keys(self, cls: str) -> list[str]:
        """Init fields of a config dataclass (vLLM's @config forbids other keys)."""
        keys = []
        for name, stmt in self.fields(cls).items():
            if isinstance(stmt.value, ast.Call) and any(
                kw.arg == "init" and isinstance(kw.value, ast.Constant) and kw.value.value is False
                for kw in stmt.value.keywords
            ):
                continue
            if "InitVar" not in ast.unparse(stmt.annotation):
                keys.append(name)
        return sorted(keys)


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Module statements, with the runtime branch of ``if TYPE_CHECKING: … else: …``."""
    for node in body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _module_level(node.orelse)
        elif isinstance(node, (ast.If, ast.Try)):
            yield from _module_level(node.body)
        else:
            yield node


# A type hint as get_kwargs sees it: ("bool"|"int"|"float"|"str"|"none"|"dict"|"nonbuiltin"|"unknown", None),
# ("literal", values), ("dataclass", class), ("list"|"set"|"tuple", element hints, tuple length or None).
Hint = tuple[Any, ...]
_BUILTIN = {"bool": "bool", "int": "int", "float": "float", "str": "str", "None": "none", "NoneType": "none"}
_DICTS = {"dict", "Dict", "Mapping", "MutableMapping", "defaultdict", "OrderedDict"}
_SEQUENCES = {"list": "list", "List": "list", "Sequence": "list", "set": "set", "Set": "set", "tuple": "tuple"}


def hints(src: Source, node: ast.expr, depth: int = 0) -> set[Hint]:
    """vLLM's get_type_hints of an annotation: the members of its unions, Annotated unwrapped."""
    if depth > 8:
        return {("unknown",)}
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a forward reference
        try:
            return hints(src, ast.parse(node.value, mode="eval").body, depth + 1)
        except SyntaxError:
            return {("unknown",)}
    if isinstance(node, ast.Constant) and node.value is None:
        return {("none",)}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return hints(src, node.left, depth + 1) | hints(src, node.right, depth + 1)
    if isinstance(node, ast.Subscript):
        outer = ast.unparse(node.value).rsplit(".", 1)[-1]
        args = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        if outer in ("Annotated", "SkipValidation"):
            return hints(src, args[0], depth + 1)
        if outer == "Optional":
            return hints(src, args[0], depth + 1) | {("none",)}
        if outer == "Union":
            return set().union(*(hints(src, a, depth + 1) for a in args))
        if outer == "Literal":
            values = []
            for a in args:
                if isinstance(a, ast.Constant):
                    values.append(a.value)
                else:  # a nested alias of literals
                    inner = hints(src, a, depth + 1)
                    if len(inner) != 1 or next(iter(inner))[0] != "literal":
                        return {("unknown",)}
                    values += next(iter(inner))[1]
            return {("literal", tuple(values))}
        if outer in _DICTS:
            return {("dict",)}
        if outer in _SEQUENCES:
            ellipsis = any(isinstance(a, ast.Constant) and a.value is Ellipsis for a in args)
            elems = [a for a in args if not (isinstance(a, ast.Constant) and a.value is Ellipsis)]
            elem = set().union(*(hints(src, a, depth + 1) for a in elems[:1])) if elems else {("unknown",)}
            length = None if outer != "tuple" or ellipsis else len(args)
            return {(_SEQUENCES[outer], frozenset(elem), length)}
        return {("unknown",)}
    if isinstance(node, (ast.Name, ast.Attribute)):
        name = ast.unparse(node).rsplit(".", 1)[-1]
        if name in _BUILTIN:
            return {(_BUILTIN[name],)}
        if name in _DICTS:
            return {("dict",)}
        if name in _SEQUENCES:
            return {(_SEQUENCES[name], frozenset({("unknown",)}), None)}
        if isinstance(node, ast.Name) and src.find(name):
            if name in src.aliases:
                return hints(src, src.aliases[name], depth + 1)
            if src.is_dataclass(name):
                return {("dataclass", name)}
            if src.is_dict(name):
                return {("dict",)}
            return {("nonbuiltin",)}  # an Enum, a TypedDict or another class: get_kwargs gives it type=str
        # torch.dtype, Any, a class from another package: not a builtin, so a str unless a Literal decides.
        return {("nonbuiltin",)}
    return {("unknown",)}


def _scalar_kind(hs: Iterable[Hint]) -> str | None:
    names = {h[0] for h in hs}
    for kind in ("int", "float"):
        if kind in names:
            return kind
    if names & {"str", "nonbuiltin"} and "unknown" not in names:
        return "str"
    return None


def field_spec(src: Source, annotation: ast.expr, name: str, human: dict[str, str]) -> dict[str, Any]:
    """What get_kwargs makes of a config field: the table entry's type, nargs, choices, switch."""
    hs = hints(src, annotation)
    names = {h[0] for h in hs}
    nullable = "none" in names
    spec: dict[str, Any]
    dataclass = next((h[1] for h in hs if h[0] == "dataclass"), None)
    if dataclass is not None:
        spec = {"type": "config", "config": dataclass, "keys": src.config_keys(dataclass)}
    elif names == {"bool", "str", "none"}:
        return {"type": "str", "nargs": "?", "const": True}
    elif "bool" in names:
        return {"type": "bool", "switch": True, "nargs": 0, "action": "boolean"}
    elif "unknown" in names:
        return {"type": None}
    elif "literal" in names:
        values = sorted(next(h[1] for h in hs if h[0] == "literal"))
        kind = {bool: None, int: "int", float: "float", str: "str"}.get(type(values[0]))
        spec = {"type": kind} if "str" in names else {"type": kind, "choices": values}
    elif names & {"tuple", "list", "set"}:
        seq = next(h for h in hs if h[0] in ("tuple", "list", "set"))
        elem = set(seq[1])
        spec = {"nargs": seq[2] if seq[0] == "tuple" and seq[2] else "+"}
        if {h[0] for h in elem} == {"literal"}:
            spec.update(type="str", choices=sorted(next(iter(elem))[1]))
        elif len(elem) > 1 and ("str",) in elem:
            spec["type"] = "str"
        else:
            spec["type"] = _scalar_kind(elem)
    elif "int" in names:
        spec = {"type": human.get(name, "int")}
    elif "float" in names:
        spec = {"type": "float"}
    elif "dict" in names and names & {"str", "nonbuiltin"}:
        spec = {"type": "json_or_str"}
    elif "dict" in names:
        spec = {"type": "json"}
    elif names & {"str", "nonbuiltin"}:
        spec = {"type": "str"}
    else:
        return {"type": None}
    if nullable:
        spec["nullable"] = True
        if spec.get("choices"):
            spec["choices"] = [*spec["choices"], None]
    return spec


def _constant(node: ast.expr | None) -> Any:
    """A literal default (numbers, strings, None, booleans, lists of them), else KeyError."""
    if node is None:
        raise KeyError
    if isinstance(node, ast.Call) and ast.unparse(node.func).rsplit(".", 1)[-1] in ("field", "Field"):
        for kw in node.keywords:
            if kw.arg == "default":
                return _constant(kw.value)
        raise KeyError
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        raise KeyError from None
    if isinstance(value, (set, frozenset, tuple)):
        value = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else list(value)
    return value


def _type_expr(node: ast.expr) -> dict[str, Any]:
    """An explicit ``type=`` callable as a table entry's type."""
    text = ast.unparse(node)
    simple = {
        "int": "int",
        "float": "float",
        "str": "str",
        "json.loads": "json",
        "human_readable_int": "int_human",
        "human_readable_int_or_auto": "int_human_auto",
        "union_dict_and_str": "json_or_str",
    }
    if text in simple:
        return {"type": simple[text]}
    if isinstance(node, ast.Call) and node.args:
        func = ast.unparse(node.func)
        if func == "optional_type":
            return {**_type_expr(node.args[0]), "nullable": True}
        if func == "parse_type":
            return _type_expr(node.args[0])
    if isinstance(node, ast.Lambda) and ".lower()" in text and "replace('-', '_')" in text:
        return {"type": "str", "transform": "lower_underscore"}
    return {"type": None}


def _apply_kwarg(src: Source, spec: dict[str, Any], key: str, value: ast.expr | None) -> None:
    """One add_argument keyword (or an override of get_kwargs' dict) applied to a table entry."""
    if key == "type":
        spec.pop("nullable", None)
        spec.pop("transform", None)
        spec.pop("keys", None)
        spec.update(_type_expr(value) if value is not None else {"type": "str"})
    elif key == "action":
        text = ast.unparse(value) if value is not None else "store"
        text = text.strip("'\"")
        if "BooleanOptionalAction" in text:
            spec.update(type="bool", switch=True, nargs=0, action="boolean")
        elif text in ("store_true", "store_false", "store_const", "count", "help"):
            spec.update(type="bool", switch=True, nargs=0, action=text)
            spec.pop("choices", None)
        elif text == "append":
            spec["action"] = "append"
        else:
            spec["action"] = "custom"
    elif key == "nargs":
        try:
            spec["nargs"] = _constant(value) if value is not None else None
        except KeyError:
            spec["type"] = None
    elif key == "choices":
        if isinstance(value, ast.Call) and ast.unparse(value.func).endswith("get_args") and value.args:
            literal = hints(src, value.args[0])  # choices=get_args(LogLevel)
            if len(literal) == 1 and next(iter(literal))[0] == "literal":
                spec["choices"] = list(next(iter(literal))[1])
                return
        try:
            spec["choices"] = sorted(_constant(value), key=repr) if value is not None else None
        except (KeyError, TypeError):
            spec.pop("choices", None)  # computed at run time (the platform's device, say): not checked
    elif key in ("choices.remove", "choices.append") and spec.get("choices") is not None:
        if isinstance(value, ast.Name) and src.find(value.id):  # a module constant
            value = src.aliases.get(value.id, value)
        try:
            item = _constant(value)
        except KeyError:
            spec.pop("choices", None)
            return
        if key == "choices.append":
            spec["choices"].append(item)
        elif item in spec["choices"]:
            spec["choices"].remove(item)
    elif key == "default":
        try:
            spec["default"] = _constant(value)
        except KeyError:
            spec.pop("default", None)
    elif key == "const":
        try:
            spec["const"] = _constant(value)
        except KeyError:
            spec.pop("const", None)


def _human_int_fields(src: Source) -> dict[str, str]:
    """Field names _compute_kwargs gives vLLM's human-readable int parsers instead of int."""
    func = next(
        (
            n
            for n in ast.walk(src.arg_utils)
            if isinstance(n, ast.FunctionDef) and n.name in ("_compute_kwargs", "get_kwargs")
        ),
        None,
    )
    if func is None:
        return {}
    sets: dict[str, list[str]] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            with contextlib.suppress(KeyError, TypeError):
                sets[node.targets[0].id] = list(_constant(node.value))
    out: dict[str, str] = {}
    for node in ast.walk(func):
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)):
            continue
        test = node.test
        if not (isinstance(test.left, ast.Name) and test.left.id == "name"):
            continue
        target = test.comparators[0]
        if isinstance(target, ast.Name):
            names = sets.get(target.id, [])
        else:
            try:
                found = _constant(target)
            except KeyError:
                continue
            names = [found] if isinstance(found, str) else list(found)
        body = ast.unparse(node.body[0]) if node.body else ""
        kind = (
            "int_human_auto"
            if "human_readable_int_or_auto" in body
            else "int_human"
            if "human_readable_int" in body
            else None
        )
        if kind:
            out.update(dict.fromkeys(names, kind))
    return out


class Collector:
    """The table entries of one wheel, in the order vLLM adds them."""

    def __init__(self, src: Source) -> None:
        self.src = src
        self.human = _human_int_fields(src)
        self.options: list[dict[str, Any]] = []

    def field(self, cls: str, name: str) -> dict[str, Any]:
        stmt = self.src.fields(cls).get(name)
        if stmt is None:
            return {"type": None}
        spec = field_spec(self.src, stmt.annotation, name, self.human)
        with contextlib.suppress(KeyError):
            spec["default"] = _constant(stmt.value)
        return spec

    def add(self, options: list[str], spec: dict[str, Any]) -> None:
        names = list(options)
        negations: list[str] = []
        if spec.get("action") == "boolean":
            negations = ["--no-" + o[2:] for o in options if o.startswith("--")]
            if self.src.enable_disable:
                # EnableDisableAction: --enable-x ↔ --disable-x, and no --no- form of the added inverse.
                for opt in options:
                    for prefix, inverse in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
                        if opt.startswith(prefix):
                            negations.append(inverse + opt.removeprefix(prefix))
        long = next((o for o in names if o.startswith("--")), names[0])
        entry: dict[str, Any] = {
            "names": names,
            "negations": negations,
            "dest": long.lstrip("-").replace("-", "_"),
            "action": spec.get("action", "store"),
            "switch": bool(spec.get("switch", False)),
            "nargs": spec.get("nargs"),
            "type": spec.get("type"),
        }
        for key in ("nullable", "transform", "config", "keys", "choices", "const", "default"):
            if key in spec:
                entry[key] = spec[key]
        self.options.append(entry)


def _kwargs_target(node: ast.expr, env: dict[str, tuple[str, str | None]]) -> tuple[str, str] | None:
    """(config class, field) that a ``**kwargs`` expression of add_argument stands for, if known."""
    if isinstance(node, ast.Name) and node.id in env:
        cls, fld = env[node.id]
        return (cls, fld) if fld else None
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        key = node.slice.value
        if isinstance(node.value, ast.Name) and node.value.id in env and isinstance(key, str):
            return env[node.value.id][0], key
    if isinstance(node, ast.Dict):
        for k, v in zip(node.keys, node.values, strict=True):
            if k is None:
                found = _kwargs_target(v, env)
                if found:
                    return found
    return None


def _get_kwargs_class(node: ast.expr) -> str | None:
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "get_kwargs"
        and node.args
        and isinstance(node.args[0], ast.Name)
    ):
        return node.args[0].id
    return None


def _overrides(func: ast.FunctionDef, env: dict[str, tuple[str, str | None]]) -> dict[tuple[str, str], list[Any]]:
    """``kwargs["field"]["type"] = …`` and ``del kwargs["field"]["nargs"]`` in a function, per field."""
    found: dict[tuple[str, str], list[Any]] = {}

    def target(node: ast.expr) -> tuple[tuple[str, str], str] | None:
        if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)):
            return None
        key = node.slice.value
        inner = _kwargs_target(node.value, env)
        return (inner, key) if inner and isinstance(key, str) else None

    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            hit = target(node.targets[0])
            if hit:
                found.setdefault(hit[0], []).append((hit[1], node.value))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("remove", "append")
            and node.args
        ):
            hit = target(node.func.value)  # kwargs["field"]["choices"].remove("x")
            if hit and hit[1] == "choices":
                found.setdefault(hit[0], []).append((f"choices.{node.func.attr}", node.args[0]))
        elif isinstance(node, ast.Delete):
            for t in node.targets:
                hit = target(t)
                if hit:
                    found.setdefault(hit[0], []).append((hit[1], None))
    return found


def _env(func: ast.FunctionDef) -> dict[str, tuple[str, str | None]]:
    """Which local names hold get_kwargs(Config) or one field's kwargs of it."""
    env: dict[str, tuple[str, str | None]] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, node.value
            cls = _get_kwargs_class(value)
            if cls:
                env[name] = (cls, None)
            elif isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant):
                inner = _get_kwargs_class(value.value)
                if inner:
                    env[name] = (inner, str(value.slice.value))
                elif isinstance(value.value, ast.Name) and value.value.id in env:
                    env[name] = (env[value.value.id][0], str(value.slice.value))
    return env


def scan_add_argument_calls(func: ast.FunctionDef, col: Collector) -> None:
    """Walk one add_cli_args body in order, tracking which names hold which config's kwargs."""
    src = col.src
    env = _env(func)
    overrides = _overrides(func, env)
    for node in ast.walk(func):
        if not (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
        ):
            continue
        options = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        options = [o for o in options if o.startswith("-")]
        if not options:
            continue  # positional (model_tag)
        spec: dict[str, Any] = {"type": "str"}
        for kw in node.keywords:
            if kw.arg is None:
                tgt = _kwargs_target(kw.value, env)
                if tgt:
                    spec = col.field(*tgt)
                    for key, value in overrides.get(tgt, []):
                        _apply_kwarg(src, spec, key, value)
                elif not isinstance(kw.value, ast.Dict):
                    spec = {"type": None}  # **something we cannot follow
                if isinstance(kw.value, ast.Dict):
                    for k, v in zip(kw.value.keys, kw.value.values, strict=True):
                        if isinstance(k, ast.Constant) and isinstance(k.value, str):
                            _apply_kwarg(src, spec, k.value, v)
        for kw in node.keywords:
            if kw.arg is not None and kw.arg in ("type", "action", "nargs", "choices", "default", "const"):
                _apply_kwarg(src, spec, kw.arg, kw.value)
        col.add(options, spec)


def _function(tree: ast.Module, cls: str, name: str) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for stmt in node.body:
                if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
                    return stmt
    raise SystemExit(f"{cls}.{name} not found: the layout changed; adapt this script")


def _module_function(tree: ast.Module, name: str) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise SystemExit(f"{name} not found: the layout changed; adapt this script")


def _frontend_overrides(src: Source) -> list[tuple[str, str, ast.expr | None]]:
    """``frontend_kwargs["field"]["key"] = …`` (and ``del``) in the FrontendArgs classes, in source order."""
    found: list[tuple[str, str, ast.expr | None]] = []
    for cls in ("BaseFrontendArgs", "FrontendArgs"):
        node = src.classes.get(cls)
        if node is None:
            continue
        for stmt in node.body:
            if not (isinstance(stmt, ast.FunctionDef) and stmt.name in ("_customize_cli_kwargs", "add_cli_args")):
                continue
            for sub in ast.walk(stmt):
                pairs: list[tuple[ast.expr, ast.expr | None]] = []
                if isinstance(sub, ast.Assign) and len(sub.targets) == 1:
                    pairs = [(sub.targets[0], sub.value)]
                elif isinstance(sub, ast.Delete):
                    pairs = [(t, None) for t in sub.targets]
                for tgt, value in pairs:
                    if (
                        isinstance(tgt, ast.Subscript)
                        and isinstance(tgt.slice, ast.Constant)
                        and isinstance(tgt.value, ast.Subscript)
                        and isinstance(tgt.value.slice, ast.Constant)
                    ):
                        found.append((str(tgt.value.slice.value), str(tgt.slice.value), value))
    return found


def collect(src: Source) -> list[dict[str, Any]]:
    col = Collector(src)
    scan_add_argument_calls(_module_function(src.cli_args, "make_arg_parser"), col)
    # FrontendArgs.add_cli_args registers one --kebab-case flag per dataclass field (with its bases).
    overrides = _frontend_overrides(src)
    for name in src.fields("FrontendArgs"):
        spec = col.field("FrontendArgs", name)
        for field, key, value in overrides:
            if field == name:
                _apply_kwarg(src, spec, key, value)
        col.add([f"--{name.replace('_', '-')}"], spec)
    scan_add_argument_calls(_function(src.arg_utils, "EngineArgs", "add_cli_args"), col)
    scan_add_argument_calls(_function(src.arg_utils, "AsyncEngineArgs", "add_cli_args"), col)
    col.add(["-h", "--help"], {"type": "bool", "switch": True, "nargs": 0, "action": "help"})
    return col.options


def from_source(version: str, wheel: pathlib.Path) -> dict[str, Any]:
    src = Source(wheel)
    return {
        "version": version,
        "generated_by": f"scripts/gen_vllm_flags.py {version}",
        "source": f"{wheel.name}: {ARG_UTILS} (EngineArgs/AsyncEngineArgs.add_cli_args), "
        f"{src.cli_path} (make_arg_parser, FrontendArgs), field types from {CONFIG_DIR}",
        "options": collect(src),
    }


# --- the table ----------------------------------------------------------------------------------------------


def table(raw: dict[str, Any]) -> dict[str, Any]:
    """The file's content (orchestrator/engines/vllm_help.py builds it, for the import command too)."""
    try:
        return vllm_help.table(raw)
    except vllm_help.HelpProblem as e:
        raise SystemExit(f"{e}; the generator misread the source") from e


def write(doc: dict[str, Any], out: pathlib.Path) -> None:
    # One option per line: reviewable diffs, and small enough to ship.
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(vllm_help.dumps(doc), encoding="utf-8")
    n_switch = sum(1 for o in doc["options"] if o["switch"])
    typed = sum(1 for o in doc["options"] if o["type"] is not None)
    print(
        f"{out}: {len(doc['flags'])} option strings, {len(doc['options'])} options "
        f"({n_switch} switches, {typed} with a known value type)"
    )


_COMPARED = ("negations", "switch", "nargs", "type", "nullable", "choices", "keys", "transform")


def compare(a_path: pathlib.Path, b_path: pathlib.Path) -> int:
    a, b = (json.loads(p.read_text(encoding="utf-8")) for p in (a_path, b_path))
    print(f"A = {a_path} ({a['generated_by']}), B = {b_path} ({b['generated_by']})")
    problems = 0
    fa, fb = set(a["flags"]), set(b["flags"])
    for label, names in (("only in A", fa - fb), ("only in B", fb - fa)):
        if names:
            problems += len(names)
            print(f"{label} ({len(names)}): {' '.join(sorted(names))}")
    by_name_b = {n: o for o in b["options"] for n in o["names"]}
    unknown_in_a = 0
    for opt in a["options"]:
        other = by_name_b.get(opt["names"][0])
        if other is None:
            continue
        for key in _COMPARED:
            va, vb = opt.get(key), other.get(key)
            if key == "type" and va is None:
                unknown_in_a += 1
                continue
            if key in ("keys", "nullable", "transform") and va is None:
                continue
            if key == "choices" and va is not None and vb is not None:
                va, vb = sorted(va, key=repr), sorted(vb, key=repr)
            if va != vb:
                problems += 1
                print(f"{opt['names'][0]}: {key} A={va!r} B={vb!r}")
    print(f"{problems} differences; {unknown_in_a} options of A without a value type (not checked)")
    return 1 if problems else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("version", nargs="?", help="vLLM version to read from its wheel's source, e.g. 0.33.0")
    ap.add_argument("--wheel", type=pathlib.Path, help="an already downloaded vllm wheel of that version")
    ap.add_argument("--from-parser", action="store_true", help="walk the installed vLLM's own parser")
    ap.add_argument(
        "--python",
        type=pathlib.Path,
        default=REPO / ".cache" / "vllm-venv" / "bin" / "python",
        help="python of the venv vLLM is installed in (default: %(default)s)",
    )
    ap.add_argument(
        "--vllm-source",
        type=pathlib.Path,
        help="with --from-parser: a directory with another version's unpacked python files, put first on the "
        "path (a check of a source-read table; its platform detection may differ from a real install)",
    )
    ap.add_argument(
        "--from-help",
        type=pathlib.Path,
        metavar="FILE",
        help="with VERSION: read the text of `vllm serve --help=all` (what `deployctl engine-flags import` does)",
    )
    ap.add_argument("--compare", nargs=2, type=pathlib.Path, metavar=("A", "B"), help="where two tables disagree")
    ap.add_argument("-o", "--output", type=pathlib.Path, help="write here instead of the data directory")
    ap.add_argument("--dump-parser", type=pathlib.Path, help=argparse.SUPPRESS)  # inside the vLLM venv
    args = ap.parse_args()
    if args.dump_parser:
        dump_parser(args.dump_parser)
        return
    if args.compare:
        raise SystemExit(compare(*args.compare))
    if args.from_parser:
        if not args.python.is_file():
            raise SystemExit(f"no vLLM venv at {args.python}: run scripts/install_vllm_cpu.sh, or pass --python")
        raw = from_parser(args.python, args.vllm_source)
    elif args.version and args.from_help:
        write(
            vllm_help.parse(args.from_help.read_text(encoding="utf-8"), args.version),
            args.output or OUT_DIR / f"{args.version}.json",
        )
        return
    elif args.version:
        with tempfile.TemporaryDirectory() as tmp:
            wheel = args.wheel or download_wheel(args.version, pathlib.Path(tmp))
            raw = from_source(args.version, wheel)
    else:
        ap.error("give a VERSION, --from-parser or --compare")
    doc = table(raw)
    write(doc, args.output or OUT_DIR / f"{doc['version']}.json")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    main()
