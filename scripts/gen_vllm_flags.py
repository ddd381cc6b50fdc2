#!/usr/bin/env python3
"""Generate orchestrator/data/vllm_flags/<version>.json: every option `vllm serve` accepts in that version.

The list comes from vLLM's own argument definitions, read with `ast` from the released wheel (nothing is
imported or executed, so neither torch nor a GPU is needed):

* ``vllm/engine/arg_utils.py``: ``EngineArgs.add_cli_args`` and ``AsyncEngineArgs.add_cli_args`` call
  ``group.add_argument("--flag", "-f", **kwargs_of_a_config_field)``; a field typed ``bool`` gets
  ``argparse.BooleanOptionalAction``, so ``--no-flag`` too (and vLLM's EnableDisableAction adds
  ``--disable-x`` for ``--enable-x`` and the reverse);
* ``vllm/entrypoints/common/cli_args.py`` (``vllm/entrypoints/openai/cli_args.py`` before 0.2x):
  ``make_arg_parser`` adds a few flags by hand and one ``--kebab-case`` flag per field of the
  ``FrontendArgs`` dataclass;
* the config dataclasses under ``vllm/config/`` give the field types.

Usage:
    python scripts/gen_vllm_flags.py 0.33.0                 # pip-downloads the wheel into a temp dir
    python scripts/gen_vllm_flags.py 0.33.0 --wheel PATH     # use a wheel you already have
"""

from __future__ import annotations

import argparse
import ast
import json
import pathlib
import re
import subprocess
import sys
import tempfile
import zipfile

REPO = pathlib.Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "orchestrator" / "data" / "vllm_flags"
ARG_UTILS = "vllm/engine/arg_utils.py"
CLI_ARGS = ("vllm/entrypoints/common/cli_args.py", "vllm/entrypoints/openai/cli_args.py")
CONFIG_DIR = "vllm/config/"


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
            self.classes: dict[str, ast.ClassDef] = {}
            for name in sorted(names):
                if name.startswith(CONFIG_DIR) and name.endswith(".py"):
                    self._collect(ast.parse(z.read(name)))
            self._collect(self.arg_utils)
            self._collect(self.cli_args)

    def _collect(self, tree: ast.Module) -> None:
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                self.classes.setdefault(node.name, node)

    def fields(self, cls: str) -> dict[str, str]:
        """Annotated class-level fields of ``cls`` and its bases found in the same sources."""
        node = self.classes.get(cls)
        if node is None:
            return {}
        out: dict[str, str] = {}
        for base in node.bases:
            if isinstance(base, ast.Name):
                out.update(self.fields(base.id))
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                out[stmt.target.id] = ast.unparse(stmt.annotation)
        return out


def takes_no_value(annotation: str) -> bool:
    """Whether vLLM's get_kwargs makes a BooleanOptionalAction of a field with this annotation."""
    outer = annotation.replace(" ", "")
    if outer.startswith(("dict[", "list[", "tuple[", "set[", "Mapping[")):
        return False
    names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", annotation))
    if "bool" not in names:
        return False
    # bool | str | None becomes an optional-value flag (nargs="?"), not a switch.
    return "str" not in names


class Flags:
    def __init__(self) -> None:
        self.all: set[str] = set()
        self.switches: set[str] = set()  # take no value

    def add(self, options: list[str], switch: bool, negatable: bool) -> None:
        self.all.update(options)
        if switch:
            self.switches.update(options)
        if negatable:
            for opt in options:
                if not opt.startswith("--"):
                    continue
                negated = {"--no-" + opt[2:]}
                # vLLM's parser swaps BooleanOptionalAction for EnableDisableAction (argparse_utils.py).
                for prefix, inverse in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
                    if opt.startswith(prefix):
                        other = inverse + opt.removeprefix(prefix)
                        negated |= {other, "--no-" + other[2:]}
                self.all |= negated
                self.switches |= negated


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


def _action(call: ast.Call) -> str | None:
    for kw in call.keywords:
        if kw.arg == "action":
            if isinstance(kw.value, ast.Constant):
                return str(kw.value.value)
            return ast.unparse(kw.value)
    return None


def _explicit_bool_dict(call: ast.Call) -> bool:
    """``**{"action": argparse.BooleanOptionalAction, ...}`` literals."""
    for kw in call.keywords:
        if kw.arg is None and isinstance(kw.value, ast.Dict):
            for k, v in zip(kw.value.keys, kw.value.values, strict=True):
                is_action = isinstance(k, ast.Constant) and k.value == "action"
                if is_action and "BooleanOptionalAction" in ast.unparse(v):
                    return True
    return False


def scan_add_argument_calls(func: ast.FunctionDef, src: Source, flags: Flags) -> None:
    """Walk one add_cli_args body in order, tracking which names hold which config's kwargs."""
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
    for node in ast.walk(func):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
        ):
            continue
        options = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        options = [o for o in options if o.startswith("-")]
        if not options:
            continue  # positional (model_tag)
        action = _action(node)
        negatable = (action is not None and "BooleanOptionalAction" in action) or _explicit_bool_dict(node)
        switch = negatable or action in ("store_true", "store_false", "store_const", "count")
        if action is None and not negatable:
            for kw in node.keywords:
                if kw.arg is None:
                    target = _kwargs_target(kw.value, env)
                    if target and takes_no_value(src.fields(target[0]).get(target[1], "")):
                        switch = negatable = True
        flags.add(options, switch, negatable)


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


def collect(src: Source) -> Flags:
    flags = Flags()
    scan_add_argument_calls(_function(src.arg_utils, "EngineArgs", "add_cli_args"), src, flags)
    scan_add_argument_calls(_function(src.arg_utils, "AsyncEngineArgs", "add_cli_args"), src, flags)
    scan_add_argument_calls(_module_function(src.cli_args, "make_arg_parser"), src, flags)
    # FrontendArgs.add_cli_args registers one --kebab-case flag per dataclass field (with its bases).
    for name, annotation in src.fields("FrontendArgs").items():
        switch = takes_no_value(annotation)
        flags.add([f"--{name.replace('_', '-')}"], switch, switch)
    flags.add(["-h", "--help"], switch=True, negatable=False)
    return flags


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("version", help="vLLM version, e.g. 0.33.0")
    ap.add_argument("--wheel", type=pathlib.Path, help="an already downloaded vllm wheel of that version")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        wheel = args.wheel or download_wheel(args.version, pathlib.Path(tmp))
        src = Source(wheel)
        flags = collect(src)
    doc = {
        "version": args.version,
        "generated_by": "scripts/gen_vllm_flags.py",
        "source": f"{wheel.name}: {ARG_UTILS} (EngineArgs/AsyncEngineArgs.add_cli_args), "
        f"{src.cli_path} (make_arg_parser, FrontendArgs), field types from {CONFIG_DIR}",
        "notes": "-O<level> is rewritten to --optimization-level; --x.y sets key y of the JSON flag --x; "
        "underscores in flag names are accepted as dashes.",
        "flags": sorted(flags.all),
        "switches": sorted(flags.switches),
    }
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / f"{args.version}.json"
    out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"{out}: {len(flags.all)} flags, {len(flags.switches)} of them switches")


if __name__ == "__main__":
    main()
