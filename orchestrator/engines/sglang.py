"""SGLang (`python3 -m sglang.launch_server`), read at 0.5.23 from its PyPI wheel.

Facts this module relies on (paths inside the wheel, ``sglang/srt/``):

* Flags are argparse (arg_groups/fields/*.py): ``--tp-size``, ``--pp-size`` (``--pp`` alone is an
  ambiguous prefix), ``--context-length``, ``--max-running-requests``, ``--chunked-prefill-size``,
  ``--mem-fraction-static``, ``--kv-cache-dtype`` (auto, fp8_e4m3, fp8_e5m2, ...),
  ``--disable-radix-cache`` (prefix caching is on by default), ``--served-model-name``, which must
  not hold ``:`` (the LoRA ``model:adapter`` syntax), ``--host`` (default 127.0.0.1) and ``--port``.
* The HTTP port opens after the weights, the KV pool and the CUDA graphs are ready; ``/health``
  (and ``/health_generate``) then run a one-token generation, which can take up to
  ``SGLANG_HEALTH_CHECK_TIMEOUT`` (20 s) under load, while ``/ready`` answers at once: the
  probes ask ``/ready``, the gate ``/health``.
* KV sizing (mem_cache/kv_cache_configurator.py ``_profile_available_bytes``): the free memory before
  the weights load (``pre``) and after (``available``) give
  ``rest = available − pre × (1 − mem_fraction_static)``; with ``available ≈ pre − weights``
  that is ``pre × mem_fraction_static − weights``. Activations and CUDA graphs live in the rest of
  the GPU, outside the static fraction. Pages hold one token.
* The log says ``KV Cache is allocated. dtype: …, #tokens: N, K size: …`` and
  ``max_total_num_tokens=N, …, context_len=L, …`` and ``Load weight end. … mem usage=W GB``
  (GB meaning GiB).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import ClassVar

from orchestrator.engines import base, startup_log, startup_phases

_KV = re.compile(r"KV Cache is allocated\..*?#tokens: (\d+)")
_SCHEDULER = re.compile(r"max_total_num_tokens=(\d+),.*?context_len=(\d+)")
_WEIGHTS = re.compile(r"Load weight end\..*?mem usage=([\d.]+) GB")
_LOAD_TIME = re.compile(r"Load weight end\. elapsed=([\d.]+) s")

# SGLang's default --chunked-prefill-size by the GPU's memory (arg_groups/memory_hook.py): (below GiB, size).
_CHUNKED_PREFILL_BY_GIB = ((20, 2048), (60, 4096), (160, 8192))
_CHUNKED_PREFILL_LARGEST = 16384


class Sglang(base.Engine):
    kind = "sglang"
    title = "SGLang"
    command = ("python3", "-m", "sglang.launch_server")
    default_version = "0.5.23"
    probe_path = "/ready"
    memory_flag = "--mem-fraction-static"
    block_size = 1
    kv_cache_dtypes: ClassVar[Mapping[str, str]] = base.kv_dtypes(fp8="fp8_e4m3")
    reserved: ClassVar[Mapping[str, str]] = {
        "--model-path": "model.source (the weights path)",
        "--model": "model.source (the weights path)",
        "--served-model-name": "model.name",
        "--tp-size": "engine.tensorParallelSize",
        "--tensor-parallel-size": "engine.tensorParallelSize",
        "--tp": "engine.tensorParallelSize",
        "--pp-size": "engine.pipelineParallelSize",
        "--pipeline-parallel-size": "engine.pipelineParallelSize",
        "--context-length": "engine.maxModelLen",
        "--max-running-requests": "engine.maxNumSeqs",
        "--chunked-prefill-size": "engine.maxNumBatchedTokens",
        "--kv-cache-dtype": "engine.kvCacheDtype",
        "--mem-fraction-static": "engine.gpuMemoryUtilization",
        "--disable-radix-cache": "engine.enablePrefixCaching",
        "--enable-metrics": "always on (deployctl renders it so /metrics exists, as on the other engines)",
        **base.bind_flags("--host"),
        "--nnodes": "placement.nodesPerCopy",
        "--node-rank": "placement.nodesPerCopy",
        "--dist-init-addr": "placement.nodesPerCopy",
    }
    memory_source = "sglang/srt/mem_cache/kv_cache_configurator.py _profile_available_bytes"
    # "Load weight end." carries its elapsed time since late 2025; graph capture is timed per batch
    # kind in newer builds ("Capture target decode CUDA graph end. elapsed=...") and those add up.
    phase_lines = (
        startup_phases.line("model_load", r"Load weight end\. elapsed=([\d.]+) s"),
        startup_phases.line("cuda_graphs", r"Capture cuda graph end\. Time elapsed: ([\d.]+) s"),
        startup_phases.line("cuda_graphs", r"Capture \w+ \w+ CUDA graph end\. elapsed=([\d.]+) s", combine="sum"),
    )
    single_node = (
        "deployctl runs SGLang copies on one node only (SGLang's own --nnodes rendezvous is not rendered yet); "
        "fit the copy on one node's GPUs, or use vLLM for copies across nodes"
    )
    crash_classes = (
        base.args_refused(
            r"error: unrecognized arguments:|error: ambiguous option:|error: argument --[\w-]+:", "SGLang", "SGLang"
        ),
        base.CrashClass(
            "max_model_len",
            re.compile(r"is greater than the derived context_length"),
            "engine.maxModelLen is above what the model supports (max_position_embeddings in its config.json): "
            "lower it, or check that model.architecture or model.config describes the weights the pod loads",
        ),
        base.CrashClass(
            "kv_cache",
            re.compile(
                r"Loaded weights leave no GPU memory for the KV cache|Not enough memory\. Please try to increase "
                r"--mem-fraction-static"
            ),
            "SGLang's static memory (weights and KV cache) had no room for the KV cache: raise "
            "engine.gpuMemoryUtilization (SGLang's --mem-fraction-static), use kvCacheDtype fp8 or raise "
            "tensorParallelSize (run `deployctl plan` for the numbers)",
        ),
        base.CrashClass(
            "oom",
            re.compile(r"Capture cuda graph failed"),
            "SGLang ran out of memory capturing CUDA graphs outside its static memory: lower "
            "engine.gpuMemoryUtilization (SGLang's --mem-fraction-static) to leave more room, or lower maxNumSeqs",
        ),
        base.model_unloadable(
            "SGLang",
            r"are not supported for now\. Supported architectures|Invalid repository ID or local directory|"
            r"is not a valid JSON file|Can't load the configuration of",
            "that the directory holds the complete model (config.json, tokenizer, weights) readable by uid 1000 "
            "(or by the group engine.fsGroup names), and that SGLang supports its architecture; offline, it "
            "cannot fall back to downloading it",
        ),
    )

    def args(self, s: base.ServerSettings) -> list[str]:
        args = [
            "--model-path", s.model_path,
            "--served-model-name", s.served_name,
            "--tp-size", str(s.tensor_parallel),
        ]  # fmt: skip
        if s.pipeline_parallel > 1:
            args += ["--pp-size", str(s.pipeline_parallel)]
        args += ["--context-length", str(s.max_model_len), "--max-running-requests", str(s.max_num_seqs)]
        args += self.tuning_flags(s, "--chunked-prefill-size")
        args += ["--mem-fraction-static", str(s.memory_fraction)]
        if not s.prefix_caching:
            args.append("--disable-radix-cache")
        # /metrics exists only with --enable-metrics; vLLM and TGI serve it unasked.
        args += ["--enable-metrics", "--host", "0.0.0.0", "--port", str(s.port)]
        return args + list(s.extra_args)

    def default_batched_tokens(self, total_gib: float, max_model_len: int) -> int | None:
        # arg_groups/memory_hook.py: the chunked-prefill size by GPU memory.
        for below, size in _CHUNKED_PREFILL_BY_GIB:
            if total_gib < below:
                return size
        return _CHUNKED_PREFILL_LARGEST

    def field_refusals(self, s: base.ServerSettings) -> list[base.Refusal]:
        return super().field_refusals(s) + base.refused_where(
            (
                ":" in s.served_name,
                "model.name",
                f"SGLang refuses a served model name with ':' ({s.served_name!r}): it reads 'model:adapter' as "
                "a LoRA adapter; rename it without ':'",
            ),
        )

    def kv_budget(self, m: base.MemoryInputs) -> base.KvBudget:
        # The fraction is of the memory free before the weights load: the GPU less the CUDA context.
        budget = (m.total - m.non_torch) * m.fraction
        return base.KvBudget(
            budget=budget,
            kv=budget - m.weights,
            formula="(total − CUDA context) × mem-fraction-static − weights; activations and CUDA graphs use the rest",
        )

    def memory_warnings(self, m: base.MemoryInputs, kv: base.KvBudget) -> list[str]:
        outside = m.total - kv.budget
        needed = m.activation + m.cuda_graphs + m.non_torch
        if needed <= outside:
            return []
        fraction = math.floor((m.total - needed) / (m.total - m.non_torch) * 100) / 100  # down: enough room
        return [
            f"SGLang keeps {outside:.1f} GiB per GPU outside --mem-fraction-static {m.fraction} for activations, "
            f"CUDA graphs and the CUDA context, which need about {needed:.1f} GiB: a full prefill or the CUDA-graph "
            f"capture may run out of memory. Lower gpuMemoryUtilization to {max(fraction, 0.0):.2f} or below "
            "(SGLang's own default leaves at least 10 GiB on GPUs above 60 GiB), or lower maxNumBatchedTokens"
        ]

    def parse_startup(self, pod: str, text: str) -> startup_log.Observation | None:
        kv = _KV.findall(text)
        scheduler = _SCHEDULER.findall(text)
        weights = _WEIGHTS.findall(text)
        if not kv and not scheduler and not weights:
            return None
        tokens = int(kv[-1]) if kv else (int(scheduler[-1][0]) if scheduler else None)
        context = int(scheduler[-1][1]) if scheduler else None
        seconds = _LOAD_TIME.findall(text)
        return startup_log.Observation(
            pod=pod,
            device="GPU",
            kv_cache_tokens=tokens,
            max_model_len=context,
            max_concurrency=round(tokens / context, 2) if tokens is not None and context else None,
            weights_gib=max(float(w) for w in weights) if weights else None,
            load_seconds=max(float(x) for x in seconds) if seconds else None,
        )


ENGINE = Sglang()
