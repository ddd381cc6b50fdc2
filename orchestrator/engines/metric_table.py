"""The engines' Prometheus metrics by version: which families each serves, and which answers each question.

One table per engine version, ``orchestrator/data/engine_metrics/<engine>/<version>.json``: the
families the server exposes (type and labels) and the *roles* a dashboard, an alert or a canary
analysis asks about (time to first token, end-to-end latency, failed requests, queue, KV cache
usage, ...), each naming the family, and the label matchers, that answer it on that version. Names
move between versions (vLLM's ``time_per_output_token_seconds`` became ``inter_token_latency_seconds``,
``gpu_cache_usage_perc`` became ``kv_cache_usage_perc``) and differ between engines (TGI has no TTFT
histogram), so what reads an engine's metrics asks for a role instead of spelling a name.

vLLM 0.32.0's table is scraped from the real server (``scripts/gen_engine_metrics.py``); the others
say their source in the file. :func:`problems` holds every table to its own families, and the
tests hold the shipped tables to it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Mapping
from importlib import resources
from typing import Literal

from orchestrator.engines import flag_table

Kind = Literal["counter", "gauge", "histogram"]
FORMAT = 1
_DATA_DIR = "data/engine_metrics"


@dataclasses.dataclass(frozen=True)
class Role:
    """A question every engine's metrics should answer, and the kind of family that answers it."""

    name: str
    kind: Kind
    meaning: str


ROLES: dict[str, Role] = {
    role.name: role
    for role in (
        Role("ttft", "histogram", "seconds from a request's arrival to its first output token"),
        Role("itl", "histogram", "seconds between two output tokens of one request"),
        Role("e2e", "histogram", "seconds from a request's arrival to its last output token"),
        # The error ratio is failed / (succeeded + failed): no engine has one counter of every request
        # (TGI's counts an OpenAI-route request twice), and a client's 4xx is no fault of the server.
        Role("succeeded", "counter", "requests answered successfully"),
        Role("failed", "counter", "requests that ended in a server error (5xx, or the engine's own failure count)"),
        Role("waiting", "gauge", "requests queued, not yet scheduled"),
        Role("running", "gauge", "requests being served (in the batch)"),
        Role("kv_usage", "gauge", "fraction of the KV cache in use, 0 to 1"),
        Role("prompt_tokens", "counter", "prompt tokens processed"),
        Role("generation_tokens", "counter", "output tokens generated"),
    )
}


# The live latencies of the SLO language (``p95_ttft_ms``, ``median_e2el_ms`` …) and the histogram role
# that answers each, and the quantile of each statistic: what alerts and the canary's analysis judge.
LATENCY_ROLES = {"ttft": "ttft", "itl": "itl", "e2el": "e2e"}
STAT_QUANTILES = {"median": 0.5, "p95": 0.95, "p99": 0.99}


