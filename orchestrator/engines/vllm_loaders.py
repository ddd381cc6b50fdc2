"""How vLLM reads the weights: the ``--load-format`` values each vLLM version has, and the streamer's settings.

vLLM accepts any string for ``--load-format`` at argparse time and fails only once a worker looks the
loader up (``Load format `X` is not supported``), minutes into a start; so deployctl checks the
profile's ``engine.loadFormat`` against the table of the profile's vLLM version
(``orchestrator/data/vllm_load_formats.json``, read out of each version's wheel, its ``_source`` says
how). ``engine.loadStreamer`` becomes the Run:ai streamer's ``--model-loader-extra-config`` keys,
which vLLM 0.15-0.19 ignore silently when misspelt and 0.32 on refuses: deployctl writes them itself.
"""

from __future__ import annotations

import functools
import json
from importlib import resources

_TABLE = "data/vllm_load_formats.json"
# The loaders whose settings engine.loadStreamer carries (runai_streamer_loader.py, both loaders).
STREAMER_FORMATS = frozenset({"runai_streamer", "runai_streamer_sharded"})


@functools.cache
def _table() -> dict[str, tuple[str, ...]]:
    data = json.loads(resources.files("orchestrator").joinpath(_TABLE).read_text(encoding="utf-8"))
    return {version: tuple(formats) for version, formats in data.items() if not version.startswith("_")}


def formats(version: str) -> tuple[str, ...] | None:
    """The load formats vLLM ``version`` has, sorted; None when deployctl has no table for it."""
    return _table().get(version)


def problem(load_format: str, version: str) -> str | None:
    """Why vLLM ``version`` cannot load with ``load_format``, naming the versions that can; None when it can."""
    known = formats(version)
    if known is None:
        tables = ", ".join(_table())
        return (
            f"deployctl has no load-format table for vLLM {version} (it has {tables}); leave engine.loadFormat "
            "unset, or pass --load-format in engine.extraArgs, which is checked against the flag list only"
        )
    if load_format in known:
        return None
    having = [v for v, fmts in _table().items() if load_format in fmts]
    where = (
        f"vLLM {', '.join(having)} {'has' if len(having) == 1 else 'have'} it" if having else "no vLLM version has it"
    )
    return f"vLLM {version} has no load format {load_format!r} ({where}); vLLM {version} has: {', '.join(known)}"


def streamer_config(concurrency: int | None, memory_limit: int | None) -> str:
    """The ``--model-loader-extra-config`` JSON of the Run:ai streamer's settings (the keys vLLM reads)."""
    config = {"concurrency": concurrency, "memory_limit": memory_limit}
    return json.dumps({k: v for k, v in config.items() if v is not None}, separators=(",", ":"), sort_keys=True)
