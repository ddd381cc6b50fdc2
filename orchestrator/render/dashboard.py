"""A release's Grafana dashboard, in the metric names of its engine version.

Latency percentiles (TTFT, time per output token, end to end), tokens per second, queue, KV cache
usage, server errors, copies answering, and the canary against the stable copies, with an
annotation wherever new pods started serving (a rollout, a canary, a restart). Every query names
its series through the engine's metric table, like the alert rules (``orchestrator.render.alerts``; both
write their queries through ``orchestrator.render.promql``); a panel the engine cannot fill is left out and the
dashboard's description says which and why.

Shipped as a ConfigMap that Grafana's dashboard sidecar loads (label ``grafana_dashboard: "1"``,
kube-prometheus-stack's default), by ``deployctl render --format dashboard`` and by the chart.
``deployctl apply`` never writes it: a ConfigMap among a release's kinds would let a forged record
overwrite the release records, which are ConfigMaps too (docs/observability.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from orchestrator.profile import model as profiles
from orchestrator.render import promql

SCHEMA_VERSION = 39  # Grafana 10.4 and later read it
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
DASHBOARD_LABEL = {"grafana_dashboard": "1"}  # what kube-prometheus-stack's Grafana sidecar watches for
_WIDTH, _HEIGHT = 12, 8  # two panels per row on Grafana's 24-column grid
_PERCENTILES = (0.5, 0.95, 0.99)
_TRACK = promql.TRACK_LABEL
# Stable pods carry no track label: name them for the legend.
_STABLE = f'label_replace({{expr}}, "{_TRACK}", "stable", "{_TRACK}", "")'


def dashboard(profile: profiles.Profile) -> dict[str, Any]:
    """The Grafana dashboard JSON model of ``profile``'s release."""
    s = promql.scope(profile)
    panels: list[dict[str, Any]] = []
    missing: list[str] = []
    for title, unit, targets, roles in _panel_specs(s):
        if not targets:
            missing.append(f"{title} ({', '.join(_meaning(s, role) for role in roles)})")
            continue
        panels.append(_panel(len(panels), title, unit, targets))
    description = f"Release {s.release} in namespace {s.namespace}: {s.table.engine} {s.table.version} metrics."
    if missing:
        description += f" Not shown, the engine has no such metric: {'; '.join(missing)}."
    return {
        "uid": _uid(s),
        "title": f"deployctl {s.namespace}/{s.release}",
        "description": description,
        "tags": ["deployctl", s.table.engine],
        "schemaVersion": SCHEMA_VERSION,
        "editable": False,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [{"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"}]
        },
        "annotations": {"list": [_new_pods_annotation(s)]},
        "panels": panels,
    }


def config_map(profile: profiles.Profile, labels: Mapping[str, str]) -> dict[str, Any]:
    """The ConfigMap Grafana's dashboard sidecar loads: the dashboard JSON under ``<release>.json``."""
    name = profile.metadata.name
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{name}-dashboard",
            "namespace": profile.metadata.namespace,
            "labels": {**labels, **DASHBOARD_LABEL},
        },
        "data": {f"{name}.json": text(profile)},
    }


def text(profile: profiles.Profile) -> str:
    """The dashboard as the JSON text the ConfigMap and the chart carry: sorted keys, so the same
    profile always gives the same bytes."""
    return json.dumps(dashboard(profile), indent=1, sort_keys=True)


def queries(model: Mapping[str, Any]) -> list[str]:
    """Every PromQL expression of a dashboard model: its panels' targets and its annotations'."""
    found = [t["expr"] for panel in model.get("panels", ()) for t in panel.get("targets", ())]
    found += [a["expr"] for a in model.get("annotations", {}).get("list", ()) if "expr" in a]
    return found


# --- the panels ----------------------------------------------------------------------------------

Target = tuple[str, str]  # (PromQL, legend)


