"""The canary's metrics source `pods`: each serving pod's /metrics, read through the API server.

No Prometheus is needed (the air-gap default): deployctl reaches each pod through a port-forward,
as the gate does, with the permission the gate already has (``pods/portforward``), and reads the
engine's metrics path. A pod that does not answer is left out of that round and named, so the
analysis counts the pods it heard from (``orchestrator.gate.live_metrics``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from typing import Any

from orchestrator import conventions, errors, http
from orchestrator.gate import exposition, live_metrics
from orchestrator.kube import Kube, PortForwarder
from orchestrator.kube import status as kube_status
from orchestrator.render import canary as canary_workload


@dataclasses.dataclass(frozen=True)
class Target:
    """A pod the analysis reads: its side and the port its engine serves metrics on."""

    track: str  # "canary" | "stable"
    port: int


@dataclasses.dataclass(frozen=True)
class Round:
    """One read of every pod: what each answered, and why the others did not."""

    scrapes: list[live_metrics.Scrape]
    unanswered: dict[str, str]  # pod -> why


class Reader:
    """Port-forwards to the pods, kept open across rounds: ``with Reader(...) as r: r.read()``."""

    def __init__(self, kube: Kube, namespace: str, targets: Mapping[str, Target], path: str) -> None:
        self._kube, self._namespace, self._path = kube, namespace, path
        self._targets = dict(targets)  # pod -> its side and port: the two sides may serve on different ports
        self._urls: dict[str, str] = {}
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Reader:
        try:
            for pod, target in self._targets.items():
                forwarder = self._stack.enter_context(PortForwarder(self._kube, self._namespace, pod, target.port))
                self._urls[pod] = forwarder.url
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def read(self, timeout: float = 10.0) -> Round:
        scrapes: list[live_metrics.Scrape] = []
        unanswered: dict[str, str] = {}
        for pod, url in self._urls.items():
            try:
                families = exposition.parse(http.metrics_text(url, self._path, timeout=timeout))
            except (errors.EndpointError, exposition.ExpositionError) as e:
                unanswered[pod] = errors.shorten(str(e), 200)
                continue
            scrapes.append(live_metrics.Scrape(pod, self._targets[pod].track, families))
        return Round(scrapes, unanswered)


def serving_pods(kube: Kube, name: str, namespace: str) -> dict[str, Target]:
    """The release's Ready pods that serve (a port named http), by side: the canary's carry the track."""
    pods, _ = kube.list("Pod", namespace, labels=f"{conventions.RELEASE_LABEL}={name}")
    targets: dict[str, Target] = {}
    for pod in pods:
        port = _http_port(pod)
        if port is None or pod["metadata"].get("deletionTimestamp") or not kube_status.Pod.from_object(pod).ready:
            continue
        labels = pod["metadata"].get("labels") or {}
        track = (
            canary_workload.CANARY
            if labels.get(conventions.TRACK_LABEL) == canary_workload.CANARY
            else canary_workload.STABLE
        )
        targets[kube_status.name_of(pod)] = Target(track, port)
    return targets


def _http_port(pod: Mapping[str, Any]) -> int | None:
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == "http" and isinstance(port.get("containerPort"), int):
                return int(port["containerPort"])
    return None
