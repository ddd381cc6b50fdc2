"""Profile and plan → every setting of the release, resolved once into ``chart_values.Values``.

The Jinja2 templates (``orchestrator.render.manifests``) and the Helm chart's Go templates only
place these values into objects. Here are the engine's command and environment, the probes sized
by the start-up estimate, the pod security settings, the node affinity, and for copies that span
nodes the group engine's commands and the copies' names, hashed from their pod templates.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shlex
from collections.abc import Mapping, Sequence

from pydantic import BaseModel

from orchestrator import conventions, errors
from orchestrator.catalog import lookup as catalog
from orchestrator.plan import planner
from orchestrator.profile import engine as profile_engine
from orchestrator.profile import model as profiles
from orchestrator.profile import pod as profile_pod
from orchestrator.profile import weights as profile_weights
from orchestrator.render import alerts, chart_values, compile_cache, dashboard

# Pod Security "restricted" needs a non-root user. The official image has none (it runs as
# root), so we pick a numeric uid, which the kubelet can check without reading /etc/passwd,
# and give it a writable HOME for the caches engines and their kernels write (torch.compile,
# Triton, FlashInfer). The weights must then be readable by any user (0644 files, 0755 directories).
RUN_AS_UID = 1000
HOME_DIR = profile_pod.HOME_DIR


# Start-up time when the profile does not give engine.startupSeconds: a fixed part (CUDA and
# NCCL initialisation, torch.compile, CUDA-graph capture, which do not grow with the weights)
# plus reading the pod's weights at an assumed 250 MiB/s, what a busy NFS or Ceph claim
# sustains; local NVMe is ten times faster, so this errs long. Llama 3 70B in bf16 (131 GiB)
# comes to about 14 minutes, an 8B model to about 6.
STARTUP_FIXED_SECONDS = 300
STORAGE_MIB_PER_SECOND = 250
PROBE_PERIOD_SECONDS = 10

# A copy across nodes waits for its workers before vLLM starts; Ray's own file-descriptor advice
# (KubeRay runs `ulimit -n 65536` before `ray start`) holds for the head we start ourselves.
RAY_BACKEND_ARGS = ("--distributed-executor-backend", "ray")
# vLLM's multiprocessing backend across nodes: torch.distributed's rendezvous on the leader.
MP_MASTER_PORT = 29500

# LeaderWorkerSet injects these into every pod of a group (sigs.k8s.io/lws, pkg/utils/env).
LWS_ENV = profile_pod.LWS_ENV
LWS_GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
# Characters of the release name kept in a RayCluster's name: KubeRay derives longer names from it
# ("<name>-head-svc", pod names with a group suffix), which must stay valid DNS labels. The longest
# name is a canary copy's, "<prefix>-<8-hex digest>-c<index>": 54 characters at index 999, so its
# "-head-svc" is 63.
GROUP_NAME_PREFIX_CHARS = 40


def values(profile: profiles.Profile, plan: planner.Plan, strategy: Mapping[str, object] | None) -> chart_values.Values:
    """Every setting of ``profile``'s release, resolved once; ``strategy`` as ``manifests.render`` takes it."""
    engine, placement, rollout = profile.engine, profile.placement, profile.rollout
    probe = engine.engine.probe_path
    if strategy is None:
        strategy = conventions.strategy_spec(conventions.PROFILE_STRATEGY_DEFAULTS[rollout.strategy])
    rolling = _strategy(strategy)
    cache_volumes, cache_mounts = compile_cache.volumes(profile)
    values = chart_values.Values(
        fullnameOverride=profile.metadata.name,
        engine=chart_values.EngineValues(kind=engine.kind, version=engine.engine_version),
        profileHash=profile.spec_hash(),
        commonLabels=_sorted(profile.metadata.labels),
        image=chart_values.ImageValues(reference=engine.image),
        imagePullSecrets=[chart_values.ImagePullSecret(name=n) for n in engine.imagePullSecrets],
        replicaCount=rollout.replicas,
        strategy=rolling,
        progressDeadlineSeconds=rollout.progressDeadlineSeconds,
        revisionHistoryLimit=rollout.revisionHistory,
        server=_server(profile, plan),
        group=_group(profile, rolling),
        model=_model(profile.model.name, profile.model.source),
        resources=_resources(engine, profile.gpus_per_pod),
        shmSizeLimit=engine.shmSize or ("16Gi" if profile.gpus_per_pod > 1 else "1Gi"),
        startupProbe=_probe(
            probe, timeout=5, failures=math.ceil(startup_allowed(profile, plan) / PROBE_PERIOD_SECONDS)
        ),
        readinessProbe=_probe(probe, timeout=5, failures=3),
        livenessProbe=_probe(probe, timeout=10, failures=6, period=30),
        podSecurityContext=_pod_security(engine),
        securityContext={"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        extraEnv=_k8s(engine.env),
        envFrom=_k8s(engine.envFrom),
        extraVolumes=_k8s(engine.volumes) + cache_volumes,
        extraVolumeMounts=_k8s(engine.volumeMounts) + cache_mounts,
        podLabels=_sorted(placement.podLabels),
        podAnnotations=_sorted(placement.podAnnotations),
        nodeSelector=_sorted(placement.nodeSelector),
        affinity=_affinity(profile),
        tolerations=[t.model_dump(mode="json", exclude_none=True) for t in placement.tolerations],
        priorityClassName=placement.priorityClassName or "",
        runtimeClassName=placement.runtimeClassName or "",
        podDisruptionBudget=_disruption(rollout.replicas, profile.nodes_per_copy),
        networkPolicy=chart_values.NetworkPolicyValues(
            enabled=profile.airgap.denyEgress, allowEgressCIDRs=list(profile.airgap.allowEgressCIDRs)
        ),
        podMonitor=chart_values.PodMonitorValues(
            path=engine.engine.metrics_path, **profile.monitoring.podMonitor.model_dump()
        ),
        prometheusRule=_prometheus_rule(profile, plan),
        dashboard=_dashboard(profile),
        httpRoute=_http_route(profile),
    )
    return _with_copies(values, profile)


def _http_route(profile: profiles.Profile) -> chart_values.HTTPRouteValues:
    canary = profile.rollout.canary
    if canary is None or canary.traffic != "httpRoute":
        return chart_values.HTTPRouteValues()
    route = canary.httpRoute
    return chart_values.HTTPRouteValues(
        enabled=True,
        parentRefs=[
            chart_values.ParentRefValues(name=r.name, namespace=r.namespace or "", sectionName=r.sectionName or "")
            for r in route.parentRefs
        ],
        hostnames=list(route.hostnames),
    )


def _prometheus_rule(profile: profiles.Profile, plan: planner.Plan) -> chart_values.PrometheusRuleValues:
    if not profile.monitoring.alerts.enabled:
        return chart_values.PrometheusRuleValues()
    rule = alerts.prometheus_rule(profile, startup_allowed(profile, plan), {}, profile.metadata.name)
    return chart_values.PrometheusRuleValues(
        enabled=True,
        labels=_sorted(profile.monitoring.alerts.labels),
        annotations=rule["metadata"]["annotations"],
        groups=rule["spec"]["groups"],
    )


def _dashboard(profile: profiles.Profile) -> chart_values.DashboardValues:
    if not profile.monitoring.dashboard.enabled:
        return chart_values.DashboardValues()
    return chart_values.DashboardValues(
        enabled=True, labels=_sorted(profile.monitoring.dashboard.labels), content=dashboard.text(profile)
    )


def _server(profile: profiles.Profile, plan: planner.Plan) -> chart_values.ServerValues:
    serving = profile.engine.engine
    settings = profile.server_settings()
    if profile.engine.skipMemoryProfiling:
        settings = dataclasses.replace(settings, kv_cache_memory_bytes=calibrated_kv_bytes(plan))
    return chart_values.ServerValues(
        command=list(serving.command),
        args=_literal_args(serving.args(settings)),
        port=profile.engine.port,
        healthPath=serving.health_path,
        env=_env(profile),
    )


def _model(name: str, source: profile_weights.PvcSource | profile_weights.HostPathSource) -> chart_values.ModelValues:
    return chart_values.ModelValues(
        servedName=name,
        claimName=source.pvc if isinstance(source, profile_weights.PvcSource) else "",
        hostPath=source.hostPath if isinstance(source, profile_weights.HostPathSource) else "",
        mountPath=source.mountPath,
    )


def _resources(engine: profile_engine.EngineSpec, gpus_per_pod: int) -> dict[str, object]:
    gpus = str(gpus_per_pod)
    return {
        # No CPU limit: CFS throttling stalls the tokenizer and scheduler loop under load.
        "requests": {"cpu": engine.cpu, "memory": engine.memory, conventions.GPU_RESOURCE: gpus},
        "limits": {"memory": engine.memory, conventions.GPU_RESOURCE: gpus},
    }


def startup_allowed(profile: profiles.Profile, plan: planner.Plan) -> int:
    """Seconds the startup probe allows: the load, and for a copy across nodes the workers' joining first."""
    startup = startup_seconds(profile, plan)
    if profile.multi_node:
        startup += profile.rollout.groupJoinSeconds  # vLLM starts loading only once the workers joined
    return startup


def _pod_security(engine: profile_engine.EngineSpec) -> dict[str, object]:
    context: dict[str, object] = {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_UID,
        "runAsGroup": RUN_AS_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if engine.fsGroup is not None:
        # OnRootMismatch unless told otherwise: see the field's description (a chown walk of the weights).
        context.update(fsGroup=engine.fsGroup, fsGroupChangePolicy=engine.fsGroupChangePolicy or "OnRootMismatch")
    return context


def _literal_args(args: Sequence[str]) -> list[str]:
    """The engine's args from the profile (model.name, the model path, engine.extraArgs), escaped so that
    Kubernetes' ``$(VAR)`` expansion cannot put an env value such as HF_TOKEN's into them: the served
    name would carry the token into /v1/models and from there into the gate's messages and records."""
    return [conventions.literal_arg(arg) for arg in args]


def _strategy(spec: Mapping[str, object]) -> chart_values.StrategyValues:
    """A Deployment ``spec.strategy`` (as preflight gives it) in the values' flat shape."""
    rolling = spec.get("rollingUpdate")
    numbers = (
        {k: v for k, v in rolling.items() if k in ("maxSurge", "maxUnavailable")}
        if isinstance(rolling, Mapping)
        else {}
    )
    return chart_values.StrategyValues.model_validate({"type": spec["type"], **numbers})


def _k8s(items: Sequence[BaseModel]) -> list[dict[str, object]]:
    """Profile items as the Kubernetes objects they mirror; a field left at its default is left out, as
    the API server defaults it the same way."""
    return [item.model_dump(mode="json", exclude_defaults=True) for item in items]


def _env(profile: profiles.Profile) -> list[dict[str, object]]:
    env: list[dict[str, object]] = [{"name": "HOME", "value": HOME_DIR}]
    env += [{"name": name, "value": value} for name, value in profile.engine.engine.env(profile.server_settings())]
    env += compile_cache.env(profile)
    if profile.airgap.offline and profile.multi_node and profile.placement.groupEngine == "kuberay":
        env.append({"name": "RAY_USAGE_STATS_ENABLED", "value": "0"})  # Ray's own usage report
    if profile.model.credentialsSecret:
        env.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": profile.model.credentialsSecret, "key": "token"}},
            }
        )
    return env


