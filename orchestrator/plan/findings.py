"""What the planner says about a profile besides its numbers: the findings, each with its field.

Parallelism the model cannot take, a context longer than the model's, memory that does not fit (with
the split, length or dtype that would), hardware the profile's dtypes do not suit, and fields the
engine refuses; the layout's own findings (``orchestrator.plan.layout``) join them. The planner
(``orchestrator.plan.planner``) sorts them and derives its verdict from the worst.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from orchestrator import engines
from orchestrator.catalog import lookup as catalog
from orchestrator.plan import kv_cache, layout, memory, weights_rule
from orchestrator.plan.layout import Finding
from orchestrator.profile import model as profile_schema

GIB = memory.GIB


@dataclass(frozen=True)
class Context:
    """One GPU of a profile as the planner sized it; the plan's numbers and the findings read it."""

    profile: profile_schema.Profile
    split: layout.Split
    native_fp8: bool
    batched_tokens: int
    gpu: engines.MemoryInputs  # the GPU's memory as modelled, in GiB
    kv: engines.KvBudget  # what the engine's rule makes of it
    available: float  # GiB of KV cache per GPU, after any calibration
    kv_layout: kv_cache.KvLayout  # how the KV cache holds the GPU's layers
    weights: weights_rule.Weights  # how the linear weights are stored

    @property
    def engine(self) -> engines.Engine:
        return self.profile.engine.engine

    @property
    def block_size(self) -> int:
        return self.engine.block_size

    @property
    def kv_per_token(self) -> int:
        return self.kv_layout.bytes_per_token

    @property
    def blocks(self) -> int:
        return self.kv_layout.blocks(self.available)

    @property
    def usable_tokens(self) -> int:
        # vLLM keeps one block back as the null block (the other engines near enough too); a
        # request must fit in the rest.
        return self.kv_layout.longest_request(self.blocks, self.batched_tokens)

    @property
    def concurrency(self) -> float:
        """Full-length (maxModelLen) sequences the KV cache holds at once."""
        return self.kv_layout.concurrency(self.blocks, self.profile.engine.maxModelLen, self.batched_tokens)


def of(c: Context) -> list[Finding]:
    """Every finding about ``c``, unsorted."""
    out: list[Finding] = []
    out += _parallelism_findings(c)
    out += layout.findings(c.profile, c.split, c.batched_tokens)
    out += _context_length_findings(c)
    out += _memory_findings(c)
    out += _hardware_findings(c)
    out += _engine_findings(c)
    out += _model_findings(c)
    return out


def _model_findings(c: Context) -> list[Finding]:
    """The weights storage the profile overrides, and model families only vLLM's rule is known for."""
    out: list[Finding] = []
    if c.weights.disagreement:
        out.append(Finding("weights-dtype-overrides-config", "warning", c.weights.disagreement, "model.weightsDtype"))
    a = c.split.arch
    if c.profile.engine.kind != "vllm" and (a.attention == "mla" or a.windows):
        what = "multi-head latent attention" if a.attention == "mla" else "sliding-window attention"
        out.append(
            Finding(
                "no-sizing-rule",
                "error",
                f"{a.source} ({a.family}) uses {what}; the planner knows how vLLM's KV cache holds it, not how "
                f"{c.engine.title}'s does, and a dense-layer guess could be wrong several times over. Serve it with "
                "engine.kind vllm, or state what the engine logged for it in model.measured "
                "(docs/capacity.md#model-families).",
                "engine.kind",
            )
        )
    return out


def _engine_findings(c: Context) -> list[Finding]:
    """Fields the profile's engine cannot honour: refused, never silently dropped."""
    refusals = c.profile.engine.engine.refusals(c.profile.server_settings())
    out = [Finding("engine-unsupported", "invalid", r.message, r.field) for r in refusals]
    out += [
        Finding("engine-memory", "warning", m, "engine.gpuMemoryUtilization")
        for m in c.engine.memory_warnings(c.gpu, c.kv)
    ]
    return out


