"""`rollout.warmup` and `model.verify`: read (and check) the weights on every target node before the swap.

While the old revision still serves, a warm-up pod without a GPU goes to each node a new engine pod
can land on: it pulls the new image, reads every byte of the weights into the node's page cache,
checks that the compile cache is writable, and, with `model.verify`, hashes what it reads so that
deployctl can compare the bytes with the model's sha256 manifest or its OpenSSF model signature.
Only then do the GPU pods start (orchestrator/apply/warmup.py). For a regulated user the check is the
difference between "we intended this model revision" and "we ran these bytes".
"""

from __future__ import annotations

import posixpath
from typing import Literal

import pydantic
from pydantic import Field

from orchestrator.profile import base as profile_base


class WarmupSpec(profile_base.Model):
    enabled: bool = Field(
        default=False,
        description="Run the warm-up before a revision that replaces pods (not before a rollback, which must "
        "never wait on it). Off: the GPU pods read the weights themselves, cold.",
    )
    timeoutSeconds: int = Field(
        default=900,
        ge=30,
        le=86_400,
        description="How long the warm-up may take on each node (pod `activeDeadlineSeconds`): the image pull and "
        "one read of the weights. A warm-up still running then has failed.",
    )
    onFailure: Literal["stop", "continue"] = Field(
        default="stop",
        description="A warm-up that fails or times out: `stop` ends the apply before any GPU pod starts (nothing "
        "of the release changed), `continue` warns and rolls out unwarmed. A weights mismatch under "
        "`model.verify` always stops.",
    )


def _relative(value: str, what: str) -> str:
    if not value or value.startswith("/") or posixpath.normpath(value) != value or value.split("/")[0] == "..":
        raise ValueError(f"{what} {value!r} must be a path relative to the weights directory, e.g. SHA256SUMS")
    return value


class WeightsVerifySpec(profile_base.Model):
    """Exactly one of `sha256Manifest` or `signature` (with `publicKey`)."""

    sha256Manifest: str | None = Field(
        default=None,
        description="A `sha256sum`-format manifest in the weights directory (e.g. `SHA256SUMS`, written by "
        "`sha256sum $(find . -type f ! -name SHA256SUMS) > SHA256SUMS` where the weights were approved).",
        examples=["SHA256SUMS"],
    )
    signature: str | None = Field(
        default=None,
        description="An OpenSSF model signature file in the weights directory, as `model_signing sign key` (the "
        "`model-signing` package, files serialization) writes it, checked with `publicKey`.",
    )
    publicKey: str | None = Field(
        default=None,
        description="The signer's public key, PEM (ECDSA P-256 or Ed25519). The release records its key id.",
    )

    @pydantic.field_validator("sha256Manifest", "signature")
    @classmethod
    def _in_weights(cls, v: str | None, info: pydantic.ValidationInfo) -> str | None:
        return None if v is None else _relative(v, str(info.field_name))

    @pydantic.model_validator(mode="after")
    def _one_way(self) -> WeightsVerifySpec:
        if (self.sha256Manifest is None) == (self.signature is None):
            raise ValueError("give exactly one of sha256Manifest (a sha256sum file) or signature (with publicKey)")
        if (self.signature is None) != (self.publicKey is None):
            raise ValueError("signature and publicKey go together: the signature is checked with that key")
        if self.publicKey is not None and "-----BEGIN PUBLIC KEY-----" not in self.publicKey:
            raise profile_base.field_error(
                ("publicKey",), "publicKey must be a PEM public key (-----BEGIN PUBLIC KEY----- …)"
            )
        return self

    @property
    def manifest(self) -> str:
        """The file the warm-up reads and reports: the manifest or the signature."""
        return self.sha256Manifest or self.signature or ""
