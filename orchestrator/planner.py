"""The VRAM planner: vLLM's start-up memory accounting for a profile, worked out before any GPU is touched.

vLLM (V1 engine, ``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory``) sizes its KV cache as

    requested  = total GPU memory × gpu_memory_utilization
    KV memory  = requested − weights − peak activation − non-torch memory − CUDA-graph estimate

where the CUDA-graph estimate is only subtracted since vLLM 0.21.0 (when
``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` became 1). The KV memory is cut into blocks of 16 tokens ×
every attention layer on the GPU (``vllm/v1/core/kv_cache_planning.py``), and the start-up log reports
``blocks / ceil(max_model_len / 16)`` as the maximum concurrency and that times ``max_model_len`` as
"GPU KV cache size: N tokens" (``vllm/v1/core/kv_cache_utils.py``). Weights are counted from the
config; the activation peak, non-torch memory and CUDA-graph estimate are modelled from published
start-up logs (see docs/capacity.md, and the datapoints in tests/test_planner.py that keep the model
honest).

A copy may span nodes (one pod per node): each GPU is sized for its own pipeline stage, and the layout
findings keep tensor-parallel groups inside a node and say what crosses the network between nodes.

Pure: takes a Profile, returns a Plan. Its only I/O is reading a model config through the catalog.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator import catalog, errors, vllm_flags
from orchestrator import profile as profile_schema

Severity = Literal["invalid", "error", "warning", "info"]
Verdict = Literal["fits", "does-not-fit", "invalid"]
SEVERITY_ORDER: dict[str, int] = {"info": 0, "warning": 1, "error": 2, "invalid": 3}

GIB = 1 << 30
KIB = 1 << 10
BLOCK_SIZE = 16  # vLLM's default KV block size for CUDA attention backends
VOCAB_PADDING = 64  # VocabParallelEmbedding pads the vocabulary to a multiple of 64 before sharding
ACTIVATION_BYTES = 2  # activations run in the 16-bit model dtype

# vLLM's profile run ends with a dummy sampler pass over max_num_seqs rows of full-vocabulary float32
# logits; the logged torch peak is ~3.85 such tensors (logits, probabilities, sort/top-p buffers). Fitted
# on vLLM 0.19.0 H100 logs: 1.89 GiB for 1024 × 128256 (Llama 3.1 8B), 2.21 GiB for 1024 × 152064 (Qwen2.5
# 7B), 2.29 GiB for Qwen2.5 72B.
SAMPLER_FP32_COPIES = 3.85
# The forward pass of max_num_batched_tokens tokens peaks in the MLP: the gate/up projection (2 × I), its
# SiLU-and-multiply output (I), and about four hidden-size tensors (residual, normed input, attention
# output, MLP output) alive around it.
HIDDEN_COPIES = 4

# Memory vLLM's process holds outside PyTorch's allocator after profiling (CUDA graphs' private pools
# aside): cuBLAS/attention workspaces on one GPU; with tensor parallelism also NCCL communicators and
# the custom all-reduce buffers. Logged "non-torch forward increase memory" on H100, vLLM 0.19.0:
# 0.24-0.27 GiB at TP=1, 2.06-2.21 GiB at TP=2 and TP=4.
NON_TORCH_GIB_SINGLE = 0.25
NON_TORCH_GIB_TENSOR_PARALLEL = 2.1
# Pipeline parallelism without TP keeps the single-GPU figure: its NCCL use is one point-to-point
# send/recv per stage boundary, with no custom all-reduce buffers, and the published PP=2, TP=1 log
# (calibration run [4] in docs/capacity.md) matches 0.25 GiB to 0.1 % of its KV tokens; 2.1 GiB
# would put the plan 1.4 % under it. Between nodes NCCL's network buffers sit mostly in host memory.

# vLLM's CUDA-graph memory estimate (logged "Estimated CUDA graph memory: X GiB total") grows with the
# number of layers a graph replays: 0.49 GiB for 8 layers, 0.84 for 32, 1.5-1.8 for 80 (vLLM 0.19.0,
# H100, 51 capture sizes up to 512).
CUDA_GRAPH_GIB_BASE = 0.35
CUDA_GRAPH_GIB_PER_LAYER = 0.016
CUDA_GRAPHS_RESERVED_SINCE = (0, 21)

# Link speeds the traffic figures use, in GB/s (10^9 bytes/s) per GPU and per direction: a ring
# all-reduce sends and receives at once, so one direction is what bounds it. NVLink is NVIDIA's
# per-GPU figure halved (H100/H200 SXM 900 GB/s both ways, A100 and H100 NVL's bridge 600); PCIe 4.0
# x16 32 GB/s. Between nodes: one 400 Gb/s NIC per GPU, as HGX H100 nodes have, for InfiniBand NDR
# and RoCE; one 100 GbE link for plain Ethernet.
_NVLINK_GB_S: dict[str, float] = {
    "A100-40GB": 300.0,
    "A100-80GB": 300.0,
    "H100-80GB": 450.0,
    "H100-NVL": 300.0,
    "H200": 450.0,
}
_NVLINK_GB_S_OTHER = 450.0
_PCIE_GB_S = 32.0
_NODE_LINKS: dict[str | None, tuple[str, float]] = {
    "infiniband": ("InfiniBand NDR (400 Gb/s per GPU)", 50.0),
    "roce": ("RoCE (400 GbE per GPU)", 50.0),
    "ethernet": ("100 GbE over TCP", 12.5),
    None: ("the network: at best InfiniBand NDR (400 Gb/s per GPU; hardware.nodeInterconnect is unset)", 50.0),
}
# The prefill pace the Ethernet figure assumes: full steps of max_num_batched_tokens per second. An
# estimate only; the real pace depends on the model, the GPUs and the prompts.
_PREFILL_STEPS_PER_S = 4

# vLLM's default --max-num-batched-tokens for the OpenAI server (EngineArgs.get_batch_defaults): larger
# GPUs get larger batches, except A100, where larger batches lowered throughput (vLLM PR #17885).
DEFAULT_BATCHED_TOKENS_LARGE = 16384  # ≥ 160 GiB
DEFAULT_BATCHED_TOKENS_HOPPER = 8192  # ≥ 70 GiB, not A100
DEFAULT_BATCHED_TOKENS_OTHER = 2048

_WEIGHT_BYTES: dict[str, float] = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    # 4-bit GPTQ/AWQ: half a byte per weight plus a 16-bit scale and a 4-bit zero point per group of 128.
    "int4": 0.5 + 2.5 / 128,
}
_KV_BYTES: dict[str, int] = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


@dataclass(frozen=True)
class Finding:
    """One thing the planner has to say, about one profile field."""

    code: str
    severity: Severity
    message: str
    field: str  # the profile path, e.g. engine.tensorParallelSize, so the CLI can show the YAML line

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "severity": self.severity, "message": self.message, "field": self.field}


@dataclass(frozen=True)
class MemorySplit:
    """Where one GPU's memory goes, in GiB (the heaviest GPU when pipeline stages differ)."""

    total_gib: float
    budget_gib: float  # total × gpu_memory_utilization: what vLLM may use
    weights_gib: float
    activation_peak_gib: float
    non_torch_gib: float
    cuda_graphs_gib: float  # reserved inside the budget (vLLM ≥ 0.21), else 0
    kv_cache_gib: float  # what vLLM logs as "Available KV cache memory" (negative: does not fit)
    headroom_gib: float  # total − budget: left to other processes (and to CUDA graphs before 0.21)

    def to_json(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Plan:
    """The capacity plan of a profile: does it fit, how much KV cache, how many full-length sequences."""

    weights_gib_per_gpu: float
    kv_bytes_per_token_per_gpu: int
    kv_bytes_per_token_model: int
    kv_cache_gib_per_gpu: float
    kv_cache_blocks: int
    kv_cache_tokens: int
    max_concurrency: float  # full-length (maxModelLen) sequences the KV cache holds at once
    max_model_len_that_fits: int
    memory: MemorySplit
    inputs: dict[str, Any]
    findings: tuple[Finding, ...] = field(default=())

    @property
    def worst_severity(self) -> Severity | None:
        if not self.findings:
            return None
        return max(self.findings, key=lambda f: SEVERITY_ORDER[f.severity]).severity

    @property
    def verdict(self) -> Verdict:
        """The one verdict every command reports, derived from the worst finding and nothing else."""
        worst = self.worst_severity
        if worst == "invalid":
            return "invalid"
        return "does-not-fit" if worst == "error" else "fits"

    @property
    def fits(self) -> bool:
        return self.verdict == "fits"

    def to_json(self) -> dict[str, Any]:
        return {
            "fits": self.fits,
            "verdict": self.verdict,
            "weights_gib_per_gpu": round(self.weights_gib_per_gpu, 3),
            "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token_per_gpu,
            "kv_bytes_per_token_model": self.kv_bytes_per_token_model,
            "kv_cache_gib_per_gpu": round(self.kv_cache_gib_per_gpu, 3),
            "kv_cache_blocks": self.kv_cache_blocks,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": round(self.max_concurrency, 2),
            "max_model_len_that_fits": self.max_model_len_that_fits,
            "findings": [f.to_json() for f in self.findings],
            "memory_per_gpu": self.memory.to_json(),
            "inputs": self.inputs,
        }


@dataclass(frozen=True)
class _Layout:
    """How one model copy is split: the numbers every formula below needs."""

    arch: catalog.ModelArch
    tp: int
    pp: int
    weight_bytes: float  # per quantizable (linear-layer) weight
    kv_bytes: int  # per KV element

    @property
    def layers_per_gpu(self) -> int:
        # vLLM spreads layers as evenly as it can; the stage with the most layers bounds the KV cache.
        return math.ceil(self.arch.num_hidden_layers / self.pp)

    @property
    def kv_heads_per_gpu(self) -> int:
        # Fewer KV heads than GPUs: vLLM replicates KV heads so each GPU holds at least one.
        return math.ceil(self.arch.num_key_value_heads / self.tp)

    @property
    def q_heads_per_gpu(self) -> int:
        return math.ceil(self.arch.num_attention_heads / self.tp)

    @property
    def mlp_width_per_gpu(self) -> int:
        width = self.arch.moe_intermediate_size or self.arch.intermediate_size
        return math.ceil(width / self.tp)

    def kv_bytes_per_token(self) -> int:
        a = self.arch
        return 2 * self.layers_per_gpu * self.kv_heads_per_gpu * a.head_dim * self.kv_bytes


@dataclass(frozen=True)
class Calibration:
    """What a running engine showed about the memory the model does not explain (``calibrate``)."""

    overhead_gib: float  # observed minus modelled activation + non-torch + CUDA-graph memory, per GPU
    source: str  # which release and revision it was observed on

    def to_json(self) -> dict[str, Any]:
        return {"overhead_gib": round(self.overhead_gib, 3), "source": self.source}


def calibrate(recorded_plan: Mapping[str, Any], observed_kv_tokens: int, source: str) -> Calibration:
    """The planner's error on a deployed revision: its plan (``Plan.to_json()``) against the KV
    tokens its vLLM logged. The KV memory vLLM really had is tokens × bytes per token per GPU; what
    the plan left for KV beyond that is memory the model did not account for."""
    per_token = int(recorded_plan["kv_bytes_per_token_per_gpu"])
    planned_gib = float(recorded_plan["kv_cache_gib_per_gpu"])
    observed_gib = observed_kv_tokens * per_token / GIB
    return Calibration(overhead_gib=planned_gib - observed_gib, source=source)


def same_setup(recorded_plan: Mapping[str, Any], profile: profile_schema.Profile) -> bool:
    """Whether a recorded plan is for the same model, GPU, vLLM version and split (TP and PP) as
    ``profile`` (a calibration only carries over between those: the split decides the per-GPU share)."""
    inputs = recorded_plan.get("inputs") or {}
    current = plan(profile).inputs
    keys = ("model", "gpu", "vllm_version", "tensor_parallel_size", "pipeline_parallel_size")
    return all(inputs.get(k, 1 if k == "pipeline_parallel_size" else None) == current.get(k) for k in keys)


def plan(profile: profile_schema.Profile, calibration: Calibration | None = None) -> Plan:
    """Work out the per-GPU memory split, KV capacity and findings of ``profile``; with a
    ``calibration``, the overhead a running engine showed is taken off the KV cache too."""
    arch = _architecture(profile)
    eng, hw = profile.engine, profile.hardware
    gpu = catalog.gpu(hw.gpu) if hw.gpu else None
    total_gib = hw.memoryGiB if hw.memoryGiB is not None else (gpu.memory_gib if gpu else 0.0)
    native_fp8 = hw.fp8 if hw.fp8 is not None else (gpu.fp8 if gpu else False)
    weights_dtype = _weights_dtype(profile.model.weightsDtype, arch)
    kv_dtype_bytes = _KV_BYTES.get(eng.kvCacheDtype, 2)
    layout = _Layout(
        arch, eng.tensorParallelSize, eng.pipelineParallelSize, _WEIGHT_BYTES[weights_dtype], kv_dtype_bytes
    )
    batched_tokens = _batched_tokens(profile, gpu, total_gib)
    eager = vllm_flags.has_flag(eng.extraArgs, "--enforce-eager")
    graphs_reserved = _version(eng.vllmVersion) >= CUDA_GRAPHS_RESERVED_SINCE and not eager

    budget = total_gib * eng.gpuMemoryUtilization
    weights = _weights_bytes_per_gpu(layout) / GIB
    activation = _activation_bytes(layout, batched_tokens, eng.maxNumSeqs) / GIB
    non_torch = NON_TORCH_GIB_SINGLE if layout.tp == 1 else NON_TORCH_GIB_TENSOR_PARALLEL
    graphs = CUDA_GRAPH_GIB_BASE + CUDA_GRAPH_GIB_PER_LAYER * layout.layers_per_gpu if graphs_reserved else 0.0
    available = budget - weights - activation - non_torch - graphs - (calibration.overhead_gib if calibration else 0.0)

    kv_per_token = layout.kv_bytes_per_token()
    blocks = max(0, math.floor(available * GIB / (kv_per_token * BLOCK_SIZE)))
    blocks_per_seq = math.ceil(eng.maxModelLen / BLOCK_SIZE)
    concurrency = blocks / blocks_per_seq
    # vLLM keeps one block back as the null block; a request must fit in the rest.
    usable_tokens = max(0, blocks - 1) * BLOCK_SIZE
    weights_fit = weights <= budget

    ctx = _Context(
        batched_tokens=batched_tokens,
        profile=profile,
        arch=arch,
        layout=layout,
        total_gib=total_gib,
        native_fp8=native_fp8,
        budget=budget,
        available=available,
        kv_per_token=kv_per_token,
        usable_tokens=usable_tokens,
        weights=weights,
        weights_fit=weights_fit,
        concurrency=concurrency,
    )
    findings = tuple(sorted(_findings(ctx), key=lambda f: -SEVERITY_ORDER[f.severity]))

    whole_model = _Layout(arch, 1, 1, layout.weight_bytes, kv_dtype_bytes)
    return Plan(
        weights_gib_per_gpu=weights,
        kv_bytes_per_token_per_gpu=kv_per_token,
        kv_bytes_per_token_model=whole_model.kv_bytes_per_token(),
        kv_cache_gib_per_gpu=available,
        kv_cache_blocks=blocks,
        kv_cache_tokens=int(concurrency * eng.maxModelLen),
        max_concurrency=concurrency,
        max_model_len_that_fits=usable_tokens,
        memory=MemorySplit(
            total_gib=total_gib,
            budget_gib=budget,
            weights_gib=weights,
            activation_peak_gib=activation,
            non_torch_gib=non_torch,
            cuda_graphs_gib=graphs,
            kv_cache_gib=available,
            headroom_gib=total_gib - budget,
        ),
        inputs={
            "model": arch.source,
            "model_type": arch.model_type,
            "params": _params_total(arch),
            "layers": arch.num_hidden_layers,
            "layers_per_gpu": layout.layers_per_gpu,
            "attention_heads": arch.num_attention_heads,
            "kv_heads": arch.num_key_value_heads,
            "kv_heads_per_gpu": layout.kv_heads_per_gpu,
            "head_dim": arch.head_dim,
            "hidden_size": arch.hidden_size,
            "vocab_size": arch.vocab_size,
            "experts": arch.num_local_experts,
            "weights_dtype": weights_dtype,
            "weights_bytes_per_param": layout.weight_bytes,
            "kv_cache_dtype": eng.kvCacheDtype,
            "kv_cache_bytes_per_element": kv_dtype_bytes,
            "tensor_parallel_size": layout.tp,
            "pipeline_parallel_size": layout.pp,
            "gpus_per_replica": profile.gpus_per_copy,
            "nodes_per_copy": profile.nodes_per_copy,
            "gpus_per_pod": profile.gpus_per_pod,
            "gpus_per_node": hw.gpusPerNode,
            "node_interconnect": hw.nodeInterconnect,
            "gpu": hw.gpu,
            "native_fp8": native_fp8,
            "max_model_len": eng.maxModelLen,
            "max_num_seqs": eng.maxNumSeqs,
            "max_num_batched_tokens": batched_tokens,
            "gpu_memory_utilization": eng.gpuMemoryUtilization,
            "vllm_version": eng.vllmVersion,
            "cuda_graphs_reserved": graphs_reserved,
            "block_size": BLOCK_SIZE,
            "calibration": calibration.to_json() if calibration else None,
        },
        findings=findings,
    )


def check(
    profile: profile_schema.Profile, *, allow_unfit: bool = False, calibration: Calibration | None = None
) -> Plan:
    """The plan of ``profile``, or the refusal every command gives for it.

    An invalid profile (vLLM would refuse it) raises InvalidProfile, exit 2; one that does not fit
    its GPUs raises DoesNotFit, exit 3, unless ``allow_unfit`` (``validate`` and ``plan`` report the
    verdict instead of raising; ``render --force`` writes it into the objects). Each problem names
    its field and YAML line.
    """
    result = plan(profile, calibration)
    if result.verdict == "invalid":
        raise errors.InvalidProfile(
            _problems(profile, result, "invalid", "the profile asks for something vLLM would refuse")
        )
    if result.verdict == "does-not-fit" and not allow_unfit:
        raise errors.DoesNotFit(_problems(profile, result, "error", "the profile does not fit its GPUs"))
    return result


def _problems(profile: profile_schema.Profile, result: Plan, severity: Severity, headline: str) -> str:
    lines = [f"{profile.source}: {headline}:"]
    for f in result.findings:
        if f.severity == severity:
            line = profile.line_of(f.field) if f.field else None
            lines.append(f"  {f.field}{f' (line {line})' if line else ''}: {f.message}")
    return "\n".join(lines)


# --- inputs ------------------------------------------------------------------------------------


def _architecture(profile: profile_schema.Profile) -> catalog.ModelArch:
    model = profile.model
    if model.architecture is not None:
        return catalog.architecture(model.architecture)
    assert model.config is not None  # the schema guarantees one of the two
    path = profile.base_dir / model.config
    try:
        return catalog.load_config(path)
    except catalog.ConfigError as e:
        raise errors.InvalidProfile(f"model.config: {e}; give the model's Hugging Face config.json") from e


def _weights_dtype(requested: str, arch: catalog.ModelArch) -> str:
    if requested != "auto":
        return requested
    # vLLM's dtype "auto" keeps a 16-bit checkpoint's dtype and serves float32 checkpoints in 16 bits.
    return "fp16" if arch.torch_dtype in ("float16", "fp16", "half") else "bf16"


def _batched_tokens(profile: profile_schema.Profile, gpu: catalog.Gpu | None, total_gib: float) -> int:
    eng = profile.engine
    if eng.maxNumBatchedTokens is not None:
        return eng.maxNumBatchedTokens
    is_a100 = gpu is not None and gpu.key.startswith("A100")
    if total_gib >= 160:
        default = DEFAULT_BATCHED_TOKENS_LARGE
    elif total_gib >= 70 and not is_a100:
        default = DEFAULT_BATCHED_TOKENS_HOPPER
    else:
        default = DEFAULT_BATCHED_TOKENS_OTHER
    # Chunked prefill is on by default, so the default is not raised to max_model_len, only capped.
    return min(default, eng.maxNumSeqs * eng.maxModelLen)


def _version(text: str) -> tuple[int, ...]:
    parts = re.findall(r"\d+", text.split("+")[0])[:3]
    return tuple(int(p) for p in parts) if parts else (0,)


# --- memory terms ------------------------------------------------------------------------------


def _layer_params_per_gpu(layout: _Layout) -> tuple[float, float]:
    """(quantizable linear weights, 16-bit weights) of one decoder layer on one GPU."""
    a = layout.arch
    h, hd = a.hidden_size, a.head_dim
    q_out = layout.q_heads_per_gpu * hd
    kv_out = layout.kv_heads_per_gpu * hd
    linear = h * q_out + 2 * h * kv_out + q_out * h
    sixteen_bit = 2 * h  # input and post-attention RMSNorm, replicated on every GPU
    if a.qkv_bias:
        sixteen_bit += q_out + 2 * kv_out
    if a.is_moe:
        linear += a.num_local_experts * 3 * h * layout.mlp_width_per_gpu
        sixteen_bit += h * a.num_local_experts  # the router stays 16-bit and is replicated
    else:
        linear += 3 * h * layout.mlp_width_per_gpu
    return float(linear), float(sixteen_bit)


def _weights_bytes_per_gpu(layout: _Layout) -> float:
    """Weight bytes on the heaviest GPU: its share of the layers plus embedding and/or LM head."""
    a = layout.arch
    linear, sixteen_bit = _layer_params_per_gpu(layout)
    layers = layout.layers_per_gpu * (linear * layout.weight_bytes + sixteen_bit * 2)
    padded_vocab = math.ceil(a.vocab_size / VOCAB_PADDING) * VOCAB_PADDING
    # Embedding and LM head stay 16-bit in fp8/int8/int4 checkpoints (that is ~1 GiB on 70B models).
    table = math.ceil(padded_vocab / layout.tp) * a.hidden_size * 2
    final_norm = a.hidden_size * 2
    if layout.pp == 1:
        ends = table + (0 if a.tie_word_embeddings else table) + final_norm
    else:
        # The first stage holds the embedding, the last the LM head (its own copy even when tied).
        ends = table + final_norm
    # The rotary cos/sin cache: max_position_embeddings × head_dim in the model dtype.
    rope = a.max_position_embeddings * a.head_dim * 2
    return layers + ends + rope


def _params_total(arch: catalog.ModelArch) -> int:
    whole = _Layout(arch, 1, 1, 1.0, 2)
    linear, sixteen_bit = _layer_params_per_gpu(whole)
    table = arch.vocab_size * arch.hidden_size
    tables = table if arch.tie_word_embeddings else 2 * table
    return int(arch.num_hidden_layers * (linear + sixteen_bit) + tables + arch.hidden_size)


def _activation_bytes(layout: _Layout, batched_tokens: int, max_num_seqs: int) -> float:
    """Peak transient memory of vLLM's profile run: the bigger of forward pass and dummy sampler."""
    a = layout.arch
    width = layout.mlp_width_per_gpu
    if a.is_moe:
        # fused_moe keeps per-(token, expert) caches of 2·I, I and H for the top-k experts of each token.
        per_token = a.num_experts_per_tok * (3 * width + a.hidden_size) + HIDDEN_COPIES * a.hidden_size
    else:
        per_token = 3 * width + HIDDEN_COPIES * a.hidden_size
    forward = batched_tokens * per_token * ACTIVATION_BYTES
    sampler_rows = min(max_num_seqs, batched_tokens)
    sampler = SAMPLER_FP32_COPIES * sampler_rows * a.vocab_size * 4
    return max(forward, sampler)


# --- findings ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Context:
    profile: profile_schema.Profile
    arch: catalog.ModelArch
    layout: _Layout
    total_gib: float
    native_fp8: bool
    budget: float
    available: float
    kv_per_token: int
    usable_tokens: int
    weights: float
    weights_fit: bool
    concurrency: float
    batched_tokens: int


def _findings(c: _Context) -> list[Finding]:
    out: list[Finding] = []
    out += _parallelism_findings(c)
    out += _layout_findings(c)
    out += _context_length_findings(c)
    out += _memory_findings(c)
    out += _hardware_findings(c)
    return out


def valid_tensor_parallel_sizes(arch: catalog.ModelArch, limit: int = 64) -> list[int]:
    """TP sizes vLLM accepts for ``arch``: they divide the attention heads and the MLP width, and the
    KV heads either split evenly across them or are replicated an equal number of times."""
    kv = arch.num_key_value_heads
    width = arch.moe_intermediate_size or arch.intermediate_size
    return [
        tp
        for tp in range(1, limit + 1)
        if arch.num_attention_heads % tp == 0 and width % tp == 0 and (kv % tp == 0 or tp % kv == 0)
    ]


def _parallelism_findings(c: _Context) -> list[Finding]:
    out: list[Finding] = []
    eng, hw, a = c.profile.engine, c.profile.hardware, c.arch
    tp, pp = eng.tensorParallelSize, eng.pipelineParallelSize
    valid = valid_tensor_parallel_sizes(a)
    if tp not in valid:
        msg = (
            f"tensorParallelSize {tp} does not split {a.source} evenly ({a.num_attention_heads} "
            f"attention heads, {a.num_key_value_heads} KV heads): vLLM refuses it. Use one of {_join(valid)}."
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


# --- multi-node layout ---------------------------------------------------------------------------


def _nodes_for(gpus: int, gpus_per_node: int, tp: int) -> int:
    """Nodes a copy of ``gpus`` GPUs takes by default, or 0 when that split leaves a pod of unequal
    size or a tensor-parallel group across a node boundary."""
    nodes = -(-gpus // gpus_per_node)
    pod = gpus // nodes
    return nodes if gpus % nodes == 0 and pod % tp == 0 else 0


def _in_node_layout(c: _Context) -> tuple[int, int, int] | None:
    """(TP, PP, nodes) for the same GPUs with every tensor-parallel group inside one node: the largest
    valid TP up to a node's GPUs, pipeline stages for the rest."""
    gpus, gpn = c.profile.gpus_per_copy, c.profile.hardware.gpusPerNode
    for tp in reversed(valid_tensor_parallel_sizes(c.arch)):
        nodes = _nodes_for(gpus, gpn, tp) if tp <= gpn and gpus % tp == 0 else 0
        if nodes and gpus // tp <= c.arch.num_hidden_layers:
            return tp, gpus // tp, nodes
    return None


def _pp_bytes_per_token(a: catalog.ModelArch) -> int:
    # vLLM's decoder models hand the next stage the hidden state and the residual (IntermediateTensors).
    return 2 * a.hidden_size * ACTIVATION_BYTES


def _tp_bytes_per_token(c: _Context) -> float:
    # Two all-reduces of the hidden state per layer (after attention, after the MLP); a ring all-reduce
    # over n GPUs sends 2(n-1)/n of the message from each GPU.
    tp = c.layout.tp
    return 2 * c.layout.layers_per_gpu * c.arch.hidden_size * ACTIVATION_BYTES * 2 * (tp - 1) / tp


def _intra_node_link(hw: profile_schema.HardwareSpec) -> tuple[str, float]:
    if hw.interconnect == "pcie":
        return "PCIe", _PCIE_GB_S
    return "NVLink", _NVLINK_GB_S.get(hw.gpu or "", _NVLINK_GB_S_OTHER)


def _tp_traffic(c: _Context) -> str:
    """Why a tensor-parallel group belongs inside a node, in this model's numbers."""
    a, tp, layers = c.arch, c.layout.tp, c.layout.layers_per_gpu
    per_token, pp_bytes = _tp_bytes_per_token(c), _pp_bytes_per_token(a)
    link_name, link = _NODE_LINKS[c.profile.hardware.nodeInterconnect]
    nv_name, nv = _intra_node_link(c.profile.hardware)
    seqs = c.profile.engine.maxNumSeqs
    return (
        "Tensor parallelism all-reduces every layer's activations twice per token, so each GPU moves "
        f"2 × {layers} layers × {a.hidden_size} hidden × 2 bytes × 2({tp}-1)/{tp} = {per_token / 1e6:.1f} MB "
        f"per token. Between nodes that goes over {link_name}, {link:g} GB/s each way, instead of {nv_name} "
        f"({nv:g} GB/s each way per GPU): {per_token / link / 1e3:.0f} µs per token instead of "
        f"{per_token / nv / 1e3:.0f} µs, {seqs * per_token / link / 1e6:.0f} ms of network time in every "
        f"decode step of {seqs} sequences (maxNumSeqs), plus the latency of {2 * layers} all-reduces per step. "
        "Pipeline stages across nodes send only the hidden state and residual at a stage boundary: "
        f"2 × {a.hidden_size} × 2 bytes = {pp_bytes / KIB:g} KiB per token, {per_token / pp_bytes:.0f}× less"
    )


def _layout_findings(c: _Context) -> list[Finding]:
    """How a copy's GPUs sit on nodes (one pod per node) and what crosses the network between them."""
    prof = c.profile
    gpus, nodes, gpn = prof.gpus_per_copy, prof.nodes_per_copy, prof.hardware.gpusPerNode
    tp, pp = c.layout.tp, c.layout.pp
    if gpus % nodes:
        return [_uneven_split(c)]  # the pod size is not defined, so nothing below is either
    pod = gpus // nodes
    out: list[Finding] = []
    if pod > gpn:
        out.append(_exceeds_node(c))
    elif nodes > 1 and gpus <= gpn:
        msg = (
            f"placement.nodesPerCopy {nodes} spreads a copy of {gpus} GPUs (TP × PP) over {nodes} nodes though "
            f"one node has {gpn}: its GPUs then talk over the network instead of inside the node, and the copy "
            f"needs {nodes} nodes free at once and stops when any of them goes. Leave placement.nodesPerCopy "
            "unset to keep the copy on one node."
        )
        out.append(Finding("spans-nodes-needlessly", "warning", msg, "placement.nodesPerCopy"))
    if tp > gpn or tp > pod or pod % tp:
        out.append(_cross_node_tp(c, pod))
    if nodes > 1:
        out += _network_findings(c, nodes)
    if nodes > 1 and pp > 1:
        out.append(_pp_bubbles(c, nodes))
    return out


def _uneven_split(c: _Context) -> Finding:
    prof = c.profile
    gpus, nodes, gpn = prof.gpus_per_copy, prof.nodes_per_copy, prof.hardware.gpusPerNode
    why = (
        "placement.nodesPerCopy" if prof.placement.nodesPerCopy is not None else f"as many as {gpn} GPUs per node need"
    )
    options = [n for n in range(1, gpus + 1) if gpus % n == 0 and gpus // n <= gpn]
    return Finding(
        "uneven-node-split",
        "invalid",
        f"tensorParallelSize × pipelineParallelSize = {gpus} GPUs do not split evenly over {nodes} nodes ({why}): "
        "every node of a copy runs one pod, and the pods request the same number of GPUs. Use "
        f"placement.nodesPerCopy {_join(options)}, or a pipelineParallelSize that makes TP × PP a multiple "
        f"of {nodes}.",
        "placement.nodesPerCopy",
    )


def _exceeds_node(c: _Context) -> Finding:
    prof = c.profile
    gpus, nodes, gpn, tp = prof.gpus_per_copy, prof.nodes_per_copy, prof.hardware.gpusPerNode, c.layout.tp
    fits = [n for n in range(nodes + 1, gpus + 1) if gpus % n == 0 and gpus // n <= gpn]
    whole_groups = [n for n in fits if (gpus // n) % tp == 0]
    fix = (whole_groups or fits)[0]
    return Finding(
        "exceeds-node",
        "error",
        f"placement.nodesPerCopy {nodes} puts {gpus // nodes} GPUs in each pod of the copy (TP × PP = {gpus} "
        f"over {nodes} node{'s' if nodes > 1 else ''}) but a node has {gpn}: the pods can never be scheduled. "
        f"Use placement.nodesPerCopy {fix} ({gpus // fix} GPUs on each node).",
        "placement.nodesPerCopy",
    )


def _cross_node_tp(c: _Context, pod: int) -> Finding:
    prof = c.profile
    tp, gpn, nodes = c.layout.tp, prof.hardware.gpusPerNode, prof.nodes_per_copy
    if tp > gpn:
        where = f"tensorParallelSize {tp} needs {tp} GPUs in one tensor-parallel group but a node has {gpn}"
    elif tp > pod:
        where = (
            f"tensorParallelSize {tp} needs {tp} GPUs in one tensor-parallel group but each of the copy's "
            f"{nodes} pods (one per node) has {pod}"
        )
    else:
        where = f"the copy's pods have {pod} GPUs each, which {tp}-GPU tensor-parallel groups do not divide"
    where += ", so the group spans nodes"
    if prof.engine.allowCrossNodeTP:
        msg = (
            f"{where} (engine.allowCrossNodeTP is set). {_tp_traffic(c)}. Expect decoding far slower than in one node."
        )
        return Finding("cross-node-tp-allowed", "warning", msg, "engine.tensorParallelSize")
    better = _in_node_layout(c)
    if better is None:
        fix = "no split of these GPUs keeps tensor-parallel groups inside nodes; use GPUs per copy a node holds"
    else:
        b_tp, b_pp, b_nodes = better
        fix = (
            f"use tensorParallelSize {b_tp} and pipelineParallelSize {b_pp} ({b_nodes} node"
            f"{'s' if b_nodes > 1 else ''} × {b_tp * b_pp // b_nodes} GPUs, tensor parallelism inside each node)"
        )
    msg = f"{where}. {_tp_traffic(c)}. Fix: {fix}, or set engine.allowCrossNodeTP to accept the slowdown."
    return Finding("cross-node-tp", "error", msg, "engine.tensorParallelSize")


def _network_findings(c: _Context, nodes: int) -> list[Finding]:
    hw, a, pp = c.profile.hardware, c.arch, c.layout.pp
    pp_bytes = _pp_bytes_per_token(a)
    if hw.nodeInterconnect is None:
        msg = (
            f"this copy spans {nodes} nodes but hardware.nodeInterconnect is unset. Pipeline stages hand every "
            f"token's hidden state and residual ({pp_bytes / KIB:g} KiB) to the next node, and vLLM waits on "
            "each hand-over: the nodes need an RDMA fabric, InfiniBand or RoCE, with GPUDirect RDMA, so NCCL "
            "moves activations between GPU memory and the NIC without a copy through host memory and the "
            "kernel's TCP stack. Set hardware.nodeInterconnect (infiniband, roce or ethernet) to the link the "
            "nodes have."
        )
        return [Finding("node-interconnect-unset", "warning", msg, "hardware.nodeInterconnect")]
    if hw.nodeInterconnect != "ethernet" or pp == 1:
        return []
    bt = c.batched_tokens
    step = bt * pp_bytes
    eth, ib = _NODE_LINKS["ethernet"][1], _NODE_LINKS["infiniband"][1]
    rate = _PREFILL_STEPS_PER_S * bt * pp_bytes / 1e9
    msg = (
        f"pipeline stages of this copy pass activations over plain Ethernet (hardware.nodeInterconnect "
        f"ethernet; assumed 100 GbE, {eth:g} GB/s, through NCCL's TCP sockets). Each stage boundary carries "
        f"the hidden state and residual, {pp_bytes / KIB:g} KiB per token: a full prefill step of {bt} tokens "
        f"(maxNumBatchedTokens) moves {step / (1 << 20):.0f} MiB across it, {step / eth / 1e6:.0f} ms at line "
        f"rate, which NCCL's socket transport seldom reaches, against {step / ib / 1e6:.0f} ms over InfiniBand "
        f"NDR. At an estimated {_PREFILL_STEPS_PER_S} such steps a second "
        f"({_PREFILL_STEPS_PER_S * bt:,} tokens/s) that is {rate:.1f} GB/s, {rate / eth:.0%} of the link. "
        "Fine for trials; for production use InfiniBand or RoCE with GPUDirect RDMA."
    )
    return [Finding("pp-over-ethernet", "warning", msg, "hardware.nodeInterconnect")]


def _pp_bubbles(c: _Context, nodes: int) -> Finding:
    eng, a = c.profile.engine, c.arch
    tp, pp, seqs = c.layout.tp, c.layout.pp, eng.maxNumSeqs
    idle = seqs < pp
    msg = (
        f"pipelineParallelSize {pp} across {nodes} nodes: vLLM keeps up to {pp} batches in flight, one per "
        f"stage, and a request rides in one of them, so maxNumSeqs {seqs} makes micro-batches of at most "
        f"{-(-seqs // pp)} sequences. "
        + (
            f"With maxNumSeqs below {pp} some stage always waits idle: raise it. "
            if idle
            else f"With fewer than {pp} requests running some stage waits idle; throughput grows with concurrency. "
        )
        + f"A single request gets no faster: its tokens pass the {pp} stages in turn "
        f"({c.layout.layers_per_gpu} layers each) and cross {nodes - 1} network hop"
        f"{'s' if nodes > 2 else ''} per token, so it decodes at best as fast as one {tp}-GPU group running "
        f"all {a.num_hidden_layers} layers."
    )
    return Finding("pp-bubbles", "warning" if idle else "info", msg, "engine.pipelineParallelSize")


def _context_length_findings(c: _Context) -> list[Finding]:
    eng, a = c.profile.engine, c.arch
    if eng.maxModelLen <= a.max_model_len:
        return []
    msg = (
        f"maxModelLen {eng.maxModelLen} is longer than {a.source} supports ({a.max_model_len} tokens: "
        "max_position_embeddings, with rope scaling if the config has it); vLLM refuses to start unless "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, and positions beyond it produce garbage. "
        f"Use maxModelLen ≤ {a.max_model_len}."
    )
    return [Finding("max-model-len-above-model", "invalid", msg, "engine.maxModelLen")]


def _memory_findings(c: _Context) -> list[Finding]:
    eng = c.profile.engine
    if not c.weights_fit:
        return [_weights_do_not_fit(c)]
    out: list[Finding] = []
    if c.usable_tokens < eng.maxModelLen:
        out.append(_kv_too_small(c))
    elif eng.maxNumSeqs > c.concurrency:
        out.append(_seqs_above_kv(c))
    return out


def _weights_do_not_fit(c: _Context) -> Finding:
    eng, a = c.profile.engine, c.arch

    gpn = c.profile.hardware.gpusPerNode

    def roomy(tp: int, pp: int) -> bool:  # weights that leave room for anything at all
        layout = _Layout(a, tp, pp, c.layout.weight_bytes, c.layout.kv_bytes)
        return _weights_bytes_per_gpu(layout) / GIB < 0.8 * c.budget

    # The smallest valid TP inside one node, else that node's TP with more pipeline stages across nodes.
    in_node = [tp for tp in valid_tensor_parallel_sizes(a) if tp <= gpn]
    bigger = [tp for tp in in_node if tp > eng.tensorParallelSize and roomy(tp, eng.pipelineParallelSize)]
    fix = "use more GPUs per copy"
    if bigger:
        fix = f"use tensorParallelSize {bigger[0]}"
    elif in_node:
        tp = in_node[-1]
        stages = [
            pp
            for pp in range(eng.pipelineParallelSize + 1, a.num_hidden_layers + 1)
            if _nodes_for(tp * pp, gpn, tp) and roomy(tp, pp)
        ]
        if stages:
            nodes = _nodes_for(tp * stages[0], gpn, tp)
            fix = (
                f"use tensorParallelSize {tp} × pipelineParallelSize {stages[0]} "
                f"({nodes} node{'s' if nodes > 1 else ''} per copy)"
            )
    return Finding(
        "weights-do-not-fit",
        "error",
        f"the weights alone need {c.weights:.1f} GiB per GPU but vLLM may use {c.budget:.1f} GiB "
        f"({c.total_gib:.2f} GiB × gpuMemoryUtilization {eng.gpuMemoryUtilization}); {fix}, quantized "
        "weights (fp8 halves them), or GPUs with more memory.",
        "engine.tensorParallelSize",
    )


def _tokens_at(c: _Context, kv_bytes: int) -> int:
    per_token = c.kv_per_token * kv_bytes // c.layout.kv_bytes
    blocks = max(0, math.floor(c.available * GIB / (per_token * BLOCK_SIZE)))
    return max(0, blocks - 1) * BLOCK_SIZE


def _kv_too_small(c: _Context) -> Finding:
    eng = c.profile.engine
    fixes = [f"maxModelLen ≤ {c.usable_tokens}" if c.usable_tokens >= BLOCK_SIZE else None]
    if c.layout.kv_bytes == 2 and _tokens_at(c, 1) >= eng.maxModelLen:
        fixes.append("kvCacheDtype fp8 (halves KV memory per token)")
    # The utilization at which one full sequence (plus vLLM's null block) would fit.
    needed_gib = (eng.maxModelLen + BLOCK_SIZE) * c.kv_per_token / GIB - c.available
    utilization = math.ceil((c.budget + needed_gib) / c.total_gib * 100) / 100
    if utilization <= 0.98:
        fixes.append(f"gpuMemoryUtilization {utilization:.2f}")
    fixes.append("a larger tensorParallelSize")
    room = (
        f"{c.available:.2f} GiB per GPU is left for KV cache, room for {c.usable_tokens} tokens"
        if c.available > 0
        else f"nothing is left for KV cache ({c.available:.2f} GiB per GPU after weights, activations, "
        "non-torch memory and CUDA graphs)"
    )
    return Finding(
        "kv-too-small",
        "error",
        f"{room}, but one maxModelLen sequence needs {eng.maxModelLen} tokens "
        f"({_gib(eng.maxModelLen * c.kv_per_token)} GiB per GPU): vLLM refuses to start. Fix: "
        + _join([f for f in fixes if f], "or")
        + ".",
        "engine.maxModelLen",
    )


def _seqs_above_kv(c: _Context) -> Finding:
    eng = c.profile.engine
    alternatives = []
    if c.layout.kv_bytes == 2:
        alternatives.append(f"fp8 KV cache holds {_tokens_at(c, 1) / eng.maxModelLen:.1f}")
    half = max(BLOCK_SIZE, eng.maxModelLen // 2)
    alternatives.append(f"at maxModelLen {half} it holds {c.usable_tokens / half:.1f}")
    return Finding(
        "max-num-seqs-above-kv",
        "warning",
        f"the KV cache holds {c.concurrency:.1f} sequences of the full {eng.maxModelLen} tokens "
        f"({c.usable_tokens} tokens at {c.kv_per_token / KIB:g} KiB per token per GPU) but maxNumSeqs is "
        f"{eng.maxNumSeqs}: when many requests run long, vLLM preempts and recomputes them. "
        + "; ".join(alternatives)
        + f". Fine if most requests are short; else lower maxNumSeqs to "
        f"{max(1, math.floor(c.concurrency))}.",
        "engine.maxNumSeqs",
    )


def _hardware_findings(c: _Context) -> list[Finding]:
    out: list[Finding] = []
    eng, hw = c.profile.engine, c.profile.hardware
    gpu_name = hw.gpu or f"this GPU ({hw.memoryGiB} GiB; hardware.fp8 unset, so assumed without fp8)"
    if eng.kvCacheDtype != "auto" and not c.native_fp8:
        # Read from vLLM 0.33.0: FlashAttention takes fp8 KV only with FA3 on sm90 or FA4 on sm100
        # (fa_utils.flash_attn_supports_kv_cache_dtype); FlashInfer and Triton attention accept it on sm80.
        msg = (
            f"kvCacheDtype {eng.kvCacheDtype} on {gpu_name}, which has no native fp8: vLLM 0.33 still "
            "runs it, but FlashAttention reads fp8 KV only on Hopper/Blackwell, so vLLM falls back to the "
            "FlashInfer or Triton attention backend, which store K/V as fp8 and convert them to 16-bit "
            "inside the kernel. You get the halved KV memory, not faster attention. Without calibrated "
            "scales K/V are stored with scale 1.0: check output quality."
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


def _join(items: list[Any], last: str = "or") -> str:
    texts = [str(i) for i in items]
    if len(texts) <= 1:
        return "".join(texts)
    return ", ".join(texts[:-1]) + f" {last} " + texts[-1]
