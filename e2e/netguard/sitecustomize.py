"""A network guard the e2e air-gap test loads into deployctl (PYTHONPATH=e2e/netguard).

Active only when DEPLOYCTL_E2E_NET_LOG names a file. Every TCP/UDP connect() and every name
lookup is checked: allowed are the addresses in DEPLOYCTL_E2E_NET_ALLOW ("host:port,...", the
API server and the simulator) and loopback ports this same process listens on (deployctl's own
port-forward listeners). Anything else is appended to the log and refused with PermissionError,
so a call that deployctl would swallow is still seen by the test.
"""

from __future__ import annotations

import os
import socket
import sys
import traceback
from typing import Any

_LOG = os.environ.get("DEPLOYCTL_E2E_NET_LOG")
_LOOPBACK = {"127.0.0.1", "::1", "localhost"}


def _install(log: str) -> None:
    allowed: set[tuple[str, int]] = set()
    for item in filter(None, os.environ.get("DEPLOYCTL_E2E_NET_ALLOW", "").split(",")):
        host, _, port = item.rpartition(":")
        allowed.add((host, int(port)))
    allowed_hosts = _LOOPBACK | {host for host, _ in allowed}
    listening: set[int] = set()
    inet = (socket.AF_INET, socket.AF_INET6)

    def violation(what: str) -> PermissionError:
        # The caller's frames, so the test's failure says which code made the call.
        stack = "".join(traceback.format_stack(limit=12)[:-2])
        with open(log, "a") as f:
            f.write(f"pid {os.getpid()} {' '.join(sys.argv[1:3])}: {what}\n{stack}\n")
        return PermissionError(f"deployctl e2e network guard: {what} is not allowed")

    def check(sock: socket.socket, address: Any) -> None:
        if sock.family not in inet:
            return
        host, port = str(address[0]), int(address[1])
        if (host, port) in allowed or (host in _LOOPBACK and port in listening):
            return
        raise violation(f"connect to {host}:{port}")

    original_connect = socket.socket.connect
    original_connect_ex = socket.socket.connect_ex
    original_bind = socket.socket.bind
    original_getaddrinfo = socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> None:
        check(self, address)
        original_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        check(self, address)
        return original_connect_ex(self, address)

    def bind(self: socket.socket, address: Any) -> None:
        original_bind(self, address)
        if self.family in inet:
            listening.add(int(self.getsockname()[1]))

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name is not None and name not in allowed_hosts:
            raise violation(f"name lookup of {name}")
        return original_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = connect  # type: ignore[method-assign]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
    socket.socket.bind = bind  # type: ignore[method-assign]
    socket.getaddrinfo = getaddrinfo


if _LOG:
    _install(_LOG)
