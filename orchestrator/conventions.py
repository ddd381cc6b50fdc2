"""The names and small rules that cross modules: label and annotation keys, rollout strategies,
GPU counting from pod specs, and the messages several commands print.

Each lives here once, on the bottom floor, so two modules can never disagree about them (they
did: two GPU counters read different fields of the same pod). Pure: plain data in, plain data out.
"""

from __future__ import annotations

import decimal
import math
import re
from collections.abc import Mapping
from typing import Literal

# --- the OpenAI-compatible API paths the smoke benchmark sends to ----------------------------------
# Here, not in gate.workload, so `deployctl bench`'s options name them without importing the gate.
Endpoint = Literal["/v1/chat/completions", "/v1/completions"]
CHAT_PATH: Endpoint = "/v1/chat/completions"
COMPLETIONS_PATH: Endpoint = "/v1/completions"  # what `vllm bench serve --endpoint` defaults to
ENDPOINTS = (CHAT_PATH, COMPLETIONS_PATH)

# --- labels and annotations ----------------------------------------------------------------------

MANAGED_BY = "deployctl"  # app.kubernetes.io/managed-by; the Helm chart writes the same
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
RELEASE_LABEL = "deployctl.dev/release"  # pruning, the rollout watch and status find objects by it
PROFILE_HASH_ANNOTATION = "deployctl.dev/profile-hash"  # the GitOps gate matches the synced spec by it
# A profile rendered with --force although the planner refused it: reviewers see the verdict.
FIT_VERDICT_ANNOTATION = "deployctl.dev/fit-verdict"
RECORD_LABEL = "deployctl.dev/release-record"
REVISION_LABEL = "deployctl.dev/revision"
OUTCOME_LABEL = "deployctl.dev/outcome"
RECORD_HASH_ANNOTATION = "deployctl.dev/record-sha256"
# The record's format (also in its record.json), readable before the body is parsed.
RECORD_FORMAT_LABEL = "deployctl.dev/record-format"

# A model copy that spans nodes is a group of pods: one leader (Ray head / LWS leader, the pod that
# serves HTTP) and its workers. Render puts these on every member, so the rollout watch, the Service
# and `status` find a copy's pods the same way on KubeRay and on LeaderWorkerSet.
COPY_LABEL = "deployctl.dev/copy"  # the copy's group object (RayCluster name); KubeRay only
GROUP_ROLE_LABEL = "deployctl.dev/group-role"  # leader | worker
LEADER_ROLE, WORKER_ROLE = "leader", "worker"
# The group objects deployctl creates, by kind: one RayCluster per copy, or one LeaderWorkerSet.
GROUP_KINDS = ("RayCluster", "LeaderWorkerSet")
# The Prometheus Operator's scrape object (profile monitoring.podMonitor); its CRD is optional too.
POD_MONITOR_KIND = "PodMonitor"
# The alert rules of a release (profile monitoring.alerts), the same operator's CRD.
PROMETHEUS_RULE_KIND = "PrometheusRule"
# On a canary's pods only: the stable copies' pods carry none, so adding the canary restarts nothing.
# The PodMonitor copies it onto every series, so dashboards and the analysis tell the two apart.
TRACK_LABEL = "deployctl.dev/track"
# The Prometheus Operator's kinds: what profile monitoring renders beside the workload.
MONITORING_KINDS = (POD_MONITOR_KIND, PROMETHEUS_RULE_KIND)
# The Gateway API route to the release's Service (rollout.canary.traffic httpRoute); its CRD is optional too.
HTTP_ROUTE_KIND = "HTTPRoute"
# The release kinds whose CRD a cluster may lack, which only some profiles render.
OPTIONAL_KINDS = (*GROUP_KINDS, *MONITORING_KINDS, HTTP_ROUTE_KIND)
# What the Prometheus Operator's CRDs accept as a duration (monitoring.coreos.com/v1 Duration):
# units from y to ms, largest first. The profile checks it and the chart's schema carries it.
PROMETHEUS_DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"


