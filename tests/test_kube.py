"""Cluster access without a cluster: which proxy the API calls and the port-forward use, refused tunnels.

deployctl reaches the API server as the kubeconfig says (directly, or through its cluster's
``proxy-url``) and ignores HTTPS_PROXY/HTTP_PROXY/NO_PROXY, like the gate endpoint; the
port-forward's websocket, which websocket-client would otherwise route by those variables on its
own, follows the same rule. A tunnel refused by RBAC fails the command naming the permission.
A 429 (throttling, a new CRD's cache still filling) is sent again after the server's Retry-After.
"""

from __future__ import annotations

import http.server
import pathlib
from collections.abc import Iterator
from typing import Any

import localserver
import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import ws_client
from websocket import _http as websocket_http

from orchestrator import errors
from orchestrator.kube import client, kinds, portforward

DEAD_PROXY = "http://127.0.0.1:9"


def _kubeconfig(tmp_path: pathlib.Path, proxy_url: str | None = None) -> pathlib.Path:
    cluster: dict[str, Any] = {"server": "https://10.0.0.1:6443", "insecure-skip-tls-verify": True}
    if proxy_url:
        cluster["proxy-url"] = proxy_url
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "ci",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "ci", "context": {"cluster": "c", "user": "u"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CI runner's proxy for internet egress, with no NO_PROXY."""
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, DEAD_PROXY)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)


def _websocket_route(configuration: Any, host: str) -> tuple[str | None, int]:
    """Where websocket-client would connect for ``host``: (proxy host or None, proxy port)."""
    options = ws_client.websocket_proxycare({}, configuration, f"wss://{host}/x", {})
    proxy = websocket_http.proxy_info(**options)
    found = websocket_http.get_proxy_info(host, True, proxy.proxy_host, proxy.proxy_port, proxy.auth, proxy.no_proxy)
    return found[0], found[1]


@pytest.mark.usefixtures("proxy_environment")
def test_api_calls_and_the_port_forward_ignore_the_proxy_environment(tmp_path: pathlib.Path) -> None:
    kube = client.connect(str(_kubeconfig(tmp_path)))
    assert kube.api_client.configuration.proxy is None
    assert kube.api_client.rest_client.pool_manager.__class__.__name__ == "PoolManager"  # not ProxyManager
    tunnel = portforward._direct_unless_kubeconfig_proxy(kube.api_client.configuration)
    assert _websocket_route(tunnel, "10.0.0.1") == (None, 0)
    # What websocket-client does with the unchanged configuration: the environment's proxy.
    assert _websocket_route(kube.api_client.configuration, "10.0.0.1") == ("127.0.0.1", 9)


@pytest.mark.usefixtures("proxy_environment")
def test_a_kubeconfig_proxy_url_is_used_by_api_calls_and_the_port_forward(tmp_path: pathlib.Path) -> None:
    kube = client.connect(str(_kubeconfig(tmp_path, proxy_url="http://proxy.internal:3128")))
    assert kube.api_client.configuration.proxy == "http://proxy.internal:3128"
    assert kube.api_client.rest_client.pool_manager.__class__.__name__ == "ProxyManager"
    tunnel = portforward._direct_unless_kubeconfig_proxy(kube.api_client.configuration)
    assert _websocket_route(tunnel, "10.0.0.1") == ("proxy.internal", 3128)


def test_the_port_forwards_configuration_is_a_copy(tmp_path: pathlib.Path) -> None:
    kube = client.connect(str(_kubeconfig(tmp_path)))
    tunnel = portforward._direct_unless_kubeconfig_proxy(kube.api_client.configuration)
    assert tunnel is not kube.api_client.configuration
    assert kube.api_client.configuration.proxy is None and kube.api_client.configuration.no_proxy is None


_FORBIDDEN = (
    'Handshake status 403 Forbidden -+-+- {"content-type": "application/json"} -+-+- b\'{"kind":"Status",'
    '"status":"Failure","message":"pods \\\\"llm-0\\\\" is forbidden: User \\\\"system:serviceaccount:ns:ci\\\\" '
    'cannot create resource \\\\"pods/portforward\\\\" in API group \\\\"\\\\" in the namespace \\\\"ns\\\\"",'
    '"reason":"Forbidden","code":403}\''
)


