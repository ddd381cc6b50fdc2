"""A vLLM flag table from the text of ``vllm serve --help=all``: the offline way to add a vLLM version.

deployctl ships tables for the vLLM versions it knows (orchestrator/data/vllm_flags/). For a newer one,
``deployctl engine-flags import`` reads the help text that version prints inside the user's own image
and writes a table to the user's flags directory (:func:`orchestrator.engines.vllm_flags.user_dir`), where the
check of ``engine.extraArgs`` finds it. argparse's help shows each option's strings, whether it takes
a value and how many (``X``, ``[X]``, ``X [X ...]``), its choices (``{a,b}``) and its default, so an
imported table checks flag names, switches and their ``--no-``/``--disable-`` forms, arity and
choices; it does not say value types (``int``, a JSON config's keys), which stay unchecked (null).
Both layouts argparse writes are read: ``-tp TP, --tensor-parallel-size TP`` (Python up to 3.12) and
``-tp, --tensor-parallel-size TP`` (3.13 on).

:func:`table` builds the file's content from parsed options; scripts/gen_vllm_flags.py uses it too.
"""

from __future__ import annotations

import ast
import json
import re

from orchestrator.engines.flag_table import Json, Table, TableOption

FORMAT = 2
NOTES = (
    "-O<level> is rewritten to --optimization-level; --x.y sets key y of the JSON flag --x; underscores in "
    "flag names are accepted as dashes. Per option: names switch it on or take its value, negations switch it "
    "off; type is the kind of value (null: not known, not checked); nullable: 'None' and '' also mean unset; "
    "keys: the only top-level keys a config flag's JSON may have. defaults repeats each option's default by "
    "its first name."
)
# What a value of each kind is, for the table's readers (orchestrator/engines/vllm_flags.py checks them).
KINDS = {
    "bool": "a switch",
    "int": "int()",
    "int_human": "vLLM's human_readable_int: an int, or a number with k/m/g/t (x1000) or K/M/G/T (x1024)",
    "int_human_auto": "human_readable_int, or -1/auto",
    "float": "float()",
    "str": "any string",
    "json": "json.loads()",
    "json_or_str": "JSON when it looks like {...}, else any string",
    "config": "a JSON object for a config dataclass (bare 80m-style numbers allowed)",
    "other": "a callable this script does not model: not checked",
}

# An option's line: argparse's two-space section indent, then its strings; its help follows after two
# spaces or on the next lines (indented further). Text indented otherwise (vLLM's JSON tip, whose
# examples start with --json-arg) is no option.
_OPTION_LINE = re.compile(r"^  (-[^ ].*)$")
_NAME = re.compile(r"^--?[A-Za-z0-9][A-Za-z0-9_-]*$")
_DEFAULT = re.compile(r"\(default: (.*)\)\s*$", re.DOTALL)
_SPECIAL = {"-h": "help", "--help": "help", "--version": "version"}


class HelpProblem(ValueError):
    """The text is not the help of `vllm serve`; the message says what to give instead."""


def parse(text: str, version: str) -> Table:
    """The flag table (format 2) of ``vllm serve --help=all`` output ``text``, for vLLM ``version``."""
    options: list[TableOption] = []
    current: TableOption | None = None
    help_lines: list[str] = []
    for line in text.splitlines():
        match = _OPTION_LINE.match(line)
        if match is not None and _is_option(match.group(1).split("  ")[0]):
            _finish(current, help_lines)
            invocation, _, rest = match.group(1).partition("  ")
            current = _option(invocation.strip())
            options.append(current)
            help_lines = [rest.strip()]
        elif current is not None and line.startswith(" " * 8):
            help_lines.append(line.strip())
        else:
            _finish(current, help_lines)
            current, help_lines = None, []
    _finish(current, help_lines)
    seen = {n for o in options for n in o["names"]}
    if not {"--model", "--port"} & seen or len(options) < 20:
        raise HelpProblem(
            f"the text lists {len(options)} option(s) and not --port: it is not the output of `vllm serve --help=all` "
            "(plain --help shows only the option groups); run `vllm serve --help=all` in the image and give its "
            "whole output"
        )
    raw: Table = {
        "version": version,
        "generated_by": f"deployctl engine-flags import --vllm-version {version}",
        "source": f"the text of `vllm serve --help=all` of vLLM {version}: names, switches, arity, choices and "
        "defaults; value types are not in it (null: not checked)",
        "options": _unique(options),
    }
    return table(raw)


def _strings(invocation: str) -> list[str]:
    """The comma-separated parts of an option's line, each an option string and maybe its metavar."""
    return re.split(r", (?=-)", invocation)


def _is_option(invocation: str) -> bool:
    return all(_NAME.match(part.split(" ", 1)[0]) for part in _strings(invocation))


