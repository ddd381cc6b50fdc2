"""Profile → Kubernetes objects: the Jinja2 manifests, the Helm chart's values, and deployctl's RBAC.

Every setting is resolved once, here in Python, into ``chart_values.Values``: the Helm chart's
values, whose JSON schema is the chart's values.schema.json. The Jinja2 templates in ``manifests/`` and the
chart's Go templates only place those values into objects, so ``deployctl render`` and
``helm template`` fed ``deployctl render --format helm-values`` give the same objects, and a test
holds them to it. The output is deterministic: the same profile gives the same bytes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import pathlib
import re
import shlex
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import jinja2
import yaml
from pydantic import BaseModel

from orchestrator import conventions, errors, yaml_text
from orchestrator.catalog import lookup as catalog
from orchestrator.plan import planner
from orchestrator.profile import base as profile_base
from orchestrator.profile import model as profiles
from orchestrator.profile import pod as profile_pod
from orchestrator.render import chart_values

CHART_NAME = "vllm-inference"  # also app.kubernetes.io/name, as in a chart made by `helm create`
MANAGED_BY = conventions.MANAGED_BY  # the Helm chart writes the same, so both renders carry equal labels
MANAGED_BY_LABEL = conventions.MANAGED_BY_LABEL
RELEASE_LABEL = conventions.RELEASE_LABEL
PROFILE_HASH_ANNOTATION = conventions.PROFILE_HASH_ANNOTATION
GPU_RESOURCE = conventions.GPU_RESOURCE
GPU_PRODUCT_LABEL = conventions.GPU_PRODUCT_LABEL

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

# Objects in the order they are applied: the NetworkPolicy exists before the first pod can
# reach out, the ServiceAccount before the pods that name it.
_WORKLOAD_TEMPLATES = (
    "serviceaccount.yaml.j2",
    "networkpolicy.yaml.j2",  # only with airgap.denyEgress
    "service.yaml.j2",
    "poddisruptionbudget.yaml.j2",
)
# What runs the copies: a Deployment of one-pod copies, or a group object per engine.
_COPY_TEMPLATES = {"": "deployment.yaml.j2", "kuberay": "raycluster.yaml.j2", "lws": "leaderworkerset.yaml.j2"}

# A copy across nodes waits for its workers before vLLM starts; Ray's own file-descriptor advice
# (KubeRay runs `ulimit -n 65536` before `ray start`) holds for the head we start ourselves.
RAY_BACKEND_ARGS = ("--distributed-executor-backend", "ray")
# vLLM's multiprocessing backend across nodes: torch.distributed's rendezvous on the leader.
MP_MASTER_PORT = 29500
# KubeRay starts `ray start` itself unless a pod template carries this annotation; then it only
# exports the command as $KUBERAY_GEN_RAY_START_CMD, and the head script runs it, waits for the
# workers and starts vLLM.
RAY_OVERWRITE_CMD_ANNOTATION = "ray.io/overwrite-container-cmd"
# LeaderWorkerSet injects these into every pod of a group (sigs.k8s.io/lws, pkg/utils/env).
LWS_ENV = profile_pod.LWS_ENV
LWS_GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
# Characters of the release name kept in a RayCluster's name: KubeRay derives longer names from it
# ("<name>-head-svc", pod names with a group suffix), which must stay valid DNS labels.
GROUP_NAME_PREFIX_CHARS = 40
_RBAC_TEMPLATE = "rbac/deployctl.yaml.j2"
# Last: it only tells Prometheus where the pods are (profile monitoring.podMonitor).
_PODMONITOR_TEMPLATE = "podmonitor.yaml.j2"


# --- resolving a profile -------------------------------------------------------------------------


def helm_values(profile: profiles.Profile, plan: planner.Plan) -> dict[str, Any]:
    """The chart's values for a profile: what `deployctl render --format helm-values` prints."""
    return _resolve(profile, plan, None).model_dump(mode="json")


