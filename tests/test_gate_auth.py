"""gate.apiKeySecret: the profile field, reading the Secret, the health gate's key, the rendered Role.

Secrets are served by a dict behind ``Kube.get``'s signature (the cluster path is e2e's job,
e2e/test_gate_api_key.py); the health gate runs against a local ``http.server`` that checks the
key as ``vllm serve --api-key`` does.
"""

from __future__ import annotations

import base64
import pathlib
from collections.abc import Iterator
from typing import Any

import localserver
import pytest

from orchestrator import errors
from orchestrator.apply import health
from orchestrator.profile import gate_auth
from orchestrator.profile import model as profile_mod
from orchestrator.render import manifests as render

KEY = "sk-gate-" + "s3cret" * 4
NS = "inference"
PROFILES = pathlib.Path(__file__).resolve().parent.parent / "profiles"


def secrets_of(objects: dict[str, dict[str, str]]) -> gate_auth.Getter:
    """Kube.get over Secrets given as name -> plain data (base64-encoded as the API server serves it)."""

    def get(kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        assert kind == "Secret" and namespace == NS
        if name not in objects:
            return None
        data = {k: base64.b64encode(v.encode()).decode() for k, v in objects[name].items()}
        return {"kind": "Secret", "metadata": {"name": name, "namespace": namespace}, "data": data}

    return get


def forbidden(kind: str, name: str, namespace: str) -> dict[str, Any] | None:
    raise errors.Forbidden('secrets "vllm-api-key" is forbidden: User "ci" cannot get resource "secrets"')


REF = gate_auth.ApiKeySecret(name="vllm-api-key")


# --- reading the Secret ------------------------------------------------------------------------


def test_the_key_is_read_from_the_default_key_and_stripped_of_a_trailing_newline() -> None:
    assert gate_auth.read(secrets_of({"vllm-api-key": {"api-key": KEY + "\n"}}), NS, REF) == KEY


def test_another_key_of_the_secret_can_be_named() -> None:
    ref = gate_auth.ApiKeySecret(name="vllm-api-key", key="token")
    assert gate_auth.read(secrets_of({"vllm-api-key": {"token": KEY, "api-key": "other"}}), NS, ref) == KEY


@pytest.mark.parametrize(
    "get, words",
    [
        (secrets_of({}), "no such Secret"),
        (secrets_of({"vllm-api-key": {"token": KEY}}), "has no such key (its keys: token)"),
        (secrets_of({"vllm-api-key": {"api-key": "  "}}), "the value is empty"),
        (forbidden, "grant `get` on that Secret"),
    ],
)
def test_a_key_that_cannot_be_read_is_an_error_naming_the_field_and_never_a_value(
    get: gate_auth.Getter, words: str
) -> None:
    with pytest.raises(gate_auth.ApiKeyUnavailable) as caught:
        gate_auth.read(get, NS, REF)
    message = caught.value.message
    assert "gate.apiKeySecret" in message and "inference/vllm-api-key" in message and words in message
    assert KEY not in message


# --- the profile field ---------------------------------------------------------------------------


def _with_gate(tmp_path: pathlib.Path, gate_yaml: str) -> pathlib.Path:
    text = (PROFILES / "dev-tp2.yaml").read_text()
    assert "\ngate:\n" in text
    path = tmp_path / "p.yaml"
    path.write_text(text.replace("\ngate:\n", f"\ngate:\n{gate_yaml}", 1))
    return path


def test_the_profile_names_the_secret_and_defaults_the_key(tmp_path: pathlib.Path) -> None:
    prof = profile_mod.load(_with_gate(tmp_path, "  apiKeySecret:\n    name: vllm-api-key\n"))
    assert prof.gate.apiKeySecret == gate_auth.ApiKeySecret(name="vllm-api-key", key="api-key")


@pytest.mark.parametrize(
    "gate_yaml, words",
    [
        ("  apiKeySecret:\n    name: Not_A_Name\n", "gate.apiKeySecret.name"),
        ("  apiKeySecret:\n    name: k\n    value: sk-123\n", "gate.apiKeySecret.value"),
        ("  apiKeySecret: {}\n", "gate.apiKeySecret.name"),
    ],
)
def test_a_bad_api_key_secret_is_refused_with_its_path(tmp_path: pathlib.Path, gate_yaml: str, words: str) -> None:
    with pytest.raises(errors.InvalidProfile) as caught:
        profile_mod.load(_with_gate(tmp_path, gate_yaml))
    assert words in caught.value.message


# --- RBAC ------------------------------------------------------------------------------------------


def _secret_rules(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        rule
        for obj in objects
        if obj["kind"] in ("Role", "ClusterRole")
        for rule in obj["rules"]
        if "secrets" in rule["resources"]
    ]


def test_the_role_may_get_the_named_secret_only_and_nothing_else_of_secrets() -> None:
    assert _secret_rules(render.rbac(NS, api_key_secret="vllm-api-key")) == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["vllm-api-key"], "verbs": ["get"]}
    ]
    assert _secret_rules(render.rbac(NS)) == []


# --- the health gate ---------------------------------------------------------------------------


class _Keyed(localserver.QuietHandler):
    def do_GET(self) -> None:
        if self.path == "/health":
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.headers.get("Authorization") != f"Bearer {KEY}":
            self.send_json(401, {"error": "Unauthorized"})
        else:
            self.send_json(200, {"data": [{"id": "m"}]})


@pytest.fixture(scope="module")
def keyed() -> Iterator[str]:
    with localserver.serve(_Keyed) as url:
        yield url


def test_the_health_gate_passes_with_the_servers_key(keyed: str) -> None:
    report = health.wait_healthy({"pod/a": keyed}, "m", timeout=5, api_key=KEY)
    assert report.ok and report.unauthorized is None


@pytest.mark.parametrize("key", [None, "wrong"])
def test_a_refused_key_ends_the_health_wait_at_once_as_unauthorized(keyed: str, key: str | None) -> None:
    report = health.wait_healthy({"pod/a": keyed}, "m", timeout=30, interval=5, api_key=key)
    assert not report.ok and report.elapsed < 2  # not waited out: a key does not change by waiting
    assert report.unauthorized is not None and "401" in report.unauthorized


def test_the_refusal_message_names_the_field_and_the_secret_but_no_key() -> None:
    text = gate_auth.refused_message(NS, REF, "HTTP 401")
    assert "gate.apiKeySecret" in text and "inference/vllm-api-key" in text and "401" in text
    assert "set gate.apiKeySecret" not in text
    assert "name the Secret" in gate_auth.refused_message(NS, None, "HTTP 401")
