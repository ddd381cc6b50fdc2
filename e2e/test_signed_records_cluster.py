"""Signed release records on the real control plane: a namespace editor's forgery is never restored.

The issue's finding, replayed: a ServiceAccount bound to the built-in `edit` ClusterRole in the
release's namespace appends a record with deployctl's own library, hashes valid, carrying a
ClusterRoleBinding, a ConfigMap in another namespace and a gate endpoint of its own. Then an
upgrade fails its health gate. Signed by deployctl's key, the real history says revision 1 is
the last good one: the rollback restores it, the forgery is named, nothing outside the release is
written and nothing is sent to the forged endpoint (docs/security.md#signed-records).
"""

from __future__ import annotations

import contextlib
import datetime
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import faulthelpers
import kubernetes
import pytest
import yaml
from controllerhelpers import apply_object, object_doc, wait_ready
from deployhelpers import ReleaseEnv, Result, deployctl, profile, write_profile

from orchestrator.records import encoding, releases

pytestmark = pytest.mark.kwok

EDITOR = "team-editor"
# Public TEST keys (tests/data/keys/README.md): only ever for tests.
KEYS = Path(__file__).resolve().parent.parent / "tests" / "data" / "keys"


@contextlib.contextmanager
def _listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP port on 127.0.0.1 that notes what each connection sends (the forged gate endpoint)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    seen: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                with contextlib.suppress(OSError):
                    seen.append(conn.recv(4096))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], seen
    finally:
        stop.set()
        thread.join(2)
        server.close()


def _editor_api(env: ReleaseEnv) -> kubernetes.client.ApiClient:
    """An API client of a ServiceAccount bound to the built-in `edit` ClusterRole in the namespace."""
    core = kubernetes.client.CoreV1Api(env.api)
    core.create_namespaced_service_account(env.namespace, {"metadata": {"name": EDITOR}})
    kubernetes.client.RbacAuthorizationV1Api(env.api).create_namespaced_role_binding(
        env.namespace,
        {
            "metadata": {"name": EDITOR},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"kind": "ServiceAccount", "name": EDITOR, "namespace": env.namespace}],
        },
    )
    token = faulthelpers.mint_token(env.api, env.namespace, EDITOR)
    path = faulthelpers.kubeconfig_with(env.kubeconfig, env.tmp / "editor-kubeconfig", token=token, context="editor")
    return kubernetes.config.new_client_from_config(config_file=str(path))


def _forge(editor: kubernetes.client.ApiClient, namespace: str, endpoint: str) -> str:
    """Revision 2, as the editor can write it: revision 1's record and signature, other manifests."""
    core = kubernetes.client.CoreV1Api(editor)
    first = releases.from_configmap(
        editor.sanitize_for_serialization(core.read_namespaced_config_map("deployctl.llm.v1", namespace))
    )
    outside: list[dict[str, Any]] = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"forged-{namespace}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": EDITOR, "namespace": namespace}],
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"forged-{namespace}", "namespace": "default"}},
    ]
    manifests = first.manifests + b"---\n" + yaml.safe_dump_all(outside).encode()
    stored = yaml.safe_load(first.profile)
    stored.setdefault("gate", {})["endpoint"] = endpoint
    body = first.body() | {
        "revision": 2,
        "description": f"upgrade from revision {first.revision}",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "profile": yaml.safe_dump(stored),
        "manifests_sha256": encoding.sha256(manifests),
        "prev_hash": first.hash,
    }
    hashed = encoding.sha256(encoding.canonical_json(body))
    # The signature of revision 1, moved: the record looks signed, and its hashes are all valid.
    record = releases.record_from_body(body, hash=hashed, manifests=manifests, envelope=first.envelope)
    core.create_namespaced_config_map(namespace, releases.to_configmap(record))
    return hashed


def _gone(read: Callable[[], Any]) -> bool:
    try:
        read()
    except kubernetes.client.ApiException as e:
        return e.status == 404
    return False


