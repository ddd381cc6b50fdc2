"""`rollout.canary`: a new revision serves live traffic on a few copies first, judged side by side
with the stable copies over the same window, before it replaces them all.

Each step runs the canary on more copies, then analyses a window of live traffic: the canary's
latency percentiles and error rate against the stable copies' (``maxRatio``), and against the
absolute SLOs of ``gate.smoke.slo`` that live metrics can measure (``slo.LIVE_METRICS``). A window
with fewer than ``minRequests`` requests on either side is inconclusive, and ``inconclusive`` says
what then. After the last step every copy runs the new revision. What runs it and where the
metrics come from is ``orchestrator.apply``'s; here only what a profile may say.
"""

from __future__ import annotations

import difflib
import math
from typing import Annotated, Literal

import pydantic
from pydantic import Field, StringConstraints

from orchestrator import conventions
from orchestrator.profile import base as profile_base
from orchestrator.profile import gate_endpoint, slo
from orchestrator.profile.monitoring import Duration, PodMonitorSpec

# Ratios to the stable copies that judge a step unless the profile says otherwise: 20 % slower at the
# 95th percentile, or twice the error rate.
DEFAULT_MAX_RATIO = {"p95_ttft_ms": 1.2, "p95_e2el_ms": 1.2, "error_rate": 2.0}
# Below this, the stable copies' error rate counts as this much when the canary's is compared with
# it: against a stable side with no error, one failed canary request in a hundred is no regression.
ERROR_RATE_FLOOR = 0.01
_STEPS = ("rollout", "canary", "steps")  # the release-wide checks run on the whole profile
_SERVICE_NAME_MAX = 63  # a Service's name is a DNS label


class Analysis(profile_base.Model):
    window: Duration = Field(
        default="5m",
        description="Live traffic judged after the step's copies serve: a Prometheus duration (5m, 10m). At least "
        "two metrics intervals: a rate needs two scrapes in it.",
    )
    minRequests: int = Field(
        default=100,
        ge=1,
        description="Requests the canary and the stable copies must each have answered in the window; fewer is "
        "inconclusive (`inconclusive` says what then).",
    )


class Step(profile_base.Model):
    copies: int | None = Field(default=None, ge=1, description="Copies that run the canary in this step.")
    percent: int | None = Field(
        default=None,
        ge=1,
        le=99,
        description="Instead of `copies`: this share of rollout.replicas, rounded up to whole copies.",
    )
    analysis: Analysis = Field(default_factory=Analysis, description="The live traffic that judges the step.")

    @pydantic.model_validator(mode="after")
    def _one_size(self) -> Step:
        if (self.copies is None) == (self.percent is None):
            raise ValueError("a canary step gives its size as `copies` or as `percent`, one of the two")
        return self

    def canary_copies(self, replicas: int) -> int:
        """The copies this step runs the canary on, of ``replicas``."""
        if self.copies is not None:
            return self.copies
        return max(1, math.ceil((self.percent or 0) * replicas / 100))


class Metrics(profile_base.Model):
    source: Literal["pods", "prometheus"] = Field(
        default="pods",
        description="`pods`: deployctl reads each serving pod's metrics through the API server, no Prometheus "
        "needed (the air-gap default). `prometheus`: PromQL against `prometheusUrl`, over the series the "
        "release's PodMonitor labels (monitoring.podMonitor).",
    )
    prometheusUrl: (
        Annotated[
            str,
            pydantic.StringConstraints(pattern=r"^https?://[^\s/]+(/\S*)?$"),
            pydantic.AfterValidator(gate_endpoint.checked),  # no user@, ? or #: docs/canary.md
        ]
        | None
    ) = Field(
        default=None,
        description="With source prometheus: the Prometheus HTTP API's base URL, e.g. "
        "http://prometheus-operated.monitoring:9090.",
    )
    interval: Duration = Field(
        default="15s",
        description="How often deployctl reads the pods (source pods); with source prometheus, the "
        "PodMonitor's interval counts instead.",
    )