def calibrated_kv_bytes(plan: planner.Plan) -> int:
    """The KV cache per GPU in bytes of a calibrated plan (engine.skipMemoryProfiling); exit 2 without one."""
    if plan.inputs["calibration"] is None:
        raise needs_calibration("a render has none (`deployctl apply` takes it from the release's own records)")
    return int(plan.kv_cache_gib_per_gpu * (1 << 30))


def needs_calibration(why: str, release: str = "RELEASE") -> errors.InvalidProfile:
    """The refusal of engine.skipMemoryProfiling without a calibration (exit 2), saying ``why`` there is none."""
    return errors.InvalidProfile(
        "engine.skipMemoryProfiling needs a calibration, the KV cache a running vLLM of the same model, GPU, "
        f"vLLM version, TP and PP allocated, and {why}. Deploy once without skipMemoryProfiling; "
        f"`deployctl plan PROFILE --calibrate-from {release}` then shows the calibrated plan"
    )


def startup_seconds(profile: profiles.Profile, plan: planner.Plan) -> int:
    """Seconds a pod may take to load before the startup probe restarts it (the probe allows at least this).

    engine.startupSeconds when given, else the estimate described at STARTUP_FIXED_SECONDS.
    """
    if profile.engine.startupSeconds is not None:
        return profile.engine.startupSeconds
    weights_gib = plan.weights_gib_per_gpu * profile.gpus_per_pod
    return math.ceil(STARTUP_FIXED_SECONDS + weights_gib * 1024 / STORAGE_MIB_PER_SECOND)


