"""Helpers of the GitOps e2e tests: a git server on loopback and Flux's objects.

The local cluster runs Flux's real source-controller and kustomize-controller on this machine
(not in pods), so a git server on 127.0.0.1 is reachable from them as from the tests.
`GitServer` is `git http-backend` (git's own smart-HTTP server, a CGI program) behind a
stdlib HTTP server: no build, no dependency beyond git itself. Tests commit straight into
its bare repositories with git's plumbing (no work tree, no push), and Flux clones them over
HTTP like any remote.

    with GitServer(tmp_path / "git") as git:
        url = git.create_repo("app")
        sha = git.commit("app", {"kustomization.yaml": ..., "cm.yaml": ...}, "first")
        create_git_repository(api_client, ns, "app", url)
        create_kustomization(api_client, ns, "app", source="app", target_namespace=ns)
        ready = wait_ready(api_client, ns, "app", revision=sha)
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kubernetes

SOURCE_GROUP, SOURCE_VERSION = "source.toolkit.fluxcd.io", "v1"
KUSTOMIZE_GROUP, KUSTOMIZE_VERSION = "kustomize.toolkit.fluxcd.io", "v1"
# kind -> (group, version, plural)
KINDS = {
    "GitRepository": (SOURCE_GROUP, SOURCE_VERSION, "gitrepositories"),
    "Kustomization": (KUSTOMIZE_GROUP, KUSTOMIZE_VERSION, "kustomizations"),
}
BRANCH = "main"
# Fixed identity and environment for every git command: no user or system config leaks in.
_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "deployctl e2e",
    "GIT_AUTHOR_EMAIL": "e2e@deployctl.invalid",
    "GIT_COMMITTER_NAME": "deployctl e2e",
    "GIT_COMMITTER_EMAIL": "e2e@deployctl.invalid",
}


# --- the git server -----------------------------------------------------------------------


class GitServer:
    """Bare repositories under `root`, served read-only over smart HTTP on 127.0.0.1.

    `start()` binds a free port (or `port`); `url(repo)` is what a GitRepository points at.
    Usable as a context manager. Requests served are kept in `requests` ("GET /app.git/...").
    """

    def __init__(self, root: Path, port: int = 0) -> None:
        self.root = Path(root)
        self.requests: list[str] = []
        self._port = port
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one commit at a time

    # lifecycle

    def start(self) -> GitServer:
        self.root.mkdir(parents=True, exist_ok=True)
        handler = type("_BoundHandler", (_GitHandler,), {"git_server": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self._port), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="git-http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> GitServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the git server is not started")
        return int(self._httpd.server_address[1])

    def url(self, repo: str) -> str:
        return f"http://127.0.0.1:{self.port}/{repo}.git"

    # repositories

    def repo_path(self, repo: str) -> Path:
        return self.root / f"{repo}.git"

    def create_repo(self, repo: str) -> str:
        """An empty bare repository whose HEAD is `main`; returns its URL."""
        _git("init", "--quiet", "--bare", f"--initial-branch={BRANCH}", str(self.repo_path(repo)))
        return self.url(repo)

    def commit(
        self, repo: str, files: Mapping[str, str | None], message: str = "update", *, replace: bool = False
    ) -> str:
        """Commit `files` ({path: text}) on `main` and return the commit's sha.

        Paths not named keep their content from the previous commit, unless `replace`, which
        starts from an empty tree; a path mapped to None is deleted.
        """
        git_dir = str(self.repo_path(repo))
        with self._lock, tempfile.TemporaryDirectory() as tmp:
            env = {"GIT_DIR": git_dir, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
            parent = self.head(repo)
            if parent and not replace:
                _git("read-tree", parent, env=env)
            entries = []  # `update-index --index-info` lines; mode 0 removes the path
            for path, text in files.items():
                if text is None:
                    entries.append(f"0 {'0' * 40}\t{path}\n")
                else:
                    blob = _git("hash-object", "-w", "--stdin", input=text, env=env)
                    entries.append(f"100644 {blob}\t{path}\n")
            _git("update-index", "--index-info", input="".join(entries), env=env)
            tree = _git("write-tree", env=env)
            sha = _git("commit-tree", tree, *(["-p", parent] if parent else []), "-m", message, env=env)
            # With the old value: fails rather than lose a commit made behind our back.
            _git("update-ref", f"refs/heads/{BRANCH}", sha, parent or "", env=env)
        return sha

    def head(self, repo: str) -> str | None:
        """The sha `main` points at; None before the first commit."""
        out = subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", f"refs/heads/{BRANCH}"],
            env={**os.environ, **_GIT_ENV, "GIT_DIR": str(self.repo_path(repo))},
            capture_output=True,
            text=True,
            check=False,
        )
        return out.stdout.strip() or None


class _GitHandler(BaseHTTPRequestHandler):
    """Runs `git http-backend` per request, as a web server runs a CGI program."""

    git_server: GitServer

    def do_GET(self) -> None:
        self._cgi()

    def do_POST(self) -> None:
        self._cgi()

    def _cgi(self) -> None:
        self.git_server.requests.append(f"{self.command} {self.path}")
        path, _, query = self.path.partition("?")
        body = self._body()
        env = {
            **os.environ,
            **_GIT_ENV,
            "GIT_PROJECT_ROOT": str(self.git_server.root),
            "GIT_HTTP_EXPORT_ALL": "1",  # serve every repository, without git-daemon-export-ok
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": self.request_version,
            "REQUEST_METHOD": self.command,
            "PATH_INFO": urllib.parse.unquote(path),
            "QUERY_STRING": query,
            "REMOTE_ADDR": self.client_address[0],
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
        }
        # http-backend reads these from the environment: gzip-ed requests, protocol v2.
        for header in ("Content-Encoding", "Git-Protocol"):
            if header in self.headers:
                env["HTTP_" + header.upper().replace("-", "_")] = self.headers[header]
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, check=False)
        head, sep, payload = out.stdout.partition(b"\r\n\r\n")
        if not sep:
            head, sep, payload = out.stdout.partition(b"\n\n")
        if out.returncode != 0 or not sep:
            self.send_error(500, "git http-backend failed", out.stderr.decode(errors="replace")[-500:])
            return
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            else:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline().strip():  # trailers, then the blank line
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()  # the CRLF after each chunk
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def log_message(self, format: str, *args: Any) -> None:
        pass  # kept in GitServer.requests instead of stderr


def _git(*args: str, input: str | None = None, env: Mapping[str, str] | None = None) -> str:
    out = subprocess.run(
        ["git", *args],
        input=input,
        env={**os.environ, **_GIT_ENV, **(env or {})},
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed ({out.returncode}): {out.stderr.strip()}")
    return out.stdout.strip()


# --- Flux's objects -----------------------------------------------------------------------


def create_git_repository(
    api_client: kubernetes.client.ApiClient,
    namespace: str,
    name: str,
    url: str,
    *,
    branch: str = BRANCH,
    interval: str = "5s",
    timeout: str = "20s",
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A GitRepository polling `url`'s `branch` every `interval`; `spec` adds or overrides fields."""
    body = {
        "apiVersion": f"{SOURCE_GROUP}/{SOURCE_VERSION}",
        "kind": "GitRepository",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"url": url, "ref": {"branch": branch}, "interval": interval, "timeout": timeout, **(spec or {})},
    }
    return _create(api_client, body)