def _resolve(profile: profiles.Profile, plan: planner.Plan, strategy: Mapping[str, Any] | None) -> chart_values.Values:
    engine, placement, rollout = profile.engine, profile.placement, profile.rollout
    serving = engine.engine
    health, probe = serving.health_path, serving.probe_path
    source = profile.model.source
    gpus = str(profile.gpus_per_pod)
    startup = startup_seconds(profile, plan)
    if profile.multi_node:
        startup += rollout.groupJoinSeconds  # vLLM starts loading only once the workers joined
    if strategy is None:
        strategy = conventions.strategy_spec(conventions.PROFILE_STRATEGY_DEFAULTS[rollout.strategy])
    values = chart_values.Values(
        fullnameOverride=profile.metadata.name,
        engine=chart_values.EngineValues(kind=engine.kind, version=engine.engine_version),
        profileHash=profile.spec_hash(),
        commonLabels=_sorted(profile.metadata.labels),
        image=chart_values.ImageValues(reference=engine.image),
        imagePullSecrets=[chart_values.ImagePullSecret(name=n) for n in engine.imagePullSecrets],
        replicaCount=rollout.replicas,
        strategy=_strategy(strategy),
        progressDeadlineSeconds=rollout.progressDeadlineSeconds,
        revisionHistoryLimit=rollout.revisionHistory,
        server=chart_values.ServerValues(
            command=list(serving.command),
            args=_literal_args(serving.args(profile.server_settings())),
            port=engine.port,
            healthPath=health,
            env=_env(profile),
        ),
        group=_group(profile, strategy),
        model=chart_values.ModelValues(
            servedName=profile.model.name,
            claimName=source.pvc if isinstance(source, profiles.PvcSource) else "",
            hostPath=source.hostPath if isinstance(source, profiles.HostPathSource) else "",
            mountPath=source.mountPath,
        ),
        resources={
            # No CPU limit: CFS throttling stalls the tokenizer and scheduler loop under load.
            "requests": {"cpu": engine.cpu, "memory": engine.memory, GPU_RESOURCE: gpus},
            "limits": {"memory": engine.memory, GPU_RESOURCE: gpus},
        },
        shmSizeLimit=engine.shmSize or ("16Gi" if profile.gpus_per_pod > 1 else "1Gi"),
        startupProbe=_probe(probe, timeout=5, failures=math.ceil(startup / PROBE_PERIOD_SECONDS)),
        readinessProbe=_probe(probe, timeout=5, failures=3),
        livenessProbe=_probe(probe, timeout=10, failures=6, period=30),
        podSecurityContext={
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_UID,
            "runAsGroup": RUN_AS_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
            **_fs_group(engine),
        },
        securityContext={"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        extraEnv=_k8s(engine.env),
        envFrom=_k8s(engine.envFrom),
        extraVolumes=_k8s(engine.volumes),
        extraVolumeMounts=_k8s(engine.volumeMounts),
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
            path=serving.metrics_path, **profile.monitoring.podMonitor.model_dump()
        ),
    )
    return _with_copies(values, profile)


def _literal_args(args: Sequence[str]) -> list[str]:
    """The engine's args from the profile (model.name, the model path, engine.extraArgs), escaped so that
    Kubernetes' ``$(VAR)`` expansion cannot put an env value such as HF_TOKEN's into them: the served
    name would carry the token into /v1/models and from there into the gate's messages and records."""
    return [conventions.literal_arg(arg) for arg in args]


def _strategy(spec: Mapping[str, Any]) -> chart_values.StrategyValues:
    """A Deployment ``spec.strategy`` (as preflight gives it) in the values' flat shape."""
    rolling = spec.get("rollingUpdate") or {}
    return chart_values.StrategyValues(
        type=spec["type"], **{k: v for k, v in rolling.items() if k in ("maxSurge", "maxUnavailable")}
    )


def _k8s(items: Sequence[BaseModel]) -> list[dict[str, Any]]:
    """Profile items as the Kubernetes objects they mirror; a field left at its default is left out, as
    the API server defaults it the same way."""
    return [item.model_dump(mode="json", exclude_defaults=True) for item in items]


def _fs_group(engine: profiles.EngineSpec) -> dict[str, Any]:
    if engine.fsGroup is None:
        return {}
    # OnRootMismatch unless told otherwise: see the field's description (a chown walk of the weights).
    return {"fsGroup": engine.fsGroup, "fsGroupChangePolicy": engine.fsGroupChangePolicy or "OnRootMismatch"}


def _env(profile: profiles.Profile) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [{"name": "HOME", "value": HOME_DIR}]
    env += [{"name": name, "value": value} for name, value in profile.engine.engine.env(profile.server_settings())]
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


def startup_seconds(profile: profiles.Profile, plan: planner.Plan) -> int:
    """Seconds a pod may take to load before the startup probe restarts it (the probe allows at least this).

    engine.startupSeconds when given, else the estimate described at STARTUP_FIXED_SECONDS.
    """
    if profile.engine.startupSeconds is not None:
        return profile.engine.startupSeconds
    weights_gib = plan.weights_gib_per_gpu * profile.gpus_per_pod
    return math.ceil(STARTUP_FIXED_SECONDS + weights_gib * 1024 / STORAGE_MIB_PER_SECOND)