def prometheus_label(pod_label: str) -> str:
    """The name Prometheus gives a pod label that a PodMonitor's podTargetLabels copies onto series:
    every character a label name may not hold becomes an underscore (``deployctl.dev/release`` →
    ``deployctl_dev_release``)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", pod_label)


_DURATION_UNITS = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}


def prometheus_seconds(duration: str) -> float:
    """Seconds in a Prometheus duration (``1m30s`` → 90.0); ValueError when it is not one."""
    if not duration or not re.fullmatch(PROMETHEUS_DURATION, duration):
        raise ValueError(f"{duration!r} is not a Prometheus duration; write it as 30s, 1m or 1m30s")
    return float(sum(float(n) * _DURATION_UNITS[unit] for n, unit in re.findall(r"(\d+)(ms|[ywdhms])", duration)))


GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # set by NVIDIA GPU Feature Discovery

# --- rollout strategies --------------------------------------------------------------------------

# Deployment.spec.strategy for each strategy preflight can choose. "one-at-a-time" stops an old
# pod before its replacement starts: it can never hang on GPUs nobody has, at the price of
# downtime for a single replica (design.md, "Rollout on scarce GPUs").
STRATEGIES: dict[str, dict[str, object]] = {
    "surge": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
    "one-at-a-time": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
    "recreate": {"type": "Recreate"},
}

# What the profile's rollout.strategy renders to before preflight has looked at the cluster
# (`deployctl render` for GitOps). "auto" takes the choice that can never hang: surge needs a
# free GPU slot, which nobody has checked yet.
PROFILE_STRATEGY_DEFAULTS: dict[str, str] = {
    "surge": "surge",
    "no-surge": "one-at-a-time",
    "auto": "one-at-a-time",
    "recreate": "recreate",
}


def strategy_spec(name: str) -> dict[str, object]:
    """Deployment.spec.strategy for a strategy name, as a fresh dict the caller may keep."""
    spec = STRATEGIES[name]
    return {k: dict(v) if isinstance(v, dict) else v for k, v in spec.items()}


# --- GPU counting ----------------------------------------------------------------------------------


def parse_quantity(value: object) -> decimal.Decimal:
    """A Kubernetes resource quantity ("4", "500m", "1Ki", "2e3") as a number; ValueError if it is none."""
    text = str(value).strip()
    suffix, factor = next(((s, f) for s, f in _SUFFIXES if text.endswith(s)), ("", decimal.Decimal(1)))
    try:
        result = decimal.Decimal(text[: len(text) - len(suffix)]) * factor
    except decimal.InvalidOperation:
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from None
    if not result.is_finite():
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    return result


# No suffix is the tail of another ("Mi" ends in "i", "M" does not), so order does not matter;
# an exponent ("2e3", "1E3") ends in a digit and Decimal reads it.
_SUFFIXES: list[tuple[str, decimal.Decimal]] = [
    *((s, decimal.Decimal(1024) ** (i + 1)) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))),
    *((s, decimal.Decimal(1000) ** (i + 1)) for i, s in enumerate(("k", "M", "G", "T", "P", "E"))),
    ("m", decimal.Decimal("0.001")),
]


def gpu_count(value: object) -> int:
    """A GPU quantity as a whole number (0 when absent); GPUs are not divisible, so a fraction
    rounds down. ValueError when the value is not a quantity."""
    if value is None:
        return 0
    return max(0, math.floor(parse_quantity(value)))


def _mapping(value: object) -> Mapping[str, object]:
    """A field of a Kubernetes object that should hold a mapping; absent (or not one): empty."""
    return value if isinstance(value, Mapping) else {}


def _items(value: object) -> list[Mapping[str, object]]:
    """A field that should hold a list of mappings (containers); absent: empty."""
    return [_mapping(item) for item in value] if isinstance(value, list) else []


def container_gpus(container: Mapping[str, object]) -> int:
    """GPUs one container asks for. Extended resources may give only a limit; the API server then
    sets the request to it, so the request wins when both are there."""
    resources = _mapping(container.get("resources"))
    for kind in ("requests", "limits"):
        value = _mapping(resources.get(kind)).get(GPU_RESOURCE)
        if value is not None:
            return gpu_count(value)
    return 0


def pod_gpus(pod: Mapping[str, object]) -> int:
    """GPUs the scheduler reserves for a pod: containers summed, init containers at their peak.

    Init containers run one after another, so only the largest counts; a sidecar (an init
    container with restartPolicy Always) keeps running beside everything started after it.
    ValueError when a container's GPU quantity is not a quantity.
    """
    spec = _mapping(pod.get("spec"))
    sidecars = peak = 0
    for container in _items(spec.get("initContainers")):
        gpus = container_gpus(container)
        if container.get("restartPolicy") == "Always":
            sidecars += gpus
            peak = max(peak, sidecars)
        else:
            peak = max(peak, sidecars + gpus)
    running = sidecars + sum(container_gpus(c) for c in _items(spec.get("containers")))
    return max(running, peak)


# --- messages -------------------------------------------------------------------------------------


def no_records_message(release: str, namespace: str) -> str:
    """What every command that needs a release's history says when it has none."""
    return (
        f"release {release} has no records in namespace {namespace}; check the name and -n "
        f"(`deployctl history {release} -n NAMESPACE` lists a release's revisions)"
    )


# Kubernetes expands ``$(NAME)`` in a container's command and args to the value of the env variable
# NAME (a Secret's value, with HF_TOKEN from model.credentialsSecret) and turns ``$$`` into ``$``.
# A string from a profile must reach the container as written, so every ``$`` followed by ``(`` or
# ``$`` is doubled: the kubelet's expansion then gives back exactly the profile's text.
_EXPANDED_DOLLAR = re.compile(r"\$(?=[$(])")


def literal_arg(text: str) -> str:
    """``text`` escaped so that Kubernetes' ``$(VAR)`` expansion leaves it exactly as it is
    (``llama-$(HF_TOKEN)`` becomes ``llama-$$(HF_TOKEN)``, which the container receives as ``llama-$(HF_TOKEN)``)."""
    return _EXPANDED_DOLLAR.sub("$$", text)
