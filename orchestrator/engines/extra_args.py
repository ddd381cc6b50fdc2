"""The one reader of a profile's ``engine.extraArgs``, engine-neutral: which entry is a flag, which are its
values, and what to say when an entry is not usable.

An engine's checker (``engines.vllm_args`` for vLLM, ``engines.flags`` for the others) subclasses
:class:`Check` and says how its parser sees one argument (:meth:`Check.is_value`, :meth:`Check.resolve`)
and what it makes of a flag and its values (:meth:`Check.accept`); the walk over the arguments, argparse's
arity rules and the messages every engine shares live here, so two engines word the same fault alike.
"""

from __future__ import annotations

import abc
import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from orchestrator.engines.flag_table import FlagSet, Json, Option, Problem, ProblemKind


@dataclass
class Token:
    """One argument as the engine's parser reads it (vLLM rewrites some before parsing)."""

    text: str
    index: int  # the extraArgs entry it came from
    dotted: bool = False  # the JSON that vLLM's --flag.key arguments became


@dataclass(frozen=True)
class Match:
    """A flag the parser found: its option, the string written, and a value attached to it (``=value``)."""

    option: Option
    name: str
    explicit: str | None


# What resolving a flag gives besides a match: "skip" (reported, or unknown: the values after it go with
# it) or "stop" (the parser reads nothing after it).
Resolved = Match | Literal["skip", "stop"]


def arity(nargs: int | str | None, available: int) -> tuple[int, int]:
    """(values needed, values taken) of argparse's nargs, given the values that follow."""
    if nargs is None:
        return 1, min(1, available)
    if nargs == "?":
        return 0, min(1, available)
    if nargs == "+":
        return 1, available
    if isinstance(nargs, int):
        return nargs, min(nargs, available)
    return 0, available  # "*", or argparse.REMAINDER ("...")


def need_words(nargs: int | str | None) -> str:
    """How many values a flag of ``nargs`` needs, in words."""
    return "at least one value" if nargs == "+" else f"{nargs} values" if nargs else "a value"


def shown(names: Sequence[str], most: int = 6) -> str:
    """The first ``most`` names, then how many more."""
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def describe(choices: tuple[Json, ...] | None, kind: str | None, words: Mapping[str, str]) -> str:
    """What a flag takes, in words: its choices, else its kind of value."""
    if choices is not None:
        return "one of " + ", ".join(str(c) for c in choices if c is not None)
    return words.get(kind or "", "a value")


def example(
    choices: tuple[Json, ...] | None, default: float | None, kind: str | None, examples: Mapping[str, str]
) -> str:
    """A value a flag takes, for a fix: its first choice, its numeric default, else one of its kind."""
    if choices:
        return str(next(c for c in choices if c is not None))
    if default is not None:
        return str(default)
    return examples.get(kind or "", "VALUE")


