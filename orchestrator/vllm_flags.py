"""The vLLM command-line flags each known vLLM version accepts, and the check of a profile's extraArgs.

The flag lists are generated from vLLM's own argument definitions by ``scripts/gen_vllm_flags.py`` and
shipped as ``orchestrator/data/vllm_flags/<version>.json``. :func:`check` finds misspelt, abbreviated or
misused flags (with a "did you mean") and flags deployctl renders itself from profile fields
(:func:`reserved_flags`), so a typo fails `deployctl validate` rather than a pod at start-up.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Literal

_DATA_DIR = "data/vllm_flags"
_NEGATIVE_NUMBER = re.compile(r"^-\d")

ProblemKind = Literal["unknown", "abbreviation", "reserved", "value-on-switch"]

# Flags deployctl renders from profile fields; setting them again in extraArgs would fight the profile
# (argparse keeps the last one) and break the VRAM math, so the profile field is the only place for them.
_RESERVED: dict[str, str] = {
    "--model": "model.source (the weights path is passed as the positional model argument)",
    "--served-model-name": "model.name",
    "--tensor-parallel-size": "engine.tensorParallelSize",
    "-tp": "engine.tensorParallelSize",
    "--pipeline-parallel-size": "engine.pipelineParallelSize",
    "-pp": "engine.pipelineParallelSize",
    "--max-model-len": "engine.maxModelLen",
    "--max-num-seqs": "engine.maxNumSeqs",
    "--max-num-batched-tokens": "engine.maxNumBatchedTokens",
    "--kv-cache-dtype": "engine.kvCacheDtype",
    "--gpu-memory-utilization": "engine.gpuMemoryUtilization",
    "--device-memory-utilization": "engine.gpuMemoryUtilization",
    "--enable-prefix-caching": "engine.enablePrefixCaching",
    "--no-enable-prefix-caching": "engine.enablePrefixCaching",
    "--disable-prefix-caching": "engine.enablePrefixCaching",
    "--no-disable-prefix-caching": "engine.enablePrefixCaching",
    "--port": "engine.port",
    "--host": "engine.port (deployctl binds all interfaces inside the pod)",
}


@dataclass(frozen=True)
class Problem:
    """One bad entry of extraArgs: which argument, what is wrong, and the flag meant if we can tell."""

    index: int  # position in extraArgs
    arg: str
    kind: ProblemKind
    message: str
    suggestion: str | None = None


@dataclass(frozen=True)
class FlagSet:
    version: str
    flags: frozenset[str]
    switches: frozenset[str]  # flags that take no value


def known_versions() -> list[str]:
    """vLLM versions with a flag list, oldest first."""
    return sorted(_flag_files(), key=_version_key)


def reserved_flags() -> dict[str, str]:
    """Flags deployctl renders itself, each with the profile field that sets it."""
    return dict(_RESERVED)


def flag_set(version: str) -> FlagSet:
    """The flags of ``version``; KeyError names the known versions and how to add one."""
    files = _flag_files()
    if version not in files:
        raise KeyError(
            f"no vLLM flag list for version {version}; known: {', '.join(known_versions())}. "
            f"Generate one with `python scripts/gen_vllm_flags.py {version}`"
        )
    data = json.loads(files[version])
    return FlagSet(version, frozenset(data["flags"]), frozenset(data["switches"]))


def normalize(arg: str) -> str:
    """The flag name vLLM's parser sees: no ``=value``, underscores as dashes, ``-O3`` as the level flag."""
    name = arg.split("=", 1)[0]
    if name.startswith("--"):
        # FlexibleArgumentParser turns underscores into dashes up to the first dot (--a_b.c_d → --a-b.c_d).
        head, dot, tail = name.partition(".")
        return head.replace("_", "-") + dot + tail
    if name.startswith("-O"):
        return "--optimization-level"
    return name


def has_flag(extra_args: list[str], flag: str) -> bool:
    """Whether ``flag`` (a switch) is switched on by ``extra_args``; a later ``--no-…`` wins."""
    state = False
    for arg in extra_args:
        name = normalize(arg)
        if name == flag:
            state = True
        elif name == "--no-" + flag.removeprefix("--"):
            state = False
    return state


def check(extra_args: list[str], version: str) -> list[Problem]:
    """Problems with ``extra_args`` for vLLM ``version``: unknown flags, abbreviations, values given to
    switches, and flags deployctl sets from the profile. Values (tokens not starting with ``-``) pass."""
    fs = flag_set(version)
    problems: list[Problem] = []
    for i, arg in enumerate(extra_args):
        if not arg.startswith("-") or _NEGATIVE_NUMBER.match(arg) or arg == "-":
            continue
        problem = _check_one(i, arg, fs)
        if problem:
            problems.append(problem)
    return problems


def _check_one(index: int, arg: str, fs: FlagSet) -> Problem | None:
    name = normalize(arg)
    base = name.split(".", 1)[0] if name.startswith("--") else name  # --compilation-config.mode → base
    if base in _RESERVED:
        return Problem(
            index,
            arg,
            "reserved",
            f"{base} is set by deployctl from {_RESERVED[base]}; set it there, not in extraArgs",
        )
    if base in fs.flags:
        if "=" in arg and base in fs.switches and "." not in name:
            return Problem(
                index,
                arg,
                "value-on-switch",
                f"{base} takes no value in vLLM {fs.version} (argparse rejects {arg!r}); write "
                f"{base} to switch it on"
                + (f" or --no-{base[2:]} to switch it off" if f"--no-{base[2:]}" in fs.flags else ""),
                base,
            )
        return None
    prefixed = sorted(f for f in fs.flags if f.startswith("--") and f.startswith(base)) if base[2:] else []
    if len(prefixed) == 1:
        return Problem(
            index,
            arg,
            "abbreviation",
            f"{base} is an abbreviation of {prefixed[0]}: vLLM's argparse accepts unique "
            f"prefixes, but a flag added in a later version can make it ambiguous; write {prefixed[0]}",
            prefixed[0],
        )
    close = difflib.get_close_matches(base, sorted(fs.flags), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    return Problem(index, arg, "unknown", f"{base} is not a vLLM {fs.version} flag{hint}", close[0] if close else None)


@functools.cache
def _flag_files() -> dict[str, str]:
    root = resources.files("orchestrator").joinpath(_DATA_DIR)
    return {
        f.name.removesuffix(".json"): f.read_text(encoding="utf-8") for f in root.iterdir() if f.name.endswith(".json")
    }


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))
