"""The renderer: golden files, determinism, air gap, placement, probes, security and RBAC.

Golden files under tests/golden/ are the rendered YAML of the example profiles, reviewed by a
person. After an intended change, regenerate them with
``DEPLOYCTL_UPDATE_GOLDEN=1 pytest tests/test_render.py`` and read the diff before committing.
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
from typing import Any

import jinja2
import pytest
import yaml

from orchestrator import engines
from orchestrator.engines import flags as engine_flags
from orchestrator.engines import vllm_flags
from orchestrator.plan import planner
from orchestrator.profile import model as profile
from orchestrator.render import manifests as render
from orchestrator.render import resolve


def _rendered(prof: profile.Profile, strategy: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The objects of ``prof``, rendered with its own plan as every command does."""
    return render.render(prof, planner.plan(prof), strategy)


ROOT = pathlib.Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
EXAMPLES = sorted((ROOT / "profiles").glob("*.yaml"))
EVERY_OPTION = GOLDEN / "every-option.profile.yaml"
LWS = GOLDEN / "lws.profile.yaml"  # a copy across nodes on LeaderWorkerSet: golden only, no controller ran
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def _load(path: pathlib.Path) -> profile.Profile:
    return profile.load(path)


def _variant(base: pathlib.Path, **changes: Any) -> profile.Profile:
    """``base`` with dotted fields replaced, e.g. ``_variant(p, **{"engine.tensorParallelSize": 1})``."""
    data = yaml.safe_load(base.read_text())
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        node = data
        for key in parents:
            node = node.setdefault(key, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return profile.loads(yaml.safe_dump(data))


def _by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {obj["kind"]: obj for obj in objects}


def _pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The pod template that serves: the Deployment's, or a copy's leader (Ray head, LWS leader)."""
    kinds = _by_kind(objects)
    if "RayCluster" in kinds:
        head: dict[str, Any] = kinds["RayCluster"]["spec"]["headGroupSpec"]["template"]
        return head
    if "LeaderWorkerSet" in kinds:
        leader: dict[str, Any] = kinds["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
        return leader
    spec: dict[str, Any] = kinds["Deployment"]["spec"]["template"]
    return spec


def _container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = _pod(objects)["spec"]["containers"][0]
    return container


def _env(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in _container(objects)["env"]}


def _serve_args(container: dict[str, Any]) -> list[str]:
    """The arguments of `vllm serve` in the serving container: its args, or, for a Ray head, the
    `exec vllm serve …` line of its start script."""
    if "args" in container:
        return list(container["args"])
    script = container["command"][-1]
    line = next(line for line in script.splitlines() if line.startswith("exec vllm serve "))
    return shlex.split(line)[3:]


def _match_expressions(objects: list[dict[str, Any]]) -> dict[str, list[str]]:
    affinity = _pod(objects)["spec"].get("affinity")
    if not affinity:
        return {}
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 1, "one term: its expressions must all hold (terms are ORed)"
    return {e["key"]: e["values"] for e in terms[0]["matchExpressions"] if e["operator"] == "In"}


PROD = ROOT / "profiles" / "prod-tp4.yaml"
DEV = ROOT / "profiles" / "dev-tp2.yaml"


# --- every profile ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [*EXAMPLES, EVERY_OPTION, LWS], ids=lambda p: p.stem)
def test_every_profile_renders_namespaced_labelled_objects_in_apply_order(path: pathlib.Path) -> None:
    prof = _load(path)
    objects = _rendered(prof)
    kinds = [o["kind"] for o in objects]
    copies = {"kuberay": ["RayCluster"] * prof.rollout.replicas, "lws": ["LeaderWorkerSet"]}
    runs = copies[prof.placement.groupEngine] if prof.multi_node else ["Deployment"]
    expected = [
        "ServiceAccount",
        "NetworkPolicy",
        "Service",
        "PodDisruptionBudget",
        *runs,
        "PodMonitor",
        "PrometheusRule",
        "HTTPRoute",
    ]
    canary = prof.rollout.canary
    optional = {
        "NetworkPolicy": prof.airgap.denyEgress,
        "PodMonitor": prof.monitoring.podMonitor.enabled,
        "PrometheusRule": prof.monitoring.alerts.enabled,
        "HTTPRoute": canary is not None and canary.traffic == "httpRoute",
    }
    assert kinds == [k for k in expected if optional.get(k, True)]
    for obj in objects:
        meta = obj["metadata"]
        if obj["kind"] == "RayCluster":  # one per copy, named by the pod templates' hash and its index
            assert meta["name"].startswith(prof.metadata.name + "-")
            continue
        assert meta["name"] == prof.metadata.name
        assert meta["namespace"] == prof.metadata.namespace
        assert meta["labels"][render.RELEASE_LABEL] == prof.metadata.name
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "deployctl"
        assert prof.metadata.labels.items() <= meta["labels"].items()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_profile_is_air_gapped(path: pathlib.Path) -> None:
    prof = _load(path)
    objects = _rendered(prof)
    env = _env(objects)
    offline = prof.engine.engine.offline_env
    assert {name: env.get(name) for name in offline} == dict.fromkeys(offline, "1")
    assert DIGEST.search(_container(objects)["image"]), "images are pinned by digest"
    policy = _by_kind(objects)["NetworkPolicy"]["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    release_pods = {"matchLabels": _by_kind(objects)["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"]}
    assert policy["podSelector"] == release_pods
    serving = {"ports": [{"port": prof.engine.port, "protocol": "TCP"}]}
    if prof.multi_node:  # the pods of a copy reach each other on every port, and nothing else does
        assert policy["ingress"] == [serving, {"from": [{"podSelector": release_pods}]}]
        group, *egress = policy["egress"]
        assert group == {"to": [{"podSelector": release_pods}]}
    else:
        assert policy["ingress"] == [serving]
        egress = policy["egress"]
    dns, *others = egress
    assert dns["ports"] == [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert [rule["to"] for rule in others] == (
        [[{"ipBlock": {"cidr": c}} for c in prof.airgap.allowEgressCIDRs]] if prof.airgap.allowEgressCIDRs else []
    )


@pytest.mark.parametrize("path", [*EXAMPLES, EVERY_OPTION, LWS], ids=lambda p: p.stem)
def test_rendered_yaml_matches_the_reviewed_golden_file(path: pathlib.Path) -> None:
    text = render.to_yaml(_rendered(_load(path)))
    golden = GOLDEN / (path.name.removesuffix(".profile.yaml").removesuffix(".yaml") + ".yaml")
    if os.environ.get("DEPLOYCTL_UPDATE_GOLDEN"):
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8"), f"{golden.name} differs; see this module's docstring"


def test_same_profile_renders_the_same_bytes_whatever_the_key_order() -> None:
    first = render.to_yaml(_rendered(_load(EVERY_OPTION)))
    assert render.to_yaml(_rendered(_load(EVERY_OPTION))) == first
    data = yaml.safe_load(EVERY_OPTION.read_text())
    for section in ("metadata", "placement"):
        for key, value in list(data[section].items()):
            if isinstance(value, dict):
                data[section][key] = dict(reversed(list(value.items())))
    reordered = profile.loads(yaml.safe_dump(data, sort_keys=False))
    assert render.to_yaml(_rendered(reordered)) == first


# --- the server container ---------------------------------------------------------------------------


def test_args_put_the_model_path_first_then_the_profile_flags_then_extra_args() -> None:
    args = _container(_rendered(_load(EVERY_OPTION)))["args"]
    assert args[0] == "/weights", "a hostPath source is served from its mountPath"
    assert args[1:5] == ["--served-model-name", "Qwen/Qwen2.5-72B-Instruct", "--tensor-parallel-size", "2"]
    flags = dict(zip(args[1::2], args[2::2], strict=False))
    assert flags["--pipeline-parallel-size"] == "2"
    assert flags["--max-num-batched-tokens"] == "8192"
    assert flags["--kv-cache-dtype"] == "fp8_e4m3"
    assert "--no-enable-prefix-caching" in args
    assert args[-2:] == ["--enforce-eager", "--disable-log-requests"]
    assert _container(_rendered(_load(EVERY_OPTION)))["command"] == ["vllm", "serve"]


def test_defaults_leave_out_flags_vllm_already_defaults() -> None:
    args = _container(_rendered(_load(DEV)))["args"]
    assert args[0] == "/models/llama3-8b-instruct"
    for flag in ("--pipeline-parallel-size", "--max-num-batched-tokens", "--kv-cache-dtype", "--model"):
        assert flag not in args
    assert "--enable-prefix-caching" in args
    assert args[args.index("--host") + 1] == "0.0.0.0"


@pytest.mark.parametrize("path", [*EXAMPLES, EVERY_OPTION], ids=lambda p: p.stem)
def test_every_rendered_flag_exists_in_that_engine_version_and_is_reserved(path: pathlib.Path) -> None:
    prof = _load(path)
    args = _serve_args(_container(_rendered(prof)))
    if prof.multi_node:  # the Ray backend flag follows the profile's flags
        args = args[: args.index("--distributed-executor-backend")]
    ours = [a for a in args[: len(args) - len(prof.engine.extraArgs)] if a.startswith("--")]
    engine = prof.engine.engine
    if engine.kind == "vllm":
        known = vllm_flags.flag_set(prof.engine.engine_version).flags
    else:
        known = engine_flags.flag_set(engine.kind, prof.engine.engine_version).flags
    assert [f for f in ours if f not in known] == []
    # Reserved flags are refused in extraArgs, so a profile cannot render one twice.
    assert [f for f in ours if f not in engine.reserved] == []


def test_gpus_are_requested_and_limited_as_tensor_times_pipeline_parallel() -> None:
    for path, gpus in ((PROD, "4"), (DEV, "2"), (EVERY_OPTION, "4")):
        resources = _container(_rendered(_load(path)))["resources"]
        assert resources["requests"][render.GPU_RESOURCE] == resources["limits"][render.GPU_RESOURCE] == gpus
        assert "cpu" not in resources["limits"], "a CPU limit throttles the scheduler loop"
        assert resources["requests"]["memory"] == resources["limits"]["memory"]


def test_credentials_secret_is_referenced_never_copied() -> None:
    objects = _rendered(_load(EVERY_OPTION))
    env = _env(objects)
    assert env["HF_TOKEN"] == {"secretKeyRef": {"name": "hf-mirror-token", "key": "token"}}
    assert "HF_TOKEN" not in _env(_rendered(_load(PROD)))


def test_offline_switches_follow_airgap_offline() -> None:
    env = _env(_rendered(_load(EVERY_OPTION)))  # offline: false
    assert not set(engines.VLLM.offline_env) & set(env)


def test_home_points_at_the_writable_volume_for_the_non_root_user() -> None:
    objects = _rendered(_load(PROD))
    mounts = {m["name"]: m for m in _container(objects)["volumeMounts"]}
    assert _env(objects)["HOME"] == mounts["home"]["mountPath"] == resolve.HOME_DIR


def test_service_links_are_off_so_a_service_named_vllm_cannot_set_vllm_port() -> None:
    assert _pod(_rendered(_load(PROD)))["spec"]["enableServiceLinks"] is False


# --- volumes -------------------------------------------------------------------------------------


def test_pvc_weights_are_mounted_read_only() -> None:
    objects = _rendered(_load(PROD))
    volumes = {v["name"]: v for v in _pod(objects)["spec"]["volumes"]}
    assert volumes["model"]["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
    mounts = {m["name"]: m for m in _container(objects)["volumeMounts"]}
    assert mounts["model"] == {"name": "model", "mountPath": "/models", "readOnly": True}


def test_host_path_weights_must_be_an_existing_directory_mounted_read_only() -> None:
    objects = _rendered(_load(EVERY_OPTION))
    volumes = {v["name"]: v for v in _pod(objects)["spec"]["volumes"]}
    assert volumes["model"]["hostPath"] == {"path": "/data/weights/qwen2.5-72b", "type": "Directory"}
    mounts = {m["name"]: m for m in _container(objects)["volumeMounts"]}
    assert mounts["model"]["readOnly"] is True


@pytest.mark.parametrize(
    ("changes", "size"),
    [
        ({}, "16Gi"),  # TP 4: more than one GPU per pod
        ({"engine.tensorParallelSize": 1}, "1Gi"),
        ({"engine.shmSize": "24Gi"}, "24Gi"),
    ],
)
def test_dev_shm_is_memory_backed_and_sized_by_gpus_per_pod(changes: dict[str, Any], size: str) -> None:
    objects = _rendered(_variant(PROD, **changes))
    volumes = {v["name"]: v for v in _pod(objects)["spec"]["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": size}
    mounts = {m["name"]: m["mountPath"] for m in _container(objects)["volumeMounts"]}
    assert mounts["dshm"] == "/dev/shm"


# --- placement -----------------------------------------------------------------------------------


def test_tp4_requires_the_gpu_product_and_an_nvlink_node() -> None:
    expressions = _match_expressions(_rendered(_load(PROD)))
    assert "NVIDIA-A100-SXM4-80GB" in expressions[render.GPU_PRODUCT_LABEL]
    assert expressions["deployctl.dev/nvlink"] == ["true"]


def test_tp2_requires_the_gpu_product_but_not_nvlink() -> None:
    expressions = _match_expressions(_rendered(_load(DEV)))
    assert set(expressions) == {render.GPU_PRODUCT_LABEL}


def test_no_product_match_and_no_nvlink_means_no_affinity() -> None:
    prof = _variant(DEV, **{"placement.matchGpuProduct": False})
    assert "affinity" not in _pod(_rendered(prof))["spec"]


def test_custom_nvlink_label_selectors_tolerations_and_classes_reach_the_pod() -> None:
    spec = _pod(_rendered(_load(EVERY_OPTION)))["spec"]
    assert _match_expressions(_rendered(_load(EVERY_OPTION)))["example.com/nvswitch"] == ["yes"]
    assert spec["nodeSelector"] == {"node-pool": "gpu", "topology.kubernetes.io/zone": "lab-b"}
    assert {"key": "dedicated", "operator": "Equal", "value": "inference", "effect": "NoExecute"} in spec["tolerations"]
    assert spec["priorityClassName"] == "inference-critical"
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["imagePullSecrets"] == [{"name": "internal-registry"}]


def test_default_profile_tolerates_the_gpu_taint() -> None:
    tolerations = _pod(_rendered(_load(DEV)))["spec"]["tolerations"]
    assert tolerations == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_profile_labels_cannot_change_what_the_selectors_match() -> None:
    objects = _rendered(_load(EVERY_OPTION))  # podLabels sets app.kubernetes.io/name
    deployment = _by_kind(objects)["Deployment"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector["app.kubernetes.io/name"] == render.CHART_NAME
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert deployment["spec"]["template"]["metadata"]["labels"]["tier"] == "gold"


def test_profile_hash_is_on_the_deployment_but_not_its_pods() -> None:
    prof = _load(PROD)
    deployment = _by_kind(_rendered(prof))["Deployment"]
    assert deployment["metadata"]["annotations"][render.PROFILE_HASH_ANNOTATION] == prof.spec_hash()
    # An SLO-only change alters the hash but must leave the pod template (and so the pods) alone.
    slo_change = profile.loads(PROD.read_text().replace('"<=1500"', '"<=1400"'), base_dir=PROD.parent)
    other = _by_kind(_rendered(slo_change))["Deployment"]
    assert other["metadata"]["annotations"][render.PROFILE_HASH_ANNOTATION] != prof.spec_hash()
    assert other["spec"]["template"] == deployment["spec"]["template"]
    assert "annotations" not in deployment["spec"]["template"]["metadata"]
    pod_annotations = _pod(_rendered(_load(EVERY_OPTION)))["metadata"]["annotations"]
    assert pod_annotations["prometheus.io/scrape"] == "true"


# --- rollout -------------------------------------------------------------------------------------


def test_auto_strategy_replaces_one_pod_at_a_time_until_preflight_says_otherwise() -> None:
    prof = _load(PROD)
    deployment = _by_kind(_rendered(prof))["Deployment"]
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }
    surge = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert _by_kind(_rendered(prof, strategy=surge))["Deployment"]["spec"]["strategy"] == surge
    assert deployment["spec"]["progressDeadlineSeconds"] == 1800
    assert deployment["spec"]["revisionHistoryLimit"] == 10


def test_recreate_strategy_and_rollout_settings_come_from_the_profile() -> None:
    spec = _by_kind(_rendered(_load(EVERY_OPTION)))["Deployment"]["spec"]
    assert spec["strategy"] == {"type": "Recreate"}
    assert (spec["replicas"], spec["progressDeadlineSeconds"], spec["revisionHistoryLimit"]) == (3, 3600, 5)


@pytest.mark.parametrize(
    ("replicas", "budget"), [(1, {"maxUnavailable": 1}), (2, {"minAvailable": 1}), (5, {"minAvailable": 4})]
)
def test_disruption_budget_never_blocks_a_drain_of_a_single_replica(replicas: int, budget: dict[str, int]) -> None:
    spec = _by_kind(_rendered(_variant(PROD, **{"rollout.replicas": replicas})))["PodDisruptionBudget"]["spec"]
    assert {k: v for k, v in spec.items() if k in ("minAvailable", "maxUnavailable")} == budget
    assert spec["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


# --- probes --------------------------------------------------------------------------------------


def test_startup_probe_allows_the_profiles_startup_seconds() -> None:
    probe = _container(_rendered(_load(EVERY_OPTION)))["startupProbe"]  # startupSeconds: 2400
    assert probe["failureThreshold"] * probe["periodSeconds"] >= 2400
    assert probe["httpGet"] == {"path": "/health", "port": "http"}


def test_startup_estimate_gives_a_70b_model_minutes_and_more_than_an_8b() -> None:
    big = _container(_rendered(_load(PROD)))["startupProbe"]
    small = _container(_rendered(_load(DEV)))["startupProbe"]
    big_s, small_s = (p["failureThreshold"] * p["periodSeconds"] for p in (big, small))
    assert 600 <= big_s <= 1800, "70B bf16 at 250 MiB/s: about 14 minutes, inside the progress deadline"
    assert resolve.STARTUP_FIXED_SECONDS < small_s < big_s


def test_liveness_is_more_patient_than_readiness() -> None:
    container = _container(_rendered(_load(PROD)))
    live, ready = container["livenessProbe"], container["readinessProbe"]
    assert live["httpGet"]["path"] == ready["httpGet"]["path"] == "/health"
    assert live["periodSeconds"] * live["failureThreshold"] > ready["periodSeconds"] * ready["failureThreshold"]
    assert live["timeoutSeconds"] >= ready["timeoutSeconds"]


# --- security ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_pods_meet_pod_security_restricted(path: pathlib.Path) -> None:
    objects = _rendered(_load(path))
    pod = _pod(objects)["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert "privileged" not in context
    allowed = {
        "name",
        "persistentVolumeClaim",
        "emptyDir",
        "configMap",
        "secret",
        "projected",
        "csi",
        "ephemeral",
    }
    assert all(set(volume) <= allowed for volume in pod["volumes"])
    assert not {"hostNetwork", "hostPID", "hostIPC"} & set(pod)
    assert _by_kind(objects)["ServiceAccount"]["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == _by_kind(objects)["ServiceAccount"]["metadata"]["name"]


# --- output --------------------------------------------------------------------------------------


def test_write_puts_one_object_per_file_in_apply_order_and_drops_stale_ones(tmp_path: pathlib.Path) -> None:
    prof = _load(PROD)
    unrelated = tmp_path / "kustomization.yaml"
    unrelated.write_text("resources: []\n")
    first = render.write(_rendered(prof), tmp_path)
    assert [p.name for p in first] == [
        "00-serviceaccount-llama3-70b.yaml",
        "01-networkpolicy-llama3-70b.yaml",
        "02-service-llama3-70b.yaml",
        "03-poddisruptionbudget-llama3-70b.yaml",
        "04-deployment-llama3-70b.yaml",
    ]
    assert yaml.safe_load(first[-1].read_text())["kind"] == "Deployment"
    without_policy = _variant(PROD, **{"airgap.denyEgress": False})
    second = render.write(_rendered(without_policy), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*(p.name for p in second), unrelated.name])
    assert "---\n".join(p.read_text() for p in second) == render.to_yaml(_rendered(without_policy))


def test_templates_refuse_a_missing_value() -> None:
    template = render._environment().from_string("name: {{ nothing | json }}")
    with pytest.raises(jinja2.UndefinedError):
        template.render({})


# --- RBAC ----------------------------------------------------------------------------------------


def test_rbac_grants_deployctl_only_what_it_uses() -> None:
    objects = render.rbac("inference", service_account="ci-deployer")
    kinds = {o["kind"]: o for o in objects}
    assert list(kinds) == ["ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"]
    for obj in objects:
        if obj["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
            assert obj["metadata"]["namespace"] == "inference"
    for binding in ("RoleBinding", "ClusterRoleBinding"):
        assert kinds[binding]["subjects"] == [
            {"kind": "ServiceAccount", "name": "ci-deployer", "namespace": "inference"}
        ]
        assert kinds[binding]["roleRef"]["name"] == kinds[binding.removesuffix("Binding")]["metadata"]["name"]

    def grants(role: dict[str, Any]) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    out.setdefault(f"{group}/{resource}", set()).update(rule["verbs"])
        return out

    role = grants(kinds["Role"])
    writes = {"get", "list", "watch", "create", "patch", "update", "delete"}
    for resource in (
        "apps/deployments",
        "/services",
        "/serviceaccounts",
        "policy/poddisruptionbudgets",
        "networking.k8s.io/networkpolicies",
    ):
        assert role[resource] == writes, resource
    # Release records are append-only: deployctl may create them, never change or delete one.
    assert role["/configmaps"] == {"get", "list", "watch", "create"}
    assert role["apps/replicasets"] == {"get", "list", "watch"}
    assert role["/pods"] == {"get", "list", "watch", "create", "delete"}  # a Role for any profile: the warm-up
    (unwarmed,) = [o for o in render.rbac("inference", warmup=False) if o["kind"] == "Role"]
    assert grants(unwarmed)["/pods"] == {"get", "list", "watch"}
    assert role["/pods/log"] == {"get"}
    assert role["/pods/portforward"] == {"get", "create"}
    assert role["/events"] == {"list", "watch"}
    assert role["/namespaces"] == {"get"}
    assert role["coordination.k8s.io/leases"] <= writes
    assert "/secrets" not in role and not any("*" in r or "*" in v for r, vs in role.items() for v in vs)
    assert grants(kinds["ClusterRole"]) == {"/nodes": {"list", "watch"}, "/pods": {"list"}}


_OPTIONAL_RESOURCES = {
    "ray.io/rayclusters",
    "leaderworkerset.x-k8s.io/leaderworkersets",
    "monitoring.coreos.com/podmonitors",
}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (ROOT / "profiles" / "dev-tp2.yaml", set()),
        (ROOT / "profiles" / "llama31-405b-2node.yaml", {"ray.io/rayclusters"}),
        (GOLDEN / "lws.profile.yaml", {"leaderworkerset.x-k8s.io/leaderworkersets"}),
        (GOLDEN / "every-option.profile.yaml", {"monitoring.coreos.com/podmonitors"}),
    ],
)
def test_render_rbac_grants_group_and_podmonitor_writes_only_for_a_profile_that_renders_them(
    path: pathlib.Path, expected: set[str]
) -> None:
    from click.testing import CliRunner

    from orchestrator.cli import app as cli

    result = CliRunner().invoke(cli.main, ["render", str(path), "--format", "rbac", "-o", "json"])
    assert result.exit_code == 0, result.output
    (role,) = [o for o in yaml.safe_load(result.stdout)["items"] if o["kind"] == "Role"]
    granted = {f"{g}/{r}" for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert granted & _OPTIONAL_RESOURCES == expected
    assert "apps/deployments" in granted  # the rest of the Role stays
    rendered = {o["kind"] for o in render.render(profile.load(path), planner.plan(profile.load(path)))}
    assert ("RayCluster" in rendered, "LeaderWorkerSet" in rendered, "PodMonitor" in rendered) == (
        "ray.io/rayclusters" in expected,
        "leaderworkerset.x-k8s.io/leaderworkersets" in expected,
        "monitoring.coreos.com/podmonitors" in expected,
    )


def test_rbac_without_kinds_grants_every_kind_a_profile_may_render() -> None:
    (role,) = [o for o in render.rbac("inference") if o["kind"] == "Role"]
    granted = {f"{g}/{r}" for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert granted >= _OPTIONAL_RESOURCES


def test_rbac_bindings_of_two_namespaces_do_not_collide() -> None:
    names = {
        o["metadata"]["name"]
        for ns in ("a-b", "a")
        for o in render.rbac(ns, "c" if ns == "a-b" else "b-c")
        if o["kind"] == "ClusterRoleBinding"
    }
    assert len(names) == 2
