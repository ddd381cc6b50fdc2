"""TensorRT-LLM's OpenAI server (`trtllm-serve serve`, PyTorch backend), as of the 1.2 releases.

Facts this module relies on (tensorrt_llm/commands/serve.py, _torch/pyexecutor/_util.py,
tensorrt_llm/serve/openai_server.py; main-branch source of the 1.2 period, see default_version):

* Click options with underscores: ``--tp_size``, ``--pp_size``, ``--max_batch_size``,
  ``--max_num_tokens``, ``--max_seq_len``, ``--kv_cache_free_gpu_memory_fraction``, ``--backend``,
  ``--host`` (default localhost) and ``--port``; the model is the positional argument. The PyTorch
  backend (the default) loads a Hugging Face checkpoint directly: no engine build.
* The KV-cache dtype has no flag: it comes from the checkpoint's quantization
  (``kv_cache_quant_algo: FP8`` in hf_quant_config.json) or an ``--extra_llm_api_options`` file,
  as does turning block reuse (prefix caching, on by default) off. deployctl writes no such file,
  so those two fields are refused rather than dropped.
* The OpenAI request models forbid unknown fields (serve/openai_protocol.py): the smoke gate sends
  ``max_tokens`` alone.
* There is no served-model-name in 1.2: ``/v1/models`` lists the model directory's name, and chat
  answers echo whatever ``model`` the client sent.
* A prompt longer than ``max_num_tokens`` is refused unless chunked prefill is on; deployctl turns it
  on when maxModelLen is longer than the batched-token budget, as vLLM always has it.
* Nothing listens until the model is loaded, the KV cache sized and the warm-up done; ``/health``
  then answers 200.
* KV sizing (``KvCacheCreator``): after the weights load and a warm-up of ``max_num_tokens``, the
  peak memory is measured and ``(total − peak) × kv_cache_free_gpu_memory_fraction`` becomes the KV
  cache, in blocks of 32 tokens. It logs ``Allocated X GiB for max tokens in paged KV cache (N).``,
  once for a temporary cache and once for the real one (the last line counts).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from typing import ClassVar

from orchestrator.engines import base, startup_log

DEFAULT_MAX_NUM_TOKENS = 8192  # trtllm-serve's --max_num_tokens default

_ALLOCATED = re.compile(r"Allocated ([\d.]+) GiB for max tokens in paged KV cache \((\d+)\)")


class TrtLlm(base.Engine):
    kind = "trtllm"
    title = "TensorRT-LLM"
    command = ("trtllm-serve", "serve")
    # The flag table was read at main commit 00209af (1.2-era: no --served_model_name, no KV-dtype
    # flag; both came in 1.3.0rc7): the release source itself is on NVIDIA's index only, out of reach
    # here. An image's exact table: scripts/gen_engine_flags.py trtllm VERSION --source its serve.py.
    default_version = "main-00209af"
    # trtllm-serve's /metrics is JSON iteration stats; openai_server.py mounts the Prometheus exposition
    # here, once the LLM API option return_perf_metrics is true (engine.extraArgs' options file).
    metrics_path = "/prometheus/metrics"
    memory_flag = "--kv_cache_free_gpu_memory_fraction"
    block_size = 32
    kv_cache_dtypes: ClassVar[Mapping[str, str]] = {"auto": ""}
    reserved: ClassVar[Mapping[str, str]] = {
        "--tp_size": "engine.tensorParallelSize",
        "--pp_size": "engine.pipelineParallelSize",
        "--max_batch_size": "engine.maxNumSeqs",
        "--max_num_tokens": "engine.maxNumBatchedTokens",
        "--max_seq_len": "engine.maxModelLen",
        "--kv_cache_free_gpu_memory_fraction": "engine.gpuMemoryUtilization",
        "--enable_chunked_prefill": "engine.maxNumBatchedTokens (on when maxModelLen is longer)",
        "--backend": "engine.kind (deployctl serves the PyTorch backend)",
        **base.bind_flags("--host"),
    }
    memory_source = "tensorrt_llm/_torch/pyexecutor/_util.py KvCacheCreator"
    single_node = (
        "deployctl runs TensorRT-LLM copies on one node only (across nodes it needs an MPI world, "
        "trtllm-llmapi-launch under mpirun, not rendered yet); use vLLM for copies across nodes"
    )
    # serve/openai_protocol.py: the request models forbid unknown fields, and a chat request with
    # max_completion_tokens is refused (extra_forbidden), so the output limit is max_tokens alone.
    output_limit_fields = ("max_tokens",)
    crash_classes = (
        base.args_refused(
            r"Error: No such option|Error: Missing argument|Error: Invalid value for|Error: Option '",
            "trtllm-serve",
            "TensorRT-LLM",
        ),
        base.CrashClass(
            "kv_cache",
            re.compile(r"Impossible to fit in any sequence in kvCache"),
            "TensorRT-LLM had no room for one maxModelLen sequence in its KV cache: lower engine.maxModelLen, raise "
            "gpuMemoryUtilization (--kv_cache_free_gpu_memory_fraction) or tensorParallelSize (see `deployctl plan`)",
        ),
        base.CrashClass(
            "oom",
            re.compile(r"Executor creation failed due to insufficient GPU memory"),
            "TensorRT-LLM ran out of GPU memory creating its executor: lower engine.maxNumBatchedTokens "
            "(--max_num_tokens) or maxNumSeqs, or raise tensorParallelSize (check `deployctl plan`)",
        ),
        base.model_unloadable(
            "TensorRT-LLM",
            r"Failed to infer model format|Unknown architecture for AutoModelForCausalLM",
            "that the directory holds a complete Hugging Face checkpoint (config.json, tokenizer, weights) and "
            "that TensorRT-LLM's PyTorch backend supports its architecture",
        ),
    )

    def args(self, s: base.ServerSettings) -> list[str]:
        batched = s.max_batched_tokens or DEFAULT_MAX_NUM_TOKENS
        args = [
            s.model_path,
            "--backend", "pytorch",
            "--tp_size", str(s.tensor_parallel),
            "--pp_size", str(s.pipeline_parallel),
            "--max_batch_size", str(s.max_num_seqs),
            "--max_num_tokens", str(batched),
            "--max_seq_len", str(s.max_model_len),
            "--kv_cache_free_gpu_memory_fraction", str(s.memory_fraction),
        ]  # fmt: skip
        if s.max_model_len > batched:
            args.append("--enable_chunked_prefill")  # else prompts longer than max_num_tokens are refused
        args += ["--host", "0.0.0.0", "--port", str(s.port)]
        return args + list(s.extra_args)

    def default_batched_tokens(self, total_gib: float, max_model_len: int) -> int | None:
        return DEFAULT_MAX_NUM_TOKENS

    def served_id(self, served_name: str, model_path: str) -> str:
        return posixpath.basename(model_path.rstrip("/"))

    def field_refusals(self, s: base.ServerSettings) -> list[base.Refusal]:
        return base.refused_where(
            (
                s.kv_cache_dtype != "auto",
                "engine.kvCacheDtype",
                "trtllm-serve has no KV-cache dtype flag: it takes fp8 KV from the checkpoint's quantization "
                "(kv_cache_quant_algo FP8 in hf_quant_config.json, as ModelOpt writes it) or from an "
                "--extra_llm_api_options file, which deployctl does not write; serve such a checkpoint with "
                "kvCacheDtype auto",
            ),
            (
                not s.prefix_caching,
                "engine.enablePrefixCaching",
                "TensorRT-LLM reuses KV blocks (prefix caching) unless an --extra_llm_api_options file says "
                "kv_cache_config.enable_block_reuse: false, which deployctl does not write; leave it true",
            ),
        )

    def kv_budget(self, m: base.MemoryInputs) -> base.KvBudget:
        peak = m.weights + m.activation + m.non_torch + m.cuda_graphs  # measured after the warm-up
        kv = (m.total - peak) * m.fraction
        return base.KvBudget(
            budget=peak + max(kv, 0.0),
            kv=kv if peak <= m.total else m.total - peak,
            formula="(total − weights − warm-up peak − non-torch − CUDA graphs) × kv_cache_free_gpu_memory_fraction",
            cuda_graphs=m.cuda_graphs,
        )

    def parse_startup(self, pod: str, text: str) -> startup_log.Observation | None:
        allocated = _ALLOCATED.findall(text)
        if not allocated:
            return None
        _, tokens = allocated[-1]  # the first line is the temporary cache of the memory estimate
        return startup_log.Observation(pod=pod, device="GPU", kv_cache_tokens=int(tokens))


ENGINE = TrtLlm()
