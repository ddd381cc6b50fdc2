"""The threat model of docs/security.md, one row per actor, on the local control plane.

Every test runs in a namespace that enforces Pod Security `restricted`, and every actor acts with its
own identity and only the rights RBAC gives it, as on a shared cluster:

- deployctl (the CLI in CI) is a ServiceAccount bound to the Role `deployctl render --format rbac`
  renders, nothing more;
- the namespace editor is a ServiceAccount bound to the built-in `edit` ClusterRole in the namespace;
- the profile author may create InferenceProfiles in the namespace and nothing else;
- the controller's ServiceAccount holds what `render --format controller` grants it;
- the cluster admin is the test's own client (it owns the key, the policy and the controller);
- the network neighbour is a process listening on this machine's network.

The deeper tests of each defence are named in the table of docs/security.md; these show that each
row holds with the rights each actor really has.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import secrets
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faulthelpers
import kubernetes
import pytest
import yaml
from controllerhelpers import conditions, get_object
from deployhelpers import ReleaseEnv, Result, deployctl, exists, profile, wait_until, write_profile
from test_policy_cluster import (  # noqa: F401  (fixtures)
    HOST_PATH,
    Admission,
    admission,
    can_i,
    case_object,
    installed_controller_rbac,
    kubectl,
    policy_crd,
)
from test_signed_records_cluster import _editor_api, _forge, _gone, _listener

from orchestrator import errors
from orchestrator.records import releases
from orchestrator.render import manifests as render

pytestmark = pytest.mark.kwok

DEPLOYER = "ci-deployer"
AUTHOR = "profile-author"
API_KEY_SECRET = "gate-api-key"


@dataclass
class Actors:
    """The test's namespace under `restricted`, and a kubeconfig per actor that has one."""

    env: ReleaseEnv
    deployer: Path  # deployctl's own identity: the rendered Role
    keyed: dict[str, str]  # the environment of a deployctl that signs (the admin's key file)
    public_key: Path

    def deployctl(self, *args: str, timeout: float = 240, env: dict[str, str] | None = None) -> Result:
        return deployctl(
            self.deployer, *args, env=self.keyed if env is None else env,
            timeout=timeout,
        )  # fmt: skip

    def apply(
        self, doc: dict[str, Any], *extra: str, filename: str = "profile.yaml", env: dict[str, str] | None = None
    ) -> Result:
        path = write_profile(self.env.tmp, doc, filename)
        return self.deployctl("apply", str(path), "-o", "json", *extra, env=env)


def restrict(api: kubernetes.client.ApiClient, namespace: str) -> None:
    """Pod Security `restricted`, enforced: the API server refuses any pod that breaks it."""
    labels = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")}
    kubernetes.client.CoreV1Api(api).patch_namespace(namespace, {"metadata": {"labels": labels}})


@contextlib.contextmanager
def service_account(env: ReleaseEnv, name: str, objects: list[dict[str, Any]]) -> Iterator[Path]:
    """A ServiceAccount ``name`` with ``objects`` (its Roles and bindings) applied; its kubeconfig.
    Cluster-scoped bindings are removed afterwards; the rest goes with the test's namespace."""
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": env.namespace}}
    with faulthelpers.applied(env.api, [account, *objects]):
        token = faulthelpers.mint_token(env.api, env.namespace, name)
        yield faulthelpers.kubeconfig_with(env.kubeconfig, env.tmp / f"{name}-kubeconfig", token=token, context=name)


@pytest.fixture
def actors(env: ReleaseEnv) -> Iterator[Actors]:
    restrict(env.api, env.namespace)
    kubernetes.client.CoreV1Api(env.api).create_namespaced_secret(
        env.namespace, {"metadata": {"name": API_KEY_SECRET}, "stringData": {"key": "sk-" + secrets.token_hex(16)}}
    )
    private, public = env.tmp / "admin-signing.pem", env.tmp / "admin-signing.pub"
    made = deployctl(env.kubeconfig, "keygen", str(private), "-o", "json")
    assert made.code == 0, made.stderr
    with service_account(env, DEPLOYER, render.rbac(env.namespace, DEPLOYER, API_KEY_SECRET)) as deployer:
        yield Actors(env, deployer, {"DEPLOYCTL_SIGNING_KEY": str(private)}, public)