# The Gateway API's own patterns (gateway.networking.k8s.io/v1 ObjectName, SectionName, Namespace,
# Hostname): a value the HTTPRoute CRD would refuse is refused here, before a canary's steps run.
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_HOSTNAME = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class ParentRef(profile_base.Model):
    name: str = Field(min_length=1, max_length=253, pattern=_DNS_SUBDOMAIN, description="The Gateway's name.")
    namespace: str | None = Field(
        default=None, max_length=63, pattern=_DNS_LABEL, description="The Gateway's namespace; unset: the release's."
    )
    sectionName: str | None = Field(
        default=None,
        max_length=253,
        pattern=_DNS_SUBDOMAIN,
        description="One listener of the Gateway; unset: all.",
    )


class HTTPRouteSpec(profile_base.Model):
    parentRefs: list[ParentRef] = Field(
        default_factory=list,
        max_length=32,
        description="The Gateways the HTTPRoute attaches to (gateway.networking.k8s.io/v1).",
    )
    hostnames: list[Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=_HOSTNAME)]] = Field(
        default_factory=list, max_length=16, description="Host names the route answers; empty: any."
    )


class CanarySpec(profile_base.Model):
    steps: list[Step] = Field(
        min_length=1,
        max_length=20,  # bounds the admission rule's cost; more steps than copies would never grow
        description="Each step's canary size and analysis, growing; after the last, every copy runs the new "
        "revision. The first step also runs the smoke gate on the canary alone.",
    )
    maxRatio: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_MAX_RATIO),
        description="Canary against stable, per live metric (p95_ttft_ms, p99_e2el_ms, median_itl_ms, error_rate, "
        f"…): the most the canary's value may be, as a multiple of the stable copies'. The stable error rate "
        f"counts as at least {ERROR_RATE_FLOOR:g}.",
    )
    inconclusive: Literal["wait", "pass", "fail"] = Field(
        default="wait",
        description="A window with too few requests: `wait` for another window, until maxWait; `pass` the step; "
        "`fail` it and roll the canary back.",
    )
    maxWait: Duration = Field(
        default="30m",
        description="With inconclusive wait: how long a step may wait for enough traffic before it fails.",
    )
    traffic: Literal["service", "httpRoute"] = Field(
        default="service",
        description="`service`: the Service spreads requests over ready endpoints, so c canary copies of n get "
        "about c/n (the analysis measures the real share). `httpRoute`: a Gateway API HTTPRoute deployctl renders "
        "and owns weighs the two sides.",
    )
    httpRoute: HTTPRouteSpec = Field(
        default_factory=HTTPRouteSpec, description="With traffic httpRoute: where the route attaches."
    )
    metrics: Metrics = Field(default_factory=Metrics, description="Where the analysis reads the engines' metrics.")

    @pydantic.field_validator("maxRatio")
    @classmethod
    def _known_positive_ratios(cls, v: dict[str, float]) -> dict[str, float]:
        for metric, ratio in v.items():
            if metric not in slo.LIVE_METRICS:
                close = difflib.get_close_matches(metric, slo.LIVE_METRICS, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise profile_base.field_error(
                    (metric,),
                    f"{metric!r} is not a metric live traffic measures{hint}; these are: {', '.join(slo.LIVE_METRICS)}",
                )
            if not ratio > 0 or not math.isfinite(ratio):
                raise profile_base.field_error(
                    (metric,), f"{ratio:g} is no ratio to the stable copies: give a number above 0, e.g. 1.2"
                )
        return v

    @pydantic.model_validator(mode="after")
    def _sources(self) -> CanarySpec:
        if self.metrics.source == "prometheus" and not self.metrics.prometheusUrl:
            raise profile_base.field_error(
                ("metrics", "prometheusUrl"), "metrics.source prometheus needs the Prometheus URL to query"
            )
        if self.traffic == "httpRoute" and not self.httpRoute.parentRefs:
            raise profile_base.field_error(
                ("httpRoute", "parentRefs"), "traffic httpRoute needs the Gateway the route attaches to"
            )
        if conventions.prometheus_seconds(self.metrics.interval) <= 0:
            raise profile_base.field_error(("metrics", "interval"), "the metrics interval must be above 0")
        return self

    def largest_step(self, replicas: int) -> int:
        """The most copies any step runs the canary on, of ``replicas``."""
        return max(step.canary_copies(replicas) for step in self.steps)

    def check_route_names(self, release: str) -> None:
        """Refuse a weighed route whose side Services' names (`<release>-stable`, `<release>-canary`)
        would pass the 63 characters a Service name may have: found only once a step ran, otherwise."""
        longest = len(release) + len("-stable")
        if self.traffic == "httpRoute" and longest > _SERVICE_NAME_MAX:
            raise profile_base.field_error(
                ("metadata", "name"),
                f"with rollout.canary.traffic httpRoute the canary weighs the Services {release}-stable and "
                f"{release}-canary, {longest} characters where a Service name may have {_SERVICE_NAME_MAX}: "
                f"shorten the release's name to at most {_SERVICE_NAME_MAX - len('-stable')} characters",
            )

    def check_release(self, replicas: int, group_engine: str | None, pod_monitor: PodMonitorSpec) -> None:
        """Refuse a canary the release cannot run: a LeaderWorkerSet (one object holds every copy), the
        Prometheus source without the PodMonitor whose labels it queries, and bad steps."""
        if group_engine == "lws":
            raise profile_base.field_error(
                ("rollout", "canary"),
                "a LeaderWorkerSet holds every copy in one object, so no copy can run another revision; a canary "
                "across nodes needs placement.groupEngine kuberay (one RayCluster per copy)",
            )
        if group_engine == "kuberay" and self.traffic == "httpRoute":
            raise profile_base.field_error(
                ("rollout", "canary", "traffic"),
                "a route weighs the stable side through a Service that selects the stable copies' pods alone, and "
                "the pods of a KubeRay copy carry no label shared by the stable copies only (adding one would "
                "restart them); use traffic service, where the release's Service spreads requests over every head",
            )
        interval = self.metrics.interval
        if self.metrics.source == "prometheus":
            if not pod_monitor.enabled:
                raise profile_base.field_error(
                    ("rollout", "canary", "metrics", "source"),
                    "metrics.source prometheus queries the series the release's PodMonitor labels: set "
                    "monitoring.podMonitor.enabled: true, or use source pods",
                )
            interval = pod_monitor.interval
            if conventions.prometheus_seconds(interval) < 1:
                raise profile_base.field_error(
                    ("monitoring", "podMonitor", "interval"),
                    f"with rollout.canary.metrics.source prometheus the canary queries Prometheus every "
                    f"monitoring.podMonitor.interval, and {interval} would flood it; make it at least 1s",
                )
        self._check_steps(replicas, interval)

    def _check_steps(self, replicas: int, scrape_interval: str) -> None:
        """Refuse steps that do not grow, that leave no stable copy, or whose window holds fewer than two
        scrapes of ``scrape_interval`` (the interval the analysis reads at)."""
        interval = conventions.prometheus_seconds(scrape_interval)
        previous = 0
        for index, step in enumerate(self.steps):
            copies = step.canary_copies(replicas)
            size = ("copies",) if step.copies is not None else ("percent",)
            if copies <= previous:
                raise profile_base.field_error(
                    (*_STEPS, index, *size),
                    f"step {index + 1} runs the canary on {copies} copies, no more than step {index}'s {previous}: "
                    "each step must grow",
                )
            if copies >= replicas and replicas > 1:
                raise profile_base.field_error(
                    (*_STEPS, index, *size),
                    f"step {index + 1} runs the canary on {copies} of rollout.replicas {replicas} copies, which leaves "
                    "no stable copy to compare it with; the promotion after the last step moves every copy",
                )
            if copies > replicas:
                raise profile_base.field_error(
                    (*_STEPS, index, *size), f"step {index + 1} asks for {copies} canary copies of {replicas}"
                )
            window = conventions.prometheus_seconds(step.analysis.window)
            if window < 2 * interval:
                raise profile_base.field_error(
                    (*_STEPS, index, "analysis", "window"),
                    f"a window of {step.analysis.window} holds fewer than two scrapes {scrape_interval} apart, and a "
                    f"rate needs two; make it at least {_seconds_text(2 * interval)}",
                )
            previous = copies


def _seconds_text(seconds: float) -> str:
    whole = math.ceil(seconds)
    if whole < 60 or whole % 60:
        return f"{whole // 60}m{whole % 60}s" if whole >= 60 else f"{whole}s"
    return f"{whole // 60}m"
