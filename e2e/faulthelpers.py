"""Fault injection for deployctl's end-to-end tests: hold an API write, mint and forge credentials.

A killed deployctl must leave a state that a re-run repairs. To kill it at a chosen step rather
than at a random moment, `HoldingWebhook` registers a validating admission webhook that holds one
matching write in the API server until the test lets it go: the CLI is then provably between two
writes. Credentials helpers write kubeconfigs that point at the wrong port, trust the wrong CA or
carry a forged, expired ServiceAccount token, and mint real tokens for least-privilege tests.
`Env`/`deploy_env` give a test a namespace ready for `deployctl apply` of deployhelpers.profile().
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import http.server
import json
import os
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import kwoksim
import localcluster
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID
from deployhelpers import Result, create_models_volume, deployctl, read_or_none, start_deployctl, write_profile

LOCK_TTL = "5"  # seconds: a killed apply's lock can be taken over this soon
RECORD_SELECTOR = "deployctl.dev/release-record=true"
HOLD_LIMIT_S = 20.0  # the webhook's timeoutSeconds is 25: a held write is always answered in time


@dataclass
class Env:
    """A namespace with a bound `models` claim, pod port 8000 forwarded to a healthy simulator."""

    kubeconfig: Path
    namespace: str
    tmp: Path
    cluster: localcluster.Cluster
    api: kubernetes.client.ApiClient
    simulator: Callable[..., Any]

    def write(self, doc: dict[str, Any], filename: str = "profile.yaml") -> Path:
        return write_profile(self.tmp, doc, filename)

    def run(self, *args: str, timeout: float = 120) -> Result:
        return deployctl(self.kubeconfig, *args, timeout=timeout)

    def apply(self, path: Path, *extra: str, timeout: float = 120) -> Result:
        return self.run("apply", str(path), "--output", "json", "--lock-ttl", LOCK_TTL, *extra, timeout=timeout)

    def start_apply(self, path: Path, log: str = "killed.log") -> subprocess.Popen[bytes]:
        return start_deployctl(self.kubeconfig, "apply", str(path), "--lock-ttl", LOCK_TTL, log=self.tmp / log)

    def forward(self, ports: dict[int, int]) -> None:
        kwoksim.forward_ports(self.cluster, self.namespace, ports)

    def history(self, release: str = "llm") -> list[tuple[int, str]]:
        result = self.run("history", release, "-n", self.namespace, "--output", "json")
        assert result.code == 0, result.stderr
        return [(r["revision"], r["status"]) for r in result.json]

    def deployment(self, release: str = "llm") -> Any:
        apps = kubernetes.client.AppsV1Api(self.api)
        return read_or_none(lambda: apps.read_namespaced_deployment(release, self.namespace))


@contextlib.contextmanager
def deploy_env(
    cluster: localcluster.Cluster,
    namespace: str,
    api: kubernetes.client.ApiClient,
    simulator: Callable[..., Any],
    tmp: Path,
) -> Iterator[Env]:
    """The test's namespace, ready for `deployctl apply` of deployhelpers.profile()."""
    create_models_volume(api, namespace)
    good = simulator(model="sim-model")
    kwoksim.forward_ports(cluster, namespace, {8000: good.port})
    try:
        yield Env(cluster.kubeconfig, namespace, tmp, cluster, api, simulator)
    finally:
        kubernetes.client.CoreV1Api(api).delete_persistent_volume(f"models-{namespace}"[:63])


# --- waiting --------------------------------------------------------------------------------


