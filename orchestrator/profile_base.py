"""The building blocks every profile section shares: the strict base model and the name checks.

Kept apart from orchestrator/profile.py so the sections split into their own modules
(profile_engine, profile_pod) and the root model can all use them without importing each other.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict
from pydantic_core import PydanticCustomError

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


class Model(BaseModel):
    """Every profile section: unknown keys refused, defaults validated, values frozen."""

    model_config = ConfigDict(extra="forbid", populate_by_name=False, validate_default=True, frozen=True)


def dns_label(value: str, what: str) -> str:
    if len(value) > 63 or not DNS1123_LABEL.match(value):
        raise ValueError(
            f"{value!r} is not a valid {what}: use at most 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return value


RESERVED_LABEL_PREFIXES = ("app.kubernetes.io/", "deployctl.dev/")


def no_reserved_labels(labels: dict[str, str]) -> dict[str, str]:
    taken = sorted(k for k in labels if k.startswith(RESERVED_LABEL_PREFIXES))
    if taken:
        raise ValueError(
            f"label(s) {', '.join(taken)} are set by deployctl (selectors and pruning rely on them); "
            "use your own prefix, e.g. example.com/team"
        )
    return labels


Loc = tuple[str | int, ...]
# The error type of field_error: its context carries the path below the validated field, so that a
# check made over a whole section still names the one item it is about (and that item's YAML line).
FIELD_ERROR = "deployctl_field"


def field_error(at: Loc, message: str) -> PydanticCustomError:
    """An error about the field ``at`` below the one being validated (profile_errors extends the path)."""
    return PydanticCustomError(FIELD_ERROR, "{reason}", {"reason": message, "at": at})