def _option(invocation: str) -> TableOption:
    strings: list[str] = []
    shape = ""
    for part in _strings(invocation):
        name, _, args = part.partition(" ")
        strings.append(name)
        shape = args or shape  # 3.13 writes the metavar after the last string only
    nargs, choices = _arity(shape)
    entry: TableOption = {"names": strings, "negations": [], "dest": _dest(strings), "switch": nargs == 0}
    if nargs == 0:
        entry["negations"] = [s for s in strings[1:] if _inverse(s, strings[0])]
        entry["names"] = [s for s in strings if s not in entry["negations"]]
        special = next((_SPECIAL[s] for s in strings if s in _SPECIAL), None)
        entry["action"] = special or ("boolean" if entry["negations"] else "store_true")
        entry.update({"nargs": 0, "type": "bool"})
    else:
        entry.update({"action": "store", "nargs": nargs, "type": None})
        if choices is not None:
            entry["choices"] = choices
    return entry


def _arity(shape: str) -> tuple[int | str | None, list[Json] | None]:
    """argparse's layout of the metavar M as (nargs, choices): ``M`` → None, ``[M]`` → ?, ``[M ...]``
    → *, ``M [M ...]`` → +, ``M M`` → 2, nothing → 0 (a switch). M is ``{a,b}`` for choices. Any
    other text is a metavar of vLLM's own (``['auto', 'hf']``, ``{…} or name registered in …``): one
    value, its choices not enforced by argparse, so none recorded."""
    if not shape:
        return 0, None
    if shape == "...":
        return "...", None  # argparse.REMAINDER
    words = shape.split(" ")
    metavar = words[0].strip("[]")

    def choices() -> list[Json] | None:
        return [*metavar[1:-1].split(",")] if metavar.startswith("{") and metavar.endswith("}") else None

    if shape == metavar:
        return None, choices()
    if shape == f"[{metavar}]":
        return "?", choices()
    if shape in (f"[{metavar} ...]", f"[{metavar} [{metavar} ...]]"):
        return "*", choices()
    if shape == f"{metavar} [{metavar} ...]":
        return "+", choices()
    if len(words) > 1 and all(w == metavar for w in words):
        return len(words), choices()
    return None, None


def _inverse(name: str, first: str) -> bool:
    """Whether switch string ``name`` turns off the switch ``first`` (BooleanOptionalAction's --no-x; vLLM
    0.33's EnableDisableAction adds --disable-x to --enable-x and the reverse)."""
    body = first.removeprefix("--")
    if name == f"--no-{body}":
        return True
    for on, off in (("enable-", "disable-"), ("disable-", "enable-")):
        if body.startswith(on) and name == f"--{off}{body.removeprefix(on)}":
            return True
    return False


def _dest(strings: list[str]) -> str:
    long = next((s for s in strings if s.startswith("--")), strings[0])
    return long.lstrip("-").replace("-", "_")


def _finish(entry: TableOption | None, help_lines: list[str]) -> None:
    if entry is None:
        return
    found = _DEFAULT.search(" ".join(x for x in help_lines if x))
    if found is not None and entry["action"] not in ("help", "version"):
        entry["default"] = _value(found.group(1))


def _value(text: str) -> Json:
    """A default as argparse printed it (str() of the value), back as JSON-able data where it parses."""
    if text == "None":
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, RecursionError, MemoryError):
        return text
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return text
    return list(value) if isinstance(value, tuple) else value


def _unique(options: list[TableOption]) -> list[TableOption]:
    """Each option once: --help=all lists an option in every group that shows it."""
    by_names: dict[tuple[str, ...], TableOption] = {}
    for opt in options:
        by_names.setdefault(tuple(opt["names"] + opt["negations"]), opt)
    return list(by_names.values())


def table(raw: Table) -> Table:
    """The file's content: a header, the flat lists older readers use, then one entry per option."""
    options = sorted(raw["options"], key=lambda o: o["names"][0].lstrip("-"))
    seen: set[str] = set()
    for opt in options:
        for name in opt["names"] + opt["negations"]:
            if name in seen:
                raise HelpProblem(f"{name} is registered twice; the text was misread")
            seen.add(name)
    switches = sorted(n for o in options if o["switch"] for n in o["names"] + o["negations"])
    defaults = {
        next(n for n in o["names"] if n.startswith("--")): o["default"]
        for o in options
        if "default" in o and any(n.startswith("--") for n in o["names"])
    }
    return {
        "version": raw["version"],
        "format": FORMAT,
        "generated_by": raw["generated_by"],
        "source": raw["source"],
        "notes": NOTES,
        "kinds": KINDS,
        "flags": sorted(seen),
        "switches": switches,
        "defaults": defaults,
        "options": options,
    }


def dumps(doc: Table) -> str:
    """The table as its file holds it: one option per line, for reviewable diffs."""
    head = {k: v for k, v in doc.items() if k != "options"}
    text = json.dumps(head, indent=1)[:-2]
    lines = ",\n  ".join(json.dumps(o, separators=(", ", ": ")) for o in doc["options"])
    return f'{text},\n "options": [\n  {lines}\n ]\n}}\n'