@dataclasses.dataclass(frozen=True)
class Family:
    """One metric family as the server exposes it; ``name`` is what PromQL queries (a histogram's base)."""

    name: str
    kind: Kind
    labels: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Series:
    """The series that answer one role: a family and the label matchers that narrow it."""

    family: Family
    matchers: str = ""  # PromQL label matchers, e.g. 'status="5xx"'; empty: every series of the family

    def selector(self, extra: str = "", suffix: str = "") -> str:
        """``family<suffix>{matchers, extra}``: ``suffix`` is ``_bucket``/``_sum``/``_count`` for a histogram."""
        inside = ",".join(part for part in (self.matchers, extra) if part)
        return f"{self.family.name}{suffix}{{{inside}}}"

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a sample with ``labels`` is one of these series (=, !=, =~, !~ as PromQL reads them:
        a regex matches the whole value, an absent label is the empty string)."""
        for name, op, value in _MATCHER_PARTS.findall(self.matchers):
            have = labels.get(name, "")
            wanted = _unquote(value)
            hit = have == wanted if op in ("=", "!=") else re.fullmatch(wanted, have) is not None
            if hit == (op in ("!=", "!~")):
                return False
        return True


@dataclasses.dataclass(frozen=True)
class MetricTable:
    """What one engine version exposes and which series answer each role (None: the engine has none)."""

    engine: str
    version: str
    path: str
    source: str
    families: Mapping[str, Family]
    roles: Mapping[str, Series | None]

    def role(self, name: str) -> Series | None:
        """The series answering role ``name`` on this version, or None where the engine has no such metric."""
        if name not in ROLES:
            raise KeyError(f"unknown metric role {name!r}; roles: {', '.join(ROLES)}")
        return self.roles.get(name)

    def names(self) -> frozenset[str]:
        """Every series name a query may use: counters and gauges as named, histograms with their suffixes."""
        out: set[str] = set()
        for family in self.families.values():
            if family.kind == "histogram":
                out.update(family.name + suffix for suffix in ("_bucket", "_sum", "_count"))
            else:
                out.add(family.name)
        return frozenset(out)


def versions(engine: str) -> tuple[str, ...]:
    """The versions of ``engine`` deployctl has a metric table for, oldest first."""
    root = resources.files("orchestrator").joinpath(_DATA_DIR).joinpath(engine)
    if not root.is_dir():
        return ()
    found = [entry.name.removesuffix(".json") for entry in root.iterdir() if entry.name.endswith(".json")]
    return tuple(sorted(found, key=flag_table.version_key))


@functools.cache
def table(engine: str, version: str) -> MetricTable:
    """The shipped table of ``engine`` ``version``; ValueError, naming the known versions, when there is none."""
    root = resources.files("orchestrator").joinpath(_DATA_DIR).joinpath(engine).joinpath(f"{version}.json")
    if not root.is_file():
        known = ", ".join(versions(engine)) or "none"
        raise ValueError(f"deployctl has no metric table for {engine} {version} (known: {known})")
    return parse(json.loads(root.read_text(encoding="utf-8")))


def parse(data: Mapping[str, object]) -> MetricTable:
    """A MetricTable from a table file's JSON; ValueError when it is not a format-1 table."""
    if data.get("format") != FORMAT:
        raise ValueError(f"not a format-{FORMAT} metric table")
    raw_families = data.get("families")
    raw_roles = data.get("roles")
    if not isinstance(raw_families, dict) or not isinstance(raw_roles, dict):
        raise ValueError("a metric table needs 'families' and 'roles' objects")
    families = {name: Family(name, spec["type"], tuple(spec.get("labels", ()))) for name, spec in raw_families.items()}
    roles: dict[str, Series | None] = {}
    for role, spec in raw_roles.items():
        if spec is None:
            roles[role] = None
            continue
        family = families.get(spec["family"])
        if family is None:
            raise ValueError(f"role {role} names {spec['family']!r}, which is not one of the table's families")
        roles[role] = Series(family, spec.get("matchers", ""))
    return MetricTable(
        engine=str(data["engine"]),
        version=str(data["version"]),
        path=str(data.get("path", "/metrics")),
        source=str(data.get("source", "")),
        families=families,
        roles=roles,
    )


_MATCHER_PARTS = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')


def _unquote(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*(?:,|$)')


def matcher_labels(matchers: str) -> list[str]:
    """The label names of PromQL label matchers (``a="x",b=~"y,z"``); ValueError when they are not matchers."""
    labels, position = [], 0
    while position < len(matchers.strip()):
        found = _MATCHER.match(matchers, position)
        if found is None:
            raise ValueError(f"not PromQL label matchers: {matchers!r}")
        labels.append(found[1])
        position = found.end()
    return labels


def problems(metric_table: MetricTable) -> list[str]:
    """What is wrong with a table: a missing role, a role answered by the wrong kind, a matcher on no label."""
    found: list[str] = []
    for name, role in ROLES.items():
        if name not in metric_table.roles:
            found.append(f"role {name} is missing (write null where the engine has no such metric)")
            continue
        series = metric_table.roles[name]
        if series is None:
            continue
        if series.family.kind != role.kind:
            found.append(f"role {name} needs a {role.kind}, {series.family.name} is a {series.family.kind}")
        for label in matcher_labels(series.matchers):
            if label not in series.family.labels:
                found.append(f"role {name} matches on {label!r}, which {series.family.name} does not carry")
    for name in metric_table.roles:
        if name not in ROLES:
            found.append(f"role {name} is not one deployctl knows ({', '.join(ROLES)})")
    return found