def _parallelism_findings(c: Context) -> list[Finding]:
    out: list[Finding] = []
    eng, hw, a = c.profile.engine, c.profile.hardware, c.split.arch
    tp, pp = eng.tensorParallelSize, eng.pipelineParallelSize
    valid = layout.valid_tensor_parallel_sizes(a)
    if tp not in valid:
        msg = (
            f"tensorParallelSize {tp} does not split {a.source} evenly ({a.num_attention_heads} "
            f"attention heads, {a.num_key_value_heads} KV heads): vLLM refuses it. "
            f"Use one of {layout.join_words(valid)}."
        )
        out.append(Finding("tp-not-divisor", "invalid", msg, "engine.tensorParallelSize"))
    if pp > a.num_hidden_layers:
        msg = (
            f"pipelineParallelSize {pp} is more than the {a.num_hidden_layers} layers of {a.source}; "
            "a stage needs at least one layer."
        )
        out.append(Finding("pp-exceeds-layers", "invalid", msg, "engine.pipelineParallelSize"))
    if tp > 2 and hw.interconnect == "pcie":
        msg = (
            f"tensorParallelSize {tp} over PCIe: every layer all-reduces across {tp} GPUs without "
            "NVLink, which costs much of the decode throughput (vLLM's custom all-reduce needs NVLink). "
            "Prefer TP ≤ 2 per PCIe group with more replicas, or NVLink-connected GPUs."
        )
        out.append(Finding("tp-over-pcie", "warning", msg, "hardware.interconnect"))
    return out


def _context_length_findings(c: Context) -> list[Finding]:
    eng, a = c.profile.engine, c.split.arch
    if eng.maxModelLen <= a.max_model_len:
        return []
    # Each engine refuses it its own way (vLLM and SGLang with an override variable, TGI and
    # TensorRT-LLM by capping it); positions beyond the model's are garbage on any of them.
    refusal = {
        "vllm": "vLLM refuses to start unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
        "sglang": "SGLang refuses to start unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
    }.get(eng.kind, f"{c.engine.title} would cut it to the model's")
    msg = (
        f"maxModelLen {eng.maxModelLen} is longer than {a.source} supports ({a.max_model_len} tokens: "
        f"max_position_embeddings, with rope scaling if the config has it); {refusal}, and positions beyond it "
        f"produce garbage. Use maxModelLen ≤ {a.max_model_len}."
    )
    return [Finding("max-model-len-above-model", "invalid", msg, "engine.maxModelLen")]


def _memory_findings(c: Context) -> list[Finding]:
    eng = c.profile.engine
    if not c.gpu.weights <= c.kv.budget:  # the weights alone do not fit
        return [_weights_do_not_fit(c)]
    out: list[Finding] = []
    if c.usable_tokens < eng.maxModelLen:
        out.append(_kv_too_small(c))
    elif eng.maxNumSeqs > c.concurrency:
        out.append(_seqs_above_kv(c))
    return out