def _panel_specs(s: promql.Scope) -> list[tuple[str, str, list[Target], tuple[str, ...]]]:
    """(title, unit, targets, roles it reads) per panel, in reading order; no targets: the engine lacks them."""
    ratio = promql.error_ratio(s)
    by_track = promql.error_ratio(s, _TRACK)
    ttft_by_track = promql.quantile(s, "ttft", 0.95, _TRACK)
    return [
        ("Time to first token", "s", _percentiles(s, "ttft"), ("ttft",)),
        ("Time per output token", "s", _percentiles(s, "itl"), ("itl",)),
        ("End-to-end latency", "s", _percentiles(s, "e2e"), ("e2e",)),
        (
            "Tokens per second",
            "short",
            _rates(s, ("prompt_tokens", "generation_tokens")),
            ("prompt_tokens", "generation_tokens"),
        ),
        ("Queue and batch", "short", _sums(s, ("waiting", "running")), ("waiting", "running")),
        ("KV cache usage", "percentunit", _per_pod(s, "kv_usage"), ("kv_usage",)),
        ("Server errors (ratio)", "percentunit", [(ratio, "failed / all")] if ratio else [], ("failed",)),
        (
            "Canary against stable: p95 TTFT",
            "s",
            [(_STABLE.format(expr=ttft_by_track), "{{" + _TRACK + "}}")] if ttft_by_track else [],
            ("ttft",),
        ),
        (
            "Canary against stable: error ratio",
            "percentunit",
            [(_STABLE.format(expr=by_track), "{{" + _TRACK + "}}")] if by_track else [],
            ("failed",),
        ),
        ("Copies answering", "short", [(f"count ({s.up()} == 1)", "answering")], ()),
    ]


def _percentiles(s: promql.Scope, role: str) -> list[Target]:
    out = []
    for q in _PERCENTILES:
        expr = promql.quantile(s, role, q)
        if expr:
            out.append((expr, f"p{round(q * 100)}"))
    return out


def _rates(s: promql.Scope, roles: tuple[str, ...]) -> list[Target]:
    return [(promql.rate(series), role.replace("_", " ")) for role in roles if (series := s.series(role))]


def _sums(s: promql.Scope, roles: tuple[str, ...]) -> list[Target]:
    return [(f"sum ({series})", role) for role in roles if (series := s.series(role))]


def _per_pod(s: promql.Scope, role: str) -> list[Target]:
    series = s.series(role)
    return [(f"max by (pod) ({series})", "{{pod}}")] if series else []


def _panel(index: int, title: str, unit: str, targets: list[Target]) -> dict[str, Any]:
    return {
        "id": index + 1,
        "type": "timeseries",
        "title": title,
        "datasource": DATASOURCE,
        "gridPos": {"x": (index % 2) * _WIDTH, "y": (index // 2) * _HEIGHT, "w": _WIDTH, "h": _HEIGHT},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"refId": chr(ord("A") + n), "expr": expr, "legendFormat": legend, "datasource": DATASOURCE}
            for n, (expr, legend) in enumerate(targets)
        ],
    }


def _new_pods_annotation(s: promql.Scope) -> dict[str, Any]:
    """Marks the minutes in which pods started answering that did not answer two minutes before."""
    up = s.up()
    return {
        "name": "New pods serving",
        "datasource": DATASOURCE,
        "enable": True,
        "iconColor": "blue",
        # Answering now and not two minutes ago: a pod that finished loading, not one that appeared.
        "expr": f"count by ({_TRACK}) (({up} == 1) unless ({up} offset 2m == 1))",
        "step": "60s",
        "titleFormat": "new pods serving",
        "textFormat": "a rollout, a canary ({{" + _TRACK + "}}) or a restart",
    }


def _meaning(s: promql.Scope, role: str) -> str:
    return f"{s.table.engine} {s.table.version} has no series for {role}"


def _uid(s: promql.Scope) -> str:
    # Grafana uids are at most 40 characters; the same release always gets the same one.
    return "deployctl-" + hashlib.sha256(f"{s.namespace}/{s.release}".encode()).hexdigest()[:24]