def wait_for(done: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll ``done`` until it is true; TimeoutError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def exit_code(proc: subprocess.Popen[bytes], *, timeout: float, log: Path) -> int:
    """``proc``'s exit code; past ``timeout`` it is killed and the test fails with its log."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        pytest.fail(f"{proc.args!r} still ran after {timeout:.0f} s; its log:\n{log.read_text(errors='replace')}")


def log_has(log: Path, text: str) -> bool:
    return log.exists() and text in log.read_text(errors="replace")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a running process (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # Fields 14 and 15 of stat(5), counted from the state field (3) as index 0 here: utime, stime.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


# --- the release lock and records -----------------------------------------------------------


def lease_spec(api: kubernetes.client.ApiClient, namespace: str, release: str = "llm") -> dict[str, Any] | None:
    """The release Lease's spec as the API returns it (camelCase keys), or None when absent."""
    try:
        lease = kubernetes.client.CustomObjectsApi(api).get_namespaced_custom_object(
            "coordination.k8s.io", "v1", namespace, "leases", f"deployctl-{release}"
        )
    except kubernetes.client.ApiException as e:
        if e.status == 404:
            return None
        raise
    spec: dict[str, Any] = lease.get("spec") or {}
    return spec


def wait_until_lease_expires(api: kubernetes.client.ApiClient, namespace: str, release: str = "llm") -> None:
    """Sleep until the release lock's holder has not renewed it for its whole duration."""
    spec = lease_spec(api, namespace, release) or {}
    renewed = spec.get("renewTime") or spec.get("acquireTime")
    if not spec.get("holderIdentity") or not renewed:
        return
    at = datetime.datetime.fromisoformat(renewed.replace("Z", "+00:00"))
    expires = at + datetime.timedelta(seconds=int(spec.get("leaseDurationSeconds", 60)))
    left = (expires - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
    time.sleep(max(0.0, left) + 0.3)


def record_revisions(api: kubernetes.client.ApiClient, namespace: str, release: str = "llm") -> list[int]:
    """Revision numbers of the release's record ConfigMaps as stored, in name order, duplicates kept."""
    items = (
        kubernetes.client.CoreV1Api(api)
        .list_namespaced_config_map(namespace, label_selector=f"{RECORD_SELECTOR},deployctl.dev/release={release}")
        .items
    )
    revisions = []
    for cm in items:
        assert cm.metadata.name == f"deployctl.{release}.v{cm.metadata.labels['deployctl.dev/revision']}"
        revisions.append(int(json.loads(cm.data["record.json"])["revision"]))
    return sorted(revisions)


# --- holding one write in the API server ----------------------------------------------------


@dataclass(frozen=True)
class Resource:
    """What a webhook rule matches: API group ("" for core), version, plural."""

    group: str
    version: str
    plural: str


SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts")
DEPLOYMENTS = Resource("apps", "v1", "deployments")


class HoldingWebhook:
    """A validating admission webhook that holds the first matching write until `release()`.

    Matches writes of ``resource`` (``operations``) in ``namespace`` to objects labelled with the
    release; ``hold_if(object)`` picks which one to hold (default: the first). Every other
    request, and every one after the held one, is allowed at once. ``held`` is set while the
    write waits in the API server. The configuration is owned by the Namespace, so it goes away
    with it even if a test dies before deleting it.
    """

    def __init__(
        self,
        cluster: localcluster.Cluster,
        api: kubernetes.client.ApiClient,
        namespace: str,
        resource: Resource,
        operations: tuple[str, ...] = ("CREATE",),
        *,
        release: str = "llm",
        hold_if: Callable[[dict[str, Any]], bool] = lambda _obj: True,
    ) -> None:
        if cluster.state_dir is None:
            pytest.skip("holding a write needs the local cluster's CA (E2E_KUBECONFIG is set)")
        self._pki = cluster.state_dir / "pki"
        self._api, self.namespace, self.resource, self.operations = api, namespace, resource, operations
        self.release_name, self._hold_if = release, hold_if
        self.name = f"hold-{namespace}"[:63].rstrip("-")
        self.held = threading.Event()
        self._let_go = threading.Event()
        self._used = threading.Lock()
        self._holding_done = False
        self._server: http.server.ThreadingHTTPServer | None = None

    def __enter__(self) -> HoldingWebhook:
        webhook = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                request = review["request"]
                if webhook._should_hold(request.get("object") or {}):
                    webhook.held.set()
                    webhook._let_go.wait(HOLD_LIMIT_S)
                body = json.dumps(
                    {
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "response": {"uid": request["uid"], "allowed": True},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        # kwok's serving certificate names 127.0.0.1 and is signed by the cluster CA.
        tls.load_cert_chain(self._pki / "kwok-serving.crt", self._pki / "kwok-serving.key")
        server.socket = tls.wrap_socket(server.socket, server_side=True)
        self._server = server
        threading.Thread(target=server.serve_forever, name="hold-webhook", daemon=True).start()
        self._register(server.server_address[1])
        return self

    def _should_hold(self, obj: dict[str, Any]) -> bool:
        with self._used:
            if self._holding_done or not self._hold_if(obj):
                return False
            self._holding_done = True
            return True

    def _register(self, port: int) -> None:
        core = kubernetes.client.CoreV1Api(self._api)
        ns = core.read_namespace(self.namespace)
        r = self.resource
        body = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {
                "name": self.name,
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Namespace", "name": self.namespace, "uid": ns.metadata.uid}
                ],
            },
            "webhooks": [
                {
                    "name": "hold.e2e.deployctl.dev",
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{port}/validate",
                        "caBundle": base64.b64encode((self._pki / "ca.crt").read_bytes()).decode(),
                    },
                    "rules": [
                        {
                            "apiGroups": [r.group],
                            "apiVersions": [r.version],
                            "resources": [r.plural],
                            "operations": list(self.operations),
                            "scope": "Namespaced",
                        }
                    ],
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}},
                    "objectSelector": {"matchLabels": {"deployctl.dev/release": self.release_name}},
                    "failurePolicy": "Ignore",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 25,
                }
            ],
        }
        admission = kubernetes.client.AdmissionregistrationV1Api(self._api)
        admission.create_validating_webhook_configuration(body)
        # The API server picks a new configuration up from its informer, well within a second
        # (tens of milliseconds when idle); a write before that would not be held.
        time.sleep(1.5)

    def release(self) -> None:
        """Let the held write (and any later one) through."""
        self._let_go.set()

    def __exit__(self, *exc: object) -> None:
        self.release()
        with contextlib.suppress(kubernetes.client.ApiException):
            kubernetes.client.AdmissionregistrationV1Api(self._api).delete_validating_webhook_configuration(self.name)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


