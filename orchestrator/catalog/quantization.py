"""A checkpoint's quantization, read from its config.json's ``quantization_config``: which weights are
quantized, and how many bytes each of them takes with its scales and zero points.

vLLM picks the quantization method from this block (``vllm/model_executor/layers/quantization``), so
the planner does too; an explicit ``model.weightsDtype`` overrides it. A method without a rule here is
refused (:class:`UnknownQuantization`), never sized as 16-bit. Embeddings, the LM head, norms and MoE
routers stay in the model's 16-bit dtype under every method below, as vLLM loads them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

# The weight groups of a decoder layer the planner counts apart (``orchestrator.plan.memory``).
Group = Literal["attention", "mlp", "experts"]
ALL_LINEAR: frozenset[Group] = frozenset({"attention", "mlp", "experts"})

FP16_SCALE = 2.0
FP32_SCALE = 4.0


class UnknownQuantization(ValueError):
    """A ``quantization_config`` whose method (or bit width) the planner has no rule for."""


@dataclass(frozen=True)
class Quantization:
    """How a checkpoint's linear weights are stored."""

    method: str  # quant_method as the config writes it, e.g. "awq"
    scheme: str  # the profile's weightsDtype it amounts to: fp8, int8, int4, mxfp4 or nvfp4
    bytes_per_weight: float  # of a quantized weight, its scales and zero points included
    groups: frozenset[Group]  # which weight groups it quantizes; the rest stay 16-bit
    rule: str  # the storage rule in words, for the plan's inputs and docs/capacity.md

    def to_json(self) -> dict[str, object]:
        return {
            "method": self.method,
            "scheme": self.scheme,
            "bytes_per_weight": round(self.bytes_per_weight, 5),
            "groups": sorted(self.groups),
            "rule": self.rule,
        }


# One weight of the explicit weightsDtype values, with the scales a typical checkpoint of that kind
# carries (AWQ/GPTQ int4 with groups of 128, MXFP4 blocks of 32, NVFP4 blocks of 16).
EXPLICIT: dict[str, Quantization] = {
    "fp8": Quantization("explicit", "fp8", 1.0, ALL_LINEAR, "1 byte per weight, one fp32 scale per tensor"),
    "int8": Quantization("explicit", "int8", 1.0, ALL_LINEAR, "1 byte per weight, one scale per channel"),
    "int4": Quantization(
        "explicit", "int4", 0.5 + 2.5 / 128, ALL_LINEAR, "4 bits per weight, a 16-bit scale and 4-bit zero per 128"
    ),
    "mxfp4": Quantization(
        "explicit", "mxfp4", 0.5 + 1 / 32, frozenset({"experts"}), "4 bits per expert weight, an e8m0 scale per 32"
    ),
    "nvfp4": Quantization("explicit", "nvfp4", 0.5 + 1 / 16, ALL_LINEAR, "4 bits per weight, an fp8 scale per 16"),
}


def parse(block: object, source: str) -> Quantization | None:
    """The quantization a config's ``quantization_config`` describes; None when there is none."""
    if block is None:
        return None
    if not isinstance(block, Mapping):
        raise UnknownQuantization(f"{source}: quantization_config must be an object")
    method = str(block.get("quant_method") or ("bitsandbytes" if _bnb(block) else "")).lower()
    reader = _READERS.get(method)
    if reader is None:
        known = ", ".join(sorted(_READERS))
        raise UnknownQuantization(
            f"{source}: quantization_config.quant_method {method or '(none)'!r} has no sizing rule in deployctl's "
            f"planner (it knows {known})"
        )
    return reader(block, source)


def _fp8(block: Mapping[str, object], source: str) -> Quantization:
    size = block.get("weight_block_size")
    groups = _groups_left(block)
    if isinstance(size, Sequence) and len(size) == 2 and all(isinstance(n, int) and n > 0 for n in size):
        rows, cols = size
        return Quantization(
            "fp8",
            "fp8",
            1.0 + FP32_SCALE / (rows * cols),
            groups,
            f"1 byte per weight, an fp32 scale per {rows}×{cols} block",
        )
    return Quantization("fp8", "fp8", 1.0, groups, "1 byte per weight, one fp32 scale per tensor")


def _mxfp4(block: Mapping[str, object], source: str) -> Quantization:
    # vLLM's Mxfp4Config quantizes the fused MoE experts only; attention, router, embedding and LM
    # head are in modules_to_not_convert and load in bf16.
    return Quantization(
        "mxfp4", "mxfp4", 0.5 + 1 / 32, frozenset({"experts"}), "4 bits per expert weight, an e8m0 scale per 32"
    )


def _awq(block: Mapping[str, object], source: str) -> Quantization:
    bits, group = _bits(block, source, (4,)), _group_size(block, source)
    zero = bits / 8 if block.get("zero_point", True) else 0.0
    return Quantization(
        "awq",
        "int4",
        bits / 8 + (FP16_SCALE + zero) / group,
        _groups_left(block),
        f"{bits} bits per weight, a 16-bit scale{' and a packed zero' if zero else ''} per {group}",
    )


