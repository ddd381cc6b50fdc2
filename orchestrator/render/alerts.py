"""A release's alert rules, in the metric names of its engine version: a PrometheusRule and a rule file.

Five alerts page for what an on-call engineer can act on: server errors, time to first token over
the profile's SLO, a KV cache that stays full, a queue that keeps growing, and fewer copies answering
than the profile asks for. Each query names its series through the engine's metric table
(``orchestrator.engines.metric_table``) rather than spelling a metric, so a vLLM that renamed a
family, or an engine that has none (TGI has no TTFT histogram), gets the right rule or none, and
the PrometheusRule says which alerts it lacks and why (annotation ``deployctl.dev/unanswered``).

Series are found by the labels the release's PodMonitor gives every target: ``namespace`` and
``deployctl_dev_release`` (the pod label ``deployctl.dev/release``, which ``podTargetLabels`` copies
and Prometheus spells with underscores). Rules are plain data; promtool checks and unit-tests them
(e2e/test_alert_rules.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from orchestrator import conventions
from orchestrator.engines import metric_table
from orchestrator.profile import model as profiles
from orchestrator.profile import slo as slo_language

# The PodMonitor copies these pod labels onto every series (podTargetLabels); Prometheus replaces the
# characters a label name may not hold with underscores.
TARGET_POD_LABELS = (conventions.RELEASE_LABEL, conventions.TRACK_LABEL)
RELEASE_TARGET_LABEL = conventions.prometheus_label(conventions.RELEASE_LABEL)
TRACK_TARGET_LABEL = conventions.prometheus_label(conventions.TRACK_LABEL)
UNANSWERED_ANNOTATION = "deployctl.dev/unanswered"
METRIC_TABLE_ANNOTATION = "deployctl.dev/metric-table"

# Without an error_rate SLO: page when more than one request in twenty fails, as a sustained rate.
DEFAULT_ERROR_RATIO = 0.05
KV_SATURATED = 0.95  # of the KV cache in use: new requests wait for blocks, TTFT climbs
WINDOW = "5m"  # rate window of every alert: long enough to hold several 30 s scrapes
# A copy is "not answering" once it has been down longer than it may take to load: the startup
# probe's allowance plus a margin, so a rollout's loading pods never page.
COPY_DOWN_MARGIN_S = 300
# The SLO statistics an alert can watch on a histogram, as quantiles.
_QUANTILES = {"median": 0.5, "p95": 0.95, "p99": 0.99}
_LATENCY_ROLES = {"ttft": "ttft", "e2el": "e2e"}  # SLO latency name -> metric-table role
_LATENCY_WORDS = {"ttft": "time to first token", "e2el": "end-to-end latency"}


@dataclasses.dataclass(frozen=True)
class Scope:
    """What selects one release's series, and the table that names them."""

    namespace: str
    release: str
    table: metric_table.MetricTable

    @property
    def matchers(self) -> str:
        return f'namespace="{self.namespace}",{RELEASE_TARGET_LABEL}="{self.release}"'

    def series(self, role: str, suffix: str = "") -> str | None:
        """The selector of ``role`` within the release, or None where the engine has no such series."""
        found = self.table.role(role)
        return found.selector(self.matchers, suffix) if found else None


def scope(profile: profiles.Profile) -> Scope:
    engine = profile.engine
    return Scope(
        profile.metadata.namespace, profile.metadata.name, metric_table.table(engine.kind, engine.engine_version)
    )


def error_ratio(scope_: Scope, by: str = "") -> str | None:
    """failed / (succeeded + failed) over WINDOW, summed ``by`` labels; None without both counters."""
    failed, succeeded = scope_.series("failed"), scope_.series("succeeded")
    if failed is None or succeeded is None:
        return None
    grouping = f" by ({by})" if by else ""
    fail_rate = f"sum{grouping} (rate({failed}[{WINDOW}]))"
    return f"{fail_rate} / ({fail_rate} + sum{grouping} (rate({succeeded}[{WINDOW}])))"


