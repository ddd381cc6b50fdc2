"""The one extraArgs reader every engine's check builds on (orchestrator/engines/extra_args.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import pytest

from orchestrator.engines import extra_args, flag_table, flags, vllm_flags
from orchestrator.engines.extra_args import Match, Token
from orchestrator.engines.flag_table import Option


@pytest.mark.parametrize(
    ("nargs", "available", "expected"),
    [
        (None, 0, (1, 0)),
        (None, 3, (1, 1)),
        ("?", 0, (0, 0)),
        ("?", 2, (0, 1)),
        ("+", 0, (1, 0)),
        ("+", 3, (1, 3)),
        ("*", 2, (0, 2)),
        ("...", 2, (0, 2)),  # argparse.REMAINDER, which an imported --help=all table may hold
        (2, 1, (2, 1)),
        (2, 5, (2, 2)),
        (0, 4, (0, 0)),
    ],
)
def test_arity_is_argparses(nargs: int | str | None, available: int, expected: tuple[int, int]) -> None:
    assert extra_args.arity(nargs, available) == expected


def test_shown_names_the_first_and_counts_the_rest() -> None:
    assert extra_args.shown(["a", "b"]) == "a, b"
    assert extra_args.shown([str(i) for i in range(8)]) == "0, 1, 2, 3, 4, 5 and 2 more"


def test_describe_and_example_prefer_choices_then_the_default_then_the_kind() -> None:
    words = {"int": "an integer"}
    assert extra_args.describe((None, "a", "b"), "str", words) == "one of a, b"
    assert extra_args.describe(None, "int", words) == "an integer"
    assert extra_args.describe(None, "other", words) == "a value"
    assert extra_args.example((None, "a"), 3, "str", {}) == "a"
    assert extra_args.example(None, 3, "int", {"int": "16"}) == "3"
    assert extra_args.example(None, None, "int", {"int": "16"}) == "16"
    assert extra_args.example(None, None, "other", {}) == "VALUE"


_TABLE: flag_table.Table = {
    "version": "1",
    "flags": ["--size", "--on", "--pair"],
    "switches": ["--on"],
    "options": [
        {"names": ["--size"], "negations": [], "dest": "size", "action": "store", "switch": False, "nargs": None,
         "type": "int"},
        {"names": ["--on"], "negations": [], "dest": "on", "action": "store_true", "switch": True, "nargs": 0,
         "type": "bool"},
        {"names": ["--pair"], "negations": [], "dest": "pair", "action": "store", "switch": False, "nargs": 2,
         "type": "str"},
    ],
}  # fmt: skip


class _Toy(extra_args.Check):
    """The smallest engine: a flag is what starts with '-', and every problem names only its kind."""

    kind_words: ClassVar[Mapping[str, str]] = {}
    examples: ClassVar[Mapping[str, str]] = {}

    def is_value(self, n: int) -> bool:
        return not self.tokens[n].text.startswith("-")

    def resolve(self, n: int) -> extra_args.Resolved:
        tok = self.tokens[n]
        if tok.text == "--":
            return "stop"
        opt = self.fs.options.get(tok.text)
        if opt is None:
            self.unknown(tok.index, tok.text, None, "toy refuses it")
            return "skip"
        return Match(opt, tok.text, None)

    def accept(self, tok: Token, match: Match, values: list[str]) -> None:
        self.problem(tok.index, "exits", f"{match.name} {values}")

    def stray(self, tok: Token, after: Option | None) -> None:
        self.problem(tok.index, "stray-value", after.name if after else "-")

    def missing(self, tok: Token, match: Match) -> int:
        self.problem(tok.index, "missing-value", match.name)
        return 0


def _walk(args: list[str]) -> list[tuple[int, str, str]]:
    toy = _Toy(args, flag_table.flag_set(_TABLE), "Toy 1", {})
    toy.parse([Token(a, i) for i, a in enumerate(args)])
    return [(p.index, p.kind, p.message) for p in toy.found()]


def test_each_flag_takes_the_values_its_arity_allows_and_the_rest_are_stray() -> None:
    assert _walk(["--size", "1", "2", "--on", "x"]) == [
        (0, "exits", "--size ['1']"),
        (2, "stray-value", "--size"),  # a stray value leaves no flag in force (stray_keeps_after)
        (3, "exits", "--on []"),
        (4, "stray-value", "--on"),
    ]


def test_values_after_an_unknown_flag_go_with_it_and_stop_ends_the_walk() -> None:
    assert _walk(["--sise", "1", "2", "--", "--nope"]) == [
        (0, "unknown", "--sise is not a Toy 1 flag; did you mean --size?"),
    ]


def test_a_flag_short_of_values_is_reported_once_with_the_values_it_had() -> None:
    assert _walk(["--pair", "a", "--on"]) == [(0, "missing-value", "--pair"), (2, "exits", "--on []")]


def test_every_engine_words_an_ambiguous_prefix_alike() -> None:
    [vllm] = vllm_flags.check(["--enable-"], "0.33.0")
    [sglang] = flags.check(["--enable-"], "sglang", "0.5.23", {})
    for problem, label in ((vllm, "vLLM 0.33.0"), (sglang, "SGLang 0.5.23")):
        assert problem.kind == "ambiguous"
        assert f" {label} flags (" in problem.message
        assert problem.message.endswith("; argparse refuses it as ambiguous: write the whole flag")