def _probe(path: str, *, timeout: int, failures: int, period: int = PROBE_PERIOD_SECONDS) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": timeout,
        "failureThreshold": failures,
    }


def _affinity(profile: profiles.Profile) -> dict[str, Any]:
    expressions: list[dict[str, Any]] = []
    if profile.placement.matchGpuProduct:
        products = catalog.product_labels(profile.hardware.gpu, profile.hardware.productLabels)
        if products is None:  # the planner refuses this first; never render the pod without the constraint
            raise errors.InvalidProfile(planner.product_labels_missing(profile))
        expressions.append({"key": GPU_PRODUCT_LABEL, "operator": "In", "values": sorted(products)})
    if profile.nvlink_required:
        label = profile.placement.nvlinkLabel
        expressions.append({"key": label.key, "operator": "In", "values": [label.value]})
    if not expressions:
        return {}
    terms = [{"matchExpressions": expressions}]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


# --- copies that span nodes ------------------------------------------------------------------------


def _group(profile: profiles.Profile, strategy: Mapping[str, Any]) -> chart_values.GroupValues:
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
    rolling = strategy.get("rollingUpdate") or {}
    return chart_values.GroupValues(
        engine="lws",
        size=size,
        leaderCommand=[*serve, *args, *rendezvous],
        workerCommand=[*serve, *args, *rendezvous, "--headless"],
        maxSurge=int(rolling.get("maxSurge", 0)),
        maxUnavailable=int(rolling.get("maxUnavailable", 1)),
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
        prefix = _copy_prefix(values.fullnameOverride)
        names = [f"{prefix}-{digest}-{i}" for i in range(values.replicaCount)]
        copies = [chart_values.CopyValues(name=n, affinity=_copy_affinity(values.affinity, n, topology)) for n in names]
    return values.model_copy(update={"group": group.model_copy(update={"copies": copies})})


def _copy_prefix(release: str) -> str:
    return release[:GROUP_NAME_PREFIX_CHARS].rstrip("-")


def _copy_affinity(base: Mapping[str, Any], copy: str | None, topology_key: str | None) -> dict[str, Any]:
    """The node affinity, plus: one pod of a copy per node, and, with a topology key, one domain per copy.

    A copy is named by its label (KubeRay) or, on LWS, by the group key each pod carries
    (``matchLabelKeys``: the term applies to the pod's own group only).
    """
    term: dict[str, Any]
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


# --- templates -------------------------------------------------------------------------------------


def render(
    profile: profiles.Profile, plan: planner.Plan, strategy: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The release's Kubernetes objects in apply order.

    ``plan`` is the profile's plan, made once by the caller (it sizes the startup probe). When its
    verdict is not "fits" (``render --force``), every object carries the verdict in an annotation,
    so a reviewer of the GitOps change sees it. ``strategy`` is the Deployment strategy preflight
    chose from the cluster's free GPUs; without it, rollout.strategy decides, and "auto" replaces
    one pod at a time, which never hangs.
    """
    values = _resolve(profile, plan, strategy).model_dump(mode="json")
    labels = _labels(values)
    context = {
        "values": values,
        "name": values["fullnameOverride"],
        "namespace": profile.metadata.namespace,
        "labels": labels,
        "selector": _selector(values),
        "annotations": {PROFILE_HASH_ANNOTATION: values["profileHash"]},
        # Ours last, as in _labels: the selector labels and the profile hash are not overridable.
        "pod_labels": {**values["podLabels"], **labels},
        # Not on the pod template: a change to SLOs or gate settings must not restart (and reload) the pods.
        "pod_annotations": dict(values["podAnnotations"]),
        "copy_label": conventions.COPY_LABEL,
        "role_label": conventions.GROUP_ROLE_LABEL,
        "ray_overwrite_annotation": RAY_OVERWRITE_CMD_ANNOTATION,
    }
    objects: list[dict[str, Any]] = []
    for template in _WORKLOAD_TEMPLATES:
        if template != "networkpolicy.yaml.j2" or values["networkPolicy"]["enabled"]:
            objects.extend(_render_template(template, context))
    objects.extend(_render_template(_COPY_TEMPLATES[values["group"]["engine"]], context))
    if values["podMonitor"]["enabled"]:
        objects.extend(_render_template(_PODMONITOR_TEMPLATE, context))
    if plan.verdict != "fits":
        for obj in objects:
            obj["metadata"].setdefault("annotations", {})[conventions.FIT_VERDICT_ANNOTATION] = _verdict_text(plan)
    return objects


def _verdict_text(plan: planner.Plan) -> str:
    problems = [f.message for f in plan.findings if f.severity in ("error", "invalid")]
    return f"{plan.verdict} (rendered with --force): " + " ".join(problems)


def rbac(
    namespace: str,
    service_account: str = "deployctl",
    api_key_secret: str | None = None,
    kinds: Collection[str] | None = None,
) -> list[dict[str, Any]]:
    """What deployctl itself may do: a Role in ``namespace``, read-only nodes and pods cluster-wide.

    Returns the ServiceAccount, Role, RoleBinding, ClusterRole and ClusterRoleBinding. With
    ``api_key_secret`` (the profile's gate.apiKeySecret name) the Role may also get that Secret.
    ``kinds``: the kinds the profile renders; the Role writes RayClusters, LeaderWorkerSets and
    PodMonitors only when they are among them. None: all three (a Role for any profile).
    """
    some = {*conventions.GROUP_KINDS, conventions.POD_MONITOR_KIND}  # the kinds only some profiles render
    optional = some if kinds is None else set(kinds) & some
    values = {
        "namespace": namespace,
        "service_account": service_account,
        "api_key_secret": api_key_secret,
        "kinds": sorted(optional),
    }
    return _render_template(_RBAC_TEMPLATE, values)


CONTROLLER_TEMPLATE = "controller.yaml.j2"


CONTROLLER_NAMESPACE_TEMPLATE = "controller-namespace.yaml.j2"
_CONTROLLER_LABELS = {"app.kubernetes.io/name": "deployctl-controller", MANAGED_BY_LABEL: MANAGED_BY}


def controller(namespace: str, image: str, watch_namespaces: Sequence[str] = ()) -> list[dict[str, Any]]:
    """`deployctl controller` in the cluster: its Namespace, ServiceAccount, a ClusterRole of reads
    and its binding, the leader Lease with the Role that may only take it, a Role and RoleBinding in
    each of ``watch_namespaces`` (where it may deploy), and a Deployment of two replicas.

    Refuses (exit 2) an image not pinned by digest and a namespace that is not a DNS label: what
    runs with the controller's rights must be the bytes that were reviewed, and a bad name would
    only fail later, at apply, half installed."""
    problems = []
    if not profile_base.DIGEST.search(image):
        problems.append(
            f"--image {image} is not pinned by digest: give REGISTRY/deployctl-controller@sha256:<64 hex digits> "
            "(the digest your registry reports for the image built from the Containerfile, docs/gitops.md)"
        )
    problems += _namespace_problems(namespace, watch_namespaces)
    if problems:
        raise errors.InvalidInstall("render --format controller: " + "; ".join(problems))
    context = {"namespace": namespace, "image": image, "labels": _CONTROLLER_LABELS, "group": "deployctl.dev"}
    return _render_template(CONTROLLER_TEMPLATE, {**context, "watch_namespaces": list(dict.fromkeys(watch_namespaces))})


def controller_namespace(namespace: str, watch_namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """What opts namespaces in to the controller running in ``namespace``: a Role and RoleBinding in each."""
    problems = _namespace_problems(namespace, watch_namespaces)
    if not watch_namespaces:
        problems.append("give the namespaces to opt in with --watch-namespace NS (repeatable)")
    if problems:
        raise errors.InvalidInstall("render --format controller-namespace: " + "; ".join(problems))
    context = {"namespace": namespace, "labels": _CONTROLLER_LABELS, "group": "deployctl.dev"}
    return _render_template(
        CONTROLLER_NAMESPACE_TEMPLATE, {**context, "watch_namespaces": list(dict.fromkeys(watch_namespaces))}
    )


def _namespace_problems(namespace: str, watch_namespaces: Sequence[str]) -> list[str]:
    named = [("--controller-namespace", namespace)] + [("--watch-namespace", w) for w in watch_namespaces]
    return [
        f"{option} {value} is not a namespace name: at most 63 lowercase letters, digits and hyphens, starting "
        "and ending with a letter or digit"
        for option, value in named
        if len(value) > 63 or not profile_base.DNS1123_LABEL.match(value)
    ]


def _labels(values: Mapping[str, Any]) -> dict[str, str]:
    # Ours are set last: a profile label must not change what the selectors match.
    return {
        **values["commonLabels"],
        **_selector(values),
        "app.kubernetes.io/component": "inference-server",
        "app.kubernetes.io/part-of": "llm-inference",
        conventions.MANAGED_BY_LABEL: MANAGED_BY,
        "app.kubernetes.io/version": values["engine"]["version"],
        RELEASE_LABEL: values["fullnameOverride"],
    }


def _selector(values: Mapping[str, Any]) -> dict[str, str]:
    # Never the version: a Deployment's selector cannot change after creation.
    return {
        "app.kubernetes.io/name": values["nameOverride"] or CHART_NAME,
        "app.kubernetes.io/instance": values["fullnameOverride"],
    }


def _render_template(template: str, context: Mapping[str, Any]) -> list[dict[str, Any]]:
    text = _environment().get_template(template).render(context)
    return [doc for doc in yaml.safe_load_all(text) if doc]


@functools.cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_templates_dir())),
        undefined=jinja2.StrictUndefined,  # a missing value is an error, never an empty string
        keep_trailing_newline=True,
        autoescape=False,  # YAML, not HTML; values are escaped by the json filter instead
    )
    env.filters["json"] = _to_json
    env.filters["merged"] = lambda base, extra: {**base, **extra}
    return env


def _to_json(value: Any) -> str:
    """The template filter: values go in as JSON, which is YAML, so quoting is never our problem."""

    def not_json(obj: Any) -> Any:
        if isinstance(obj, jinja2.Undefined):
            str(obj)  # StrictUndefined raises UndefinedError here, naming the missing value
        raise TypeError(f"a {type(obj).__name__} cannot go into a manifest")

    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=not_json)
    # JSON leaves DEL, the C1 controls and lone surrogates raw, which YAML refuses to read, and the line
    # separators U+0085, U+2028 and U+2029 raw, which YAML folds into a space: escape them (\uXXXX means the
    # same in both), so any string a profile holds renders and parses back exactly.
    return _NOT_YAML_PRINTABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


_NOT_YAML_PRINTABLE = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")


def _templates_dir() -> pathlib.Path:
    # The templates are the package orchestrator.manifests, in a checkout and installed alike (the
    # top-level manifests/ of the repo is a link to them).
    return pathlib.Path(__file__).resolve().parent.parent / "manifests"


# --- output ----------------------------------------------------------------------------------------


def to_yaml(objects: list[dict[str, Any]]) -> str:
    """One YAML stream, keys sorted as `kubectl get -o yaml` shows them: same objects, same bytes."""
    return "---\n".join(
        yaml_text.safe_dump(obj, sort_keys=True, default_flow_style=False, allow_unicode=True, width=1 << 16)
        for obj in objects
    )


_FILE_NAME = re.compile(r"^\d{2}-[a-z]+-(?P<name>[a-z0-9-]+)\.yaml$")


def write(objects: list[dict[str, Any]], out_dir: str | pathlib.Path) -> list[pathlib.Path]:
    """One file per object, ``NN-kind-name.yaml`` (NN keeps `kubectl apply -f DIR` in apply order).

    Files this function wrote earlier for the same release names and no longer renders (say, the
    NetworkPolicy after denyEgress was turned off, or an earlier revision's RayClusters) are
    removed, so a GitOps folder never keeps a stale object; other files are left alone.
    """
    out = pathlib.Path(out_dir)
    try:
        return _write(objects, out)
    except OSError as e:
        raise errors.UsageError(
            f"cannot write the manifests into --output-dir {out}: {e.strerror or e}"
            + (f" ({e.filename})" if e.filename and str(e.filename) != str(out) else "")
            + "; give a directory you may write (it is created when missing)"
        ) from e


def _write(objects: list[dict[str, Any]], out: pathlib.Path) -> list[pathlib.Path]:
    if out.exists() and not out.is_dir():  # /dev/null, a file: mkdir's "File exists" would not say why
        raise NotADirectoryError(20, "it exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    written: list[pathlib.Path] = []
    for index, obj in enumerate(objects):
        # Binding names may hold ':' (deployctl-preflight:NS:SA), which some file systems and tools refuse.
        safe_name = obj["metadata"]["name"].replace(":", "_")
        path = out / f"{index:02d}-{obj['kind'].lower()}-{safe_name}.yaml"
        path.write_text(to_yaml([obj]), encoding="utf-8")
        written.append(path)
    names = {obj["metadata"]["name"] for obj in objects}
    # Copies are named by a hash of their templates: an earlier revision's are this release's too.
    releases = {obj["metadata"].get("labels", {}).get(RELEASE_LABEL) for obj in objects} - {None}
    copies = [re.compile(rf"{re.escape(_copy_prefix(str(r)))}-[0-9a-f]{{8}}-\d+") for r in releases]
    for path in sorted(out.iterdir()):
        match = _FILE_NAME.match(path.name)
        if not match or path in written:
            continue
        if match["name"] in names or any(c.fullmatch(match["name"]) for c in copies):
            path.unlink()
    return written
