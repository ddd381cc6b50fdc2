"""What vLLM's parser makes of one flag's value: the type callables of ``vllm serve``'s options.

vLLM's own types (``human_readable_int``, a config dataclass's JSON with bare ``80m``-style numbers,
``--flag.key`` settings) as the extraArgs check (``engines.vllm_args``) applies them; :class:`Bad`
says what the value should have been.
"""

from __future__ import annotations

import difflib
import json
import math
import re

from orchestrator.engines import extra_args
from orchestrator.engines.flag_table import Json, Option

_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_BARE_HUMAN_NUMBER = re.compile(r"\b\d+(?:\.\d+)?[kKmMgGtT]\b")
_JSON_STRING = re.compile(r'("(?:[^"\\]|\\.)*")')
_JSON_OBJECT = re.compile(r"(?s)^\s*{.*}\s*$")
_TYPED = frozenset({"int", "float", "int_human", "int_human_auto", "json", "config"})

KIND_WORDS = {
    "int": "an integer",
    "int_human": "an integer, or a number with a k/m/g/t (×1000) or K/M/G/T (×1024) suffix",
    "int_human_auto": "an integer (k/m/g/t or K/M/G/T suffixes allowed), or -1/auto",
    "float": "a number",
    "json": "JSON",
    "config": "a JSON object",
}
EXAMPLES = {"int": "16", "int_human": "8k", "int_human_auto": "8k", "float": "0.5", "json": "'{}'"}


class Bad(ValueError):
    """A value the flag's type refuses; the message says what it should be."""

    def __init__(self, message: str, suggestion: str | None = None) -> None:
        super().__init__(message)
        self.suggestion = suggestion


def convert(opt: Option, raw: str) -> Json:
    """What the option's type callable makes of ``raw``; Bad says what was wanted."""
    kind = opt.type
    if opt.nullable and raw in ("", "None") and kind != "json_or_str":
        return None
    if kind in _TYPED or (kind == "json_or_str" and _JSON_OBJECT.match(raw)):
        try:
            return _typed(opt, raw)
        except Bad:
            raise
        except ValueError as e:
            detail = f" ({e})" if kind in ("json", "json_or_str") or "decimals" in str(e) else ""
            raise Bad(f"{describe(opt)}, not {raw!r}{detail}; write it as, say, {opt.name} {example(opt)}") from None
    if kind == "str" and opt.transform == "lower_underscore":
        return raw.lower().replace("-", "_")
    return raw


def _typed(opt: Option, raw: str) -> Json:
    """``raw`` through the type callable of a typed option (``_TYPED``, or JSON-looking ``json_or_str``)."""
    kind = opt.type
    if kind == "int":
        return int(raw)
    if kind == "float":
        return float(raw)
    if kind == "int_human":
        return human_int(raw)
    if kind == "int_human_auto":
        return -1 if raw.strip() == "-1" or raw.strip().lower() == "auto" else human_int(raw)
    if kind == "config":
        return _config(opt, raw)
    return _loads(raw)  # json, json_or_str


def _loads(raw: str) -> Json:
    value: Json = json.loads(raw)
    return value


def human_int(value: str) -> int:
    """vLLM's human_readable_int: 25.6k → 25600, 1K → 1024."""
    value = value.strip()
    match = _HUMAN_INT.fullmatch(value)
    if match:
        number, suffix = match.groups()
        if suffix in "kmgt":
            return int(float(number) * 10 ** (3 * ("kmgt".index(suffix) + 1)))
        if "." in number:
            raise ValueError(
                f"decimals are not allowed with binary suffixes like {suffix}; write {number}{suffix.lower()}"
            )
        return int(number) << (10 * ("KMGT".index(suffix) + 1))
    return int(value)


def dotted_value(value: str) -> Json:
    """The value of a ``--flag.key value`` setting: JSON, else a human-readable int, else the string."""
    try:
        return _loads(value)
    except ValueError:
        try:
            return human_int(value)
        except ValueError:
            return value


def merge(into: dict[str, Json], update: dict[str, Json]) -> None:
    """``update`` into ``into``, as vLLM merges ``--flag.key`` settings: objects key by key, lists joined."""
    for k, v in update.items():
        old = into.get(k)
        if isinstance(v, dict) and isinstance(old, dict):
            merge(old, v)
        elif isinstance(v, list) and isinstance(old, list):
            old += v
        else:
            into[k] = v


def _config(opt: Option, raw: str) -> dict[str, Json]:
    parts = _JSON_STRING.split(raw)  # expand 80m-style numbers outside strings, as vLLM does
    for i in range(0, len(parts), 2):
        parts[i] = _BARE_HUMAN_NUMBER.sub(lambda m: str(human_int(m.group())), parts[i])
    try:
        value = _loads("".join(parts))
    except ValueError as e:
        what = f"a JSON object of {opt.config or 'config'} keys, not {raw!r} ({e})"
        raise Bad(f"{what}; write its keys in double quotes, e.g. {opt.name} '{_sample(opt)}'") from None
    if not isinstance(value, dict):
        what = f"a JSON object of {opt.config or 'config'} keys, not {raw!r}"
        raise Bad(f"{what}; write it as, say, {opt.name} '{_sample(opt)}'")
    if opt.keys is not None:
        unknown = sorted(set(value) - opt.keys)
        if unknown:
            close = difflib.get_close_matches(unknown[0], sorted(opt.keys), n=1, cutoff=0.6)
            keys = sorted(opt.keys)
            hint = (
                f"; did you mean {close[0]}?" if close else f"; remove it, or use one of: {extra_args.shown(keys, 12)}"
            )
            raise Bad(
                f"only {opt.config} keys, and {', '.join(repr(k) for k in unknown)} is not one (vLLM refuses an "
                f"unexpected keyword argument){hint}",
                close[0] if close else None,
            )
    return value


def _sample(opt: Option) -> str:
    key = sorted(opt.keys)[0] if opt.keys else "key"
    return json.dumps({key: "..."})


def describe(opt: Option) -> str:
    """What ``opt`` takes, in words."""
    if opt.choices is None and opt.type == "config":
        return f"a JSON object of {opt.config or 'config'} keys"
    return extra_args.describe(opt.choices, opt.type, KIND_WORDS)


def example(opt: Option) -> str:
    """A value ``opt`` takes, for a fix."""
    default = opt.default
    if not isinstance(default, (int, float)) or isinstance(default, bool) or not math.isfinite(default):
        default = None
    return extra_args.example(opt.choices, default, opt.type, EXAMPLES)
