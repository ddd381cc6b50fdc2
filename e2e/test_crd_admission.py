"""The InferenceProfile CRD on a real kube-apiserver: its schema is accepted as structural, objects
are admitted or refused by it (types, enums, CEL rules), and an object read back from the cluster is
the same profile as the file it came from."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from components import BIN_DIR
from deployhelpers import deployctl

from orchestrator.controller import crd
from orchestrator.profile import model as profile

ROOT = Path(__file__).resolve().parent.parent
PROD = ROOT / "profiles" / "prod-tp4.yaml"


@pytest.fixture
def installed(crd_installed: None, api_client: kubernetes.client.ApiClient) -> kubernetes.client.ApiClient:
    return api_client


def _create(api: kubernetes.client.ApiClient, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    custom = kubernetes.client.CustomObjectsApi(api)
    created: dict[str, Any] = custom.create_namespaced_custom_object(
        crd.GROUP, crd.VERSION, namespace, crd.PLURAL, obj, field_validation="Strict"
    )
    return created


def _object(namespace: str, **changes: dict[str, Any]) -> dict[str, Any]:
    obj = profile.to_object(profile.load(PROD))
    obj["metadata"]["namespace"] = namespace
    for section, fields in changes.items():
        obj["spec"][section] = {**obj["spec"].get(section, {}), **fields}
    return obj


def test_a_profile_object_is_admitted_and_read_back_is_the_same_profile(
    installed: kubernetes.client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    created = _create(installed, namespace, _object(namespace))
    assert created["spec"] == profile.to_object(profile.load(PROD))["spec"], "nothing defaulted or pruned"
    path = tmp_path / "from-cluster.yaml"
    path.write_text(yaml.safe_dump(created))
    from_cluster = deployctl(Path(), "render", str(path))
    same_file = tmp_path / "prod-tp4.yaml"  # the example profile, in the test's namespace
    same_file.write_text(PROD.read_text().replace("namespace: inference", f"namespace: {namespace}"))
    from_file = deployctl(Path(), "render", str(same_file))
    assert from_cluster.code == 0, from_cluster.stderr
    assert from_cluster.stdout == from_file.stdout, "the object renders the file's bytes"
    validated = deployctl(Path(), "validate", str(path))
    assert validated.code == 0 and "valid; fits (llama3-70b, TP=4" in validated.stdout


def test_catalog_names_are_admitted_in_any_case_as_the_loader_reads_them(
    installed: kubernetes.client.ApiClient, namespace: str
) -> None:
    created = _create(installed, namespace, _object(namespace, hardware={"gpu": "a100-80gb"}))
    assert created["spec"]["hardware"]["gpu"] == "a100-80gb"  # stored as written; deployctl reads A100-80GB
    assert profile.from_object(created, "cluster").hardware.gpu == "A100-80GB"


def test_a_canary_with_alerts_is_admitted_as_the_loader_reads_it(
    installed: kubernetes.client.ApiClient, namespace: str
) -> None:
    canary = {"replicas": 4, "canary": {"steps": [{"copies": 1}, {"percent": 50}], "maxRatio": {"p95_ttft_ms": 1.3}}}
    monitoring = {"podMonitor": {"enabled": True}, "alerts": {"enabled": True}}
    created = _create(installed, namespace, _object(namespace, rollout=canary, monitoring=monitoring))
    loaded = profile.from_object(created, "cluster")
    assert loaded.rollout.canary is not None and loaded.rollout.canary.maxRatio == {"p95_ttft_ms": 1.3}


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"engine": {"image": "registry.internal/vllm:latest"}}, "pinned by digest"),
        ({"model": {"config": "config.json"}}, "exactly one of model.architecture"),
        ({"hardware": {"gpu": "H100-81GB"}}, "unknown GPU; known (any case): A10, A100-40GB"),
        ({"model": {"architecture": "llama-3-71b"}}, "unknown architecture; known (any case)"),
        ({"engine": {"tensorParallelSize": 0}}, "should be greater than or equal to 1"),
        ({"engine": {"tensorParallelSizee": 2}}, "unknown field"),
        ({"model": {"source": {"pvc": "models", "hostPath": "/m"}}}, "exactly one of source.pvc or source.hostPath"),
        ({"monitoring": {"alerts": {"enabled": True}}}, "monitoring.alerts needs monitoring.podMonitor.enabled"),
        ({"rollout": {"replicas": 4, "canary": {"steps": [{"copies": 1, "percent": 10}]}}}, "copies or as percent"),
        (
            {"rollout": {"replicas": 4, "canary": {"steps": [{"copies": 1}], "traffic": "httpRoute"}}},
            "httpRoute needs httpRoute.parentRefs",
        ),
        (
            {"rollout": {"replicas": 4, "canary": {"steps": [{"copies": 1}], "metrics": {"source": "prometheus"}}}},
            "needs metrics.prometheusUrl",
        ),
    ],
)
def test_the_api_server_refuses_what_the_schema_can_check_naming_it(
    installed: kubernetes.client.ApiClient, namespace: str, changes: dict[str, Any], says: str
) -> None:
    with pytest.raises(kubernetes.client.ApiException) as refused:
        _create(installed, namespace, _object(namespace, **changes))
    assert refused.value.status == 422 or "unknown field" in says
    assert says in json.loads(refused.value.body)["message"]


def test_a_release_name_that_is_no_dns_label_is_refused_at_admission(
    installed: kubernetes.client.ApiClient, namespace: str
) -> None:
    obj = _object(namespace)
    obj["metadata"]["name"] = "llama3." + "x" * 60  # a valid object name, but no DNS label
    with pytest.raises(kubernetes.client.ApiException) as refused:
        _create(installed, namespace, obj)
    assert "metadata.name is the release name" in json.loads(refused.value.body)["message"]


def test_status_is_a_subresource_with_kstatus_conditions_shown_by_kubectl_get(
    installed: kubernetes.client.ApiClient, namespace: str, cluster: Any
) -> None:
    _create(installed, namespace, _object(namespace))
    custom = kubernetes.client.CustomObjectsApi(installed)
    condition = {
        "type": "Ready",
        "status": "False",
        "reason": "slo_failed",
        "message": "p95_ttft_ms",
        "observedGeneration": 1,
    }
    custom.patch_namespaced_custom_object_status(
        crd.GROUP,
        crd.VERSION,
        namespace,
        crd.PLURAL,
        "llama3-70b",
        {"status": {"conditions": [condition], "liveRevision": 3}},
    )
    shown = subprocess.run(
        [str(BIN_DIR / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), "get", "iprofile", "-n", namespace],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert shown[:4] == ["NAME", "READY", "REASON", "REVISION"]
    assert shown[5:9] == ["llama3-70b", "False", "slo_failed", "3"]