def planted_key(env: ReleaseEnv) -> str:
    secret = kubernetes.client.CoreV1Api(env.api).read_namespaced_secret(API_KEY_SECRET, env.namespace)
    return base64.b64decode(secret.data["key"]).decode()


def release_objects(env: ReleaseEnv) -> list[str]:
    client = kubernetes.dynamic.DynamicClient(env.api)
    found = []
    for api_version, kind in (("apps/v1", "Deployment"), ("v1", "Service"), ("v1", "ServiceAccount")):
        resource = client.resources.get(api_version=api_version, kind=kind)
        items = client.get(resource, namespace=env.namespace, label_selector="deployctl.dev/release=llm").items
        found += [f"{kind}/{item.metadata.name}" for item in items]
    return found


def profile_author(env: ReleaseEnv) -> Path:
    """The kubeconfig of an identity that may create InferenceProfiles in the namespace, and nothing else
    (its Role and binding are namespaced: they stay until the namespace goes)."""
    rules = [{"apiGroups": ["deployctl.dev"], "resources": ["inferenceprofiles"], "verbs": ["get", "create", "patch"]}]
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": AUTHOR, "namespace": env.namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": AUTHOR},
        "subjects": [{"kind": "ServiceAccount", "name": AUTHOR, "namespace": env.namespace}],
    }
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "rules": rules}
    role["metadata"] = {"name": AUTHOR, "namespace": env.namespace}
    with service_account(env, AUTHOR, [role, binding]) as kubeconfig:
        return kubeconfig


# --- namespace editor ----------------------------------------------------------------------------


def test_namespace_editor_forges_a_record_and_the_rollback_refuses_it_writes_nothing_outside_and_sends_no_key(
    actors: Actors, simulator: Callable[..., Any]
) -> None:
    env = actors.env
    keyed_gate = {"apiKeySecret": {"name": API_KEY_SECRET, "key": "key"}}
    first = actors.apply(profile(env.namespace), filename="good.yaml")
    assert first.code == 0, first.stdout + first.stderr
    with _listener() as (port, seen):
        _forge(_editor_api(env), env.namespace, f"http://127.0.0.1:{port}")
        bad = simulator(model="sim-model", fault="health-fail")
        env.forward_8001(bad.port)
        upgrade = actors.apply(profile(env.namespace, port=8001, gate=keyed_gate), filename="bad.yaml")
        refused = actors.deployctl("rollback", "llm", "-n", env.namespace, "--to", "2", "-o", "json")
        assert upgrade.code == 6, upgrade.stdout + upgrade.stderr
        assert (
            upgrade.json["rolled_back_to"] == 1
            and "revision 2 (ConfigMap deployctl.llm.v2) is not used" in upgrade.stderr
        )
        assert refused.code == 9 and "revision 2 of llm is not restored" in refused.stderr, refused.stderr
        assert seen == [], "the forged record's gate endpoint was contacted"
    rbac, core = kubernetes.client.RbacAuthorizationV1Api(env.api), kubernetes.client.CoreV1Api(env.api)
    assert _gone(lambda: rbac.read_cluster_role_binding(f"forged-{env.namespace}"))
    assert _gone(lambda: core.read_namespaced_config_map(f"forged-{env.namespace}", "default"))
    key = planted_key(env)
    for result in (first, upgrade, refused):
        assert key not in result.stdout + result.stderr
    records = core.list_namespaced_config_map(env.namespace, label_selector="deployctl.dev/release=llm").items
    assert records and all(key not in json.dumps(cm.data) for cm in records)


def test_namespace_editor_squats_the_release_name_with_a_service_and_apply_refuses_leaving_it_unchanged(
    actors: Actors,
) -> None:
    env = actors.env
    editor = kubernetes.client.CoreV1Api(_editor_api(env))
    theirs = {"app": "team-b-frontend"}
    service = {
        "metadata": {"name": "llm", "labels": theirs},
        "spec": {"selector": theirs, "ports": [{"name": "web", "port": 80, "targetPort": 8080}]},
    }
    editor.create_namespaced_service(env.namespace, service)
    before = kubernetes.client.CoreV1Api(env.api).read_namespaced_service("llm", env.namespace)

    applied = actors.apply(profile(env.namespace))

    assert applied.code == 5, applied.stdout + applied.stderr
    assert "would take over Service/llm" in applied.stderr and "--adopt" in applied.stderr, applied.stderr
    after = kubernetes.client.CoreV1Api(env.api).read_namespaced_service("llm", env.namespace)
    assert (after.spec.selector, after.metadata.labels) == (theirs, theirs)
    assert after.metadata.resource_version == before.metadata.resource_version, "the Service was written"
    assert env.deployment() is None and release_objects(env) == []