def _weights_do_not_fit(c: Context) -> Finding:
    eng, a = c.profile.engine, c.split.arch

    gpn = c.profile.hardware.gpusPerNode

    def roomy(tp: int, pp: int) -> bool:  # weights that leave room for anything at all
        split = layout.Split(a, tp, pp, c.split.quant, c.split.kv_bytes)
        return memory.weights_bytes_per_gpu(split) / GIB < 0.8 * c.kv.budget

    # The smallest valid TP inside one node, else that node's TP with more pipeline stages across nodes.
    in_node = [tp for tp in layout.valid_tensor_parallel_sizes(a) if tp <= gpn]
    bigger = [tp for tp in in_node if tp > eng.tensorParallelSize and roomy(tp, eng.pipelineParallelSize)]
    fix = "use more GPUs per copy"
    if bigger:
        fix = f"use tensorParallelSize {bigger[0]}"
    elif in_node:
        tp = in_node[-1]
        stages = [
            pp
            for pp in range(eng.pipelineParallelSize + 1, a.num_hidden_layers + 1)
            if layout.nodes_for(tp * pp, gpn, tp) and roomy(tp, pp)
        ]
        if stages:
            nodes = layout.nodes_for(tp * stages[0], gpn, tp)
            fix = (
                f"use tensorParallelSize {tp} × pipelineParallelSize {stages[0]} "
                f"({nodes} node{'s' if nodes > 1 else ''} per copy)"
            )
    return Finding(
        "weights-do-not-fit",
        "error",
        f"the weights alone need {c.gpu.weights:.1f} GiB per GPU but {c.engine.title} may use {c.kv.budget:.1f} GiB "
        f"({c.gpu.total:.2f} GiB × gpuMemoryUtilization {eng.gpuMemoryUtilization}); {fix}, quantized "
        "weights (fp8 halves them), or GPUs with more memory.",
        "engine.tensorParallelSize",
    )