def _probe(path: str, *, timeout: int, failures: int, period: int = PROBE_PERIOD_SECONDS) -> dict[str, object]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": timeout,
        "failureThreshold": failures,
    }


def _affinity(profile: profiles.Profile) -> dict[str, object]:
    expressions: list[dict[str, object]] = []
    if profile.placement.matchGpuProduct:
        products = catalog.product_labels(profile.hardware.gpu, profile.hardware.productLabels)
        if products is None:  # the planner refuses this first; never render the pod without the constraint
            raise errors.InvalidProfile(planner.product_labels_missing(profile))
        expressions.append({"key": conventions.GPU_PRODUCT_LABEL, "operator": "In", "values": sorted(products)})
    if profile.nvlink_required:
        label = profile.placement.nvlinkLabel
        expressions.append({"key": label.key, "operator": "In", "values": [label.value]})
    if not expressions:
        return {}
    terms = [{"matchExpressions": expressions}]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


# --- copies that span nodes ------------------------------------------------------------------------


def _group(profile: profiles.Profile, strategy: chart_values.StrategyValues) -> chart_values.GroupValues:
    """The group engine's settings; the copies' names come last (_with_copies), from the pod templates."""
    if not profile.multi_node:
        return chart_values.GroupValues()
    serve = profile.engine.engine.command
    args = _literal_args(profile.engine.engine.args(profile.server_settings()))
    size = profile.nodes_per_copy
    if profile.placement.groupEngine == "kuberay":
        return chart_values.GroupValues(
            engine="kuberay", size=size, leaderCommand=_ray_head_command(profile, [*serve, *args])
        )
    rendezvous = [
        "--distributed-executor-backend", "mp",
        "--nnodes", "$(LWS_GROUP_SIZE)",
        "--node-rank", "$(LWS_WORKER_INDEX)",
        "--master-addr", "$(LWS_LEADER_ADDRESS)",
        "--master-port", str(MP_MASTER_PORT),
    ]  # fmt: skip
    return chart_values.GroupValues(
        engine="lws",
        size=size,
        leaderCommand=[*serve, *args, *rendezvous],
        workerCommand=[*serve, *args, *rendezvous, "--headless"],
        maxSurge=int(strategy.maxSurge),
        maxUnavailable=int(strategy.maxUnavailable),
    )


