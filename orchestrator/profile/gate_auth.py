"""The gate's API key: where a profile says it lives (``gate.apiKeySecret``) and reading it.

A server started with ``vllm serve --api-key`` (or ``VLLM_API_KEY``) answers ``/v1/*`` only to a
request that carries ``Authorization: Bearer KEY``; ``/health`` stays open. The gate needs the key
for ``/v1/models`` and the smoke benchmark, so the profile names a Secret and a key in it, and
deployctl reads it at gate time (RBAC: ``get`` on that one Secret). Only the name is stored in
the profile and the release records; the value lives in memory for the gate's requests alone.

This module (a profile section) holds the model and the decoding; the read itself goes through
:mod:`orchestrator.kube` (the only module that talks to the API server): the caller hands in its
``Kube.get``, so the profile's floor never imports the cluster client.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from typing import Any

import pydantic

from orchestrator import errors

# Kube.get: (kind, name, namespace) -> the object, or None when it does not exist.
Getter = Callable[[str, str, str], "dict[str, Any] | None"]

FIELD = "gate.apiKeySecret"
DEFAULT_KEY = "api-key"
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


class ApiKeySecret(pydantic.BaseModel):
    """A key of a Secret in the release's namespace that holds the server's API key."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, validate_default=True)

    name: str = pydantic.Field(
        description="Name of the Secret, in the release's namespace. deployctl needs `get` on it (its rendered "
        "Role grants exactly that when the profile names one).",
        examples=["vllm-api-key"],
    )
    key: str = pydantic.Field(
        default=DEFAULT_KEY,
        description="The key in the Secret's data whose value is the API key (surrounding whitespace is dropped). "
        "Default `api-key`, as `kubectl create secret generic NAME --from-literal=api-key=...` writes it; the "
        "server must have been started with that same value.",
    )

    @pydantic.field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if len(value) > 253 or not _DNS1123_SUBDOMAIN.match(value):
            raise ValueError(
                f"{value!r} is not a valid Secret name: use lowercase letters, digits, '-' and '.', "
                "starting and ending with a letter or digit"
            )
        return value

    @pydantic.field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        if len(value) > 253 or not _SECRET_KEY.match(value):
            raise ValueError(f"{value!r} is not a valid Secret key: use letters, digits, '-', '_' and '.'")
        return value


class ApiKeyUnavailable(errors.EndpointError):
    """The key could not be read: the gate cannot measure, an Error, never a Fail."""


def read(get: Getter, namespace: str, ref: ApiKeySecret) -> str:
    """The API key the Secret holds; :class:`ApiKeyUnavailable` naming gate.apiKeySecret otherwise.

    The messages name the Secret and key, never any part of a value.
    """
    where = f"{FIELD} (Secret {namespace}/{ref.name}, key {ref.key!r})"
    try:
        secret = get("Secret", ref.name, namespace)
    except errors.Forbidden as e:
        raise ApiKeyUnavailable(
            f"{where}: deployctl may not read it ({e.message}); grant `get` on that Secret "
            "(`deployctl render PROFILE --format rbac` renders the Role)"
        ) from e
    except errors.ClusterError as e:
        raise ApiKeyUnavailable(f"{where}: could not be read: {e.message}") from e
    if secret is None:
        raise ApiKeyUnavailable(f"{where}: no such Secret; create it or fix the name in the profile")
    data = secret.get("data") or {}
    if ref.key not in data:
        keys = ", ".join(sorted(data)) or "none"
        raise ApiKeyUnavailable(f"{where}: the Secret has no such key (its keys: {keys}); fix {FIELD}.key")
    try:
        value = base64.b64decode(str(data[ref.key]), validate=True).decode("utf-8").strip()
    except (binascii.Error, UnicodeDecodeError) as e:
        raise ApiKeyUnavailable(f"{where}: the value is not base64-encoded UTF-8 text") from e
    if not value:
        raise ApiKeyUnavailable(f"{where}: the value is empty; put the server's API key there")
    return value


def refused_message(namespace: str, ref: ApiKeySecret | None, detail: str) -> str:
    """Why the gate could not measure when the server refused our key (HTTP 401/403)."""
    if ref is None:
        return (
            f"the server refused the gate's requests as unauthorized ({detail}); it wants an API key: "
            f"name the Secret that holds it in {FIELD}"
        )
    return (
        f"the server refused the API key from {FIELD} (Secret {namespace}/{ref.name}, key {ref.key!r}) as "
        f"unauthorized ({detail}); put the key the server was started with into that Secret"
    )