def _tokens_at(c: Context, kv_bytes: int) -> int:
    """The longest request the KV cache would hold with ``kv_bytes`` per element instead."""
    scaled = dataclasses.replace(c.kv_layout, layer_bytes=c.kv_layout.layer_bytes * kv_bytes // c.split.kv_bytes)
    return scaled.longest_request(scaled.blocks(c.available), c.batched_tokens)


def _kv_too_small(c: Context) -> Finding:
    eng = c.profile.engine
    fixes = [f"maxModelLen ≤ {c.usable_tokens}" if c.usable_tokens >= c.block_size else None]
    if c.split.kv_bytes == 2 and _tokens_at(c, 1) >= eng.maxModelLen:
        fixes.append("kvCacheDtype fp8 (halves KV memory per token)")
    # The utilization at which one full sequence (plus vLLM's null block) would fit.
    needed_gib = _request_bytes(c, eng.maxModelLen, extra_blocks=1) / GIB - c.available
    utilization = math.ceil((c.kv.budget + needed_gib) / c.gpu.total * 100) / 100
    if utilization <= 0.98:
        fixes.append(f"gpuMemoryUtilization {utilization:.2f}")
    fixes.append("a larger tensorParallelSize")
    room = (
        f"{c.available:.2f} GiB per GPU is left for KV cache, room for {c.usable_tokens} tokens"
        if c.available > 0
        else f"nothing is left for KV cache: weights, activations, non-torch memory and CUDA graphs are short by "
        f"{-c.available:.2f} GiB per GPU before one token is cached"
    )
    return Finding(
        "kv-too-small",
        "error",
        f"{room}, but one maxModelLen sequence needs {eng.maxModelLen} tokens "
        f"({_gib(_request_bytes(c, eng.maxModelLen))} GiB per GPU): {c.engine.title} refuses to start. Fix: "
        + layout.join_words([f for f in fixes if f], "or")
        + ".",
        "engine.maxModelLen",
    )


def _request_bytes(c: Context, tokens: int, extra_blocks: int = 0) -> int:
    """KV bytes per GPU one request of ``tokens`` tokens holds at its longest (sliding-window layers
    only their window), with ``extra_blocks`` more blocks of the pool."""
    kv = c.kv_layout
    blocks = kv.blocks_per_request(tokens, c.batched_tokens) + extra_blocks
    return blocks * kv.layer_bytes * kv.group_size * kv.block_size


def _seqs_above_kv(c: Context) -> Finding:
    eng = c.profile.engine
    alternatives = []
    if c.split.kv_bytes == 2:
        alternatives.append(f"fp8 KV cache holds {_tokens_at(c, 1) / eng.maxModelLen:.1f}")
    half = max(c.block_size, eng.maxModelLen // 2)
    alternatives.append(f"at maxModelLen {half} it holds {c.usable_tokens / half:.1f}")
    return Finding(
        "max-num-seqs-above-kv",
        "warning",
        f"the KV cache holds {c.concurrency:.1f} sequences of the full {eng.maxModelLen} tokens "
        f"({c.usable_tokens} tokens at {c.kv_per_token / layout.KIB:g} KiB per token per GPU) but maxNumSeqs is "
        f"{eng.maxNumSeqs}: when many requests run long, {c.engine.title} preempts and recomputes them. "
        + "; ".join(alternatives)
        + f". Fine if most requests are short; else lower maxNumSeqs to "
        f"{max(1, math.floor(c.concurrency))}.",
        "engine.maxNumSeqs",
    )


def product_labels_missing(profile: profile_schema.Profile) -> str:
    """Why a GPU outside the catalog needs hardware.productLabels while placement.matchGpuProduct is on."""
    return (
        f"hardware.gpu is unset (a GPU of {profile.hardware.memoryGiB:g} GiB outside the catalog), so deployctl does "
        "not know which nvidia.com/gpu.product node label values it carries, and placement.matchGpuProduct asks "
        "to require one. Give them in hardware.productLabels, e.g. `productLabels: [NVIDIA-B200]` "
        "(`kubectl get nodes -L nvidia.com/gpu.product` lists them), or set placement.matchGpuProduct: false to "
        "let pods land on any GPU node."
    )


def _hardware_findings(c: Context) -> list[Finding]:
    out: list[Finding] = []
    eng, hw = c.profile.engine, c.profile.hardware
    if c.profile.placement.matchGpuProduct and catalog.product_labels(hw.gpu, hw.productLabels) is None:
        # Dropping the constraint would let the scheduler put the pods on a smaller GPU than the VRAM math assumed.
        out.append(Finding("gpu-product-unknown", "invalid", product_labels_missing(c.profile), "hardware.memoryGiB"))
    gpu_name = hw.gpu or f"this GPU ({hw.memoryGiB} GiB; hardware.fp8 unset, so assumed without fp8)"
    if eng.kvCacheDtype != "auto" and not c.native_fp8:
        if eng.kind == "vllm":
            # Read from vLLM 0.33.0: FlashAttention takes fp8 KV only with FA3 on sm90 or FA4 on sm100
            # (fa_utils.flash_attn_supports_kv_cache_dtype); FlashInfer and Triton attention accept it on sm80.
            version = eng.engine_version
            # The profile's own version, and, for another one, which version the behaviour was read from.
            read = "" if version.startswith("0.33.") else " (as read from vLLM 0.33's source)"
            how = (
                f"vLLM {version} runs it, but{read} FlashAttention reads fp8 KV only on Hopper/Blackwell, so vLLM "
                "falls back to the FlashInfer or Triton attention backend, which store K/V as fp8 and convert "
                "them to 16-bit inside the kernel"
            )
        else:
            how = (
                f"{c.engine.title} stores K/V as fp8 and converts them to 16-bit inside its attention kernels "
                "(FlashInfer on Ampere)"
            )
        msg = (
            f"kvCacheDtype {eng.kvCacheDtype} on {gpu_name}, which has no native fp8: {how}. You get the halved "
            "KV memory, not faster attention. Without calibrated scales K/V are stored with scale 1.0: check "
            "output quality."
        )
        out.append(Finding("fp8-kv-without-native-fp8", "warning", msg, "engine.kvCacheDtype"))
    if c.profile.model.weightsDtype == "fp8" and not c.native_fp8:
        msg = (
            f"fp8 weights on {gpu_name}: vLLM serves them with a weight-only fp8 kernel (Marlin) that "
            "converts to 16-bit for the matmuls, so memory halves but compute does not speed up."
        )
        out.append(Finding("fp8-weights-without-native-fp8", "info", msg, "model.weightsDtype"))
    return out


def _gib(n_bytes: float) -> str:
    return f"{n_bytes / GIB:.2f}"