def _ray_head_command(profile: profiles.Profile, command: list[str]) -> list[str]:
    """The Ray head's script: start Ray, wait until every node of the copy joined, then serve.

    vLLM's Ray backend places the tensor- and pipeline-parallel workers on the Ray cluster it finds
    at start-up, so starting it before the workers joined fails or under-places. A copy whose
    workers never join ends with a line the rollout watch classifies as `group_incomplete`.
    """
    nodes, join = profile.nodes_per_copy, profile.rollout.groupJoinSeconds
    serve = shlex.join([*command, *RAY_BACKEND_ARGS])
    count = (
        'python3 -c \'import ray; ray.init(address="auto", logging_level="ERROR", log_to_driver=False); '
        'print(sum(1 for n in ray.nodes() if n["Alive"]))\''
    )
    script = f"""ulimit -n 65536 || true
bash -c "$KUBERAY_GEN_RAY_START_CMD" &
deadline=$((SECONDS + {join}))
while true; do
  joined=$({count} 2>/dev/null || echo 0)
  if [ "$joined" -ge {nodes} ]; then break; fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "deployctl: group incomplete: $joined of {nodes} Ray nodes joined within {join}s; vLLM not started" >&2
    exit 1
  fi
  sleep 5
done
echo "deployctl: all {nodes} Ray nodes joined; starting vLLM"
exec {serve}
"""
    return ["/bin/bash", "-c", script]