def create_kustomization(
    api_client: kubernetes.client.ApiClient,
    namespace: str,
    name: str,
    *,
    source: str,
    path: str = "./",
    target_namespace: str | None = None,
    interval: str = "5s",
    prune: bool = True,
    wait: bool = True,
    timeout: str = "60s",
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A Kustomization applying `path` of the GitRepository `source` (same namespace).

    With `wait`, Ready=True only once every applied object is healthy by kstatus (Flux's
    health assessment), within `timeout`; else Ready=False, reason HealthCheckFailed. `prune`
    deletes what a later revision no longer has. `spec` adds or overrides fields
    (healthChecks, healthCheckExprs, retryInterval, patches, ...).
    """
    fields: dict[str, Any] = {
        "sourceRef": {"kind": "GitRepository", "name": source},
        "path": path,
        "interval": interval,
        "prune": prune,
        "wait": wait,
        "timeout": timeout,
    }
    if target_namespace:
        fields["targetNamespace"] = target_namespace
    body = {
        "apiVersion": f"{KUSTOMIZE_GROUP}/{KUSTOMIZE_VERSION}",
        "kind": "Kustomization",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {**fields, **(spec or {})},
    }
    return _create(api_client, body)


def request_reconcile(api_client: kubernetes.client.ApiClient, kind: str, namespace: str, name: str) -> None:
    """Ask Flux to reconcile now rather than at the next interval (what `flux reconcile` does):
    set the reconcile.fluxcd.io/requestedAt annotation."""
    group, version, plural = KINDS[kind]
    now = datetime.now(timezone.utc).isoformat()
    kubernetes.client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        group, version, namespace, plural, name, {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": now}}}
    )


def get(api_client: kubernetes.client.ApiClient, kind: str, namespace: str, name: str) -> dict[str, Any]:
    group, version, plural = KINDS[kind]
    obj: dict[str, Any] = kubernetes.client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        group, version, namespace, plural, name
    )
    return obj


@dataclass(frozen=True)
class Ready:
    """An object's Ready condition, and the revision it is about.

    revision: a Kustomization's status.lastAttemptedRevision, a GitRepository's
    status.artifact.revision; Flux writes it as "main@sha1:<sha>".
    """

    status: str  # "True", "False" or "Unknown"
    reason: str
    message: str
    revision: str
    observed_generation: int

    def at(self, sha: str) -> bool:
        return self.revision.endswith(sha)


def ready_condition(
    api_client: kubernetes.client.ApiClient, namespace: str, name: str, kind: str = "Kustomization"
) -> Ready | None:
    """The object's Ready condition now; None before the controller first reports it."""
    status = get(api_client, kind, namespace, name).get("status") or {}
    cond = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    if cond is None:
        return None
    if kind == "GitRepository":
        revision = (status.get("artifact") or {}).get("revision", "")
    else:
        revision = status.get("lastAttemptedRevision", "")
    return Ready(
        status=cond["status"],
        reason=cond.get("reason", ""),
        message=cond.get("message", ""),
        revision=revision,
        observed_generation=int(status.get("observedGeneration", -1)),
    )


def wait_ready(
    api_client: kubernetes.client.ApiClient,
    namespace: str,
    name: str,
    *,
    kind: str = "Kustomization",
    status: str | None = "True",
    revision: str | None = None,
    timeout_s: float = 90,
) -> Ready:
    """Wait until the object's Ready condition settles and return it.

    status: the Ready status to wait for; None takes the first settled one, "True" or "False"
    (a failed apply, a failed health check). revision: a commit sha the condition must be
    about (the revision Flux attempted ends with it). The current spec must have been seen
    (observedGeneration). Raises TimeoutError with the last condition seen.
    """
    deadline = time.monotonic() + timeout_s
    last: Ready | None = None
    while True:
        generation = get(api_client, kind, namespace, name)["metadata"].get("generation", 0)
        last = ready_condition(api_client, namespace, name, kind)
        if (
            last is not None
            and last.observed_generation >= generation
            and last.status != "Unknown"
            and (status is None or last.status == status)
            and (revision is None or last.at(revision))
        ):
            return last
        if time.monotonic() > deadline:
            want = f"Ready={status or 'True|False'}" + (f" at {revision}" if revision else "")
            raise TimeoutError(f"{kind} {namespace}/{name}: not {want} after {timeout_s:.0f} s; last: {last}")
        time.sleep(0.25)


def _create(api_client: kubernetes.client.ApiClient, body: dict[str, Any]) -> dict[str, Any]:
    group, version, plural = KINDS[body["kind"]]
    obj: dict[str, Any] = kubernetes.client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        group, version, body["metadata"]["namespace"], plural, body
    )
    return obj
