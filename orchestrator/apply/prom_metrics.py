"""The canary's metrics source `prometheus`: the same counters, read from a Prometheus instead of the pods.

Each round is one instant query of the engine's series that the analysis reads (the metric table's
roles) and Prometheus' own ``up``, for the serving pods the API server lists, within the release's
PodMonitor labels (``namespace`` and ``deployctl_dev_release``, as the alerts select them). The
answer is turned back into what a pod's ``/metrics`` would have said, one pod at a time, so the
analysis is the one the `pods` source feeds (``orchestrator.gate.live_metrics``): a pod's side comes
from the API server, never from a label in Prometheus, and a pod whose last scrape failed, or that
Prometheus has not scraped yet, is left out of the round and named.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from orchestrator import errors, http
from orchestrator.apply.pod_metrics import Round, Target
from orchestrator.engines import metric_table
from orchestrator.gate import exposition, live_metrics
from orchestrator.profile import gate_endpoint
from orchestrator.profile.model import Profile
from orchestrator.render import promql

# Prometheus renames a scraped label that clashes with a target label (the operator's ``endpoint``,
# ``pod``, ``job`` ...) to ``exported_<name>``; the engine's own value is that one.
_EXPORTED = "exported_"


def series_labels(table: metric_table.MetricTable) -> dict[str, frozenset[str]]:
    """Every sample name the analysis reads on ``table``'s engine, as Prometheus stores them, with the
    labels the engine gives it (a histogram's ``le`` included): the labels that tell its series apart."""
    found: dict[str, frozenset[str]] = {}
    for role in metric_table.ROLES:
        series = table.role(role)
        if series is None:
            continue
        family = series.family
        labels = frozenset(family.labels)
        if family.kind == "histogram":
            found[family.name + "_bucket"] = labels | {"le"}
            found.update(dict.fromkeys((family.name + "_sum", family.name + "_count"), labels))
        elif family.kind == "counter":
            found.update(dict.fromkeys({family.name, family.name.removesuffix("_total") + "_total"}, labels))
        else:
            found[family.name] = labels
    return found


def series_names(table: metric_table.MetricTable) -> list[str]:
    return sorted(series_labels(table))


def query(table: metric_table.MetricTable, namespace: str, release: str, pods: list[str]) -> str:
    """The round's PromQL: the analysed series and ``up`` of ``pods``, within the release's labels."""
    names = "|".join(re.escape(name) for name in ["up", *series_names(table)])
    pod_names = "|".join(re.escape(pod) for pod in sorted(pods))
    return (
        f"{{__name__=~{_quoted(names)},namespace={_quoted(namespace)},"
        f"{promql.RELEASE_LABEL}={_quoted(release)},pod=~{_quoted(pod_names)}}}"
    )


def _quoted(text: str) -> str:
    """A PromQL double-quoted string (Go's escapes): a regex's backslashes survive the string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def check_source(profile: Profile, allowed_hosts: tuple[str, ...] = ()) -> None:
    """Refuse before anything is written (exit 2) a canary whose Prometheus (metrics.source prometheus)
    is on a host the operator has not allowed: the profile's author chooses the URL, and deployctl, or
    the controller with its own network position, would query it."""
    canary = profile.rollout.canary
    if canary is None or canary.metrics.source != "prometheus" or canary.metrics.prometheusUrl is None:
        return
    try:
        gate_endpoint.check_allowed(
            canary.metrics.prometheusUrl,
            allowed_hosts,
            "rollout.canary.metrics.prometheusUrl",
            "use rollout.canary.metrics.source pods (no Prometheus needed)",
        )
    except gate_endpoint.Refused as e:
        raise errors.InvalidProfile(e.message) from e


class Reader:
    """``with Reader(...) as r: r.read()``, as ``pod_metrics.Reader``: one query per round."""

    def __init__(
        self,
        url: str,
        table: metric_table.MetricTable,
        namespace: str,
        release: str,
        targets: Mapping[str, Target],
    ) -> None:
        self._url, self._targets = url, dict(targets)
        self._query = query(table, namespace, release, list(targets))
        self._labels = series_labels(table)

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def read(self, timeout: float = 10.0) -> Round:
        if not self._targets:
            return Round([], {})
        try:
            vector = http.prometheus_vector(self._url, self._query, timeout=timeout)
        except errors.DeployctlError as e:  # unreachable, refused, not Prometheus' JSON, a URL it cannot use
            why = errors.shorten(f"Prometheus did not answer: {e}", 200)
            return Round([], dict.fromkeys(self._targets, why))
        return split(vector, self._targets, self._labels)


def split(
    vector: list[tuple[dict[str, str], float]],
    targets: Mapping[str, Target],
    labels_of: Mapping[str, frozenset[str]],
) -> Round:
    """The answer, pod by pod: each answered pod's samples as families, keyed by sample name. A sample
    keeps only the labels its engine gives it (``labels_of``), so what a scrape job adds (the target's
    labels, pod labels copied by a relabeling) neither hides a series nor counts one pod twice."""
    up: dict[str, float] = {}
    samples: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], exposition.Sample]] = {}
    for labels, value in vector:
        pod, name = labels.get("pod", ""), labels.get("__name__", "")
        if pod not in targets:
            continue
        if name == "up":
            up[pod] = min(up.get(pod, 1.0), value)  # any scrape of the pod that failed fails the pod
            continue
        if name not in labels_of:
            continue
        kept = _engine_labels(labels, labels_of[name])
        key = (name, tuple(sorted(kept.items())))
        samples.setdefault(pod, {}).setdefault(key, exposition.Sample(name, kept, value))
    scrapes, unanswered = [], {}
    for pod, target in targets.items():
        if pod not in up:
            unanswered[pod] = "Prometheus has no scrape of it yet (is the PodMonitor's Prometheus scraping it?)"
        elif up[pod] != 1.0:
            unanswered[pod] = "Prometheus' last scrape of it failed (up 0)"
        else:
            families: dict[str, exposition.Family] = {}
            for sample in (samples.get(pod) or {}).values():
                families.setdefault(sample.name, exposition.Family(sample.name, "untyped")).samples.append(sample)
            scrapes.append(live_metrics.Scrape(pod, target.track, families))
    return Round(scrapes, unanswered)


def _engine_labels(labels: Mapping[str, str], wanted: frozenset[str]) -> dict[str, str]:
    kept = {k: v for k, v in labels.items() if k in wanted}
    for name in wanted:
        if _EXPORTED + name in labels:  # the engine's own value, renamed because a target label took its name
            kept[name] = labels[_EXPORTED + name]
    return kept
