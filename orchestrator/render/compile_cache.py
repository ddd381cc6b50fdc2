"""The compile cache's key and what it adds to the engine pod (engine.compileCache).

The key names one directory of the cache volume. It hashes what decides the compiled code: the
image (its digest: the engine, torch, Triton and CUDA versions), the weights' identity, the GPU,
the copy's shape across nodes, the engine's environment as the profile writes it, and the engine's
arguments except those that only place or size the server (port, served name, memory fraction, the
calibrated KV cache, how weights are read). So a restart, an SLO or gate change and a new
calibration reuse the directory, while a new image, model, TP/PP, max length, batch size, dtype,
quantization, compilation flag or backend variable gets a fresh one. The key narrows what vLLM
could find; vLLM's own hash of its configuration below it (``torch_compile_cache/<hash>``) is the
guard within one image, and the one against what the key cannot see (a ConfigMap's values).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from orchestrator.engines import vllm_flags
from orchestrator.profile import compile_cache as profile_compile_cache
from orchestrator.profile import model as profiles

# Flags whose value does not change what is compiled; each is dropped with its value.
_NOT_COMPILED = frozenset(
    {
        "--served-model-name", "--host", "--port", "--gpu-memory-utilization",
        "--kv-cache-memory-bytes", "--load-format", "--model-loader-extra-config",
    }
)  # fmt: skip
KEY_CHARS = 16  # 64 bits of sha256: a directory name, not a security boundary


def compiled_args(args: Sequence[str]) -> list[str]:
    """``args`` without the flags (and their values) that do not shape the compiled code."""
    kept: list[str] = []
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
            continue
        flag = vllm_flags.normalize(arg) if arg.startswith("--") else ""
        if flag in _NOT_COMPILED:
            skip_value = "=" not in arg
            continue
        kept.append(arg)
    return kept


def key(profile: profiles.Profile) -> str:
    """The cache directory's name for ``profile``: equal for equal compiled code (see the module doc)."""
    serving = profile.engine.engine
    factors = {
        "image": profile.engine.image,
        "model": [profile.model.name, profile.model.revision, profile.model.source.model_dump(mode="json")],
        "args": compiled_args(serving.args(profile.server_settings())),
        # What else picks kernels: the GPU, the copy's shape across nodes, and the environment
        # (VLLM_ATTENTION_BACKEND, TORCHINDUCTOR_*: by name and source, as the profile holds them).
        "gpu": profile.hardware.gpu,
        "nodes": [profile.nodes_per_copy, profile.placement.groupEngine if profile.multi_node else None],
        "env": [e.model_dump(mode="json") for e in profile.engine.env],
        "envFrom": [e.model_dump(mode="json") for e in profile.engine.envFrom],
    }
    canonical = json.dumps(factors, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:KEY_CHARS]


def directory(profile: profiles.Profile) -> str:
    """Where the engine's caches go in the container: the key's directory of the mounted volume."""
    return f"{profile_compile_cache.MOUNT_PATH}/{key(profile)}"


def env(profile: profiles.Profile) -> list[dict[str, object]]:
    """The variables that point vLLM, Triton and FlashInfer below the key's directory; none when unset."""
    if profile.engine.compileCache is None:
        return []
    root = directory(profile)
    where = {"VLLM_CACHE_ROOT": f"{root}/vllm", "TRITON_CACHE_DIR": f"{root}/triton", "FLASHINFER_WORKSPACE_BASE": root}
    return [{"name": name, "value": where[name]} for name in profile_compile_cache.ENV]


def volumes(profile: profiles.Profile) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """The cache's pod volume and the engine container's mount of it; none when unset."""
    cache = profile.engine.compileCache
    if cache is None:
        return [], []
    return [cache.volume()], [{"name": profile_compile_cache.VOLUME, "mountPath": profile_compile_cache.MOUNT_PATH}]
