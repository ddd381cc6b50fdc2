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
every attention layer on the GPU (``vllm/v1/core/kv_cache_planning.py``; sliding-window models in
groups, ``orchestrator.plan.kv_cache``), and the start-up log reports the blocks a full-length request
needs as the maximum concurrency and the pool's tokens as "GPU KV cache size: N tokens"
(``vllm/v1/core/kv_cache_utils.py``). Weights and KV bytes per token are counted from the config by
its family's rule (``orchestrator.catalog.config``, ``orchestrator.plan.memory``), quantized as its
``quantization_config`` says; the activation peak, non-torch memory and CUDA-graph estimate are
modelled from published start-up logs (see docs/capacity.md, and the datapoints in
tests/test_planner.py and tests/test_planner_families.py that keep the model honest).

A copy may span nodes (one pod per node): each GPU is sized for its own pipeline stage, and the layout
findings (``orchestrator.plan.layout``) keep tensor-parallel groups inside a node and say what crosses the
network between nodes.

Pure: takes a Profile, returns a Plan. Its only I/O is reading a model config through the catalog.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from orchestrator import engines, errors, user_files
from orchestrator.catalog import config as model_config
from orchestrator.catalog import lookup as catalog
from orchestrator.engines import vllm_flags
from orchestrator.plan import findings, kv_cache, layout, memory, weights_rule
from orchestrator.profile import model as profile_schema

# Findings are the layout module's type: it sits below the planner and must not import it. These
# names stay the planner's public API.
Finding = layout.Finding
Severity = layout.Severity
# Render refuses a profile with the same words the planner's finding gives.
product_labels_missing = findings.product_labels_missing
Verdict = Literal["fits", "does-not-fit", "invalid"]
SEVERITY_ORDER: dict[str, int] = {"info": 0, "warning": 1, "error": 2, "invalid": 3}

# What a user can do when the planner has no rule for the model: never a guess.
NO_RULE_ESCAPE = (
    "The planner refuses rather than guess. State what vLLM logged for this model on these GPUs (a trial "
    "start with the same TP and PP) in model.measured: weightsGiBPerGpu (`Model loading took X GiB`) and "
    "kvBytesPerTokenPerGpu (`Available KV cache memory` × 2^30 ÷ `GPU KV cache size`); see "
    "docs/capacity.md#model-families"
)
CONFIG_BYTES = 4 << 20  # model.config: a Hugging Face config.json is a few KiB
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

    @classmethod
    def of(cls, gpu: engines.MemoryInputs, kv: engines.KvBudget, kv_cache_gib: float) -> MemorySplit:
        """The split of ``gpu``'s memory under the engine's rule ``kv``, ``kv_cache_gib`` after any calibration."""
        graphs, headroom = kv.cuda_graphs, gpu.total - kv.budget
        return cls(gpu.total, kv.budget, gpu.weights, gpu.activation, gpu.non_torch, graphs, kv_cache_gib, headroom)

    def to_json(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.__dict__.items()}


class PlanInputs(TypedDict):
    """What a plan was worked out from, as recorded with each revision (``same_setup`` compares them)."""

    model: str
    model_type: str
    params: int
    layers: int
    layers_per_gpu: int
    attention_heads: int
    kv_heads: int
    kv_heads_per_gpu: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    experts: int
    weights_dtype: str
    weights_bytes_per_param: float
    quantization: dict[str, object] | None
    attention: str
    sliding_window_layers: int
    kv_layer_slots: int
    measured: bool  # sized by model.measured, not by the family's rules
    kv_cache_dtype: str
    kv_cache_bytes_per_element: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    gpus_per_replica: int
    nodes_per_copy: int
    gpus_per_pod: int
    gpus_per_node: int
    node_interconnect: str | None
    gpu: str | None
    native_fp8: bool
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    engine: str
    engine_version: str
    memory_flag: str
    memory_rule: str
    cuda_graphs_reserved: bool
    block_size: int
    calibration: CalibrationJson | None


