"""The VRAM planner: an engine's start-up memory accounting for a profile, worked out before any GPU is touched.

The weights, KV bytes per token, activation peak and non-torch memory are modelled once, here; each
engine then applies its own rule for what becomes KV cache (``orchestrator.engines``: TGI's
cuda-memory-fraction after a warm-up prefill, TensorRT-LLM's fraction of the memory free after
warm-up, SGLang's static fraction). The model was fitted on vLLM, whose rule follows.

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
findings (``orchestrator.plan.layout``) keep tensor-parallel groups inside a node and say what crosses the
network between nodes.

Pure: takes a Profile, returns a Plan. Its only I/O is reading a model config through the catalog.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator import engines, errors, user_files
from orchestrator.catalog import lookup as catalog
from orchestrator.engines import vllm_flags
from orchestrator.plan import layout
from orchestrator.profile import model as profile_schema

# Findings are the layout module's type: it sits below the planner and must not import it. These
# names stay the planner's public API.
Finding = layout.Finding
Severity = layout.Severity
Verdict = Literal["fits", "does-not-fit", "invalid"]
SEVERITY_ORDER: dict[str, int] = {"info": 0, "warning": 1, "error": 2, "invalid": 3}

GIB = 1 << 30
CONFIG_BYTES = 4 << 20  # model.config: a Hugging Face config.json is a few KiB
VOCAB_PADDING = 64  # VocabParallelEmbedding pads the vocabulary to a multiple of 64 before sharding

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
class MemorySplit:
    """Where one GPU's memory goes, in GiB (the heaviest GPU when pipeline stages differ)."""

    total_gib: float
    budget_gib: float  # what the engine's memory knob lets it use (vLLM: total × gpu_memory_utilization)
    weights_gib: float
    activation_peak_gib: float
    non_torch_gib: float
    cuda_graphs_gib: float  # taken off the KV cache by the engine's rule (vLLM ≥ 0.21, TensorRT-LLM), else 0
    kv_cache_gib: float  # what vLLM logs as "Available KV cache memory" (negative: does not fit)
    headroom_gib: float  # total − budget: left to other processes (and the engine's graphs where not counted)

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
    inputs = dict(recorded_plan.get("inputs") or {})
    # Plans recorded before deployctl served other engines name only the vLLM version.
    inputs.setdefault("engine", "vllm")
    inputs.setdefault("engine_version", inputs.get("vllm_version"))
    inputs.setdefault("pipeline_parallel_size", 1)
    current = plan(profile).inputs
    keys = ("model", "gpu", "engine", "engine_version", "tensor_parallel_size", "pipeline_parallel_size")
    return all(inputs.get(k) == current.get(k) for k in keys)


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
    split = layout.Split(
        arch, eng.tensorParallelSize, eng.pipelineParallelSize, _WEIGHT_BYTES[weights_dtype], kv_dtype_bytes
    )
    batched_tokens = _batched_tokens(profile, gpu, total_gib)
    serving = eng.engine
    graphs_reserved = _cuda_graphs_reserved(profile)

    weights = _weights_bytes_per_gpu(split) / GIB
    activation = _activation_bytes(split, batched_tokens, eng.maxNumSeqs) / GIB
    non_torch = NON_TORCH_GIB_SINGLE if split.tp == 1 else NON_TORCH_GIB_TENSOR_PARALLEL
    graphs = CUDA_GRAPH_GIB_BASE + CUDA_GRAPH_GIB_PER_LAYER * split.layers_per_gpu if graphs_reserved else 0.0
    memory_inputs = engines.MemoryInputs(
        total=total_gib,
        fraction=eng.gpuMemoryUtilization,
        weights=weights,
        activation=activation,
        non_torch=non_torch,
        cuda_graphs=graphs,
    )
    # Each engine turns the same model of the GPU into its KV cache by its own rule (engines.*.kv_budget).
    memory = serving.kv_budget(memory_inputs)
    budget = memory.budget
    available = memory.kv - (calibration.overhead_gib if calibration else 0.0)

    kv_per_token = split.kv_bytes_per_token()
    block_size = serving.block_size
    blocks = max(0, math.floor(available * GIB / (kv_per_token * block_size)))
    blocks_per_seq = math.ceil(eng.maxModelLen / block_size)
    concurrency = blocks / blocks_per_seq
    # vLLM keeps one block back as the null block (the other engines near enough too); a request
    # must fit in the rest.
    usable_tokens = max(0, blocks - 1) * block_size
    weights_fit = weights <= budget

    ctx = _Context(
        batched_tokens=batched_tokens,
        profile=profile,
        arch=arch,
        split=split,
        total_gib=total_gib,
        native_fp8=native_fp8,
        budget=budget,
        available=available,
        kv_per_token=kv_per_token,
        usable_tokens=usable_tokens,
        weights=weights,
        weights_fit=weights_fit,
        concurrency=concurrency,
        engine=serving,
        block_size=block_size,
        memory_warnings=serving.memory_warnings(memory_inputs, memory),
    )
    findings = tuple(sorted(_findings(ctx), key=lambda f: -SEVERITY_ORDER[f.severity]))

    whole_model = layout.Split(arch, 1, 1, split.weight_bytes, kv_dtype_bytes)
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
            cuda_graphs_gib=memory.cuda_graphs,
            kv_cache_gib=available,
            headroom_gib=total_gib - budget,
        ),
        inputs={
            "model": arch.source,
            "model_type": arch.model_type,
            "params": _params_total(arch),
            "layers": arch.num_hidden_layers,
            "layers_per_gpu": split.layers_per_gpu,
            "attention_heads": arch.num_attention_heads,
            "kv_heads": arch.num_key_value_heads,
            "kv_heads_per_gpu": split.kv_heads_per_gpu,
            "head_dim": arch.head_dim,
            "hidden_size": arch.hidden_size,
            "vocab_size": arch.vocab_size,
            "experts": arch.num_local_experts,
            "weights_dtype": weights_dtype,
            "weights_bytes_per_param": split.weight_bytes,
            "kv_cache_dtype": eng.kvCacheDtype,
            "kv_cache_bytes_per_element": kv_dtype_bytes,
            "tensor_parallel_size": split.tp,
            "pipeline_parallel_size": split.pp,
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
            "engine": eng.kind,
            "engine_version": eng.engine_version,
            "memory_flag": serving.memory_flag,
            "memory_rule": memory.formula,
            "cuda_graphs_reserved": memory.cuda_graphs > 0,
            "block_size": block_size,
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
    its field and YAML line, or the --set that gave it.
    """
    result = plan(profile, calibration)
    if result.verdict == "invalid":
        raise errors.InvalidProfile(
            _problems(
                profile, result, "invalid", f"the profile asks for something {profile.engine.engine.title} would refuse"
            )
        )
    if result.verdict == "does-not-fit" and not allow_unfit:
        raise errors.DoesNotFit(_problems(profile, result, "error", "the profile does not fit its GPUs"))
    return result


def _problems(profile: profile_schema.Profile, result: Plan, severity: Severity, headline: str) -> str:
    lines = [f"{profile.source}: {headline}:"]
    for f in result.findings:
        if f.severity == severity:
            lines.append(f"  {f.field}{profile.where(f.field) if f.field else ''}: {f.message}")
    return "\n".join(lines)


# --- inputs ------------------------------------------------------------------------------------


def _architecture(profile: profile_schema.Profile) -> catalog.ModelArch:
    model = profile.model
    if model.architecture is not None:
        return catalog.architecture(model.architecture)
    assert model.config is not None  # the schema guarantees one of the two
    path = profile.base_dir / model.config
    try:
        # A regular file of at most a few MiB (a config.json is a few KiB): never /dev/zero or a FIFO.
        raw = user_files.read(path, "model config", CONFIG_BYTES)
        if len(raw) > CONFIG_BYTES:
            raise catalog.ConfigError(f"{path} is over {CONFIG_BYTES:,} bytes; a config.json is a few KiB")
        return catalog.config_from_text(raw.decode("utf-8"), str(path))
    except errors.UsageError as e:
        raise errors.InvalidProfile(f"model.config: {e.message}") from e
    except UnicodeDecodeError as e:
        raise errors.InvalidProfile(f"model.config: {path} is not UTF-8 text; give the model's config.json") from e
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
    engine_default = eng.engine.default_batched_tokens(total_gib, eng.maxModelLen)
    if engine_default is not None:
        return engine_default
    is_a100 = gpu is not None and gpu.key.startswith("A100")
    if total_gib >= 160:
        default = DEFAULT_BATCHED_TOKENS_LARGE
    elif total_gib >= 70 and not is_a100:
        default = DEFAULT_BATCHED_TOKENS_HOPPER
    else:
        default = DEFAULT_BATCHED_TOKENS_OTHER
    # Chunked prefill is on by default, so the default is not raised to max_model_len, only capped.
    return min(default, eng.maxNumSeqs * eng.maxModelLen)


def _cuda_graphs_reserved(profile: profile_schema.Profile) -> bool:
    """Whether CUDA-graph memory is part of the engine's accounting: for vLLM since 0.21
    (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS), unless --enforce-eager turns the graphs off. The other
    engines always capture graphs; each engine's rule says whether they come off the KV cache."""
    eng = profile.engine
    if eng.kind != "vllm":
        return True
    eager = vllm_flags.has_flag(eng.extraArgs, "--enforce-eager")
    return _version(eng.engine_version) >= CUDA_GRAPHS_RESERVED_SINCE and not eager


def _version(text: str) -> tuple[int, ...]:
    parts = re.findall(r"\d+", text.split("+")[0])[:3]
    return tuple(int(p) for p in parts) if parts else (0,)


# --- memory terms ------------------------------------------------------------------------------


def _layer_params_per_gpu(split: layout.Split) -> tuple[float, float]:
    """(quantizable linear weights, 16-bit weights) of one decoder layer on one GPU."""
    a = split.arch
    h, hd = a.hidden_size, a.head_dim
    q_out = split.q_heads_per_gpu * hd
    kv_out = split.kv_heads_per_gpu * hd
    linear = h * q_out + 2 * h * kv_out + q_out * h
    sixteen_bit = 2 * h  # input and post-attention RMSNorm, replicated on every GPU
    if a.qkv_bias:
        sixteen_bit += q_out + 2 * kv_out
    if a.is_moe:
        linear += a.num_local_experts * 3 * h * split.mlp_width_per_gpu
        sixteen_bit += h * a.num_local_experts  # the router stays 16-bit and is replicated
    else:
        linear += 3 * h * split.mlp_width_per_gpu
    return float(linear), float(sixteen_bit)


def _weights_bytes_per_gpu(split: layout.Split) -> float:
    """Weight bytes on the heaviest GPU: its share of the layers plus embedding and/or LM head."""
    a = split.arch
    linear, sixteen_bit = _layer_params_per_gpu(split)
    layers = split.layers_per_gpu * (linear * split.weight_bytes + sixteen_bit * 2)
    padded_vocab = math.ceil(a.vocab_size / VOCAB_PADDING) * VOCAB_PADDING
    # Embedding and LM head stay 16-bit in fp8/int8/int4 checkpoints (that is ~1 GiB on 70B models).
    table = math.ceil(padded_vocab / split.tp) * a.hidden_size * 2
    final_norm = a.hidden_size * 2
    if split.pp == 1:
        ends = table + (0 if a.tie_word_embeddings else table) + final_norm
    else:
        # The first stage holds the embedding, the last the LM head (its own copy even when tied).
        ends = table + final_norm
    # The rotary cos/sin cache: max_position_embeddings × head_dim in the model dtype.
    rope = a.max_position_embeddings * a.head_dim * 2
    return layers + ends + rope


def _params_total(arch: catalog.ModelArch) -> int:
    whole = layout.Split(arch, 1, 1, 1.0, 2)
    linear, sixteen_bit = _layer_params_per_gpu(whole)
    table = arch.vocab_size * arch.hidden_size
    tables = table if arch.tie_word_embeddings else 2 * table
    return int(arch.num_hidden_layers * (linear + sixteen_bit) + tables + arch.hidden_size)


def _activation_bytes(split: layout.Split, batched_tokens: int, max_num_seqs: int) -> float:
    """Peak transient memory of vLLM's profile run: the bigger of forward pass and dummy sampler."""
    a = split.arch
    width = split.mlp_width_per_gpu
    if a.is_moe:
        # fused_moe keeps per-(token, expert) caches of 2·I, I and H for the top-k experts of each token.
        per_token = a.num_experts_per_tok * (3 * width + a.hidden_size) + HIDDEN_COPIES * a.hidden_size
    else:
        per_token = 3 * width + HIDDEN_COPIES * a.hidden_size
    forward = batched_tokens * per_token * layout.ACTIVATION_BYTES
    sampler_rows = min(max_num_seqs, batched_tokens)
    sampler = SAMPLER_FP32_COPIES * sampler_rows * a.vocab_size * 4
    return max(forward, sampler)


# --- findings ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Context:
    profile: profile_schema.Profile
    arch: catalog.ModelArch
    split: layout.Split
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
    engine: engines.Engine
    block_size: int
    memory_warnings: list[str]


def _findings(c: _Context) -> list[Finding]:
    out: list[Finding] = []
    out += _parallelism_findings(c)
    out += layout.findings(c.profile, c.split, c.batched_tokens)
    out += _context_length_findings(c)
    out += _memory_findings(c)
    out += _hardware_findings(c)
    out += _engine_findings(c)
    return out


def _engine_findings(c: _Context) -> list[Finding]:
    """Fields the profile's engine cannot honour: refused, never silently dropped."""
    refusals = c.profile.engine.engine.refusals(c.profile.server_settings())
    out = [Finding("engine-unsupported", "invalid", r.message, r.field) for r in refusals]
    out += [Finding("engine-memory", "warning", m, "engine.gpuMemoryUtilization") for m in c.memory_warnings]
    return out


def _parallelism_findings(c: _Context) -> list[Finding]:
    out: list[Finding] = []
    eng, hw, a = c.profile.engine, c.profile.hardware, c.arch
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


def _context_length_findings(c: _Context) -> list[Finding]:
    eng, a = c.profile.engine, c.arch
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
        split = layout.Split(a, tp, pp, c.split.weight_bytes, c.split.kv_bytes)
        return _weights_bytes_per_gpu(split) / GIB < 0.8 * c.budget

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
        f"the weights alone need {c.weights:.1f} GiB per GPU but {c.engine.title} may use {c.budget:.1f} GiB "
        f"({c.total_gib:.2f} GiB × gpuMemoryUtilization {eng.gpuMemoryUtilization}); {fix}, quantized "
        "weights (fp8 halves them), or GPUs with more memory.",
        "engine.tensorParallelSize",
    )


def _tokens_at(c: _Context, kv_bytes: int) -> int:
    per_token = c.kv_per_token * kv_bytes // c.split.kv_bytes
    blocks = max(0, math.floor(c.available * GIB / (per_token * c.block_size)))
    return max(0, blocks - 1) * c.block_size


def _kv_too_small(c: _Context) -> Finding:
    eng = c.profile.engine
    fixes = [f"maxModelLen ≤ {c.usable_tokens}" if c.usable_tokens >= c.block_size else None]
    if c.split.kv_bytes == 2 and _tokens_at(c, 1) >= eng.maxModelLen:
        fixes.append("kvCacheDtype fp8 (halves KV memory per token)")
    # The utilization at which one full sequence (plus vLLM's null block) would fit.
    needed_gib = (eng.maxModelLen + c.block_size) * c.kv_per_token / GIB - c.available
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
        f"({_gib(eng.maxModelLen * c.kv_per_token)} GiB per GPU): {c.engine.title} refuses to start. Fix: "
        + layout.join_words([f for f in fixes if f], "or")
        + ".",
        "engine.maxModelLen",
    )


def _seqs_above_kv(c: _Context) -> Finding:
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


def _hardware_findings(c: _Context) -> list[Finding]:
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
