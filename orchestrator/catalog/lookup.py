"""The model and GPU catalog: architecture facts read from Hugging Face config.json files, and GPU facts.

The planner needs a handful of numbers per model (layers, heads, sizes, dtype) and per GPU (memory as
CUDA reports it, native fp8, the node labels GPU feature discovery sets). They ship as data under
``orchestrator/data/`` and are read with importlib.resources, so the wheel carries them. A profile may
also point at its own config.json; :func:`load_config` reads that with the same rules.
"""

from __future__ import annotations

import difflib
import functools
import json
import pathlib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

import yaml

from orchestrator.catalog import config as model_config
from orchestrator.catalog.config import ConfigError, ModelArch

_MODELS_DIR = "data/models"
_GPUS_FILE = "data/gpus.yaml"

# The escape hatches an unknown name's message shows, each with a line to copy.
_GPU_ESCAPE = (
    "for a GPU outside the catalog, drop hardware.gpu and give its memory as CUDA reports it and its "
    "nvidia.com/gpu.product node label values, e.g. `hardware: {memoryGiB: 179, fp8: true, "
    "productLabels: [NVIDIA-B200]}`"
)
_ARCH_ESCAPE = (
    "for a model outside the catalog, replace model.architecture with the path of its Hugging Face config.json "
    "(relative to the profile), e.g. `model: {config: ./config.json}`"
)


class UnknownName(ValueError):
    """A GPU or architecture name the catalog does not hold; the message has the fix."""


@dataclass(frozen=True)
class Gpu:
    """One GPU model: memory as CUDA reports it, native fp8, and its node product labels."""

    key: str
    name: str
    memory_gib: float
    fp8: bool
    compute_capability: str
    product_labels: tuple[str, ...]
    memory_source: str


def architecture_keys() -> list[str]:
    """Sorted catalog keys of the model architectures (the names `model.architecture` accepts)."""
    return sorted(_arch_texts())


def gpu_keys() -> list[str]:
    """Sorted catalog keys of the GPUs (the names `hardware.gpu` accepts)."""
    return sorted(_gpus())


def architecture(key: str) -> ModelArch:
    """The catalog architecture ``key``; KeyError names the known keys."""
    texts = _arch_texts()
    if key not in texts:
        raise KeyError(f"unknown architecture {key!r}; known: {', '.join(sorted(texts))}")
    return model_config.parse(_read_json(texts[key], key), key)


def gpu(key: str) -> Gpu:
    """The catalog GPU ``key``; KeyError names the known keys."""
    gpus = _gpus()
    if key not in gpus:
        raise KeyError(f"unknown GPU {key!r}; known: {', '.join(sorted(gpus))}")
    return gpus[key]


def resolve_gpu(name: str) -> str:
    """The catalog key ``name`` means, ignoring case (``a100-80gb`` is ``A100-80GB``).

    UnknownName says what is close and how to describe a GPU outside the catalog instead.
    """
    return _resolve(name, gpu_keys(), "GPU", _GPU_ESCAPE)


def resolve_architecture(name: str) -> str:
    """The catalog architecture key ``name`` means, ignoring case (``Llama-3-70B`` is ``llama-3-70b``).

    UnknownName says what is close and how to point at a model's own config.json instead.
    """
    return _resolve(name, architecture_keys(), "architecture", _ARCH_ESCAPE)


def product_labels(gpu_key: str | None, given: list[str] | tuple[str, ...] | None) -> tuple[str, ...] | None:
    """The `nvidia.com/gpu.product` values a node may carry for the profile's GPU.

    ``given`` (hardware.productLabels) replaces the catalog's values; without it a catalog GPU has
    its own and a GPU outside the catalog (``gpu_key`` None) has none: None, so callers can refuse
    rather than drop the constraint.
    """
    if given is not None:
        return tuple(given)
    if gpu_key is None:
        return None
    return gpu(gpu_key).product_labels


def gpu_for_product_label(label: str) -> Gpu | None:
    """The catalog GPU whose GPU-feature-discovery product label is ``label``, if any."""
    return next((g for g in _gpus().values() if label in g.product_labels), None)


def load_config(path: pathlib.Path) -> ModelArch:
    """Read a Hugging Face config.json from ``path``; ConfigError says what is missing or wrong."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read model config {path}: {e.strerror or e}") from e
    return config_from_text(text, str(path))


def config_from_text(text: str, source: str, *, measured: bool = False) -> ModelArch:
    """A ModelArch from the text of a config.json that ``source`` names (``measured``: see config.parse)."""
    return model_config.parse(_read_json(text, source), source, measured=measured)


def parse_config(data: Mapping[str, object], source: str) -> ModelArch:
    """Build a ModelArch from an already-parsed config.json mapping."""
    return model_config.parse(data, source)


def _resolve(name: str, keys: list[str], what: str, escape: str) -> str:
    by_folded = {k.casefold(): k for k in keys}
    key = by_folded.get(name.strip().casefold())
    if key is not None:
        return key
    close = difflib.get_close_matches(name.casefold(), list(by_folded), n=1)
    hint = f"did you mean {by_folded[close[0]]!r}? " if close else ""
    raise UnknownName(f"unknown {what} {name!r}; {hint}known: {', '.join(keys)}; {escape}")


@functools.cache
def _arch_texts() -> dict[str, str]:
    root = resources.files("orchestrator").joinpath(_MODELS_DIR)
    return {
        f.name.removesuffix(".json"): f.read_text(encoding="utf-8") for f in root.iterdir() if f.name.endswith(".json")
    }


@functools.cache
def _gpus() -> dict[str, Gpu]:
    text = resources.files("orchestrator").joinpath(_GPUS_FILE).read_text(encoding="utf-8")
    raw = yaml.safe_load(text)
    if not isinstance(raw, dict):
        raise ConfigError(f"{_GPUS_FILE} must map GPU keys to their facts")
    out: dict[str, Gpu] = {}
    for key, facts in raw.items():
        try:
            out[str(key)] = Gpu(
                key=str(key),
                name=str(facts["name"]),
                memory_gib=float(facts["memoryGiB"]),
                fp8=bool(facts["fp8"]),
                compute_capability=str(facts["computeCapability"]),
                product_labels=tuple(str(x) for x in facts["productLabels"]),
                memory_source=str(facts["memorySource"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"{_GPUS_FILE}: GPU {key!r} is incomplete ({e})") from e
    return out


def _read_json(text: str, source: str) -> dict[str, object]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{source} is not valid JSON (line {e.lineno}: {e.msg})") from e
    except (ValueError, RecursionError) as e:  # a number past 4,300 digits; nesting past the stack
        raise ConfigError(f"{source} is not a config.json: a number too long or nesting too deep") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{source} must hold a JSON object, as a Hugging Face config.json does")
    return data
