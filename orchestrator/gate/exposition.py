"""The Prometheus text exposition format (version 0.0.4), read: families, their types, labels and samples.

What an engine's ``/metrics`` answers, as ``prometheus_client`` (vLLM, SGLang, TensorRT-LLM) and
``metrics-exporter-prometheus`` (TGI) write it. Only what deployctl reads is kept: each family's
type from its ``# TYPE`` line, and each sample's name, labels and value; timestamps, exemplars and
``# HELP`` are skipped. A histogram's ``_bucket``/``_sum``/``_count`` samples and a counter's
``_total`` sample belong to their family. prometheus_client writes a ``_created`` sample under a
``# TYPE x_created gauge`` line of its own, so it is a family of its own here too.
"""

from __future__ import annotations

import dataclasses
import re

# Labels end at the first } outside a quoted value; a timestamp and an OpenMetrics exemplar
# ("# {trace_id=...} 1.0") may follow the value.
_SAMPLE = re.compile(
    r'^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>(?:[^"}]|"(?:[^"\\]|\\.)*")*)\})?'
    r"\s+(?P<value>\S+)(?:\s+-?\d+)?\s*(?:#.*)?$"
)
_LABEL = re.compile(r'\s*(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*"(?P<value>(?:[^"\\]|\\.)*)"\s*(?:,|$)')
_SUFFIXES = {
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("_sum", "_count"),
    "counter": ("_total",),
}


@dataclasses.dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclasses.dataclass
class Family:
    """One ``# TYPE`` family: its kind (counter, gauge, histogram, summary, untyped) and its samples."""

    name: str
    kind: str
    samples: list[Sample] = dataclasses.field(default_factory=list)

    def label_names(self) -> tuple[str, ...]:
        """The labels its samples carry, sorted, without a histogram's ``le`` or a summary's ``quantile``."""
        names = {key for s in self.samples for key in s.labels if key not in ("le", "quantile")}
        return tuple(sorted(names))


class ExpositionError(ValueError):
    """The text is not the Prometheus exposition format; the message names the line."""


def parse(text: str) -> dict[str, Family]:
    """Families by name (for a counter, the name without ``_total`` as its ``# TYPE`` line gives it)."""
    families: dict[str, Family] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                families.setdefault(parts[2], Family(parts[2], parts[3].strip()))
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise ExpositionError(f"line {number} is not a sample: {line[:120]!r}")
        sample = Sample(match["name"], _labels(match["labels"] or "", number), _value(match["value"], number))
        _family_of(families, sample.name).samples.append(sample)
    return families


def _family_of(families: dict[str, Family], sample_name: str) -> Family:
    if sample_name in families:
        return families[sample_name]
    for family in families.values():
        suffixes = _SUFFIXES.get(family.kind, ())
        if any(sample_name == family.name + suffix for suffix in suffixes):
            return family
    return families.setdefault(sample_name, Family(sample_name, "untyped"))


def _labels(text: str, number: int) -> dict[str, str]:
    labels: dict[str, str] = {}
    position = 0
    while position < len(text.rstrip()):
        match = _LABEL.match(text, position)
        if match is None:
            raise ExpositionError(f"line {number}: cannot read the labels {text[:120]!r}")
        labels[match["key"]] = _unescape(match["value"])
        position = match.end()
    return labels


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], value)


def _value(text: str, number: int) -> float:
    try:
        return float(text)  # accepts NaN, +Inf, -Inf as Prometheus writes them
    except ValueError:
        raise ExpositionError(f"line {number}: {text!r} is not a number") from None
