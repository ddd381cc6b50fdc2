"""How the checkpoint's weights are stored: from the config's ``quantization_config`` unless the profile's
``model.weightsDtype`` says otherwise, with a warning when the two disagree.

``auto`` follows the config, as vLLM does: its quantization when it has one, else its 16-bit dtype.
An explicit dtype overrides it (a checkpoint converted after its config was written, say).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.catalog import config as catalog
from orchestrator.catalog import quantization

SIXTEEN_BIT = ("bf16", "fp16")


@dataclass(frozen=True)
class Weights:
    """The storage the plan sizes the linear weights by."""

    dtype: str  # as the plan's inputs name it: bf16, fp16, fp8, int8, int4, mxfp4 or nvfp4
    quant: quantization.Quantization | None  # None: the linear weights are 16-bit
    disagreement: str | None  # why the explicit weightsDtype and the config differ, when they do


def resolve(requested: str, arch: catalog.ModelArch) -> Weights:
    """The weights storage ``model.weightsDtype`` (``requested``) and the config ``arch`` give together."""
    configured = arch.quantization
    if requested == "auto":
        if configured is not None:
            return Weights(configured.scheme, configured, None)
        # vLLM's dtype "auto" keeps a 16-bit checkpoint's dtype and serves float32 checkpoints in 16 bits.
        return Weights("fp16" if arch.torch_dtype in ("float16", "fp16", "half") else "bf16", None, None)
    if configured is not None and configured.scheme == requested:
        return Weights(requested, configured, None)  # the config's rule is the more exact one
    quant = None if requested in SIXTEEN_BIT else quantization.EXPLICIT[requested]
    disagreement = None
    if quant is not None and quant.groups == {"experts"} and not arch.is_moe:
        # vLLM's MXFP4 method quantizes fused MoE experts only: a dense model has none to store in it.
        disagreement = (
            f"model.weightsDtype {requested} stores MoE experts only, and {arch.source} is dense: vLLM serves its "
            "weights in 16 bits, and so does the plan. Use a dense model's dtype (fp8, int8, int4, nvfp4) or auto."
        )
    elif configured is not None:
        disagreement = (
            f"model.weightsDtype {requested} overrides the checkpoint's quantization_config "
            f"({configured.method}, {configured.scheme}: {configured.rule}); vLLM loads what the checkpoint holds, "
            "so the plan is right only if the weights really are "
            f"{requested}. Leave weightsDtype at auto to size them by the config."
        )
    return Weights(requested, quant, disagreement)
