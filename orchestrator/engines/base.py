"""What every serving engine tells deployctl: its command, its flags, what "loaded" means, its memory.

design.md, "Engines": an engine describes how its server starts from the profile's first-class
fields, which flags each of its versions accepts, which endpoint answers once the model is loaded,
and how it accounts for GPU memory and reports it at start-up. Everything else (the profile, the
planner's model of the weights and KV cache, the gate, the records) is engine-neutral.

This module knows nothing of the profile: render turns a profile into ``ServerSettings`` and the
planner turns it into ``MemoryInputs``, so the engines stay on the floor below both.
"""

from __future__ import annotations

import abc
import dataclasses
import re
from collections.abc import Mapping
from typing import ClassVar

from orchestrator.engines import flag_table, startup_log, startup_phases

# The profile's KV-cache dtypes (engine.kvCacheDtype); each engine maps the ones it honours to its value.
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
# What keeps a Hugging Face-based server off the network: the model hub, and telemetry.
HF_OFFLINE_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "DO_NOT_TRACK")
BIND_FIELD = "engine.port (deployctl binds all interfaces inside the pod)"


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    """The profile's first-class serving fields, which every engine maps to its own flags."""

    model_path: str
    served_name: str
    port: int
    tensor_parallel: int
    pipeline_parallel: int
    max_model_len: int
    max_num_seqs: int
    max_batched_tokens: int | None
    kv_cache_dtype: str  # one of KV_CACHE_DTYPES
    memory_fraction: float  # engine.gpuMemoryUtilization
    prefix_caching: bool
    offline: bool = True  # airgap.offline: no model hub, no usage statistics
    multi_node: bool = False
    extra_args: tuple[str, ...] = ()
    load_format: str | None = None  # engine.loadFormat (vLLM's --load-format); None: the engine's default
    loader_config: str | None = None  # --model-loader-extra-config JSON (engine.loadStreamer)
    kv_cache_memory_bytes: int | None = None  # engine.skipMemoryProfiling: the calibrated KV cache per GPU


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A profile field this engine cannot honour, and what to do instead."""

    field: str  # the profile path, e.g. "engine.pipelineParallelSize"
    message: str


def refused_where(*checks: tuple[bool, str, str]) -> list[Refusal]:
    """A Refusal of each (refused, field, message) whose first item is true: an engine's field
    refusals written as one table of conditions."""
    return [Refusal(field, message) for refused, field, message in checks if refused]


@dataclasses.dataclass(frozen=True)
class MemoryInputs:
    """One GPU's memory as the planner models it before anything runs, in GiB."""

    total: float  # as CUDA reports it
    fraction: float  # engine.gpuMemoryUtilization: the engine's own memory knob
    weights: float
    activation: float  # peak of a forward pass over the batched-token budget (and the sampler)
    non_torch: float  # CUDA context, NCCL and kernel workspaces outside PyTorch's allocator
    cuda_graphs: float  # what capturing the engine's CUDA graphs holds (0: it captures none)


@dataclasses.dataclass(frozen=True)
class KvBudget:
    """How much of one GPU the engine lets itself use, and what is left for the KV cache, in GiB."""

    budget: float  # the part of the GPU the engine's knob hands it (reported as the plan's budget)
    kv: float  # the KV cache (negative: the weights and overheads do not fit)
    formula: str  # the engine's rule in one line, for `plan` and the docs
    cuda_graphs: float = 0.0  # the CUDA-graph memory the rule took off the KV cache


@dataclasses.dataclass(frozen=True)
class CrashClass:
    """A start-up failure the engine prints: its class, the pattern of its log line, and the fix."""

    cls: str
    pattern: re.Pattern[str]
    fix: str


def kv_dtypes(**spelled: str) -> dict[str, str]:
    """The profile's KV-cache dtypes under the engine's own names: each as the profile writes it, but those
    in ``spelled`` (an empty name: the engine's default, no flag)."""
    return {dtype: spelled.get(dtype, dtype) for dtype in KV_CACHE_DTYPES}


def bind_flags(host: str) -> dict[str, str]:
    """The reserved entries of the address flags every engine's args() end with: ``host`` and --port."""
    return {host: BIND_FIELD, "--port": "engine.port"}


def model_unloadable(title: str, patterns: str, check: str) -> CrashClass:
    """The crash class of a server that found no model it could load at the path it was given
    (``patterns``: the lines it prints then); the first advice is the same for every engine, then
    ``check``: what that engine needs of the directory."""
    return CrashClass(
        "model_path",
        re.compile(patterns),
        f"{title} could not load a model at the path it was given: check model.source (the claim or host path, "
        f"and path) and {check}",
    )


def args_refused(pattern: str, who: str, title: str) -> CrashClass:
    """The crash class of a server that refused its command line (``pattern``: its parser's error line)."""
    return CrashClass(
        "engine_args",
        re.compile(pattern),
        f"{who} refused its command line (the log says which argument): check engine.extraArgs and that the "
        f"image runs the {title} of engine.version, whose flags `deployctl validate` checked",
    )


