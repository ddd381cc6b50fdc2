"""The profile's model section: which model is served, its architecture (or config.json) for the
VRAM math, and where its weights come from inside the data center (a PVC or a host path).
"""

from __future__ import annotations

from typing import Annotated, Literal

import pydantic
from pydantic import Field

from orchestrator.catalog import lookup as catalog
from orchestrator.profile import base as profile_base
from orchestrator.profile import warmup as profile_warmup


class PvcSource(profile_base.Model):
    pvc: str = Field(description="Name of the PersistentVolumeClaim holding the weights (mounted read-only).")
    path: str = Field(
        default="/models",
        description="Absolute path of the weights directory inside the container; the claim is mounted at "
        "`mountPath` and this path must lie under it.",
        examples=["/models/llama3-70b"],
    )
    mountPath: str = Field(default="/models", description="Where the claim is mounted in the container.")

    @pydantic.model_validator(mode="after")
    def _path_under_mount(self) -> PvcSource:
        if not self.path.startswith("/") or not (self.path + "/").startswith(self.mountPath.rstrip("/") + "/"):
            raise ValueError(f"path {self.path!r} must be an absolute path under mountPath {self.mountPath!r}")
        return self


class HostPathSource(profile_base.Model):
    hostPath: str = Field(description="Absolute directory on the node holding the weights (mounted read-only).")
    mountPath: str = Field(default="/models", description="Where the directory appears in the container.")

    @pydantic.field_validator("hostPath")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"hostPath {v!r} must be an absolute path")
        return v


class MeasuredSizing(profile_base.Model):
    """Per-GPU figures from one start-up of the same model, GPU, vLLM version, TP and PP."""

    weightsGiBPerGpu: float = Field(
        gt=0, description="The weights on one GPU: vLLM's start-up line `Model loading took X GiB`."
    )
    kvBytesPerTokenPerGpu: int = Field(
        gt=0,
        description="KV-cache bytes one token takes on one GPU: `Available KV cache memory` (GiB) × 2^30 ÷ "
        "`GPU KV cache size` (tokens).",
    )


def _source_kind(value: object) -> str | None:
    """Pick the weights-source model by its key, so errors speak of one kind, not both."""
    if isinstance(value, dict):
        return "hostPath" if "hostPath" in value else "pvc"
    return "hostPath" if isinstance(value, HostPathSource) else "pvc"


class ModelSpec(profile_base.Model):
    name: str = Field(
        description="The served model name clients send in requests (`--served-model-name`), e.g. the Hugging Face id.",
        examples=["meta-llama/Meta-Llama-3-70B-Instruct"],
    )
    # The catalog's key in any case; the catalog's spelling kept.
    architecture: Annotated[str, pydantic.AfterValidator(catalog.resolve_architecture)] | None = Field(
        default=None,
        description="Catalog key of the model's architecture (layers, heads, sizes) for the VRAM math. "
        "Give this or `config`.",
        examples=["llama-3-70b"],
    )
    config: str | None = Field(
        default=None,
        description="Path to the model's Hugging Face config.json, relative to the profile file, for models "
        "outside the catalog. Give this or `architecture`.",
    )
    weightsDtype: Literal["auto", "bf16", "fp16", "fp8", "int8", "int4", "mxfp4", "nvfp4"] = Field(
        default="auto",
        description="Data type of the checkpoint's linear weights. `auto` reads the config's quantization_config "
        "(fp8, mxfp4, awq, gptq, compressed-tensors, bitsandbytes) or else its torch_dtype, as vLLM does; an "
        "explicit value overrides the config, with a warning when the two disagree.",
    )
    measured: MeasuredSizing | None = Field(
        default=None,
        # Left out of dumps when unset, so profiles written before the field keep their content hash
        # (and their rendered pods their template) across a deployctl upgrade.
        exclude_if=lambda value: value is None,
        description="What vLLM logged for this model on these GPUs, used instead of the planner's rules: the "
        "way to plan a model family or quantization the planner has no rule for (docs/capacity.md#model-families).",
    )
    source: Annotated[
        Annotated[PvcSource, pydantic.Tag("pvc")] | Annotated[HostPathSource, pydantic.Tag("hostPath")],
        pydantic.Discriminator(_source_kind),
    ] = Field(
        description="Where the weights come from inside the data center: a PVC or a host path. Nothing is "
        "downloaded from a hub."
    )
    revision: str | None = Field(
        default=None,
        description="Revision (commit sha or tag) of the weights, recorded in the release history for audit.",
    )
    credentialsSecret: str | None = Field(
        default=None,
        description="Name of a Secret with key `token` exposed as HF_TOKEN, for gated weights on an internal "
        "mirror. Only the name is ever stored in release records.",
    )
    verify: profile_warmup.WeightsVerifySpec | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="Check the weights' bytes before the GPU pods start: against a sha256 manifest or an OpenSSF "
        "model signature kept with them. The warm-up (rollout.warmup) hashes what it reads; a mismatch stops the "
        "rollout, and the release records the result (docs/time-to-serving.md#warm-up-and-verification).",
    )

    @pydantic.model_validator(mode="after")
    def _one_of_architecture_or_config(self) -> ModelSpec:
        if (self.architecture is None) == (self.config is None):
            raise ValueError(
                "give exactly one of model.architecture (a catalog key: "
                + ", ".join(catalog.architecture_keys())
                + ") or model.config (path to a config.json)"
            )
        return self
