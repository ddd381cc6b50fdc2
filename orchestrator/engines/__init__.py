"""The serving engines: an engine kind (``engine.kind``) and the profile's serving settings in; that
engine's command and flags, health and probe paths, KV-cache budget and reading of its start-up
log out, each engine behind one interface (``base.Engine``), with the vLLM flag tables.

from orchestrator import engines
engine = engines.get(profile.engine.kind)
engine.args(settings), engine.health_path, engine.kv_budget(memory), engine.parse_startup(pod, log)

``engine.check_extra_args(args, version)`` reads a profile's extraArgs with the one engine-neutral reader
(``extra_args``, over the table shape of ``flag_table``): vLLM's tables and reading in ``vllm_flags``
(``vllm_args``, ``vllm_values``, ``vllm_rules``), the other engines' in ``flags``.
"""

from __future__ import annotations

from orchestrator.engines.base import (
    KV_CACHE_DTYPES,
    CrashClass,
    Engine,
    KvBudget,
    MemoryInputs,
    Refusal,
    ServerSettings,
)
from orchestrator.engines.sglang import ENGINE as SGLANG
from orchestrator.engines.tgi import ENGINE as TGI
from orchestrator.engines.trtllm import ENGINE as TRTLLM
from orchestrator.engines.vllm import ENGINE as VLLM

ENGINES: dict[str, Engine] = {e.kind: e for e in (VLLM, TGI, TRTLLM, SGLANG)}
KINDS = tuple(ENGINES)
DEFAULT_KIND = VLLM.kind

__all__ = [
    "DEFAULT_KIND",
    "ENGINES",
    "KINDS",
    "KV_CACHE_DTYPES",
    "SGLANG",
    "TGI",
    "TRTLLM",
    "VLLM",
    "CrashClass",
    "Engine",
    "KvBudget",
    "MemoryInputs",
    "Refusal",
    "ServerSettings",
    "get",
]


def get(kind: str) -> Engine:
    """The engine of ``kind``; KeyError names the known kinds."""
    try:
        return ENGINES[kind]
    except KeyError:
        raise KeyError(f"unknown engine {kind!r}; deployctl serves {', '.join(KINDS)}") from None
