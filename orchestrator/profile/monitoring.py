"""The profile's monitoring section: the PodMonitor that scrapes the engine, the release's alerts
(a PrometheusRule) and its Grafana dashboard. What they render lives in ``orchestrator.render``
(``alerts``, ``dashboard``); here only what a profile may say, and what it may not combine.
"""

from __future__ import annotations

from typing import Annotated

import pydantic
from pydantic import Field

from orchestrator import conventions
from orchestrator.profile import base as profile_base


def _prometheus_duration(v: str) -> str:
    conventions.prometheus_seconds(v)  # the ValueError says how to write one
    return v


# A Prometheus duration (15s, 1m, 1m30s), as the operator's CRDs take it; the canary's windows too.
Duration = Annotated[str, pydantic.AfterValidator(_prometheus_duration)]


class PodMonitorSpec(profile_base.Model):
    enabled: bool = Field(
        default=False,
        description="Render a Prometheus Operator PodMonitor that scrapes the engine's metrics path on the API "
        "port. Off by default: its CRD (monitoring.coreos.com/v1) exists only where the operator is installed.",
    )
    interval: Duration = Field(default="30s", description="Scrape interval, a Prometheus duration (15s, 1m, 1m30s).")
    labels: profile_base.UserLabels = Field(
        default_factory=dict,
        description="Extra labels on the PodMonitor: what your Prometheus' podMonitorSelector matches "
        "(kube-prometheus-stack: `release: <its release name>`).",
    )


class AlertsSpec(profile_base.Model):
    enabled: bool = Field(
        default=False,
        description="Render a Prometheus Operator PrometheusRule with the release's alerts (server errors, "
        "latency over the smoke SLOs, KV cache saturated, queue growing, a copy not serving), in the metric "
        "names of engine.version. Needs monitoring.podMonitor: the rules select series by its labels.",
    )
    labels: profile_base.UserLabels = Field(
        default_factory=dict,
        description="Extra labels on the PrometheusRule: what your Prometheus' ruleSelector matches "
        "(kube-prometheus-stack: `release: <its release name>`).",
    )


class DashboardSpec(profile_base.Model):
    enabled: bool = Field(
        default=False,
        description="Put the release's Grafana dashboard into the chart's values (`render --format helm-values`), "
        "so the chart renders its ConfigMap. `render --format dashboard` prints it whatever this says; "
        "`deployctl apply` never writes it.",
    )
    labels: profile_base.UserLabels = Field(
        default_factory=dict,
        description='Extra labels on the dashboard\'s ConfigMap, beside `grafana_dashboard: "1"` (what '
        "Grafana's dashboard sidecar watches for).",
    )


class MonitoringSpec(profile_base.Model):
    podMonitor: PodMonitorSpec = Field(
        default_factory=PodMonitorSpec, description="The Prometheus Operator PodMonitor for the engine's metrics."
    )
    alerts: AlertsSpec = Field(default_factory=AlertsSpec, description="The release's alert rules.")
    dashboard: DashboardSpec = Field(default_factory=DashboardSpec, description="The release's Grafana dashboard.")

    @pydantic.model_validator(mode="after")
    def _alerts_need_the_pod_monitor(self) -> MonitoringSpec:
        if self.alerts.enabled and not self.podMonitor.enabled:
            raise ValueError(
                "monitoring.alerts needs monitoring.podMonitor.enabled: the rules find the release's series by "
                "the labels its PodMonitor puts on them. Enable the PodMonitor, or turn the alerts off"
            )
        return self