@pytest.mark.parametrize(
    ("reason", "error", "expected"),
    [
        (_FORBIDDEN, errors.Forbidden, ('cannot create resource "pods/portforward"', "Grant it in the Role")),
        (
            "Handshake status 401 Unauthorized -+-+- {} -+-+- b''",
            errors.ClusterError,
            ("rejected the credentials", "context 'ci'"),
        ),
    ],
)
def test_a_refused_tunnel_fails_when_the_forwarder_opens_naming_the_cause(
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    reason: str,
    error: type[Exception],
    expected: tuple[str, str],
) -> None:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise ApiException(status=0, reason=reason)  # what kubernetes.stream raises for a refused upgrade

    monkeypatch.setattr(portforward, "k8s_portforward", refused)
    kube = client.connect(str(_kubeconfig(tmp_path)))
    forwarder = portforward.PortForwarder(kube, "ns", "llm-0", 8000)
    with pytest.raises(error) as info, forwarder:
        pass
    message = str(info.value)
    assert all(part in message for part in expected), message
    assert "Handshake" not in message  # the library's framing is not the user's business


def test_other_tunnel_failures_are_left_to_the_health_gate(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def not_yet(*args: Any, **kwargs: Any) -> Any:
        raise ApiException(status=0, reason="Handshake status 500 Internal Server Error")

    monkeypatch.setattr(portforward, "k8s_portforward", not_yet)
    kube = client.connect(str(_kubeconfig(tmp_path)))
    with portforward.PortForwarder(kube, "ns", "llm-0", 8000) as forwarder:
        assert forwarder.url.startswith("http://127.0.0.1:")


# -- the rules review matches permissions as RBAC does ------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "wanted", "granted"),
    [
        ({"verbs": ["get", "list"], "apiGroups": ["apps"], "resources": ["deployments"]},
         ("list", "apps", "deployments", ""), True),
        ({"verbs": ["get"], "apiGroups": ["apps"], "resources": ["deployments"]},
         ("patch", "apps", "deployments", ""), False),
        ({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
         ("delete", "policy", "poddisruptionbudgets", ""), True),
        ({"verbs": ["create"], "apiGroups": [""], "resources": ["pods"]}, ("create", "", "pods", "portforward"), False),
        ({"verbs": ["create"], "apiGroups": [""], "resources": ["pods/portforward"]},
         ("create", "", "pods", "portforward"), True),
        ({"verbs": ["get"], "apiGroups": [""], "resources": ["*/log"]}, ("get", "", "pods", "log"), True),
        ({"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["one"]},
         ("get", "", "configmaps", ""), False),
        ({"verbs": ["get"], "apiGroups": ["apps"], "resources": ["deployments"]},
         ("get", "", "deployments", ""), False),
    ],
)  # fmt: skip
def test_a_listed_rule_grants_what_rbac_would_grant(
    rule: dict[str, Any], wanted: tuple[str, ...], granted: bool
) -> None:
    assert kinds.rule_grants(rule, *wanted) is granted


class _ThrottlingServer(http.server.ThreadingHTTPServer):
    """An API server that answers 429 (Retry-After: 0) to the first ``throttled`` requests, then a list."""

    def __init__(self, throttled: int) -> None:
        self.throttled, self.requests = throttled, 0
        super().__init__(("127.0.0.1", 0), _ThrottlingHandler)


class _ThrottlingHandler(localserver.QuietHandler):
    server: _ThrottlingServer

    def do_GET(self) -> None:
        self.server.requests += 1
        if self.server.requests <= self.server.throttled:
            status = {"kind": "Status", "code": 429, "message": "storage is (re)initializing"}
            self.send_json(429, status, headers={"Retry-After": "0"})
        else:
            self.send_json(200, {"kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": []})


@pytest.fixture
def throttling_kube(tmp_path: pathlib.Path) -> Iterator[tuple[client.Kube, _ThrottlingServer]]:
    server = _ThrottlingServer(throttled=3)
    with localserver.serve(server) as url:
        path = _kubeconfig(tmp_path)
        doc = yaml.safe_load(path.read_text())
        doc["clusters"][0]["cluster"] = {"server": url}
        path.write_text(yaml.safe_dump(doc))
        yield client.connect(str(path)), server


def test_a_throttled_request_is_sent_again_after_the_servers_retry_after(
    throttling_kube: tuple[client.Kube, _ThrottlingServer],
) -> None:
    kube, server = throttling_kube
    items, version = kube.list("Pod", "ns")
    assert (items, version) == ([], "7") and server.requests == 4


def test_throttling_that_outlasts_the_retry_window_is_the_api_servers_error(
    throttling_kube: tuple[client.Kube, _ThrottlingServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    kube, server = throttling_kube
    server.throttled = 10**6
    monkeypatch.setattr(client, "THROTTLED_RETRY_SECONDS", 0.5)
    with pytest.raises(errors.ClusterError, match="429: storage is"):
        kube.list("Pod", "ns")
    assert server.requests > 1