def test_a_forged_record_with_valid_hashes_is_refused_by_the_rollback_and_nothing_outside_is_written(
    env: ReleaseEnv, simulator: Callable[..., Any]
) -> None:
    private, public = env.tmp / "signing.pem", env.tmp / "signing.pub"
    made = deployctl(env.kubeconfig, "keygen", str(private), "-o", "json")
    assert made.code == 0, made.stderr
    keyed = {"DEPLOYCTL_SIGNING_KEY": str(private)}

    def run(*args: str) -> Result:
        return deployctl(env.kubeconfig, *args, env=keyed, timeout=240)

    first = run("apply", str(write_profile(env.tmp, profile(env.namespace), "good.yaml")), "--output", "json")
    assert first.code == 0, first.stdout + first.stderr
    with _listener() as (port, seen):
        _forge(_editor_api(env), env.namespace, f"http://127.0.0.1:{port}")
        ns = ("-n", env.namespace)
        # What the issue found: the chain alone cannot tell. With the key, the forgery is named.
        assert deployctl(env.kubeconfig, "audit", "verify", "llm", *ns).code == 0
        checked = deployctl(env.kubeconfig, "audit", "verify", "llm", *ns, "--key", str(public), "-o", "json")
        assert checked.code == 9, checked.stdout + checked.stderr
        assert [(p["revision"], p["code"]) for p in checked.json["problems"]] == [(2, "signature")]

        bad = simulator(model="sim-model", fault="health-fail")
        env.forward_8001(bad.port)
        upgrade = run("apply", str(write_profile(env.tmp, profile(env.namespace, port=8001), "bad.yaml")), "-o", "json")
        refused = run("rollback", "llm", *ns, "--to", "2", "-o", "json")

        assert upgrade.code == 6, upgrade.stdout + upgrade.stderr
        assert upgrade.json["rolled_back_to"] == 1, upgrade.stdout
        assert "revision 2 (ConfigMap deployctl.llm.v2) is not used" in upgrade.stderr, upgrade.stderr
        assert refused.code == 9, refused.stdout + refused.stderr
        assert "revision 2 of llm is not restored" in refused.stderr
        assert seen == [], "the forged record's gate endpoint was contacted"
    rbac = kubernetes.client.RbacAuthorizationV1Api(env.api)
    core = kubernetes.client.CoreV1Api(env.api)
    assert _gone(lambda: rbac.read_cluster_role_binding(f"forged-{env.namespace}"))
    assert _gone(lambda: core.read_namespaced_config_map(f"forged-{env.namespace}", "default"))
    deployment = kubernetes.client.AppsV1Api(env.api).read_namespaced_deployment("llm", env.namespace)
    assert deployment.spec.template.spec.containers[0].ports[0].container_port == 8000
    rows = [(r["revision"], r["status"]) for r in env.history()]
    assert rows == [(1, "superseded"), (2, "superseded"), (3, "failed"), (4, "deployed")]  # history shows all
    verified = deployctl(env.kubeconfig, "audit", "verify", "llm", *ns, "--key", str(public), "-o", "json")
    assert [(p["revision"], p["code"]) for p in verified.json["problems"]] == [(2, "signature")]
    export = env.tmp / "export.json"
    assert deployctl(env.kubeconfig, "audit", "export", "llm", *ns, "--output-file", str(export)).code == 0
    offline = deployctl(env.kubeconfig, "audit", "verify", "--file", str(export), "--key", str(public), "-o", "json")
    assert offline.code == 9 and [p["revision"] for p in offline.json["problems"]] == [2]


