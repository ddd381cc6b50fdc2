"""A real HTTP server on 127.0.0.1 for the unit tests that talk to one over a socket.

The tests write only what their server answers (a handler class); serving it on a free port in a
background thread, quietly, with an optional TLS context, and shutting it down is here once.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import ssl
import threading
from collections.abc import Iterator


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """A request handler that logs nothing (pytest shows a test's stderr) and can answer JSON."""

    def send_json(self, status: int, payload: object, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve(
    handler: type[http.server.BaseHTTPRequestHandler] | http.server.HTTPServer, *, tls: ssl.SSLContext | None = None
) -> Iterator[str]:
    """Serve ``handler`` (or an already built server) on 127.0.0.1; yields its base URL."""
    if isinstance(handler, http.server.HTTPServer):
        server = handler
    else:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True  # an unfinished stream must not hold up the shutdown
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    scheme = "https" if tls is not None else "http"
    try:
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