# The values that shape a copy's pods: a change to any of them makes new copies (new names).
_POD_SHAPING = (
    "engine", "commonLabels", "image", "imagePullSecrets", "server", "model", "resources",
    "shmSizeLimit", "startupProbe", "readinessProbe", "livenessProbe", "podSecurityContext",
    "securityContext", "podLabels", "podAnnotations", "nodeSelector", "affinity", "tolerations",
    "priorityClassName", "runtimeClassName", "terminationGracePeriodSeconds", "group",
)  # fmt: skip
# Also pod-shaping, but hashed only when set, so that a release which sets none of them keeps the copy
# names it had before they existed (a new name restarts every copy).
_POD_SHAPING_WHEN_SET = ("extraEnv", "envFrom", "extraVolumes", "extraVolumeMounts")


def _with_copies(values: chart_values.Values, profile: profiles.Profile) -> chart_values.Values:
    """Name the group objects and give each copy its affinity. KubeRay copies are named by a hash of
    the pod templates: an upgrade creates new RayClusters beside the old (or in their place), and a
    RayCluster's pods are never changed in place, which KubeRay would do one pod at a time."""
    group = values.group
    if not group.engine:
        return values
    dumped = values.model_dump(mode="json")
    shaping = {k: dumped[k] for k in _POD_SHAPING} | {k: dumped[k] for k in _POD_SHAPING_WHEN_SET if dumped[k]}
    digest = hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()[:8]
    topology = profile.placement.topologyKey
    if group.engine == "lws":
        # One object; LWS names the groups and labels each pod with its group's key.
        copies = [
            chart_values.CopyValues(
                name=values.fullnameOverride, affinity=_copy_affinity(values.affinity, None, topology)
            )
        ]
    else:
        prefix = copy_prefix(values.fullnameOverride)
        names = [f"{prefix}-{digest}-{i}" for i in range(values.replicaCount)]
        copies = [chart_values.CopyValues(name=n, affinity=_copy_affinity(values.affinity, n, topology)) for n in names]
    return values.model_copy(update={"group": group.model_copy(update={"copies": copies})})


def copy_prefix(release: str) -> str:
    return release[:GROUP_NAME_PREFIX_CHARS].rstrip("-")


def _copy_affinity(base: Mapping[str, object], copy: str | None, topology_key: str | None) -> dict[str, object]:
    """The node affinity, plus: one pod of a copy per node, and, with a topology key, one domain per copy.

    A copy is named by its label (KubeRay) or, on LWS, by the group key each pod carries
    (``matchLabelKeys``: the term applies to the pod's own group only).
    """
    term: dict[str, object]
    if copy is not None:
        term = {"labelSelector": {"matchLabels": {conventions.COPY_LABEL: copy}}}
    else:
        term = {"labelSelector": {"matchExpressions": [{"key": LWS_GROUP_KEY_LABEL, "operator": "Exists"}]},
                "matchLabelKeys": [LWS_GROUP_KEY_LABEL]}  # fmt: skip
    affinity = dict(base)
    affinity["podAntiAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": [{**term, "topologyKey": HOSTNAME_TOPOLOGY}]
    }
    if topology_key:
        affinity["podAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [{**term, "topologyKey": topology_key}]
        }
    return affinity


def _disruption(replicas: int, pods_per_copy: int) -> chart_values.DisruptionValues:
    # One replica: maxUnavailable 1, since minAvailable 1 would block every node drain for good
    # (one replica pauses serving on a drain whatever we write). More: minAvailable N-1, so a
    # drain takes one GPU node's replica at a time and the others keep serving. A copy across
    # nodes stops serving when any of its pods goes, so a drain takes one pod at a time: at most
    # one copy is down while it recovers.
    if replicas == 1 or pods_per_copy > 1:
        return chart_values.DisruptionValues(maxUnavailable=1)
    return chart_values.DisruptionValues(minAvailable=replicas - 1, maxUnavailable=0)


def _sorted(mapping: Mapping[str, str]) -> dict[str, str]:
    # Maps from the profile keep the file's key order; sorting makes equal profiles render equally.
    return dict(sorted(mapping.items()))
