"""The building blocks every profile section shares: the strict base model and the name checks.

Kept apart from orchestrator/profile/model.py so the sections split into their own modules
(profile_engine, profile_pod) and the root model can all use them without importing each other.
"""

from __future__ import annotations

import functools
import re
from typing import Annotated

import pydantic
from pydantic import BaseModel, ConfigDict
from pydantic_core import PydanticCustomError, PydanticUndefined

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# The name of most objects (a Secret, ConfigMap or PersistentVolumeClaim): a DNS-1123 subdomain.
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


class Model(BaseModel):
    """Every profile section: unknown keys refused, defaults validated, values frozen."""

    model_config = ConfigDict(extra="forbid", populate_by_name=False, validate_default=True, frozen=True)


def _kube_name(value: str, what: str, pattern: re.Pattern[str], limit: int, alphabet: str) -> str:
    if len(value) > limit or not pattern.match(value):
        raise ValueError(f"{value!r} is not a valid {what}: use {alphabet}, starting and ending with a letter or digit")
    return value


def dns_label(value: str, what: str) -> str:
    """``value`` if a DNS-1123 label (a release, namespace or volume name), else a ValueError naming ``what``."""
    return _kube_name(value, what, DNS1123_LABEL, 63, "at most 63 lowercase letters, digits and '-'")


def object_name(value: str, what: str) -> str:
    """``value`` if a DNS-1123 subdomain (a Secret, ConfigMap or claim name), else a ValueError naming ``what``."""
    return _kube_name(value, what, DNS1123_SUBDOMAIN, 253, "lowercase letters, digits, '-' and '.'")


def dns_label_of(what: str) -> pydantic.AfterValidator:
    """The check of a field holding a DNS-1123 label: ``Annotated[str, dns_label_of("namespace")]``."""
    return pydantic.AfterValidator(functools.partial(dns_label, what=what))


def object_name_of(what: str) -> pydantic.AfterValidator:
    """The check of a field naming a Kubernetes object: ``Annotated[str, object_name_of("Secret name")]``."""
    return pydantic.AfterValidator(functools.partial(object_name, what=what))


RESERVED_LABEL_PREFIXES = ("app.kubernetes.io/", "deployctl.dev/")


# Kubernetes' label syntax (apimachinery validation): a name part of at most 63 characters,
# optionally behind a DNS-subdomain prefix and "/"; a value of at most 63 such characters, or empty.
_LABEL_PART = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_PREFIX = DNS1123_SUBDOMAIN


def user_labels(labels: dict[str, str]) -> dict[str, str]:
    """Labels a profile adds to objects: valid for the API server (refused here, not after the first
    write) and none of the keys deployctl sets itself."""
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if (
            not name
            or len(name) > 63
            or not _LABEL_PART.match(name)
            or (prefix and (len(prefix) > 253 or not _LABEL_PREFIX.match(prefix)))
        ):
            raise ValueError(
                f"{key!r} is not a valid label key: up to 63 letters, digits, '-', '_' or '.', starting and ending "
                "with a letter or digit, optionally behind a DNS prefix and '/' (e.g. example.com/team)"
            )
        if len(value) > 63 or not _LABEL_PART.match(value):
            raise ValueError(
                f"{value!r} (label {key}) is not a valid label value: up to 63 letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit, or empty"
            )
    taken = sorted(k for k in labels if k.startswith(RESERVED_LABEL_PREFIXES))
    if taken:
        raise ValueError(
            f"label(s) {', '.join(taken)} are set by deployctl (selectors and pruning rely on them); "
            "use your own prefix, e.g. example.com/team"
        )
    return labels


# A field of labels a profile puts on objects (metadata.labels, placement.podLabels, a PodMonitor's).
UserLabels = Annotated[dict[str, str], pydantic.AfterValidator(user_labels)]

Loc = tuple[str | int, ...]
# The error type of field_error: its context carries the path below the validated field, so that a
# check made over a whole section still names the one item it is about (and that item's YAML line).
FIELD_ERROR = "deployctl_field"


def field_error(at: Loc, message: str) -> PydanticCustomError:
    """An error about the field ``at`` below the one being validated (profile_errors extends the path)."""
    return PydanticCustomError(FIELD_ERROR, "{reason}", {"reason": message, "at": at})


def field_default(root: type[BaseModel], path: Loc) -> object:
    """The default of the field at ``path`` below ``root`` as a document would write it (list items as
    mappings of what their default says), or None when the path names no field or it has no default.
    ``--set`` uses it to index a list the profile leaves at its default (orchestrator/profile/overrides.py)."""
    model: type[BaseModel] | None = root
    field = None
    for part in path:
        if isinstance(part, int):
            continue  # an item of a list: its model is the list's item type
        if model is None or (field := model.model_fields.get(part)) is None:
            return None
        model = model_in(field.annotation)
    if field is None:
        return None
    value = field.get_default(call_default_factory=True)
    if value is PydanticUndefined:
        return None
    return _as_written(value)


def _as_written(value: object) -> object:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_unset=True)  # what the default says, not every field
    if isinstance(value, list):
        return [_as_written(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_written(v) for k, v in value.items()}
    return value


def model_in(annotation: object) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (itself, or inside Optional, list, dict), or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = model_in(arg)
        if found is not None:
            return found
    return None