class CalibrationJson(TypedDict):
    overhead_gib: float
    source: str


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
    inputs: PlanInputs
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

    def layout_line(self) -> str:
        """Where one copy's GPUs sit (``layout.line``), for the `plan` table."""
        i = self.inputs
        tp, pp = i["tensor_parallel_size"], i["pipeline_parallel_size"]
        return layout.line(tp, pp, i["nodes_per_copy"], i["gpus_per_pod"], i["gpus_per_replica"])

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

    def to_json(self) -> CalibrationJson:
        return {"overhead_gib": round(self.overhead_gib, 3), "source": self.source}


def calibrate(recorded_plan: Mapping[str, Any], observed_kv_tokens: int, source: str) -> Calibration:
    """The planner's error on a deployed revision: its plan (``Plan.to_json()``) against the KV
    tokens its vLLM logged. The KV memory vLLM really had is tokens × bytes per token per GPU; what
    the plan left for KV beyond that is memory the model did not account for."""
    per_token = int(recorded_plan["kv_bytes_per_token_per_gpu"])
    planned_gib = float(recorded_plan["kv_cache_gib_per_gpu"])
    # A plan that was itself calibrated (engine.skipMemoryProfiling renders its KV cache, so vLLM logs
    # exactly that) had the overhead taken off already: add it back, or the next calibration finds none.
    inputs = recorded_plan.get("inputs")
    earlier = inputs.get("calibration") if isinstance(inputs, Mapping) else None
    if isinstance(earlier, Mapping) and isinstance(earlier.get("overhead_gib"), (int, float)):
        planned_gib += float(earlier["overhead_gib"])
    observed_gib = observed_kv_tokens * per_token / memory.GIB
    return Calibration(overhead_gib=planned_gib - observed_gib, source=source)


def same_setup(
    recorded_plan: Mapping[str, object], profile: profile_schema.Profile, current: Plan | None = None
) -> bool:
    """Whether a recorded plan is for the same model, GPU, vLLM version and split (TP and PP) as
    ``profile`` (a calibration only carries over between those: the split decides the per-GPU share).
    ``current``: the profile's plan when the caller has it (the planner then runs once per apply)."""
    recorded = recorded_plan.get("inputs")
    inputs: dict[str, object] = dict(recorded) if isinstance(recorded, Mapping) else {}
    # Plans recorded before deployctl served other engines name only the vLLM version.
    inputs.setdefault("engine", "vllm")
    inputs.setdefault("engine_version", inputs.get("vllm_version"))
    inputs.setdefault("pipeline_parallel_size", 1)
    now = (current or plan(profile)).inputs
    keys = ("model", "gpu", "engine", "engine_version", "tensor_parallel_size", "pipeline_parallel_size")
    return all(inputs.get(k) == now.get(k) for k in keys)