class Check(abc.ABC):
    """One check of extraArgs against one engine's table: the arguments, the table, and what is found."""

    # The values' kinds in words, and a value to show in a fix, by the table's type.
    kind_words: ClassVar[Mapping[str, str]]
    examples: ClassVar[Mapping[str, str]]
    # Whether a value no flag takes leaves the flag before it in force (argparse's positional after a
    # model) or not, for the next stray value's message.
    stray_keeps_after: ClassVar[bool] = False
    # What a value no flag takes is, by what came before it: a switch, a flag with its values, or no flag.
    # Each is formatted with the value, the flag before it, the label, and the fix for a switch.
    stray_messages: ClassVar[tuple[str, str, str]]

    def __init__(self, args: list[str], fs: FlagSet, label: str, reserved: Mapping[str, str]) -> None:
        self.args = args
        self.fs = fs
        self.label = label  # the engine and version, as messages name it
        self.reserved = reserved  # flags deployctl renders, each with the profile field that sets it
        self.tokens: list[Token] = []
        self.problems: list[Problem] = []

    def found(self) -> list[Problem]:
        """The problems, in argument order."""
        return sorted(self.problems, key=lambda p: p.index)

    def problem(self, index: int, kind: ProblemKind, message: str, suggestion: str | None = None) -> None:
        self.problems.append(Problem(index, self.args[index], kind, message, suggestion))

    # --- what the engine's parser makes of one argument --------------------------------------------------------

    @abc.abstractmethod
    def is_value(self, n: int) -> bool:
        """Whether ``self.tokens[n]`` is read as a value (else as a flag)."""

    @abc.abstractmethod
    def resolve(self, n: int) -> Resolved:
        """The flag ``self.tokens[n]`` is, reporting it when it is not usable."""

    @abc.abstractmethod
    def accept(self, tok: Token, match: Match, values: list[str]) -> None:
        """Check a flag and the values it took."""

    @abc.abstractmethod
    def missing(self, tok: Token, match: Match) -> int:
        """Report a flag short of values; returns how many more arguments the report covers."""

    def switch_fix(self, opt: Option) -> str:
        """How to write switch ``opt`` instead of giving it a value."""
        off = opt.negations[0] if opt.negations else None
        return f"write {opt.name} alone to switch it on" + (f" or {off} to switch it off" if off else "")

    def stray(self, tok: Token, after: Option | None) -> None:
        """Report a value no flag takes; ``after`` is the flag before it."""
        value = self.args[tok.index]
        if after is None:
            template, flag, fix = self.stray_messages[2], "", ""
        else:
            template = self.stray_messages[0 if after.switch else 1]
            flag, fix = after.name, self.switch_fix(after) if after.switch else ""
        message = template.format(value=value, flag=flag, label=self.label, fix=fix)
        self.problem(tok.index, "stray-value", message)

    def needs_values(self, match: Match) -> bool:
        """Whether a flag short of values is reported as such (not when another report covers it)."""
        return True

    # --- the walk --------------------------------------------------------------------------------------------

    def parse(self, tokens: list[Token]) -> None:
        """Match flags and values the way argparse does: each flag takes the values after it, by its arity."""
        self.tokens = tokens
        n = 0
        after: Option | None = None  # the flag whose values came just before, for stray-value messages
        while n < len(tokens):
            if self.is_value(n):
                self.stray(tokens[n], after)
                after = after if self.stray_keeps_after else None
                n += 1
                continue
            tok, res = tokens[n], self.resolve(n)
            n += 1
            end = n
            while end < len(tokens) and self.is_value(end):
                end += 1
            if res == "stop":
                return
            if res == "skip":
                n, after = end, None  # the values after an unknown flag go with it: one report is enough
                continue
            after = res.option
            if res.explicit is not None:
                values = [res.explicit]
            else:
                need, take = arity(res.option.nargs, end - n)
                if end - n < need and self.needs_values(res):
                    n = end + self.missing(tok, res)
                    continue
                values = [t.text for t in tokens[n : n + take]]
                n += take
            self.accept(tok, res, values)

    # --- what every engine says alike ----------------------------------------------------------------------

    def choices(self, opt: Option) -> tuple[Json, ...] | None:
        """The choices the engine's parser enforces for ``opt`` (None: any value of its type)."""
        return opt.choices

    def number_default(self, opt: Option) -> int | float | None:
        """``opt``'s default when it makes a good example value."""
        return None

    def describe(self, opt: Option) -> str:
        """What ``opt`` takes, in words."""
        return describe(self.choices(opt), opt.type, self.kind_words)

    def example(self, opt: Option) -> str:
        """A value ``opt`` takes, for a fix."""
        return example(self.choices(opt), self.number_default(opt), opt.type, self.examples)

    def ambiguous(self, index: int, written: str, names: list[str]) -> None:
        self.problem(
            index,
            "ambiguous",
            f"{written} is the start of {len(names)} {self.label} flags ({shown(names)}); argparse refuses it as "
            "ambiguous: write the whole flag",
        )

    def unknown(self, index: int, name: str, same: tuple[str, str] | None, refusal: str) -> None:
        """``name`` is no flag: ``same`` is (the spelling meant, the hint saying so), else the closest flag."""
        if same is not None:
            close, hint = [same[0]], same[1]
        else:
            close = difflib.get_close_matches(name, sorted(self.fs.flags), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else f"; remove it ({refusal})"
        self.problem(index, "unknown", f"{name} is not a {self.label} flag{hint}", close[0] if close else None)

    def bad_choice(self, index: int, opt: Option, name: str, raw: str) -> None:
        choices = [str(c) for c in self.choices(opt) or () if c is not None]
        close = difflib.get_close_matches(raw, choices, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        self.problem(
            index,
            "bad-choice",
            f"{name} {raw!r} is not one of {self.label}'s choices: {', '.join(choices)}{hint}",
            close[0] if close else None,
        )

    def reserved_field(self, opt: Option) -> str | None:
        """The profile field that sets ``opt``, when deployctl renders it."""
        return next((self.reserved[s] for s in opt.strings if s in self.reserved), None)
