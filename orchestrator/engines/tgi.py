"""Hugging Face Text Generation Inference (`text-generation-launcher`), read at v3.3.7.

Facts this module relies on, each from TGI's source at tag v3.3.7 (dfb3fbe, launcher/src/main.rs
unless named):

* One copy is one launcher that starts ``--num-shard`` tensor-parallel shards on its node. TGI has
  no pipeline parallelism and no multi-node mode, so those fields are refused.
* The chat request's ``max_completion_tokens`` is an alias of ``max_tokens`` (router/src/lib.rs):
  a request with both is refused as a duplicate field, so the smoke gate sends one.
* There is no served-model-name: ``/v1/models`` lists the ``--model-id`` string, chat answers echo
  the client's ``model``. The health gate therefore looks for the model path.
* ``--max-concurrent-requests`` is TGI's admission limit: requests above it get HTTP 429 instead of
  queueing. It is what engine.maxNumSeqs becomes; TGI sizes the running batch from its KV budget
  itself (``--max-batch-size`` is ignored on CUDA).
* Prefix caching is on by default and turned off only by the environment (``PREFIX_CACHING=0``).
* The launcher posts usage statistics to huggingface.co unless ``--usage-stats off``.
* The HTTP port opens only after the shards loaded and warmed up; ``/health`` then answers 200.
* KV sizing (server/text_generation_server/models/flash_causal_lm.py ``warmup``): after loading the
  weights, a dummy prefill of ``max_batch_prefill_tokens`` runs; then free memory is measured and
  ``free − (1 − cuda_memory_fraction × TGI_WIGGLE_ROOM) × total`` becomes KV blocks
  (TGI_WIGGLE_ROOM 0.90 since v3.3; block size 1 with the default FlashInfer attention).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

from orchestrator.engines import base, startup_log, startup_phases

WIGGLE_ROOM = 0.90  # TGI_WIGGLE_ROOM since v3.3 (0.93 in v3.1-3.2, 0.95 in v3.0)

# The router: "Setting max batch total tokens to 1069251"; the shard: "KV-cache blocks: 66828, size: 16".
_TOTAL_TOKENS = re.compile(r"Setting max batch total tokens to (\d+)")
_BLOCKS = re.compile(r"KV-cache blocks: (\d+), size: (\d+)")


class Tgi(base.Engine):
    kind = "tgi"
    title = "TGI"
    command = ("text-generation-launcher",)
    default_version = "3.3.7"
    memory_flag = "--cuda-memory-fraction"
    block_size = 1
    kv_cache_dtypes: ClassVar[Mapping[str, str]] = base.kv_dtypes(auto="", fp8="fp8_e4m3fn", fp8_e4m3="fp8_e4m3fn")
    reserved: ClassVar[Mapping[str, str]] = {
        "--model-id": "model.source (the weights path)",
        "--num-shard": "engine.tensorParallelSize",
        "--sharded": "engine.tensorParallelSize",
        "--max-total-tokens": "engine.maxModelLen",
        "--max-input-tokens": "engine.maxModelLen (one less: TGI needs room for one output token)",
        "--max-input-length": "engine.maxModelLen",
        "--max-concurrent-requests": "engine.maxNumSeqs",
        "--max-batch-prefill-tokens": "engine.maxNumBatchedTokens",
        "--kv-cache-dtype": "engine.kvCacheDtype",
        "--cuda-memory-fraction": "engine.gpuMemoryUtilization",
        **base.bind_flags("--hostname"),
        "--usage-stats": "airgap.offline (off while offline)",
    }
    memory_source = "server/text_generation_server/models/flash_causal_lm.py FlashCausalLM.warmup"
    # The launcher times each shard from its start to ready (weights, warm-up): the slowest bounds the copy.
    phase_lines = (startup_phases.line("shard_ready", r"Shard ready in ([\d.]+)s rank=\d+"),)
    single_node = "TGI runs a copy on one node only; fit it on one node's GPUs, or use vLLM for copies across nodes"
    # router/src/lib.rs: max_completion_tokens is a serde alias of max_tokens, so both is a duplicate field.
    output_limit_fields = ("max_tokens",)
    crash_classes = (
        base.args_refused(
            r"error: unexpected argument '|error: invalid value '|ArgumentValidation\(", "TGI's launcher", "TGI"
        ),
        base.CrashClass(
            "kv_cache",
            re.compile(r"Backend\(NotEnoughMemory\(|Not enough memory to handle \d+ prefill tokens"),
            "TGI could not fit its warm-up prefill or the KV cache for max-total-tokens: lower "
            "engine.maxNumBatchedTokens or engine.maxModelLen, use kvCacheDtype fp8, or raise "
            "tensorParallelSize (run `deployctl plan` for the numbers)",
        ),
        base.model_unloadable(
            "TGI",
            r"No local weights found in|Unsupported model type|is not a valid JSON file",
            "that the directory holds the complete model in safetensors (config.json, tokenizer, *.safetensors); "
            "offline, TGI cannot fall back to downloading it",
        ),
    )

    def args(self, s: base.ServerSettings) -> list[str]:
        args = [
            "--model-id", s.model_path,
            "--num-shard", str(s.tensor_parallel),
            "--max-input-tokens", str(s.max_model_len - 1),
            "--max-total-tokens", str(s.max_model_len),
            "--max-concurrent-requests", str(s.max_num_seqs),
        ]  # fmt: skip
        args += self.tuning_flags(s, "--max-batch-prefill-tokens")
        args += ["--cuda-memory-fraction", str(s.memory_fraction), "--hostname", "0.0.0.0", "--port", str(s.port)]
        if s.offline:
            args += ["--usage-stats", "off"]
        return args + list(s.extra_args)

    def env(self, s: base.ServerSettings) -> list[tuple[str, str]]:
        # Only the environment turns prefix caching (on by default in v3) off.
        return super().env(s) + ([] if s.prefix_caching else [("PREFIX_CACHING", "0")])

    def default_batched_tokens(self, total_gib: float, max_model_len: int) -> int | None:
        # launcher/src/main.rs: unset, --max-batch-prefill-tokens is max_input_tokens + 50.
        return max_model_len - 1 + 50

    def served_id(self, served_name: str, model_path: str) -> str:
        return model_path

    def field_refusals(self, s: base.ServerSettings) -> list[base.Refusal]:
        return super().field_refusals(s) + base.refused_where(
            (
                s.pipeline_parallel > 1,
                "engine.pipelineParallelSize",
                "TGI has no pipeline parallelism: a copy is one launcher with --num-shard tensor-parallel "
                "shards on one node; use tensorParallelSize alone, or vLLM, SGLang or TensorRT-LLM for PP",
            ),
        )

    def kv_budget(self, m: base.MemoryInputs) -> base.KvBudget:
        budget = m.total * m.fraction * WIGGLE_ROOM
        return base.KvBudget(
            budget=budget,
            # Free memory is measured after the warm-up prefill, so its activations are already spent.
            kv=budget - m.weights - m.activation - m.non_torch,
            formula=f"total × cuda-memory-fraction × {WIGGLE_ROOM} − weights − warm-up prefill peak − non-torch",
        )

    def parse_startup(self, pod: str, text: str) -> startup_log.Observation | None:
        total = _TOTAL_TOKENS.findall(text)
        blocks = _BLOCKS.findall(text)
        if total:
            tokens = int(total[-1])
        elif blocks:
            count, size = blocks[-1]
            tokens = int(count) * int(size)
        else:
            return None
        return startup_log.Observation(pod=pod, device="GPU", kv_cache_tokens=tokens)


ENGINE = Tgi()