def plan(profile: profile_schema.Profile, calibration: Calibration | None = None) -> Plan:
    """Work out the per-GPU memory split, KV capacity and findings of ``profile``; with a
    ``calibration``, the overhead a running engine showed is taken off the KV cache too."""
    arch = _architecture(profile)
    eng, hw = profile.engine, profile.hardware
    gpu = catalog.gpu(hw.gpu) if hw.gpu else None
    total_gib = hw.memoryGiB if hw.memoryGiB is not None else (gpu.memory_gib if gpu else 0.0)
    native_fp8 = hw.fp8 if hw.fp8 is not None else (gpu.fp8 if gpu else False)
    weights = weights_rule.resolve(profile.model.weightsDtype, arch)
    kv_dtype_bytes = _KV_BYTES.get(eng.kvCacheDtype, 2)
    split = layout.Split(arch, eng.tensorParallelSize, eng.pipelineParallelSize, weights.quant, kv_dtype_bytes)
    batched_tokens = _batched_tokens(profile, gpu, total_gib)
    gpu_memory = _memory_inputs(profile, split, total_gib, batched_tokens)
    # Each engine turns the same model of the GPU into its KV cache by its own rule (engines.*.kv_budget).
    kv = eng.engine.kv_budget(gpu_memory)
    available = kv.kv - (calibration.overhead_gib if calibration else 0.0)
    kv_layout = _kv_layout(profile, split)
    c = findings.Context(profile, split, native_fp8, batched_tokens, gpu_memory, kv, available, kv_layout, weights)
    whole_model = _kv_layout(profile, layout.Split(arch, 1, 1, weights.quant, kv_dtype_bytes))
    return Plan(
        weights_gib_per_gpu=c.gpu.weights,
        kv_bytes_per_token_per_gpu=c.kv_per_token,
        kv_bytes_per_token_model=whole_model.bytes_per_token,
        kv_cache_gib_per_gpu=c.available,
        kv_cache_blocks=c.blocks,
        kv_cache_tokens=kv_layout.logged_tokens(
            c.blocks, eng.maxModelLen, batched_tokens, group_aware=_group_aware_log(profile)
        ),
        max_concurrency=c.concurrency,
        max_model_len_that_fits=c.usable_tokens,
        memory=MemorySplit.of(gpu_memory, kv, c.available),
        inputs=_inputs(c, weights.dtype, kv, calibration),
        findings=tuple(sorted(findings.of(c), key=lambda f: -SEVERITY_ORDER[f.severity])),
    )


def _kv_layout(profile: profile_schema.Profile, split: layout.Split) -> kv_cache.KvLayout:
    """How the engine's KV cache holds this GPU's layers: vLLM's hybrid manager groups sliding-window
    and full-attention layers apart since 0.10 (``kv_cache``); every engine otherwise sizes each layer
    in full (the findings refuse the families whose rule is unknown for the other engines)."""
    eng = profile.engine
    hybrid = eng.kind == "vllm" and kv_cache.hybrid_manager(
        _version(eng.engine_version), vllm_flags.has_flag(eng.extraArgs, "--disable-hybrid-kv-cache-manager")
    )
    measured = profile.model.measured
    if measured is not None:  # as logged: one figure per token, every layer in it
        return kv_cache.layout((), 1, measured.kvBytesPerTokenPerGpu, eng.engine.block_size, hybrid=False)
    layer = memory.kv_bytes_per_layer(split)
    return kv_cache.layout(split.arch.windows, split.layers_per_gpu, layer, eng.engine.block_size, hybrid)


def _group_aware_log(profile: profile_schema.Profile) -> bool:
    """Whether the engine logs its KV cache as requests × length (every engine but vLLM before 0.20,
    which logged the block pool; ``kv_cache``)."""
    eng = profile.engine
    return eng.kind != "vllm" or _version(eng.engine_version) >= kv_cache.GROUP_AWARE_LOG_SINCE


def _weights_gib(profile: profile_schema.Profile, split: layout.Split) -> float:
    measured = profile.model.measured
    return measured.weightsGiBPerGpu if measured is not None else memory.weights_bytes_per_gpu(split) / memory.GIB


def _memory_inputs(
    profile: profile_schema.Profile, split: layout.Split, total_gib: float, batched_tokens: int
) -> engines.MemoryInputs:
    """One GPU's memory as the model counts it before the engine's rule: weights, activation peak,
    non-torch memory and, where the engine reserves it, the CUDA-graph estimate (GiB)."""
    eng = profile.engine
    non_torch = NON_TORCH_GIB_SINGLE if split.tp == 1 else NON_TORCH_GIB_TENSOR_PARALLEL
    graphs = CUDA_GRAPH_GIB_BASE + CUDA_GRAPH_GIB_PER_LAYER * split.layers_per_gpu
    return engines.MemoryInputs(
        total=total_gib,
        fraction=eng.gpuMemoryUtilization,
        weights=_weights_gib(profile, split),
        activation=memory.activation_bytes(split, batched_tokens, eng.maxNumSeqs) / memory.GIB,
        non_torch=non_torch,
        cuda_graphs=graphs if _cuda_graphs_reserved(profile) else 0.0,
    )


