"""The Helm chart's values: one pydantic model per section, resolved from a profile by ``render``.

Their JSON schema is the chart's values.schema.json (scripts/gen_chart_schema.py) and their
descriptions its README's table (scripts/gen_chart_readme.py): ``deployctl render`` and ``helm
template`` fed ``render --format helm-values`` place the same values, and tests hold them equal.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator import conventions

# The pod's last words: vLLM stops taking requests on SIGTERM and finishes what it can; a
# minute covers short completions without holding a GPU node through a drain for long.
TERMINATION_GRACE_SECONDS = 60


# --- the chart's values ------------------------------------------------------------------------


class _Values(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ImageValues(_Values):
    reference: str = Field(
        description="vLLM OpenAI-server image, pinned by digest (`repo@sha256:…`) so every replica and "
        "every rollback runs the same bytes."
    )
    pullPolicy: Literal["IfNotPresent", "Always", "Never"] = Field(
        default="IfNotPresent",
        description="Image pull policy; a digest never changes, so pulling once is enough.",
    )


class ImagePullSecret(_Values):
    name: str = Field(description="Name of a Secret of type kubernetes.io/dockerconfigjson.")


class StrategyValues(_Values):
    # Flat rather than the Deployment's own shape: Helm merges a values map into the chart's
    # default, and {type: Recreate} would inherit the default's rollingUpdate, which the API
    # server rejects. Here the template simply leaves the two numbers out for Recreate.
    type: Literal["RollingUpdate", "Recreate"] = Field(
        default="RollingUpdate", description="Deployment strategy type; Recreate stops every pod first."
    )
    maxSurge: int | str = Field(
        default=0,
        description="Extra pods during a rolling update (count or percent). 0 by default: a surge pod needs "
        "free GPUs, else it stays Pending and the rollout never ends.",
    )
    maxUnavailable: int | str = Field(
        default=1, description="Pods a rolling update may take down at once (count or percent)."
    )


class EngineValues(_Values):
    kind: Literal["vllm", "tgi", "trtllm", "sglang"] = Field(default="vllm", description="The serving engine.")
    version: str = Field(description="The engine's version in the image, shown as `app.kubernetes.io/version`.")


class ServerValues(_Values):
    command: list[str] = Field(
        description="Container command: `vllm serve`, `text-generation-launcher`, `trtllm-serve serve` or "
        "`python3 -m sglang.launch_server`.",
    )
    args: list[str] = Field(
        description="The engine's arguments: the flags deployctl derived from the profile (the model path "
        "among them), then the profile's extraArgs (a later flag wins)."
    )
    port: int = Field(default=8000, ge=1, le=65535, description="Port of the OpenAI-compatible API and health.")
    healthPath: str = Field(
        default="/health",
        description="The path that answers 200 once the model is loaded and generates (`helm test` asks it; the "
        "probes ask their own, cheaper path where the engine has one).",
    )
    env: list[dict[str, object]] = Field(
        default_factory=list,
        description="Container environment (Kubernetes EnvVars): HOME, the air-gap switches, HF_TOKEN.",
    )


class ModelValues(_Values):
    servedName: str = Field(description="Model name clients send (`--served-model-name`), shown in NOTES.txt.")
    claimName: str = Field(
        default="",
        description="PersistentVolumeClaim holding the weights, mounted read-only; empty: use hostPath.",
    )
    hostPath: str = Field(
        default="",
        description="Node directory holding the weights, used when claimName is empty (mounted read-only).",
    )
    mountPath: str = Field(default="/models", description="Where the weights volume appears in the container.")


class DisruptionValues(_Values):
    minAvailable: int = Field(
        default=0,
        ge=0,
        description="Pods that must stay available during a drain; 0: use maxUnavailable instead.",
    )
    maxUnavailable: int = Field(
        default=1, ge=0, description="Pods a drain may take at once; used when minAvailable is 0."
    )


class CopyValues(_Values):
    name: str = Field(
        description="Name of the group object: the release name, a hash of the pod templates and the copy's "
        "index. A changed template makes new copies, never changes a running one, so a copy never runs mixed "
        "revisions."
    )
    affinity: dict[str, object] = Field(
        description="Affinity of the copy's pods: the GPU product and NVLink node labels, one pod per node, "
        "and all of them in one topology domain."
    )


class GroupValues(_Values):
    engine: Literal["", "kuberay", "lws"] = Field(
        default="",
        description="Empty: each copy is one pod of a Deployment. `kuberay`: one RayCluster per copy (vLLM's Ray "
        "backend). `lws`: one LeaderWorkerSet (vLLM's multiprocessing multi-node backend).",
    )
    size: int = Field(default=1, ge=1, description="Pods in one copy, one per node (placement.nodesPerCopy).")
    copies: list[CopyValues] = Field(
        default_factory=list,
        description="The group objects: one RayCluster per copy, or the single LeaderWorkerSet.",
    )
    leaderCommand: list[str] = Field(
        default_factory=list,
        description="Command of the leader (Ray head, LWS leader): the pod that serves the OpenAI API.",
    )
    workerCommand: list[str] = Field(
        default_factory=list,
        description="Command of the workers; empty on KubeRay, which starts `ray start` in them itself.",
    )
    maxSurge: int = Field(
        default=0, ge=0, description="LeaderWorkerSet rolling update: extra copies started beside the old."
    )
    maxUnavailable: int = Field(
        default=1, ge=0, description="LeaderWorkerSet rolling update: copies taken down at once."
    )


class NetworkPolicyValues(_Values):
    enabled: bool = Field(
        default=True,
        description="Render a NetworkPolicy: ingress only on the serving port, egress only to DNS.",
    )
    allowEgressCIDRs: list[str] = Field(
        default_factory=list, description="CIDRs the pods may still reach (all ports), e.g. a metrics sink."
    )


class PodMonitorValues(_Values):
    enabled: bool = Field(
        default=False,
        description="Render a Prometheus Operator PodMonitor (monitoring.coreos.com/v1) for the serving pods; "
        "off by default, as the CRD exists only where the Prometheus Operator is installed.",
    )
    interval: str = Field(
        default="30s",
        pattern=conventions.PROMETHEUS_DURATION,
        description="How often Prometheus scrapes each pod (a Prometheus duration: 15s, 1m).",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Extra labels on the PodMonitor, for the Prometheus' podMonitorSelector (e.g. `release: "
        "kube-prometheus-stack`).",
    )
    # Not under `server`: those values shape the pods, and a changed pod template renames (restarts) a
    # multi-node release's copies; where the metrics are read changes no pod.
    path: str = Field(
        default="/metrics",
        description="The engine's Prometheus metrics path on the API port (TensorRT-LLM: /prometheus/metrics).",
    )


class PrometheusRuleValues(_Values):
    enabled: bool = Field(
        default=False,
        description="Render a Prometheus Operator PrometheusRule (monitoring.coreos.com/v1) with the release's "
        "alerts; needs podMonitor (the rules select series by its labels).",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Extra labels on the PrometheusRule, for the Prometheus' ruleSelector (e.g. `release: "
        "kube-prometheus-stack`).",
    )
    annotations: dict[str, str] = Field(
        default_factory=dict,
        description="Annotations deployctl sets: the metric table the rules were written for, and the alerts the "
        "engine has no metric for.",
    )
    # Written by deployctl, not by hand: the queries name the series of the engine version's metric
    # table, which a Go template cannot look up.
    groups: list[dict[str, object]] = Field(
        default_factory=list, description="The rule groups, as `deployctl render --format rules` prints them."
    )


class ParentRefValues(_Values):
    name: str = Field(description="The Gateway's name.")
    namespace: str = Field(default="", description="The Gateway's namespace; empty: the release's.")
    sectionName: str = Field(default="", description="One listener of the Gateway; empty: all of them.")


class HTTPRouteValues(_Values):
    enabled: bool = Field(
        default=False,
        description="Render a Gateway API HTTPRoute (gateway.networking.k8s.io/v1) to the release's Service; a "
        "canary (rollout.canary.traffic httpRoute) weighs the two sides on it while it runs.",
    )
    parentRefs: list[ParentRefValues] = Field(default_factory=list, description="The Gateways the route attaches to.")
    hostnames: list[str] = Field(default_factory=list, description="Host names the route answers; empty: any.")


class DashboardValues(_Values):
    enabled: bool = Field(
        default=False,
        description="Render the release's Grafana dashboard as a ConfigMap for Grafana's dashboard sidecar.",
    )
    labels: dict[str, str] = Field(
        default_factory=dict, description='Extra labels on the ConfigMap, beside `grafana_dashboard: "1"`.'
    )
    content: str = Field(
        default="",
        description="The dashboard's JSON model, as `deployctl render --format dashboard` writes it.",
    )


# The Kubernetes objects a profile passes to the engine pods as they are: the descriptions of
# Values' four lists of them.
_FROM_PROFILE = {
    "extraEnv": "More EnvVars of the engine container, after `server.env` (the profile's engine.env): `{name, "
    "value}` or `{name, valueFrom: {secretKeyRef: {name, key}}}`.",
    "envFrom": "EnvFromSources of the engine container (the profile's engine.envFrom): `{secretRef: {name}}`, "
    "`{configMapRef: {name}, prefix: APP_}`.",
    "extraVolumes": "More volumes of the engine pods, after the weights, /dev/shm and HOME (the profile's "
    "engine.volumes).",
    "extraVolumeMounts": "More volumeMounts of the engine container, `{name, mountPath, readOnly, subPath}` (the "
    "profile's engine.volumeMounts).",
}


class Values(_Values):
    """The Helm chart's values: every setting resolved from a profile, as both templates use it."""

    nameOverride: str = Field(default="", description="Replaces the chart name in `app.kubernetes.io/name`.")
    fullnameOverride: str = Field(
        default="",
        description="Name of every object; deployctl sets the profile's metadata.name. Empty: release name.",
    )
    engine: EngineValues = Field(description="The serving engine and its version.")
    profileHash: str = Field(
        default="",
        description="SHA-256 of the profile these values came from (annotation deployctl.dev/profile-hash).",
    )
    commonLabels: dict[str, str] = Field(
        default_factory=dict, description="Extra labels on every object (the profile's metadata.labels)."
    )
    image: ImageValues = Field(description="The engine's image.")
    imagePullSecrets: list[ImagePullSecret] = Field(
        default_factory=list, description="Secrets for pulling from the internal registry."
    )
    replicaCount: int = Field(default=1, ge=1, description="Model copies; each holds all the GPUs of one pod.")
    strategy: StrategyValues = Field(default_factory=StrategyValues, description="How pods are replaced.")
    progressDeadlineSeconds: int = Field(
        default=1800, ge=1, description="Deployment progress deadline; large models take minutes to load."
    )
    revisionHistoryLimit: int = Field(default=10, ge=0, description="Old ReplicaSets kept for `kubectl rollout undo`.")
    server: ServerValues = Field(description="The engine's server container.")
    model: ModelValues = Field(description="The weights and where they are mounted.")
    resources: dict[str, object] = Field(
        description="Container resources: GPUs (request = limit), CPU request, memory request = limit."
    )
    shmSizeLimit: str = Field(
        default="1Gi", description="Size of the memory-backed /dev/shm NCCL uses between the pod's GPUs."
    )
    startupProbe: dict[str, object] = Field(
        description="Startup probe on the engine's probe path (/health; SGLang's /ready); failureThreshold × "
        "periodSeconds is the time allowed to load."
    )
    readinessProbe: dict[str, object] = Field(description="Readiness probe on the engine's probe path.")
    livenessProbe: dict[str, object] = Field(
        description="Liveness probe on the engine's probe path; patient: a busy server is slow, a restart costs "
        "minutes."
    )
    extraEnv: list[dict[str, object]] = Field(default_factory=list, description=_FROM_PROFILE["extraEnv"])
    envFrom: list[dict[str, object]] = Field(default_factory=list, description=_FROM_PROFILE["envFrom"])
    extraVolumes: list[dict[str, object]] = Field(default_factory=list, description=_FROM_PROFILE["extraVolumes"])
    extraVolumeMounts: list[dict[str, object]] = Field(
        default_factory=list, description=_FROM_PROFILE["extraVolumeMounts"]
    )
    podSecurityContext: dict[str, object] = Field(description="Pod security context (Pod Security `restricted`).")
    securityContext: dict[str, object] = Field(description="Container security context (Pod Security `restricted`).")
    podLabels: dict[str, str] = Field(default_factory=dict, description="Extra labels on the pods.")
    podAnnotations: dict[str, str] = Field(default_factory=dict, description="Extra annotations on the pods.")
    nodeSelector: dict[str, str] = Field(default_factory=dict, description="Node labels a pod requires.")
    affinity: dict[str, object] = Field(
        default_factory=dict,
        description="Pod affinity: the required GPU product (`nvidia.com/gpu.product` In the profile's "
        "hardware.productLabels, else the catalog's values for hardware.gpu) and NVLink node labels.",
    )
    tolerations: list[dict[str, object]] = Field(default_factory=list, description="Tolerations of the pods.")
    priorityClassName: str = Field(default="", description="PriorityClass of the pods; empty: none.")
    runtimeClassName: str = Field(default="", description="RuntimeClass of the pods; empty: the cluster default.")
    terminationGracePeriodSeconds: int = Field(
        default=TERMINATION_GRACE_SECONDS, ge=0, description="Seconds a stopping pod gets to finish requests."
    )
    podDisruptionBudget: DisruptionValues = Field(
        default_factory=DisruptionValues, description="How many pods a node drain may take at once."
    )
    group: GroupValues = Field(
        default_factory=GroupValues,
        description="A copy that spans nodes: its group engine, size, group objects and commands.",
    )
    networkPolicy: NetworkPolicyValues = Field(
        default_factory=NetworkPolicyValues, description="The air-gap NetworkPolicy."
    )
    podMonitor: PodMonitorValues = Field(
        default_factory=PodMonitorValues, description="A Prometheus Operator PodMonitor for the engine's metrics."
    )
    prometheusRule: PrometheusRuleValues = Field(
        default_factory=PrometheusRuleValues, description="A Prometheus Operator PrometheusRule: the release's alerts."
    )
    dashboard: DashboardValues = Field(default_factory=DashboardValues, description="The release's Grafana dashboard.")
    httpRoute: HTTPRouteValues = Field(
        default_factory=HTTPRouteValues, description="A Gateway API HTTPRoute to the release's Service."
    )