# --- kubeconfigs and credentials -------------------------------------------------------------


def kubeconfig_with(
    base: Path,
    out: Path,
    *,
    server: str | None = None,
    ca_pem: bytes | None = None,
    token: str | None = None,
    context: str | None = None,
) -> Path:
    """A copy of kubeconfig ``base`` with its server, CA, credentials or context name replaced."""
    doc = yaml.safe_load(base.read_text())
    cluster = doc["clusters"][0]["cluster"]
    if server is not None:
        cluster["server"] = server
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    if token is not None:
        doc["users"][0]["user"] = {"token": token}
    if context is not None:
        doc["contexts"][0]["name"] = context
        doc["current-context"] = context
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    out.chmod(0o600)
    return out


def foreign_ca_pem() -> bytes:
    """A self-signed CA certificate that did not sign the API server's certificate."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "not-the-cluster-ca")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def mint_token(api: kubernetes.client.ApiClient, namespace: str, service_account: str) -> str:
    """A real token for the ServiceAccount from the TokenRequest API (valid for an hour)."""
    request = kubernetes.client.CoreV1Api(api).create_namespaced_service_account_token(
        service_account, namespace, {"spec": {"expirationSeconds": 3600}}
    )
    token: str = request.status.token
    return token


def expired_token(cluster: localcluster.Cluster, valid_token: str) -> str:
    """``valid_token`` re-signed with the cluster's ServiceAccount key, expired an hour ago.

    The TokenRequest API will not issue a token shorter than 10 minutes, so an expired one is
    made the way the API server makes tokens: same header and claims, earlier times, ES256.
    Only the expiry makes the API server reject it.
    """
    assert cluster.state_dir is not None
    header_b64, claims_b64, _ = valid_token.split(".")
    claims = json.loads(_b64decode(claims_b64))
    now = int(time.time())
    claims.update(iat=now - 7200, nbf=now - 7200, exp=now - 3600)
    signing_input = f"{header_b64}.{_b64encode(json.dumps(claims).encode())}"
    key = serialization.load_pem_private_key((cluster.state_dir / "pki" / "sa.key").read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    r, s = decode_dss_signature(key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
    return f"{signing_input}.{_b64encode(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@contextlib.contextmanager
def applied(api: kubernetes.client.ApiClient, objects: list[dict[str, Any]]) -> Iterator[None]:
    """Server-side apply ``objects`` as the admin; delete the cluster-scoped ones afterwards.

    Namespaced objects go with the test's namespace; cluster-scoped ones (a ClusterRoleBinding)
    would outlive it.
    """
    client = kubernetes.dynamic.DynamicClient(api)
    for obj in objects:
        resource = client.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        client.server_side_apply(
            resource,
            body=obj,
            name=obj["metadata"]["name"],
            namespace=obj["metadata"].get("namespace"),
            field_manager="deployctl-e2e",
            force_conflicts=True,
        )
    try:
        yield
    finally:
        for obj in objects:
            if "namespace" not in obj["metadata"] and obj["kind"] == "ClusterRoleBinding":
                resource = client.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
                with contextlib.suppress(kubernetes.client.ApiException):
                    client.delete(resource, name=obj["metadata"]["name"])
