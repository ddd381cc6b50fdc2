"""What a flag table holds, engine-neutral: the shipped JSON's shape, and the checker's view of it.

Every engine's flag table has one format (format 2): ``orchestrator/data/vllm_flags/<version>.json``
for vLLM, ``orchestrator/data/engine_flags/<engine>/<version>.json`` for the others (which add
``engine`` and ``dialect``). :func:`flag_set` turns a parsed table into the :class:`FlagSet` that the
extraArgs check (``engines.extra_args``) reads, and :class:`Problem` is what the check reports.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeAlias, TypedDict

# A value as json.loads() returns it: a default, a choice, a config flag's JSON.
Json: TypeAlias = "bool | int | float | str | list[Json] | dict[str, Json] | None"

ProblemKind = Literal[
    "unknown",  # no such flag
    "abbreviation",  # a unique prefix: the engine's argparse accepts it, deployctl does not
    "ambiguous",  # a prefix of several flags
    "reserved",  # deployctl sets it from a profile field
    "value-on-switch",  # --switch=value
    "missing-value",  # a flag that takes a value at the end, or before another flag
    "stray-value",  # a value no flag takes
    "bad-value",  # not of the flag's type (not an int, not JSON, an unknown config key)
    "bad-choice",  # not one of the flag's choices
    "needs-flag",  # a cross-flag rule of vLLM's validate_parsed_serve_args
    "exits",  # --help: prints and exits instead of serving
]


class TableOption(TypedDict, total=False):
    """One option as a table file records it (the keys after ``type`` are optional)."""

    names: list[str]
    negations: list[str]
    dest: str
    action: str
    switch: bool
    nargs: int | str | None
    type: str | None
    nullable: bool
    choices: list[Json] | None
    keys: list[str] | None
    config: str | None
    transform: str | None
    default: Json
    const: Json
    delimiter: str  # clap's value_delimiter (the other engines' tables)


class Table(TypedDict, total=False):
    """A table file: its header, the flat lists older readers use, then one entry per option."""

    version: str
    format: int
    engine: str  # the other engines' tables only
    dialect: str  # argparse, clap or click (the other engines' tables only)
    generated_by: str
    source: str
    notes: str
    kinds: dict[str, str]
    flags: list[str]
    switches: list[str]
    defaults: dict[str, Json]
    options: list[TableOption]


@dataclass(frozen=True)
class Problem:
    """One bad entry of extraArgs: which argument, what is wrong, and the flag meant if we can tell."""

    index: int  # position in extraArgs
    arg: str
    kind: ProblemKind
    message: str
    suggestion: str | None = None


@dataclass(frozen=True)
class Option:
    """One option of the engine's parser, as its table records it."""

    names: tuple[str, ...]  # switch it on, or take its value
    negations: tuple[str, ...]  # switch it off (--no-x; --disable-x for --enable-x from vLLM 0.33)
    dest: str
    action: str  # store, store_true, boolean, append, help, custom, …
    switch: bool
    nargs: int | str | None
    type: str | None  # kind of value; None: not known, not checked
    nullable: bool = False  # "None" and "" also mean unset
    choices: tuple[Json, ...] | None = None
    keys: frozenset[str] | None = None  # a config flag's JSON may have only these top-level keys
    config: str | None = None
    transform: str | None = None
    default: Json = field(default=None, compare=False)  # JSON: lists and dicts too
    const: Json = field(default=None, compare=False)

    @property
    def name(self) -> str:
        """The name to write: the first long one."""
        return next((n for n in self.names if n.startswith("--")), self.names[0])

    @property
    def strings(self) -> tuple[str, ...]:
        """Every string that names it: its names, then its negations."""
        return self.names + self.negations


@dataclass(frozen=True)
class FlagSet:
    version: str
    flags: frozenset[str]  # every option string, negations included
    switches: frozenset[str]  # option strings that take no value
    options: Mapping[str, Option] = field(default_factory=dict)  # option string → its option


def flag_set(data: Table, version: str | None = None) -> FlagSet:
    """The FlagSet of a parsed table; ``version`` defaults to the table's own."""
    options: dict[str, Option] = {}
    for raw in data["options"]:
        choices, keys = raw.get("choices"), raw.get("keys")
        opt = Option(
            names=tuple(raw["names"]),
            negations=tuple(raw["negations"]),
            dest=raw["dest"],
            action=raw["action"],
            switch=raw["switch"],
            nargs=raw["nargs"],
            type=raw["type"],
            nullable=raw.get("nullable", False),
            choices=tuple(choices) if choices is not None else None,
            keys=frozenset(keys) if keys is not None else None,
            config=raw.get("config"),
            transform=raw.get("transform"),
            default=raw.get("default"),
            const=raw.get("const"),
        )
        options.update(dict.fromkeys(opt.strings, opt))
    return FlagSet(version or data["version"], frozenset(data["flags"]), frozenset(data["switches"]), options)


def version_key(version: str) -> tuple[tuple[int, ...], str]:
    """Numeric versions in order; a name that is no version (a commit) first."""
    head = re.match(r"\d+(?:\.\d+)*", version)
    return (tuple(int(p) for p in head.group().split(".")) if head else (), version)