# --- profile author ----------------------------------------------------------------------------


def test_profile_author_cannot_borrow_the_controller_refused_at_admission_and_by_the_controller(
    admission: Admission,  # noqa: F811  (the fixture, imported)
    actors: Actors,
    controllers: Callable[..., subprocess.Popen[bytes]],
) -> None:
    env = actors.env
    author = profile_author(env)
    forbidden = case_object(env.namespace, {**HOST_PATH, "engine": {"fsGroup": 0}})
    admission.install()
    admission.enforce({}, "safe-default")

    refused = kubectl(author, "apply", "-f", "-", stdin=json.dumps(forbidden))
    assert refused.returncode != 0 and "deployctl policy rule host-path" in refused.stderr, refused.stderr
    assert not exists(lambda: get_object(env)), "stored despite admission"

    # Admission gone (or never installed): the controller refuses the same object itself.
    admission.remove()
    controllers("a")
    stored = kubectl(author, "apply", "-f", "-", stdin=json.dumps(forbidden))
    assert stored.returncode == 0, stored.stderr
    wait_until(lambda: conditions(env).get("Stalled", {}).get("status") == "True", 90, "Stalled")
    assert conditions(env)["Stalled"]["reason"] == "policy"
    assert "finalizers" not in get_object(env)["metadata"]
    assert env.deployment() is None and release_objects(env) == []