def _inputs(
    c: findings.Context, weights_dtype: str, kv: engines.KvBudget, calibration: Calibration | None
) -> PlanInputs:
    """What the plan was worked out from (``PlanInputs``)."""
    arch, split, eng, hw = c.split.arch, c.split, c.profile.engine, c.profile.hardware
    return {
        "model": arch.source,
        "model_type": arch.model_type,
        "params": memory.params_total(arch),
        "layers": arch.num_hidden_layers,
        "layers_per_gpu": split.layers_per_gpu,
        "attention_heads": arch.num_attention_heads,
        "kv_heads": arch.num_key_value_heads,
        "kv_heads_per_gpu": split.kv_heads_per_gpu,
        "head_dim": arch.head_dim,
        "hidden_size": arch.hidden_size,
        "vocab_size": arch.vocab_size,
        "experts": arch.experts.count,
        "weights_dtype": weights_dtype,
        "weights_bytes_per_param": split.quant.bytes_per_weight if split.quant else float(memory.SIXTEEN_BIT),
        "quantization": split.quant.to_json() if split.quant else None,
        "attention": arch.attention,
        "sliding_window_layers": arch.sliding_layers,
        "kv_layer_slots": c.kv_layout.slots,
        "measured": c.profile.model.measured is not None,
        "kv_cache_dtype": eng.kvCacheDtype,
        "kv_cache_bytes_per_element": split.kv_bytes,
        "tensor_parallel_size": split.tp,
        "pipeline_parallel_size": split.pp,
        "gpus_per_replica": c.profile.gpus_per_copy,
        "nodes_per_copy": c.profile.nodes_per_copy,
        "gpus_per_pod": c.profile.gpus_per_pod,
        "gpus_per_node": hw.gpusPerNode,
        "node_interconnect": hw.nodeInterconnect,
        "gpu": hw.gpu,
        "native_fp8": c.native_fp8,
        "max_model_len": eng.maxModelLen,
        "max_num_seqs": eng.maxNumSeqs,
        "max_num_batched_tokens": c.batched_tokens,
        "gpu_memory_utilization": eng.gpuMemoryUtilization,
        "engine": eng.kind,
        "engine_version": eng.engine_version,
        "memory_flag": c.engine.memory_flag,
        "memory_rule": kv.formula,
        "cuda_graphs_reserved": kv.cuda_graphs > 0,
        "block_size": c.block_size,
        "calibration": calibration.to_json() if calibration else None,
    }


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


def _architecture(profile: profile_schema.Profile) -> model_config.ModelArch:
    model = profile.model
    if model.architecture is not None:
        return catalog.architecture(model.architecture)
    assert model.config is not None  # the schema guarantees one of the two
    path = profile.base_dir / model.config
    try:
        # A regular file of at most a few MiB (a config.json is a few KiB): never /dev/zero or a FIFO.
        raw = user_files.read(path, "model config", CONFIG_BYTES)
        if len(raw) > CONFIG_BYTES:
            raise model_config.ConfigError(f"{path} is over {CONFIG_BYTES:,} bytes; a config.json is a few KiB")
        return catalog.config_from_text(raw.decode("utf-8"), str(path), measured=model.measured is not None)
    except errors.UsageError as e:
        raise errors.InvalidProfile(f"model.config: {e.message}") from e
    except UnicodeDecodeError as e:
        raise errors.InvalidProfile(f"model.config: {path} is not UTF-8 text; give the model's config.json") from e
    except model_config.ConfigError as e:
        raise errors.InvalidProfile(f"model.config: {e}; give the model's Hugging Face config.json") from e
    except model_config.UnsupportedArchitecture as e:
        raise errors.DoesNotFit(f"model.config{profile.where('model.config')}: {e}. {NO_RULE_ESCAPE}") from e


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
