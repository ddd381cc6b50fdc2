"""engine.env, envFrom, volumes, volumeMounts and fsGroup on the real control plane.

A profile that takes VLLM_API_KEY from a Secret, every key of a ConfigMap as variables, mounts a
chat template from a ConfigMap and sets fsGroup is applied with `deployctl apply`; the API server
must accept the pod spec (its own validation of names, paths and policies), the rollout and gate
must pass on the simulator, and the live pod must carry each field as the profile said.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes
import pytest
from deployhelpers import ReleaseEnv, profile

from orchestrator.controller import crd
from orchestrator.profile import model as profiles

EXAMPLE = Path(__file__).resolve().parent.parent / "profiles" / "prod-tp4-api-key.yaml"

pytestmark = pytest.mark.kwok


def _live_pod_specs(env: ReleaseEnv) -> list[dict[str, Any]]:
    pods = kubernetes.client.CoreV1Api(env.api).list_namespaced_pod(
        env.namespace, label_selector="deployctl.dev/release=llm"
    )
    specs: list[dict[str, Any]] = [env.api.sanitize_for_serialization(p.spec) for p in pods.items]
    return specs


def test_env_from_a_secret_a_config_map_volume_and_fs_group_reach_the_live_pod(env: ReleaseEnv) -> None:
    core = kubernetes.client.CoreV1Api(env.api)
    core.create_namespaced_secret(
        env.namespace, {"metadata": {"name": "vllm-api-key"}, "stringData": {"api-key": "sk-e2e"}}
    )
    core.create_namespaced_config_map(
        env.namespace, {"metadata": {"name": "chat-templates"}, "data": {"llama3.jinja": "{{ messages }}"}}
    )
    core.create_namespaced_config_map(
        env.namespace, {"metadata": {"name": "site-settings"}, "data": {"LOGGING_LEVEL": "INFO"}}
    )
    doc = profile(
        env.namespace,
        engine={  # merged into the test profile's engine section
            "env": [
                {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": "vllm-api-key", "key": "api-key"}}}
            ],
            "envFrom": [{"configMapRef": {"name": "site-settings"}, "prefix": "VLLM_"}],
            "volumes": [
                {
                    "name": "chat-template",
                    "configMap": {"name": "chat-templates", "items": [{"key": "llama3.jinja", "path": "t.jinja"}]},
                }
            ],
            "volumeMounts": [{"name": "chat-template", "mountPath": "/etc/chat-templates", "readOnly": True}],
            "fsGroup": 2000,
        },
    )
    result = env.apply(doc)
    assert result.code == 0, result.stdout + result.stderr
    assert result.json["result"] == "deployed"

    specs = _live_pod_specs(env)
    assert specs, "no pod of the release is left"
    for spec in specs:
        container = spec["containers"][0]
        assert {
            "name": "VLLM_API_KEY",
            "valueFrom": {"secretKeyRef": {"name": "vllm-api-key", "key": "api-key"}},
        } in container["env"]
        assert container["envFrom"] == [{"configMapRef": {"name": "site-settings"}, "prefix": "VLLM_"}]
        (volume,) = [v for v in spec["volumes"] if v["name"] == "chat-template"]
        assert volume["configMap"]["name"] == "chat-templates"
        assert volume["configMap"]["items"] == [{"key": "llama3.jinja", "path": "t.jinja"}]
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "chat-template"]
        assert mount == {"name": "chat-template", "mountPath": "/etc/chat-templates", "readOnly": True}
        context = spec["securityContext"]
        assert context["fsGroup"] == 2000 and context["fsGroupChangePolicy"] == "OnRootMismatch"
        assert context["runAsNonRoot"] is True  # still Pod Security restricted

    record = env.record(1)
    assert "sk-e2e" not in str(record), "the Secret's value reached the release record"


def test_the_example_with_every_pod_field_is_admitted_by_the_crd_and_read_back_unchanged(
    crd_installed: None, api_client: kubernetes.client.ApiClient, namespace: str
) -> None:
    obj = profiles.to_object(profiles.load(EXAMPLE))
    obj["metadata"]["namespace"] = namespace
    created = kubernetes.client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        crd.GROUP, crd.VERSION, namespace, crd.PLURAL, obj, field_validation="Strict"
    )
    assert created["spec"] == profiles.to_object(profiles.load(EXAMPLE))["spec"], "nothing defaulted or pruned"
    assert created["spec"]["engine"]["volumes"][0]["configMap"]["items"] == [
        {"key": "llama3-instruct.jinja", "path": "template.jinja"}
    ]
