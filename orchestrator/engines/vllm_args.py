"""How ``vllm serve`` reads extraArgs: FlexibleArgumentParser's rewriting, then argparse, then the serve rules.

:class:`VllmCheck` is the extraArgs reader (``engines.extra_args``) with vLLM's own steps: the rewriting
of underscores, ``-O3`` and ``--json-flag.key value`` before argparse sees them, argparse's matching of
prefixes and attached short values, the namespace the values make (``engines.vllm_values`` types them),
and the cross-flag rules (``engines.vllm_rules``). ``engines.vllm_flags`` loads the table and runs it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import ClassVar, Literal

from orchestrator.engines import extra_args, vllm_rules, vllm_values
from orchestrator.engines.extra_args import Match, Token
from orchestrator.engines.flag_table import FlagSet, Json, Option

# argparse's test for a negative number; vLLM has no option that looks like one, so these are values.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
# argparse's reading of one argument before it matches any: a flag, one it does not know, one already
# reported ("skip"), or None for a value.
_Resolved = Match | Literal["unknown", "skip"] | None


class VllmCheck(extra_args.Check):
    """One check of extraArgs against a vLLM table."""

    kind_words: ClassVar[Mapping[str, str]] = vllm_values.KIND_WORDS
    examples: ClassVar[Mapping[str, str]] = vllm_values.EXAMPLES
    stray_keeps_after = True  # argparse keeps reading options after a stray value
    stray_messages = (
        "{value!r} follows {flag}, which takes no value, so vLLM reads it as a second model argument and refuses "
        "it (unrecognized arguments: {value}); {fix}",
        "{value!r} is one value too many for {flag}, which takes one; vLLM refuses it (unrecognized arguments: "
        "{value}); remove it, or repeat the flag if you meant another setting",
        "{value!r} is a value with no flag before it; vLLM refuses it (unrecognized arguments: {value}); put the "
        "flag it belongs to in front of it",
    )

    def __init__(self, args: list[str], fs: FlagSet, reserved: Mapping[str, str]) -> None:
        super().__init__(args, fs, f"vLLM {fs.version}", reserved)
        self.values: dict[str, Json] = {}  # dest → value, as argparse's namespace would hold it
        self.where: dict[str, int] = {}  # dest → the extraArgs index that set it
        self.abbreviated: set[int] = set()  # tokens (by id) reported as an abbreviation of a reserved flag
        self.resolved: list[_Resolved] = []  # per token

    def run(self) -> None:
        """Rewrite, parse, then (when the arguments parse) the serve rules."""
        self.parse(self.rewrite())
        if not self.problems:
            self.rules()

    # --- FlexibleArgumentParser's rewriting ----------------------------------------------------------------------

    def rewrite(self) -> list[Token]:
        """FlexibleArgumentParser.parse_args before argparse: names, -O, and --flag.key arguments."""
        tokens: list[Token] = []
        for i, arg in enumerate(self.args):
            if arg.startswith("--help="):
                tokens.append(Token("--help", i))
            elif arg.startswith("--"):
                key, eq, value = arg.partition("=")
                head, dot, tail = key[2:].partition(".")
                tokens.append(Token("--" + head.replace("_", "-") + dot + tail + eq + value, i))
            elif arg.startswith("-O") and arg != "-O":
                tokens += [Token("--optimization-level", i), Token(arg[3:] if arg[2] == "=" else arg[2:], i)]
            elif arg == "-O" and i + 1 < len(self.args) and self.args[i + 1] in ("0", "1", "2", "3"):
                tokens.append(Token("--optimization-level", i))
            else:
                tokens.append(Token(arg, i))
        return self._dotted(tokens)

    def _dotted(self, tokens: list[Token]) -> list[Token]:
        """``--flag.key value`` arguments merged into one JSON value per flag, after the other tokens."""
        kept: list[Token] = []
        merged: dict[str, tuple[int, dict[str, Json]]] = {}
        skip = False
        for n, tok in enumerate(tokens):
            if skip:
                skip = False
                continue
            text = tok.text
            if not (text.startswith("-") and "." in text) or (text.startswith("--") and "." not in text):
                kept.append(tok)
                continue
            if _NEGATIVE_NUMBER.match(text.split("=", 1)[0]):
                before = self.args[tok.index - 1] if tok.index else "FLAG"
                self.problem(
                    tok.index,
                    "bad-value",
                    f"{text!r}: vLLM's parser takes any argument that starts with '-' and contains '.' for a "
                    f"--flag.key setting, so this value never reaches {before}; join them: {before}={text}",
                )
                kept.append(tok)
                continue
            if "=" in text:
                text, value = text.split("=", 1)
                if "." not in text:  # the dot was in the value
                    kept.append(tok)
                    continue
            elif n + 1 < len(tokens):
                value, skip = tokens[n + 1].text, True
            else:
                self.problem(
                    tok.index,
                    "missing-value",
                    f"{text} sets one key of a JSON flag and needs a value after it (vLLM crashes with an "
                    f"IndexError); write {text} VALUE or {text}=VALUE",
                )
                continue
            key, *path = text.removesuffix("+").split(".")
            item: Json = [*value.split(",")] if text.endswith("+") else vllm_values.dotted_value(value)
            for part in reversed(path):
                item = {part: item}
            if isinstance(item, dict):
                vllm_values.merge(merged.setdefault(key, (tok.index, {}))[1], item)
        for key, (index, obj) in merged.items():
            kept += [Token(key, index), Token(json.dumps(obj), index, dotted=True)]
        return kept

    # --- argparse --------------------------------------------------------------------------------------------

    def parse(self, tokens: list[Token]) -> None:
        """argparse's matching of options and values, after the model (the one positional); argparse
        classifies every argument before it matches any, so every one is resolved first."""
        self.tokens = tokens
        self.resolved = [self._resolve(t) for t in tokens]
        super().parse(tokens)

    def is_value(self, n: int) -> bool:
        return self.resolved[n] is None

    def resolve(self, n: int) -> extra_args.Resolved:
        res = self.resolved[n]
        if isinstance(res, Match):
            return res
        if res == "unknown":
            self._unknown(self.tokens[n])
        return "skip"

    def _resolve(self, tok: Token) -> _Resolved:
        """argparse's _parse_optional: None for a value, "unknown", "skip" (reported), or the flag."""
        text = tok.text
        if not text.startswith("-") or len(text) == 1 or tok.dotted:
            return None
        if text == "--":
            self.problem(
                tok.index,
                "stray-value",
                "'--' ends vLLM's options: what follows it is read as positional arguments, which `vllm serve` "
                "refuses after the model; remove it",
            )
            return "skip"
        options = self.fs.options
        if text in options:
            return Match(options[text], text, None)
        if "=" in text:
            name, value = text.split("=", 1)
            if name in options:
                return Match(options[name], name, value)
        matches = self._prefix_matches(text)
        if len(matches) > 1:
            self.ambiguous(tok.index, text.split("=", 1)[0], sorted({m.name for m in matches}))
            return "skip"
        if matches:
            self._abbreviation(tok, matches[0])
            return matches[0]
        if _NEGATIVE_NUMBER.match(text) or " " in text:
            return None
        return "unknown"

    def _prefix_matches(self, text: str) -> list[Match]:
        options = self.fs.options
        if text.startswith("--"):
            prefix, eq, value = text.partition("=")
            return [Match(o, s, value if eq else None) for s, o in options.items() if s.startswith(prefix)]
        found: list[Match] = []
        for s, o in options.items():
            if s == text[:2]:
                found.append(Match(o, s, text[2:]))  # -qfp8: -q with the value fp8
            elif s.startswith(text):
                found.append(Match(o, s, None))
        return found

    def _abbreviation(self, tok: Token, match: Match) -> None:
        written, name = tok.text.split("=", 1)[0], match.name
        field = self.reserved_field(match.option)
        if field is not None:
            self.abbreviated.add(id(tok))  # one report: the field to set instead
            self.problem(
                tok.index,
                "abbreviation",
                f"{written} is an abbreviation of {name}, which deployctl sets from {field}; "
                "set it there, not in extraArgs",
                name,
            )
        elif name.startswith(written):  # not -qfp8, which is -q with its value attached
            self.problem(
                tok.index,
                "abbreviation",
                f"{written} is an abbreviation of {name}: vLLM's argparse accepts unique prefixes, but a "
                f"flag added in a later version can make it ambiguous; write {name}",
                name,
            )

    def needs_values(self, match: Match) -> bool:
        return self.reserved_field(match.option) is None  # the reserved report says enough

    def accept(self, tok: Token, match: Match, values: list[str]) -> None:
        opt, name = match.option, match.name
        if self.reserved_field(opt) is not None:
            if id(tok) not in self.abbreviated:
                self._reserved(tok, opt, name)
        elif opt.action == "help":
            self.problem(tok.index, "exits", f"{name} prints vLLM's help and exits instead of serving; remove it")
        elif match.explicit is not None and opt.nargs == 0:
            self._value_on_switch(tok, opt, name)
        else:
            self._store(tok, opt, name, values)

    def _store(self, tok: Token, opt: Option, name: str, values: list[str]) -> None:
        """Type and choices of each value (argparse's _get_values), then the namespace."""
        value: Json
        if opt.nargs == 0:
            value = opt.const if opt.action == "store_const" else opt.action != "store_false"
            if opt.action == "boolean":
                value = name not in opt.negations
        elif not values:
            value = opt.const  # nargs="?" without a value
        else:
            converted: list[Json] = []
            for raw in values:
                try:
                    item = vllm_values.convert(opt, raw)
                except vllm_values.Bad as e:
                    self.problem(tok.index, "bad-value", f"{name} takes {e}", e.suggestion)
                    return
                if opt.choices is not None and item not in opt.choices:
                    self.bad_choice(tok.index, opt, name, raw)
                    return
                converted.append(item)
            value = converted[0] if opt.nargs in (None, "?") else converted
        self.values[opt.dest] = value
        self.where[opt.dest] = tok.index

    def describe(self, opt: Option) -> str:
        return vllm_values.describe(opt)

    def example(self, opt: Option) -> str:
        return vllm_values.example(opt)

    # --- messages --------------------------------------------------------------------------------------------

    def _unknown(self, tok: Token) -> None:
        base = tok.text.split("=", 1)[0].split(".", 1)[0] if tok.text.startswith("--") else tok.text
        if re.fullmatch(r"-[a-zA-Z]+\d+", base) and base.rstrip("0123456789") in self.fs.options:
            flag, number = base.rstrip("0123456789"), base[len(base.rstrip("0123456789")) :]
            msg = f"{base} is not a {self.label} flag; write the value apart: {flag} {number}"
            self.problem(tok.index, "unknown", msg, flag)
            return
        same = _same_setting(base, self.fs.flags)
        hint = (same, f"; write {same}, which means the same") if same else None
        self.unknown(tok.index, base, hint, "vLLM exits with 'unrecognized arguments'")

    def _reserved(self, tok: Token, opt: Option, name: str) -> None:
        written = tok.text.split("=", 1)[0] if tok.text.startswith("--") else name
        self.problem(
            tok.index,
            "reserved",
            f"{written} is set by deployctl from {self.reserved_field(opt)}; set it there, not in extraArgs",
        )

    def _value_on_switch(self, tok: Token, opt: Option, name: str) -> None:
        off = next((s for s in opt.negations if s.startswith("--no-")), opt.negations[0] if opt.negations else None)
        self.problem(
            tok.index,
            "value-on-switch",
            f"{name} takes no value in {self.label} (argparse rejects {self.args[tok.index]!r}); write "
            f"{name} to switch it on" + (f" or {off} to switch it off" if off else ""),
            name,
        )

    def missing(self, tok: Token, match: Match) -> int:
        opt, name = match.option, match.name
        self.problem(
            tok.index,
            "missing-value",
            f"{name} needs {extra_args.need_words(opt.nargs)} ({self.describe(opt)}) after it, and none follows "
            f"(argparse: expected {'at least one argument' if opt.nargs == '+' else 'one argument'}); write "
            f"{name} {self.example(opt)}",
        )
        return 0

    def switch_fix(self, opt: Option) -> str:
        off = next((s for s in opt.negations if s.startswith("--no-")), None)
        return f"write {opt.name} alone to switch it on" + (f", {off} to switch it off" if off else "")

    # --- validate_parsed_serve_args --------------------------------------------------------------------------

    def rules(self) -> None:
        dests = {o.dest for o in self.fs.options.values()}
        for needs, rule in vllm_rules.RULES:
            if needs <= dests:
                found = rule(self._get)
                if found:
                    dest, message = found
                    index = self.where.get(dest, min(self.where.values(), default=0))
                    self.problem(index, "needs-flag", message)

    def _get(self, dest: str) -> Json:
        if dest in self.values:
            return self.values[dest]
        opt = next((o for o in self.fs.options.values() if o.dest == dest), None)
        return opt.default if opt else None


def _same_setting(flag: str, flags: frozenset[str]) -> str | None:
    """The spelling of the same switch state that exists: --no-disable-x → --enable-x, and so on."""
    for prefix, other in (
        ("--no-disable-", "--enable-"),
        ("--no-enable-", "--disable-"),
        ("--disable-", "--no-enable-"),
        ("--enable-", "--no-disable-"),
    ):
        if flag.startswith(prefix) and other + flag.removeprefix(prefix) in flags:
            return other + flag.removeprefix(prefix)
    return None