def test_a_release_with_signed_records_is_refused_without_a_key_before_any_write(env: ReleaseEnv) -> None:
    private = env.tmp / "signing.pem"
    assert deployctl(env.kubeconfig, "keygen", str(private)).code == 0
    path = write_profile(env.tmp, profile(env.namespace), "good.yaml")
    signed = deployctl(env.kubeconfig, "apply", str(path), "-o", "json", env={"DEPLOYCTL_SIGNING_KEY": str(private)})
    assert signed.code == 0, signed.stdout + signed.stderr

    unkeyed = deployctl(env.kubeconfig, "rollback", "llm", "-n", env.namespace, "--to", "1")

    assert unkeyed.code == 9, unkeyed.stdout + unkeyed.stderr
    assert "has signed records (revision 1), and no key is configured to check them" in unkeyed.stderr
    assert [r["revision"] for r in env.history()] == [1]


def test_records_from_before_signing_are_refused_until_audit_trust_then_signed_writes_go_on(env: ReleaseEnv) -> None:
    private, public = env.tmp / "signing.pem", env.tmp / "signing.pub"
    assert deployctl(env.kubeconfig, "keygen", str(private)).code == 0
    keyed = {"DEPLOYCTL_SIGNING_KEY": str(private)}
    ns = ("-n", env.namespace)
    unsigned = env.apply(profile(env.namespace))  # as before signing: no key, a warning
    assert unsigned.code == 0 and any("not signed" in w for w in unsigned.json["warnings"]), unsigned.stdout
    upgrade = write_profile(env.tmp, profile(env.namespace, engine={"maxNumSeqs": 16}), "upgrade.yaml")

    refused = deployctl(env.kubeconfig, "apply", str(upgrade), "-o", "json", env=keyed)
    trusted = deployctl(env.kubeconfig, "audit", "trust", "llm", *ns, "-o", "json", env=keyed)
    upgraded = deployctl(env.kubeconfig, "apply", str(upgrade), "-o", "json", env=keyed, timeout=240)

    assert refused.code == 9, refused.stdout + refused.stderr
    assert "deployctl audit trust llm" in refused.stderr
    assert trusted.code == 0, trusted.stdout + trusted.stderr
    assert (trusted.json["revision"], trusted.json["up_to"]) == (2, 1)
    assert upgraded.code == 0, upgraded.stdout + upgraded.stderr
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "superseded"), (2, "trusted"), (3, "deployed")]
    verified = deployctl(env.kubeconfig, "audit", "verify", "llm", *ns, "--key", str(public), "-o", "json")
    assert verified.code == 0 and verified.json["ok"], verified.stdout
    without_key = deployctl(env.kubeconfig, "rollback", "llm", *ns, "--to", "1")
    assert without_key.code == 9 and "no key is configured to check them" in without_key.stderr


def test_the_controller_signs_with_the_key_of_its_secret(
    crd_installed: None, env: ReleaseEnv, controllers: Callable[..., Any]
) -> None:
    # With -n, the controller's own namespace is the test's: its Secret lives there.
    kubernetes.client.CoreV1Api(env.api).create_namespaced_secret(
        env.namespace,
        {
            "metadata": {"name": "deployctl-signing-key"},
            "stringData": {"signing-key.pem": (KEYS / "TEST-ONLY-signing-key.pem").read_text()},
        },
    )
    controllers()
    apply_object(env, object_doc(env))
    waited = wait_ready(env)
    log = (env.tmp / "controller-a.log").read_text()
    assert waited.returncode == 0, waited.stderr + log[-3000:]
    assert "signing release records with key" in log
    cm = kubernetes.client.CoreV1Api(env.api).read_namespaced_config_map("deployctl.llm.v1", env.namespace)
    assert "record.dsse.json" in cm.data
    public = str(KEYS / "TEST-ONLY-signing-key.pub")
    verified = deployctl(env.kubeconfig, "audit", "verify", "llm", "-n", env.namespace, "--key", public, "-o", "json")
    assert verified.code == 0 and verified.json["ok"], verified.stdout + verified.stderr
    other = str(KEYS / "TEST-ONLY-other-key.pub")
    wrong = deployctl(env.kubeconfig, "audit", "verify", "llm", "-n", env.namespace, "--key", other, "-o", "json")
    assert wrong.code == 9 and [p["code"] for p in wrong.json["problems"]] == ["signature"]