def _gptq(block: Mapping[str, object], source: str) -> Quantization:
    bits, group = _bits(block, source, (2, 3, 4, 8)), _group_size(block, source)
    # qweight, then per group a 16-bit scale and a packed zero point (qzeros, even when symmetric);
    # g_idx (an int32 per input row) is under 0.1 % and left out.
    return Quantization(
        "gptq",
        "int4" if bits <= 4 else "int8",
        bits / 8 + (FP16_SCALE + bits / 8) / group,
        _groups_left(block),
        f"{bits} bits per weight, a 16-bit scale and a packed zero per {group}",
    )


def _compressed_tensors(block: Mapping[str, object], source: str) -> Quantization:
    groups = block.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise UnknownQuantization(f"{source}: compressed-tensors quantization_config has no config_groups")
    widths = set()
    for group in groups.values():
        weights = group.get("weights") if isinstance(group, Mapping) else None
        if not isinstance(weights, Mapping):
            raise UnknownQuantization(f"{source}: a compressed-tensors config group has no weights scheme")
        widths.add((weights.get("num_bits"), weights.get("type"), weights.get("strategy"), weights.get("group_size")))
    if len(widths) != 1:
        raise UnknownQuantization(
            f"{source}: compressed-tensors with several weight schemes (mixed precision) has no sizing rule"
        )
    bits, kind, strategy, group_size = widths.pop()
    fmt = str(block.get("format") or "")
    left = _groups_left(block, key="ignore")
    if bits == 8:
        scheme = "fp8" if kind == "float" else "int8"
        return Quantization(
            "compressed-tensors", scheme, 1.0, left, f"1 byte per weight ({scheme}), scales per {strategy}"
        )
    if bits == 4 and "nvfp4" in fmt:
        return Quantization("compressed-tensors", "nvfp4", 0.5 + 1 / 16, left, "4 bits per weight, an fp8 scale per 16")
    if bits == 4 and strategy == "group" and isinstance(group_size, int) and group_size > 0:
        return Quantization(
            "compressed-tensors",
            "int4",
            0.5 + FP16_SCALE / group_size,
            left,
            f"4 bits per weight, a 16-bit scale per {group_size}",
        )
    raise UnknownQuantization(
        f"{source}: compressed-tensors weights of {bits} bits ({kind}, {strategy}, format {fmt or 'unset'}) "
        "have no sizing rule"
    )


def _bitsandbytes(block: Mapping[str, object], source: str) -> Quantization:
    if block.get("load_in_8bit"):
        return Quantization("bitsandbytes", "int8", 1.0 + FP32_SCALE / 4096, ALL_LINEAR, "1 byte per weight (LLM.int8)")
    if not block.get("load_in_4bit", True):
        raise UnknownQuantization(f"{source}: bitsandbytes quantization_config loads neither 4 nor 8 bits")
    # 4-bit NF4/FP4 in blocks of 64 with one absmax each: fp32, or one byte plus a second-level fp32
    # per 256 blocks under double quantization.
    absmax = (1 + FP32_SCALE / 256) / 64 if block.get("bnb_4bit_use_double_quant") else FP32_SCALE / 64
    return Quantization("bitsandbytes", "int4", 0.5 + absmax, ALL_LINEAR, "4 bits per weight, an absmax per 64")


def _bnb(block: Mapping[str, object]) -> bool:
    return bool(block.get("load_in_4bit") or block.get("load_in_8bit"))


def _bits(block: Mapping[str, object], source: str, allowed: tuple[int, ...]) -> int:
    bits = block.get("bits", block.get("w_bit"))
    if bits not in allowed:
        raise UnknownQuantization(f"{source}: quantization_config bits {bits!r} has no sizing rule (known: {allowed})")
    assert isinstance(bits, int)
    return bits


def _group_size(block: Mapping[str, object], source: str) -> int:
    group = block.get("group_size", block.get("q_group_size", 128))
    if group == -1:
        return 4096  # per output channel: one scale per row, a few thousand weights
    if not isinstance(group, int) or group <= 0:
        raise UnknownQuantization(f"{source}: quantization_config group_size {group!r} is not a positive integer")
    return group


def _groups_left(block: Mapping[str, object], key: str = "modules_to_not_convert") -> frozenset[Group]:
    """The groups a quantization covers: every linear layer but those its not-convert list names."""
    names = block.get(key) or block.get("ignored_layers") or ()
    skipped = [str(n) for n in names] if isinstance(names, Sequence) and not isinstance(names, str) else []
    groups = set(ALL_LINEAR)
    if any("self_attn" in n or "attn" in n.split(".")[-1] for n in skipped):
        groups.discard("attention")
    if any(n.endswith("experts") or ".experts" in n for n in skipped):
        groups.discard("experts")
    return frozenset(groups)


_READERS = {
    "fp8": _fp8,
    "mxfp4": _mxfp4,
    "awq": _awq,
    "gptq": _gptq,
    "compressed-tensors": _compressed_tensors,
    "bitsandbytes": _bitsandbytes,
}
