"""Port-forward to a pod through the API server, exposed as a local TCP port.

This is the path a CI runner outside the cluster has to a pod: the health gate and the smoke
benchmark speak plain HTTP to 127.0.0.1:<local port>, and each local connection is carried over
its own port-forward websocket to the pod.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import json
import re
import select
import socket
import threading
from typing import Any

import websocket
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

# The client's opener of a port-forward websocket, called with a URL built here rather than
# through ``kubernetes.stream.portforward(CoreV1Api(...).connect_get_namespaced_pod_portforward)``:
# that generated module holds every core/v1 operation, and importing it cost each apply about
# 0.35 s, and freeing it at exit another 0.2 s (docs/benchmark.md, "Where apply's overhead goes").
from kubernetes.stream.ws_client import portforward_call as k8s_portforward

from orchestrator import errors
from orchestrator.kube.client import Kube

_CHUNK = 65536
_PORTFORWARD_PATH = "/api/v1/namespaces/{namespace}/pods/{name}/portforward"
_HANDSHAKE_STATUS = re.compile(r"Handshake status (\d{3})")
_PROXY_THREAD_PREFIX = "Kubernetes port forward proxy"


def _quiet_proxy_hangups(args: threading.ExceptHookArgs) -> None:
    """Drop the client library's proxy-thread tracebacks for a peer that hung up.

    The kubernetes client pumps each forwarded socket in a thread of its own and lets a reset
    or broken pipe escape it when a local HTTP client closes a kept-alive connection; that is a
    normal end of a connection, not an error, and must not print a traceback at the user.
    """
    thread_name = args.thread.name if args.thread is not None else ""
    if thread_name.startswith(_PROXY_THREAD_PREFIX) and issubclass(
        args.exc_type, (ConnectionResetError, BrokenPipeError)
    ):
        return
    _previous_excepthook(args)


_previous_excepthook = threading.excepthook
threading.excepthook = _quiet_proxy_hangups


# Named only so that websocket-client applies no_proxy="*"; no connection is ever made to it.
_UNUSED_PROXY = "http://unused-proxy.invalid:9"


def _direct_unless_kubeconfig_proxy(configuration: k8s.Configuration) -> k8s.Configuration:
    """A copy of ``configuration`` whose websockets connect as its REST calls do.

    ``connect`` ignores HTTPS_PROXY/HTTP_PROXY, but websocket-client reads them itself and
    honours a no-proxy list only next to an explicit proxy; so, unless the kubeconfig names a
    proxy-url, the tunnel names a proxy that no host may use and goes direct.
    """
    copied = copy.deepcopy(configuration)
    if copied.proxy is None:
        copied.proxy = _UNUSED_PROXY
        copied.no_proxy = "*"
    return copied


class _Unauthorized(errors.ClusterError):
    """The tunnel's credentials were rejected (401); reported like any other 401 of the API."""


def _status_message(text: str) -> str:
    """The ``message`` of the Status in a refused handshake, or the text cut short.

    websocket-client renders the refusal as ``Handshake status 403 Forbidden -+-+- {headers}
    -+-+- b'{"kind":"Status",...}'``: the body is the repr of the bytes the API server sent.
    """
    body = text.rsplit(" -+-+- ", 1)[-1].strip()
    try:
        raw = ast.literal_eval(body) if body.startswith(("b'", 'b"')) else body
        status = json.loads(raw)
    except (ValueError, SyntaxError, TypeError):
        return errors.shorten(text, 300)
    message = status.get("message") if isinstance(status, dict) else None
    return errors.shorten(str(message), 300) if message else errors.shorten(text, 300)


