"""gate.apiKeySecret on the real control plane: the gate reads the server's API key from a Secret.

The pods' port 8001 reaches a vLLM simulator started with ``--api-key`` (vLLM's middleware: /v1/*
answers 401 without ``Authorization: Bearer KEY``, /health stays open). A profile naming a real
Secret that holds the key passes the gate; a wrong key is a gate Error (could not measure), never
a Fail, and the revision is rolled back with a message naming the field. A Secret that is missing
is refused before anything is written: found at gate time it would cost a whole model load.
The key itself is in no record, export or output.
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Callable
from typing import Any

import kubernetes
import pytest
from deployhelpers import ReleaseEnv, deployctl, profile

pytestmark = pytest.mark.kwok

SECRET = "vllm-api-key"


def _create_secret(env: ReleaseEnv, value: str, key: str = "api-key") -> None:
    kubernetes.client.CoreV1Api(env.api).create_namespaced_secret(
        env.namespace, {"metadata": {"name": SECRET}, "stringData": {key: value}}
    )


def _keyed_profile(env: ReleaseEnv, **secret_ref: str) -> dict[str, Any]:
    doc = profile(env.namespace, port=8001)
    doc["gate"] = {**doc["gate"], "apiKeySecret": {"name": SECRET, **secret_ref}}
    return doc


def _everything_stored_and_shown(env: ReleaseEnv, *outputs: str) -> str:
    items = kubernetes.client.CoreV1Api(env.api).list_namespaced_config_map(env.namespace).items
    records = "".join(json.dumps(cm.data or {}) + json.dumps(cm.binary_data or {}) for cm in items)
    export = deployctl(env.kubeconfig, "audit", "export", "llm", "-n", env.namespace)
    history = deployctl(env.kubeconfig, "history", "llm", "-n", env.namespace, "--output", "json")
    return records + export.stdout + history.stdout + "".join(outputs)


def _assert_nowhere(key: str, haystack: str) -> None:
    for needle in (key, base64.b64encode(key.encode()).decode()):
        assert needle not in haystack, "the API key leaked into a record, the export or the output"


def test_the_key_from_the_named_secret_passes_the_gate_and_is_stored_nowhere(
    env: ReleaseEnv, simulator: Callable[..., Any]
) -> None:
    key = "sk-" + secrets.token_urlsafe(24)
    keyed = simulator(model="sim-model", api_key=key)
    env.forward_8001(keyed.port)
    _create_secret(env, key)
    result = env.apply(_keyed_profile(env))
    assert result.code == 0, result.stdout + result.stderr
    out = result.json
    assert out["result"] == "deployed" and out["gate"]["verdict"] == "pass"
    assert out["gate"]["bench"]["failures"] == {}
    record = env.record(1)
    assert record["gate"]["verdict"] == "pass" and SECRET in json.dumps(record)  # the name is kept
    _assert_nowhere(key, _everything_stored_and_shown(env, result.stdout, result.stderr))


def test_a_wrong_key_is_a_gate_error_naming_the_field_and_the_revision_is_rolled_back(
    env: ReleaseEnv, simulator: Callable[..., Any]
) -> None:
    assert env.apply(profile(env.namespace)).code == 0  # revision 1: the unkeyed server on 8000
    key = "sk-" + secrets.token_urlsafe(24)
    wrong = "sk-wrong-" + secrets.token_urlsafe(24)
    keyed = simulator(model="sim-model", api_key=key)
    env.forward_8001(keyed.port)
    _create_secret(env, wrong)
    result = env.apply(_keyed_profile(env))
    assert result.code == 6, result.stdout + result.stderr
    out = result.json
    assert out["result"] == "rolled_back" and out["rolled_back_to"] == 1
    assert out["failure"]["class"] == "gate_error", out["failure"]
    assert out["gate"]["verdict"] == "error"  # could not measure: never "fail"
    message = out["failure"]["message"]
    assert "gate.apiKeySecret" in message and SECRET in message and "401" in message, message
    assert [(r["revision"], r["status"], r["gate"]) for r in env.history()] == [
        (1, "superseded", "pass"),
        (2, "failed", "error"),
        (3, "deployed", None),
    ]
    _assert_nowhere(wrong, _everything_stored_and_shown(env, result.stdout, result.stderr))
    _assert_nowhere(key, result.stdout + result.stderr)


def test_a_missing_secret_is_refused_before_anything_is_written(env: ReleaseEnv, simulator: Callable[..., Any]) -> None:
    assert env.apply(profile(env.namespace)).code == 0
    live = env.deployment().metadata.resource_version
    keyed = simulator(model="sim-model", api_key="sk-" + secrets.token_urlsafe(24))
    env.forward_8001(keyed.port)
    result = env.apply(_keyed_profile(env, key="token"))
    assert result.code == 5, result.stdout + result.stderr  # refused, as a preflight refusal is
    message = result.json["error"]
    assert "gate.apiKeySecret" in message and "no such Secret" in message and "Nothing was changed" in message
    assert [r["revision"] for r in env.history()] == [1]
    assert env.deployment().metadata.resource_version == live