def quantile(scope_: Scope, role: str, q: float, by: str = "") -> str | None:
    """The ``q`` quantile of histogram ``role`` over WINDOW, in seconds; None where the engine has none."""
    buckets = scope_.series(role, "_bucket")
    if buckets is None:
        return None
    grouping = ", ".join(part for part in ("le", by) if part)
    return f"histogram_quantile({q:g}, sum by ({grouping}) (rate({buckets}[{WINDOW}])))"


def groups(profile: profiles.Profile, copy_down_after_s: int) -> tuple[list[dict[str, Any]], list[str]]:
    """The rule groups of ``profile``'s release, and what the engine cannot alert on (one clause each).

    ``copy_down_after_s``: how long a copy may take to load (the startup probe's allowance).
    """
    s = scope(profile)
    rules: list[dict[str, Any]] = []
    unanswered: list[str] = []
    for build in (_errors, _latency_slos, _kv_saturated, _queue_growing):
        made, missing = build(s, profile)
        rules += made
        unanswered += missing
    rules.append(_copies_missing(s, profile, copy_down_after_s))
    return [{"name": f"deployctl.{s.namespace}.{s.release}", "rules": rules}], unanswered


def rule_file(profile: profiles.Profile, copy_down_after_s: int) -> dict[str, Any]:
    """The rules as a Prometheus rule file (``groups:``), what promtool and a plain Prometheus read."""
    return {"groups": groups(profile, copy_down_after_s)[0]}


def prometheus_rule(
    profile: profiles.Profile, copy_down_after_s: int, labels: Mapping[str, str], name: str
) -> dict[str, Any]:
    """The PrometheusRule object (monitoring.coreos.com/v1) of the release."""
    rule_groups, unanswered = groups(profile, copy_down_after_s)
    annotations = {METRIC_TABLE_ANNOTATION: f"{profile.engine.kind} {profile.engine.engine_version}"}
    if unanswered:
        annotations[UNANSWERED_ANNOTATION] = "; ".join(unanswered)
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": conventions.PROMETHEUS_RULE_KIND,
        "metadata": {
            "name": name,
            "namespace": profile.metadata.namespace,
            "labels": dict(labels),
            "annotations": annotations,
        },
        "spec": {"groups": rule_groups},
    }


# --- the alerts ----------------------------------------------------------------------------------


def _alert(
    name: str, expr: str, duration: str, severity: str, s: Scope, summary: str, description: str
) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": duration,
        "labels": {"severity": severity, "namespace": s.namespace, RELEASE_TARGET_LABEL: s.release},
        "annotations": {"summary": summary, "description": description},
    }


def _missing(s: Scope, role: str, alert: str) -> str:
    return f"{alert}: {s.table.engine} {s.table.version} has no metric for {role} ({metric_table.ROLES[role].meaning})"


Built = tuple[list[dict[str, Any]], list[str]]


def _errors(s: Scope, profile: profiles.Profile) -> Built:
    ratio = error_ratio(s)
    if ratio is None:
        role = "failed" if s.table.role("failed") is None else "succeeded"
        return [], [_missing(s, role, "DeployctlErrorRateHigh")]
    condition = _slo(profile, "error_rate")
    limit = condition.threshold if condition else DEFAULT_ERROR_RATIO
    source = "the profile's slo error_rate" if condition else f"the default {DEFAULT_ERROR_RATIO:g}"
    return [
        _alert(
            "DeployctlErrorRateHigh",
            f"({ratio}) > {limit:g}",
            WINDOW,
            "critical",
            s,
            f"{s.release}: more than {limit:.1%} of requests fail with a server error",
            f"Release {s.release} in {s.namespace} answers {{{{ $value | humanizePercentage }}}} of its requests "
            f"with a server error over {WINDOW}, above {source}. `deployctl status {s.release} -n {s.namespace}` "
            "shows the revision; `deployctl rollback` restores the previous one.",
        )
    ], []