class PortForwarder:
    """``with PortForwarder(kube, ns, pod, 8000) as pf: url = f"http://127.0.0.1:{pf.local_port}"``."""

    def __init__(self, kube: Kube, namespace: str, pod: str, port: int) -> None:
        # A client of its own only for the tunnel's configuration (see _direct_unless_kubeconfig_proxy);
        # it builds each tunnel's URL and credentials header and sends no request itself.
        self._api = k8s.ApiClient(_direct_unless_kubeconfig_proxy(kube.api_client.configuration))
        # Relay threads open tunnels in parallel; building the header may run the kubeconfig's
        # credential plugin to refresh a token, which is done one at a time.
        self._credentials_lock = threading.Lock()
        self._kube = kube
        self.namespace = namespace
        self.pod = pod
        self.port = port
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.local_port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> PortForwarder:
        self._check_allowed()
        thread = threading.Thread(target=self._accept_loop, name=f"pf-{self.pod}", daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.local_port}"

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # listener closed
            thread = threading.Thread(target=self._relay, args=(conn,), daemon=True)
            thread.start()

    def _check_allowed(self) -> None:
        """Open one tunnel now, so that RBAC or credentials refusing it fail the command.

        Later tunnels are opened per connection in relay threads, where an error can only close
        the connection: the health gate would then wait out its deadline and blame the server
        for what is a missing ``pods/portforward`` permission. Any other failure here (the pod
        not serving yet) is left to the health gate, which judges it under its deadline.
        """
        try:
            tunnel = self._open_remote()
        except (errors.Forbidden, _Unauthorized):
            self.close()
            raise
        except errors.ClusterError:
            return
        with contextlib.suppress(Exception):  # the library's close may meet a dead socket
            tunnel.close()

    def _open_remote(self) -> Any:
        target = f"pod {self.namespace}/{self.pod}:{self.port}"
        try:
            # As the generated connect_get_namespaced_pod_portforward serializes it: the same URL,
            # and the credentials header of the kubeconfig's user (a refreshed token included).
            with self._credentials_lock:
                method, url, headers, _, _ = self._api.param_serialize(
                    "GET",
                    _PORTFORWARD_PATH,
                    path_params={"namespace": self.namespace, "name": self.pod},
                    query_params=[("ports", str(self.port))],
                    header_params={"Accept": "*/*"},
                    auth_settings=["BearerToken"],
                )
            return k8s_portforward(self._api.configuration, method, url, headers=headers)
        except (ApiException, websocket.WebSocketException, OSError) as e:
            # The client reports a refused websocket upgrade as ApiException(status=0) whose
            # reason carries the HTTP status and the API server's Status JSON.
            text = str(getattr(e, "reason", None) or e)
            status = _HANDSHAKE_STATUS.search(text)
            message = _status_message(text)
            if status and status.group(1) == "403":
                raise errors.Forbidden(
                    f"forbidden: port-forward to {target} was refused ({message}). The gate reaches "
                    f"pods through the API server and needs create and get on pods/portforward in "
                    f"namespace {self.namespace}. Grant it in the Role (see manifests/rbac/)"
                ) from e
            if status and status.group(1) == "401":
                raise _Unauthorized(
                    f"port-forward to {target}: the API server rejected the credentials of context "
                    f"{self._kube.context!r} (401 Unauthorized: expired or wrong token/certificate?); "
                    "refresh the kubeconfig"
                ) from e
            raise errors.ClusterError(f"port-forward to {target} failed: {errors.shorten(text, 200)}") from e

    def _relay(self, local: socket.socket) -> None:
        """Pump bytes both ways until either side closes. Errors close this connection only."""
        try:
            pf = self._open_remote()
            remote = pf.socket(self.port)
        except (errors.ClusterError, OSError, ValueError):
            # The client sees a closed connection, which the health gate reports as unreachable.
            local.close()
            return
        try:
            sockets = [local, remote]
            while not self._closed.is_set():
                readable, _, _ = select.select(sockets, [], [], 1.0)
                for sock in readable:
                    data = sock.recv(_CHUNK)
                    if not data:
                        return
                    (remote if sock is local else local).sendall(data)
        except OSError:
            return
        finally:
            with contextlib.suppress(OSError):
                local.close()
            with contextlib.suppress(OSError):
                remote.close()