class Engine(abc.ABC):
    """One serving engine. Subclasses fill the class attributes and the abstract methods."""

    kind: ClassVar[str]  # the profile's engine.kind
    title: ClassVar[str]  # how people write its name
    command: ClassVar[tuple[str, ...]]  # the container command; args() follow it
    default_version: ClassVar[str]
    # The path that answers 200 only once the model is loaded and the server generates: deployctl's
    # health gate asks it. The kubelet's probes ask ``probe_path``, which must be cheap (it is asked
    # every few seconds under load) and answer 200 only once the model is loaded.
    health_path: ClassVar[str] = "/health"
    probe_path: ClassVar[str] = "/health"
    # Where the engine serves Prometheus metrics, on the API port (what a PodMonitor scrapes).
    metrics_path: ClassVar[str] = "/metrics"
    memory_flag: ClassVar[str]  # the flag engine.gpuMemoryUtilization becomes
    block_size: ClassVar[int]  # tokens per KV-cache block (page) by default
    # Environment that keeps the engine from reaching the network (telemetry, the model hub).
    offline_env: ClassVar[tuple[str, ...]] = HF_OFFLINE_ENV
    # The profile's kvCacheDtype values this engine honours, each with the value its flag takes.
    kv_cache_dtypes: ClassVar[Mapping[str, str]]
    # Flags deployctl renders itself, each with the profile field that sets it.
    reserved: ClassVar[Mapping[str, str]]
    crash_classes: ClassVar[tuple[CrashClass, ...]]
    # The request fields that carry the output limit in a chat request: vLLM and SGLang read both
    # names; TGI reads either but refuses a request with both, TensorRT-LLM refuses the newer name.
    output_limit_fields: ClassVar[tuple[str, ...]] = ("max_tokens", "max_completion_tokens")
    memory_source: ClassVar[str]  # where the memory rule below comes from (file and function)
    # Why the engine refuses a copy across nodes (None: it runs one).
    single_node: ClassVar[str | None] = None
    # The log lines that time its start-up phases (``startup_phases``); none: it logs no timings.
    phase_lines: ClassVar[tuple[startup_phases.PhaseLine, ...]] = ()

    @abc.abstractmethod
    def args(self, s: ServerSettings) -> list[str]:
        """The command's arguments: derived flags first, then extraArgs (a later flag wins)."""

    def served_id(self, served_name: str, model_path: str) -> str:
        """The model id the server lists in /v1/models (what the health gate looks for)."""
        return served_name

    def default_batched_tokens(self, total_gib: float, max_model_len: int) -> int | None:
        """Tokens one forward pass takes when engine.maxNumBatchedTokens is unset (None: vLLM's rule,
        which the planner knows)."""
        return None

    def env(self, s: ServerSettings) -> list[tuple[str, str]]:
        """Environment the settings need beyond the flags (a switch only an env variable turns)."""
        return [(name, "1") for name in self.offline_env] if s.offline else []

    @abc.abstractmethod
    def kv_budget(self, m: MemoryInputs) -> KvBudget:
        """The engine's own rule for the KV cache it allocates on one GPU."""

    def memory_warnings(self, m: MemoryInputs, kv: KvBudget) -> list[str]:
        """What the engine's rule leaves too small outside the KV cache, in plain words (none by default)."""
        return []

    def phases(self, text: str) -> dict[str, float]:
        """Seconds per start-up phase the engine's log ``text`` times (``startup_phases.PHASES``)."""
        return startup_phases.read(self.phase_lines, text)

    @abc.abstractmethod
    def parse_startup(self, pod: str, text: str) -> startup_log.Observation | None:
        """What the engine logged about its memory at start-up, or None when the log holds none of it."""

    def refusals(self, s: ServerSettings) -> list[Refusal]:
        """The fields of ``s`` this engine cannot honour; never silently dropped."""
        out = self.field_refusals(s)
        if s.multi_node and self.single_node is not None:
            out.append(Refusal("placement.nodesPerCopy", self.single_node))
        return out

    def field_refusals(self, s: ServerSettings) -> list[Refusal]:
        """The serving fields of ``s`` this engine cannot honour (the KV-cache dtype, by default)."""
        honoured = ", ".join(sorted(self.kv_cache_dtypes))
        return refused_where(
            (
                s.kv_cache_dtype not in self.kv_cache_dtypes,
                "engine.kvCacheDtype",
                f"{self.title} has no KV-cache dtype {s.kv_cache_dtype!r}; it honours {honoured}",
            ),
        )

    def tuning_flags(self, s: ServerSettings, batched_flag: str) -> list[str]:
        """The batched-token budget when the profile sets it, then the KV-cache dtype unless auto, in the
        engine's spelling: what vLLM, SGLang and TGI each write after their sequence limits."""
        out = [batched_flag, str(s.max_batched_tokens)] if s.max_batched_tokens is not None else []
        if s.kv_cache_dtype != "auto":
            out += ["--kv-cache-dtype", self.kv_cache_dtypes[s.kv_cache_dtype]]
        return out

    def versions(self) -> list[str]:
        """The versions with a flag table, oldest first."""
        from orchestrator.engines import flags

        return flags.known_versions(self.kind)

    def check_extra_args(self, extra_args: list[str], version: str) -> list[flag_table.Problem]:
        """Problems with ``extra_args`` for this engine at ``version``; none: its parser accepts them."""
        from orchestrator.engines import flags

        return flags.check(extra_args, self.kind, version, self.reserved)

    def classify_log(self, text: str) -> tuple[str, str] | None:
        """The failure class and its fix for a crash log of this engine, or None."""
        for crash in self.crash_classes:
            if crash.pattern.search(text):
                return crash.cls, crash.fix
        return None
