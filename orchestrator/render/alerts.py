"""A release's alert rules, in the metric names of its engine version: a PrometheusRule and a rule file.

The alerts page for what an on-call engineer can act on: server errors, latency over the profile's
SLOs, a KV cache that stays full, a queue that keeps growing, a server that stopped making progress,
and copies that do not answer. Every query is written through ``orchestrator.render.promql``, so a
vLLM that renamed a family, or an engine that has none (TGI has no TTFT histogram), gets the right
rule or none, and the PrometheusRule says which alerts it lacks and why (annotation
``deployctl.dev/unanswered``). ``problems`` holds a stored PrometheusRule to what this module writes,
before a rollback restores it. Rules are plain data; promtool checks and unit-tests them
(e2e/test_alert_rules.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from orchestrator import conventions
from orchestrator.engines import metric_table
from orchestrator.profile import model as profiles
from orchestrator.profile import slo as slo_language
from orchestrator.render import promql
from orchestrator.render.promql import WINDOW, Scope

UNANSWERED_ANNOTATION = "deployctl.dev/unanswered"
METRIC_TABLE_ANNOTATION = "deployctl.dev/metric-table"

# Without an error_rate SLO: page when more than one request in twenty fails, as a sustained rate.
DEFAULT_ERROR_RATIO = 0.05
# Below this many requests per second (three a minute) a ratio or a percentile is two or three
# requests' worth: no page.
MIN_REQUEST_RATE = 0.05
KV_SATURATED = 0.95  # of the KV cache in use: new requests wait for blocks, TTFT climbs
# A pod is "not answering" once it has been down longer than it may take to load: the startup
# probe's allowance plus a margin, so a pod that loads within it never pages.
COPY_DOWN_MARGIN_S = 300
# The SLO statistics an alert can watch on a histogram (metric_table.STAT_QUANTILES and LATENCY_ROLES);
# the means, deviations and the per-request TPOT of `deployctl bench` have no live histogram.
_LATENCY_WORDS = {"ttft": "time to first token", "itl": "inter-token latency", "e2el": "end-to-end latency"}
_SEVERITIES = ("critical", "warning")
# The only template actions the annotations use: a stored rule's annotations may hold no other (a
# Prometheus template can run a query of its own).
_TEMPLATE_ACTIONS = frozenset(
    {"{{ $value }}", "{{ $value | humanize }}", "{{ $value | humanizePercentage }}", "{{ $labels.pod }}"}
)

Built = tuple[list[dict[str, Any]], list[str]]


def group_name(namespace: str, release: str) -> str:
    return f"deployctl.{namespace}.{release}"


def groups(profile: profiles.Profile, copy_down_after_s: int) -> tuple[list[dict[str, Any]], list[str]]:
    """The rule groups of ``profile``'s release, and what the engine cannot alert on (one clause each).

    ``copy_down_after_s``: how long a copy may take to load (the startup probe's allowance).
    """
    s = promql.scope(profile)
    rules: list[dict[str, Any]] = []
    unanswered: list[str] = []
    for build in (_errors, _latency_slos, _kv_saturated, _queue_growing, _no_progress):
        made, missing = build(s, profile)
        rules += made
        unanswered += missing
    rules += _copies(s, profile, copy_down_after_s)
    return [{"name": group_name(s.namespace, s.release), "rules": rules}], unanswered


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
        "labels": {"severity": severity, "namespace": s.namespace, promql.RELEASE_LABEL: s.release},
        "annotations": {"summary": summary, "description": description},
    }


def _missing(s: Scope, role: str, alert: str) -> str:
    return f"{alert}: {s.table.engine} {s.table.version} has no metric for {role} ({metric_table.ROLES[role].meaning})"


def _busy(s: Scope) -> str:
    """`and` clause: enough requests in the window for a ratio or a percentile to mean something."""
    requests = promql.requests_rate(s)
    if requests is None:
        ended = s.series("e2e", "_count")
        requests = promql.rate(ended) if ended else "vector(0)"
    return f" and on() {requests} > {MIN_REQUEST_RATE:g}"


def _errors(s: Scope, profile: profiles.Profile) -> Built:
    ratio = promql.error_ratio(s)
    if ratio is None:
        role = "failed" if s.table.role("failed") is None else "succeeded"
        return [], [_missing(s, role, "DeployctlErrorRateHigh")]
    condition = _slo(profile, "error_rate")
    limit = condition.threshold if condition else DEFAULT_ERROR_RATIO
    source = "the profile's slo error_rate" if condition else f"the default {DEFAULT_ERROR_RATIO:g}"
    return [
        _alert(
            "DeployctlErrorRateHigh",
            f"({ratio}) > {limit:g}{_busy(s)}",
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
        quantiles, roles = metric_table.STAT_QUANTILES, metric_table.LATENCY_ROLES
        if stat not in quantiles or latency not in roles or condition.op not in ("<", "<="):
            continue
        role = roles[latency]
        name = f"Deployctl{latency.upper()}{stat.capitalize()}OverSLO"
        expr = promql.quantile(s, role, quantiles[stat])
        if expr is None:
            missing.append(_missing(s, role, name))
            continue
        rules.append(
            _alert(
                name,
                f"{expr} * 1000 > {condition.threshold:g}{_busy(s)}",
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
            f"{{{{ $value }}}} requests wait for release {s.release} in {s.namespace}, and the queue has grown "
            "over the last 15 minutes for 15 minutes: the copies cannot keep up with the traffic. Add copies or "
            "shed load.",
        )
    ], []


def _no_progress(s: Scope, profile: profiles.Profile) -> Built:
    """Requests in the engine but nothing coming out: a wedged server answers its metrics, fails nothing
    and observes no latency, so no other alert sees it."""
    waiting, running = s.series("waiting"), s.series("running")
    tokens = s.series("generation_tokens")
    finished = promql.rate(tokens) if tokens else None
    if finished is None and (ended := s.series("e2e", "_count")):
        finished = promql.rate(ended)
    if waiting is None or running is None or finished is None:
        role = "waiting" if waiting is None else "running" if running is None else "e2e"
        return [], [_missing(s, role, "DeployctlNoProgress")]
    return [
        _alert(
            "DeployctlNoProgress",
            f"(sum ({waiting}) + sum ({running})) > 0 and on() ({finished} or vector(0)) == 0",
            "10m",
            "critical",
            s,
            f"{s.release}: requests are in the engine and nothing has come out for 10 minutes",
            f"Release {s.release} in {s.namespace} holds {{{{ $value }}}} requests and has produced nothing for "
            "10 minutes: the engine is wedged (a hung collective, a stuck scheduler). `deployctl status` shows its "
            "pods; deleting a wedged pod restarts it.",
        )
    ], []


def _copies(s: Scope, profile: profiles.Profile, copy_down_after_s: int) -> list[dict[str, Any]]:
    """A pod that does not answer for longer than a load takes, and more copies missing than a rolling
    update takes out: one copy at a time (maxUnavailable 1) never pages while each loads in time."""
    copies = profile.rollout.replicas
    minutes = math.ceil((copy_down_after_s + COPY_DOWN_MARGIN_S) / 60)
    tolerated = max(copies - 1, 1)
    answering = f"(count ({s.up()} == 1) or vector(0))"
    return [
        _alert(
            "DeployctlPodNotAnswering",
            f"{s.up()} == 0",
            f"{minutes}m",
            "critical",
            s,
            f"{s.release}: a pod has not answered for {minutes} minutes",
            f"Pod {{{{ $labels.pod }}}} of release {s.release} in {s.namespace} has not answered its metrics endpoint "
            f"for {minutes} minutes, longer than a copy may take to load. `deployctl status {s.release} -n "
            f"{s.namespace}` explains pods that crash-loop or run out of memory.",
        ),
        _alert(
            "DeployctlCopiesMissing",
            f"{answering} < {tolerated}",
            f"{minutes}m",
            "critical",
            s,
            f"{s.release}: fewer than {tolerated} of {copies} copies answer",
            f"Only {{{{ $value }}}} of the {copies} copies of release {s.release} in {s.namespace} have answered for "
            f"{minutes} minutes: more are missing than a rolling update takes out at once. `deployctl status "
            f"{s.release} -n {s.namespace}` explains pods that are pending or failing.",
        ),
    ]


# --- the profile's SLOs --------------------------------------------------------------------------


def _slos(profile: profiles.Profile) -> dict[str, slo_language.Condition]:
    return slo_language.parse_slo(profile.gate.smoke.slo)


def _slo(profile: profiles.Profile, metric: str) -> slo_language.Condition | None:
    condition = _slos(profile).get(metric)
    return condition if condition and condition.op in ("<", "<=") else None


# --- what a stored PrometheusRule may hold ----------------------------------------------------------


def problems(spec: object, namespace: str, release: str) -> list[str]:
    """Why a PrometheusRule's spec is not one this module writes for the release: another group, a
    recording rule, a query that reads outside the release, labels that route as another team's, or a
    template that runs a query. Empty: deployctl may write it (``orchestrator.apply.confine``)."""
    if not isinstance(spec, Mapping) or set(spec) != {"groups"} or not isinstance(spec["groups"], list):
        return ["its spec holds something other than one list of rule groups"]
    found: list[str] = []
    for group in spec["groups"]:
        if not isinstance(group, Mapping) or group.get("name") != group_name(namespace, release):
            found.append(f"a rule group is not named {group_name(namespace, release)}")
        elif set(group) != {"name", "rules"} or not isinstance(group["rules"], list):
            found.append(f"group {group['name']} holds settings deployctl never writes")
        else:
            for rule in group["rules"]:
                found += _rule_problems(rule, namespace, release)
    return found


def _rule_problems(rule: object, namespace: str, release: str) -> list[str]:
    if (
        not isinstance(rule, Mapping)
        or "alert" not in rule
        or not set(rule) <= {"alert", "expr", "for", "labels", "annotations"}
    ):
        return ["a rule is not an alert as deployctl writes them (a recording rule, or unknown fields)"]
    name = rule["alert"]
    found = [f"alert {name}: {p}" for p in promql.confined(str(rule.get("expr", "")), namespace, release)]
    labels, annotations = rule.get("labels"), rule.get("annotations") or {}
    wanted = {"namespace": namespace, promql.RELEASE_LABEL: release}
    if (
        not isinstance(labels, Mapping)
        or labels.get("severity") not in _SEVERITIES
        or {k: v for k, v in labels.items() if k != "severity"} != wanted
    ):
        found.append(f"alert {name}: its labels are not severity, namespace {namespace} and release {release}")
    texts = annotations.values() if isinstance(annotations, Mapping) else [str(annotations)]
    if any(action not in _TEMPLATE_ACTIONS for text in texts for action in re.findall(r"\{\{.*?\}\}", str(text))):
        found.append(f"alert {name}: an annotation holds a template action deployctl never writes")
    return found