def test_profile_author_writes_a_variable_reference_and_no_secret_reaches_pod_args_records_or_output(
    actors: Actors,
) -> None:
    env = actors.env
    doc = profile(env.namespace, model={"name": "sim-model", "credentialsSecret": API_KEY_SECRET})
    doc["engine"]["extraArgs"] = ["--tokenizer-revision", "main-$(HF_TOKEN)"]  # HF_TOKEN: the credentials' variable
    rendered = actors.deployctl("render", str(write_profile(env.tmp, doc, "ref.yaml")))
    assert rendered.code == 0, rendered.stderr
    deployment = next(o for o in yaml.safe_load_all(rendered.stdout) if o and o["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "main-$$(HF_TOKEN)" in args, args  # the kubelet expands $(…), never $$(…)

    applied = actors.apply(doc)
    assert applied.code == 0, applied.stdout + applied.stderr
    pods = kubernetes.client.CoreV1Api(env.api).list_namespaced_pod(
        env.namespace, label_selector="deployctl.dev/release=llm"
    )
    assert pods.items and all(p.spec.containers[0].args == args for p in pods.items)
    key = planted_key(env)
    history = actors.deployctl("history", "llm", "-n", env.namespace, "-o", "json")
    status = actors.deployctl("status", "llm", "-n", env.namespace, "-o", "json")
    records = (
        kubernetes.client.CoreV1Api(env.api)
        .list_namespaced_config_map(env.namespace, label_selector=f"{releases.LABEL_RECORD}=true")
        .items
    )
    assert records, "no release record to search"
    for text in (applied.stdout + applied.stderr, history.stdout, status.stdout, json.dumps([r.data for r in records])):
        assert key not in text


# --- network neighbour ---------------------------------------------------------------------------


def test_network_neighbour_as_gate_endpoint_is_refused_and_never_gets_the_api_key(actors: Actors) -> None:
    env = actors.env
    key = planted_key(env)
    with _listener() as (port, seen):
        endpoint = f"http://127.0.0.1:{port}"
        doc = profile(
            env.namespace, gate={"endpoint": endpoint, "apiKeySecret": {"name": API_KEY_SECRET, "key": "key"}}
        )
        refused = actors.apply(doc)
        # The operator allows the host: the gate could ask it, but the API key still goes nowhere but home.
        allowed = actors.apply(doc, "--allow-gate-host", "127.0.0.1")
        unkeyed = profile(env.namespace, gate={"endpoint": endpoint + "#"})  # a fragment would drop the gate's paths
        fragment = actors.apply(unkeyed, "--allow-gate-host", "127.0.0.1")
    assert refused.code == 2 and "--allow-gate-host" in refused.stderr, refused.stdout + refused.stderr
    assert allowed.code == 2 and "sent only to the release's own endpoint" in allowed.stderr, allowed.stderr
    assert fragment.code == 2 and "fragment" in fragment.stderr, fragment.stderr
    assert seen == [], "the neighbour was contacted"
    assert release_objects(env) == [], "refused, yet something was written"
    for result in (refused, allowed, fragment):
        assert key not in result.stdout + result.stderr


def test_network_neighbour_allowed_as_gate_endpoint_puts_only_a_redacted_excerpt_into_the_record(
    actors: Actors,
) -> None:
    env = actors.env
    token = "hf_" + secrets.token_urlsafe(24)
    body = f"upstream says token={token} " + "Z" * 5000 + "\u2028forged log line"
    with _answering(503, body) as (port, asked):
        doc = profile(env.namespace, gate={"endpoint": f"http://127.0.0.1:{port}", "health": {"timeoutSeconds": 10}})
        applied = actors.apply(doc, "--allow-gate-host", "127.0.0.1")
    assert applied.code == 6, applied.stdout + applied.stderr  # the neighbour is no healthy engine
    assert asked and not any("authorization" in h.lower() for headers in asked for h in headers)
    records = (
        kubernetes.client.CoreV1Api(env.api)
        .list_namespaced_config_map(env.namespace, label_selector=f"{releases.LABEL_RECORD}=true")
        .items
    )
    stored = json.dumps([r.data for r in records]) + applied.stdout + applied.stderr
    assert records and token not in stored and token[3:15] not in stored
    assert "Z" * (errors.EXCERPT_CHARS + 1) not in stored, "more than an excerpt of the body was kept"


@contextlib.contextmanager
def _answering(status: int, body: str) -> Iterator[tuple[int, list[list[str]]]]:
    """An HTTP server on 127.0.0.1 (the neighbour) that answers every request with ``status`` and
    ``body``, and notes each request's header names."""
    asked: list[list[str]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(list(self.headers.keys()))
            payload = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_POST = do_GET

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], asked
    finally:
        server.shutdown()
        server.server_close()


# --- controller ServiceAccount --------------------------------------------------------------------


def test_controller_service_account_reads_only_its_signing_key_and_writes_only_where_opted_in(
    installed_controller_rbac: None,  # noqa: F811  (the fixture, imported)
    actors: Actors,
) -> None:
    env = actors.env
    mine = ("-n", env.namespace)
    assert can_i(env, "create", "deployments", *mine) and can_i(env, "get", "secrets/deployctl-signing-key", *mine)
    for verb, resource, where in [
        ("get", "secrets", mine),
        ("list", "secrets", mine),
        ("get", f"secrets/{API_KEY_SECRET}", mine),
        ("create", "clusterrolebindings", ()),
        ("update", "leases", ("-n", "kube-system")),
        ("create", "deployments", ("-n", "kube-system")),
        ("list", "configmaps", ("--all-namespaces",)),
    ]:
        assert not can_i(env, verb, resource, *where), f"{verb} {resource} {' '.join(where)}"


# --- cluster admin ------------------------------------------------------------------------------


def test_cluster_admin_owns_the_key_older_records_are_trusted_only_by_its_signed_step(actors: Actors) -> None:
    env = actors.env
    unsigned = actors.apply(profile(env.namespace), env={})  # before the key: an unsigned record, and a warning
    assert unsigned.code == 0 and "not signed" in unsigned.stdout + unsigned.stderr, unsigned.stdout
    upgrade = profile(env.namespace, engine={"maxNumSeqs": 16})
    before_trust = actors.apply(upgrade, filename="upgrade.yaml")
    assert before_trust.code == 9 and "audit trust" in before_trust.stderr, before_trust.stderr

    trusted = actors.deployctl("audit", "trust", "llm", "-n", env.namespace, "-o", "json")
    assert trusted.code == 0, trusted.stdout + trusted.stderr
    after_trust = actors.apply(upgrade, filename="upgrade.yaml")
    assert after_trust.code == 0, after_trust.stdout + after_trust.stderr
    export = env.tmp / "export.json"
    assert actors.deployctl("audit", "export", "llm", "-n", env.namespace, "--output-file", str(export)).code == 0
    offline = deployctl(Path(), "audit", "verify", "--file", str(export), "--key", str(actors.public_key))
    assert offline.code == 0, offline.stdout + offline.stderr
