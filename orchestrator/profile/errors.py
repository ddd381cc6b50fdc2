"""Turn pydantic's validation errors into deployctl's messages: field path, YAML line, fix.

One problem per line, in file order, e.g. ``engine.tensorParallelSize (line 12): …``. The root
model is passed in, so this module needs no import of orchestrator/profile/model.py (which calls it).
"""

from __future__ import annotations

import difflib

import pydantic
from pydantic import BaseModel
from pydantic_core import ErrorDetails

from orchestrator.profile import base as profile_base
from orchestrator.profile import strictyaml

Loc = profile_base.Loc


def describe(exc: pydantic.ValidationError, doc: strictyaml.Document, source: str, root: type[BaseModel]) -> str:
    """All problems of ``exc`` as one message: a header naming ``source``, then one line per field."""
    problems = []
    for err in exc.errors(include_url=False):
        loc = _clean_loc(err["loc"])
        if err["type"] == profile_base.FIELD_ERROR:
            loc = (*loc, *err["ctx"]["at"])  # a section-wide check names the item it is about
        line = doc.line_of(loc)
        field = ".".join(str(p) for p in loc) or "(top level)"
        origin = doc.origin_of(loc)
        where = f" (from {origin})" if origin else f" (line {line})" if line else ""
        problems.append((line or 0, f"  {field}{where}: {_message(err, loc, root, doc)}"))
    problems.sort(key=lambda item: item[0])  # in file order, as the user reads it
    return "\n".join([f"{source}: {len(problems)} problem(s) in the profile:"] + [text for _, text in problems])


def _clean_loc(loc: tuple[int | str, ...]) -> Loc:
    # pydantic puts the tag of the weights-source kind it chose after "model.source"; it is no YAML key.
    if loc[:2] == ("model", "source") and len(loc) > 2 and loc[2] in ("pvc", "hostPath"):
        return (*loc[:2], *loc[3:])
    return tuple(loc)


def _message(err: ErrorDetails, loc: Loc, root: type[BaseModel], doc: strictyaml.Document) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        parent = _model_at(root, loc[:-1])
        known = sorted(parent.model_fields) if parent else []
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"unknown key; {hint}allowed here: {', '.join(known)}" if known else "unknown key"
    if kind == "missing":
        return "required field is missing; add it (see profiles/ for examples)"
    if kind == "string_type" and (quoted := strictyaml.quoting_hint(doc, loc, err.get("input"))):
        return quoted
    msg = str(err["msg"])
    msg = msg.removeprefix("Value error, ")
    if kind in (
        "int_type",
        "int_parsing",
        "float_type",
        "float_parsing",
        "bool_type",
        "bool_parsing",
        "string_type",
        "dict_type",
        "list_type",
        "literal_error",
    ) or kind.startswith(("greater", "less")):
        msg = f"{msg} (got {_short(err.get('input'))})"
    return msg


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "…"


def _model_at(root: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    model: type[BaseModel] = root
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        sub = profile_base.model_in(field.annotation)
        if sub is None:
            return None
        model = sub
    return model