def _latency_slos(s: Scope, profile: profiles.Profile) -> Built:
    """One alert per latency SLO the histograms can answer: ``p95_ttft_ms: "<=500"`` pages over 500 ms."""
    rules: list[dict[str, Any]] = []
    missing: list[str] = []
    for metric, condition in sorted(_slos(profile).items()):
        stat, _, rest = metric.partition("_")
        latency = rest.removesuffix("_ms")
        if stat not in _QUANTILES or latency not in _LATENCY_ROLES or condition.op not in ("<", "<="):
            continue
        role = _LATENCY_ROLES[latency]
        name = f"Deployctl{latency.upper()}{stat.capitalize()}OverSLO"
        expr = quantile(s, role, _QUANTILES[stat])
        if expr is None:
            missing.append(_missing(s, role, name))
            continue
        rules.append(
            _alert(
                name,
                f"{expr} * 1000 > {condition.threshold:g}",
                "10m",
                "warning",
                s,
                f"{s.release}: {stat} {latency.upper()} over its SLO of {condition.threshold:g} ms",
                f"The {stat} {_LATENCY_WORDS[latency]} of release {s.release} in {s.namespace} is "
                f"{{{{ $value | humanize }}}} ms over {WINDOW}, above slo {metric} {condition} for 10 minutes.",
            )
        )
    return rules, missing


def _kv_saturated(s: Scope, profile: profiles.Profile) -> Built:
    usage = s.series("kv_usage")
    if usage is None:
        return [], [_missing(s, "kv_usage", "DeployctlKVCacheSaturated")]
    return [
        _alert(
            "DeployctlKVCacheSaturated",
            f"max by (pod) ({usage}) > {KV_SATURATED:g}",
            "15m",
            "warning",
            s,
            f"{s.release}: a pod's KV cache has been over {KV_SATURATED:.0%} full for 15 minutes",
            f"Pod {{{{ $labels.pod }}}} of release {s.release} keeps its KV cache "
            "{{ $value | humanizePercentage }} full: requests wait for blocks or are preempted. Add copies, lower "
            "max-num-seqs or max-model-len, or use kvCacheDtype fp8 (`deployctl plan` shows the room).",
        )
    ], []


def _queue_growing(s: Scope, profile: profiles.Profile) -> Built:
    waiting = s.series("waiting")
    if waiting is None:
        return [], [_missing(s, "waiting", "DeployctlQueueGrowing")]
    queue = f"sum ({waiting})"
    return [
        _alert(
            "DeployctlQueueGrowing",
            f"{queue} > 0 and deriv({queue}[15m:1m]) > 0",
            "15m",
            "warning",
            s,
            f"{s.release}: requests queue and the queue keeps growing",
            f"{{{{ $value }}}} requests wait for release {s.release} in {s.namespace} and the queue has grown for "
            "15 minutes: the copies cannot keep up with the traffic. Add copies or shed load.",
        )
    ], []


def _copies_missing(s: Scope, profile: profiles.Profile, copy_down_after_s: int) -> dict[str, Any]:
    copies = profile.rollout.replicas
    answering = f"(count (up{{{s.matchers}}} == 1) or vector(0))"
    minutes = math.ceil((copy_down_after_s + COPY_DOWN_MARGIN_S) / 60)
    return _alert(
        "DeployctlCopyNotServing",
        f"{answering} < {copies}",
        f"{minutes}m",
        "critical",
        s,
        f"{s.release}: fewer copies serve than the {copies} asked for",
        f"Only {{{{ $value }}}} of the {copies} copies of release {s.release} in {s.namespace} have answered their "
        f"metrics endpoint for {minutes} minutes, longer than a copy may take to load. `deployctl status "
        f"{s.release} -n {s.namespace}` explains pods that are pending, crash-looping or out of memory.",
    )


# --- the profile's SLOs --------------------------------------------------------------------------


def _slos(profile: profiles.Profile) -> dict[str, slo_language.Condition]:
    return slo_language.parse_slo(profile.gate.smoke.slo)


def _slo(profile: profiles.Profile, metric: str) -> slo_language.Condition | None:
    condition = _slos(profile).get(metric)
    return condition if condition and condition.op in ("<", "<=") else None
