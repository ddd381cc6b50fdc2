"""A small dict-in, dict-out REST client over the official kubernetes ``ApiClient``.

The official client does the hard parts (kubeconfig, exec/OIDC credentials, TLS); we call the
REST paths ourselves so that server-side apply, dry-run and watches work the same way for every
kind and everything above returns plain JSON. ``ApiException`` and urllib3 errors are turned into
``orchestrator.errors`` here and nowhere else.
"""

from __future__ import annotations

import dataclasses
import json
import os
import ssl
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import urllib3
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from orchestrator import errors, user_files
from orchestrator.kube import kinds
from orchestrator.kube import status as kube_status

FIELD_MANAGER = "deployctl"
# Connect fast, read patiently: a reachable API server answers in milliseconds, an unreachable
# one should fail the command in seconds, not minutes.
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 30.0
# A 429 is the API server declining a request it has not processed: priority-and-fairness
# throttling, or a watch cache still filling (a CRD installed seconds ago answers "storage is
# (re)initializing"). client-go retries these after the server's Retry-After; so do we, for a
# bounded while, so a moment's backpressure is not a failed deploy.
THROTTLED_RETRY_SECONDS = 30.0
_AUTHORIZATION = "authorization.k8s.io/v1"
_JSON = "application/json"


# Query parameters of a request, as the client serializes them.
Query = list[tuple[str, str | int]]


@dataclasses.dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    object: dict[str, Any]


class Kube:
    """One connection to one cluster, as named by a kubeconfig and context."""

    def __init__(self, api: k8s.ApiClient, context: str, server: str) -> None:
        self._api = api
        self.context = context
        self.server = server

    # -- plumbing ---------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: object = None,
        content_type: str = "application/json",
        stream: bool = False,
        read_timeout: float | None = READ_TIMEOUT,
        what: str = "",
    ) -> Any:
        deadline = time.monotonic() + THROTTLED_RETRY_SECONDS
        while True:
            try:
                return self._call_once(method, path, query, body, content_type, stream, read_timeout, what)
            except _Throttled as throttled:
                if time.monotonic() + throttled.retry_after > deadline:
                    raise throttled.error from None
                time.sleep(throttled.retry_after)

    def _call_once(
        self,
        method: str,
        path: str,
        query: Query | None,
        body: object,
        content_type: str,
        stream: bool,
        read_timeout: float | None,
        what: str,
    ) -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            serialized = self._api.param_serialize(
                method,
                path,
                query_params=query or [],
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            resp = self._api.call_api(*serialized, _request_timeout=(CONNECT_TIMEOUT, read_timeout)).response
        except k8s.ApiException as e:
            error = self._api_error(e.status, e.body, e.reason, method, path, what)
            if e.status == 429:
                raise _Throttled(error, e.headers) from e
            raise error from e
        except k8s.exceptions.OpenApiException as e:  # a request the client itself refused to build
            raise errors.ClusterError(f"{what or path}: {errors.shorten(str(e), 200)}") from e
        except (urllib3.exceptions.HTTPError, OSError, ssl.SSLError) as e:
            raise self._transport_error(e) from e
        if resp.status >= 400:
            try:
                error_body = resp.data
            finally:
                resp.release_conn()
            error = self._api_error(resp.status, error_body, resp.reason, method, path, what)
            if resp.status == 429:
                raise _Throttled(error, resp.headers)
            raise error
        if stream:
            return resp
        try:
            data = resp.data
        finally:
            resp.release_conn()
        return json.loads(data) if data else None

    def _transport_error(self, e: Exception) -> errors.ClusterError:
        reason = getattr(e, "reason", None) or e
        text = str(reason)
        if "CERTIFICATE_VERIFY_FAILED" in text or isinstance(reason, ssl.SSLError):
            cause = f"TLS error ({errors.shorten(text, 160)}); check the cluster CA in the kubeconfig"
        elif "refused" in text.lower():
            cause = "connection refused; is the API server running and the address right?"
        elif "timed out" in text.lower() or "timeout" in text.lower():
            cause = "the connection timed out; check the network path to the API server"
        else:
            cause = errors.shorten(text, 200)
        proxy = self._api.configuration.proxy
        via = f" through the kubeconfig's proxy-url {proxy}" if proxy else ""
        return errors.ClusterError(
            f"cannot reach the Kubernetes API at {self.server}{via} (context {self.context!r}): {cause}"
        )

    def _api_error(
        self, status: int, body: bytes | str | None, reason: str | None, method: str, path: str, what: str
    ) -> errors.ClusterError:
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
        try:
            message = str(json.loads(text or "{}").get("message", ""))
        except (ValueError, AttributeError):
            message = text
        message = errors.shorten(message or str(reason), 300)
        subject = what or f"{method} {path}"
        if status == 401:
            return errors.ClusterError(
                f"the API server at {self.server} rejected the credentials of context {self.context!r} "
                f"(401 Unauthorized: expired or wrong token/certificate?); refresh the kubeconfig"
            )
        if status == 403:
            return errors.Forbidden(f"forbidden: {message}. Grant it in the Role (see manifests/rbac/)")
        if status == 404:
            return errors.NotFound(f"{subject}: not found ({message})")
        if status == 409:
            return errors.Conflict(f"{subject}: conflict ({message})")
        if status == 410:
            return errors.WatchExpired(f"{subject}: {message}")
        return errors.ClusterError(f"{subject}: the API server answered {status}: {message}")

    # -- verbs ------------------------------------------------------------------------------

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        try:
            return self._object("GET", kinds.ref_of(kind).path(namespace, name), what=f"{kind} {name}")
        except errors.NotFound:
            return None

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        labels: str | None = None,
        fields: str | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        """Items and the list's resourceVersion (to start a watch from)."""
        query: Query = []
        if labels:
            query.append(("labelSelector", labels))
        if fields:
            query.append(("fieldSelector", fields))
        data = self._call("GET", kinds.ref_of(kind).path(namespace), query=query, what=f"list {kind}")
        kind_of_item = kind
        items = data.get("items") or []
        for item in items:  # lists omit kind/apiVersion on items; put them back for uniform handling
            item.setdefault("kind", kind_of_item)
            item.setdefault("apiVersion", kinds.ref_of(kind).group_version)
        return items, str(data.get("metadata", {}).get("resourceVersion", ""))

    def watch(
        self,
        kind: str,
        namespace: str | None,
        resource_version: str,
        *,
        labels: str | None = None,
        fields: str | None = None,
        timeout_seconds: int = 60,
    ) -> Iterator[WatchEvent]:
        """Stream changes after ``resource_version`` until the server closes the watch.

        A 410 (history compacted) raises WatchExpired: the caller re-lists and watches again.
        """
        query: Query = [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", timeout_seconds),
        ]
        if labels:
            query.append(("labelSelector", labels))
        if fields:
            query.append(("fieldSelector", fields))
        resp = self._call(
            "GET",
            kinds.ref_of(kind).path(namespace),
            query=query,
            stream=True,
            read_timeout=timeout_seconds + 15,
            what=f"watch {kind}",
        )
        try:
            buffer = b""
            for chunk in resp.stream(amt=65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object", {})
                        if status.get("code") == 410:
                            raise errors.WatchExpired(f"watch {kind}: {status.get('message', 'expired')}")
                        raise errors.ClusterError(f"watch {kind}: {errors.shorten(str(status.get('message')))}")
                    yield WatchEvent(event["type"], event["object"])
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise self._transport_error(e) from e
        finally:
            resp.release_conn()

    def apply(self, obj: Mapping[str, object], *, dry_run: bool = False, force: bool = True) -> dict[str, Any]:
        """Server-side apply as field manager ``deployctl``."""
        kind, name, namespace = _identity(obj)
        query: Query = [("fieldManager", FIELD_MANAGER), ("force", "true" if force else "false")]
        if dry_run:
            query.append(("dryRun", "All"))
        return self._object(
            "PATCH",
            kinds.ref_of(kind).path(namespace, name),
            query=query,
            body=json.dumps(obj),
            content="application/apply-patch+yaml",
            what=f"apply {kind} {name}",
        )

    def create(self, obj: Mapping[str, object]) -> dict[str, Any]:
        """Create; raises Conflict when the name is taken (used for atomic revision numbers)."""
        kind, name, namespace = _identity(obj)
        path = kinds.ref_of(kind).path(namespace)
        return self._object(
            "POST", path, query=[("fieldManager", FIELD_MANAGER)], body=obj, what=f"create {kind} {name}"
        )

    def replace(self, obj: Mapping[str, object]) -> dict[str, Any]:
        """Update guarded by metadata.resourceVersion; raises Conflict when someone else changed it."""
        kind, name, namespace = _identity(obj)
        path = kinds.ref_of(kind).path(namespace, name)
        return self._object(
            "PUT", path, query=[("fieldManager", FIELD_MANAGER)], body=obj, what=f"update {kind} {name}"
        )

    def merge_patch(
        self,
        kind: str,
        name: str,
        namespace: str | None,
        patch: Mapping[str, object],
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """JSON merge patch (RFC 7386) of an object or its ``subresource`` (e.g. ``status``); a
        metadata.resourceVersion in ``patch`` guards it (Conflict when the object changed since)."""
        return self._object(
            "PATCH",
            kinds.ref_of(kind).path(namespace, name, subresource),
            query=[("fieldManager", FIELD_MANAGER)],
            body=patch,
            content="application/merge-patch+json",
            what=f"patch {kind} {name}" + (f"/{subresource}" if subresource else ""),
        )

    def _object(
        self,
        method: str,
        path: str,
        *,
        what: str,
        body: object = None,
        query: Query | None = None,
        content: str = _JSON,
    ) -> dict[str, Any]:
        """A request whose answer is one object (or a list of them) as the API server sent it."""
        answer: dict[str, Any] = self._call(method, path, query=query, body=body, content_type=content, what=what)
        return answer

    def delete(self, kind: str, name: str, namespace: str | None = None, *, precondition_rv: str | None = None) -> bool:
        """Delete in the foreground; False when it was already gone."""
        body: dict[str, object] = {"propagationPolicy": "Background"}
        if precondition_rv:
            body["preconditions"] = {"resourceVersion": precondition_rv}
        try:
            self._call("DELETE", kinds.ref_of(kind).path(namespace, name), body=body, what=f"delete {kind} {name}")
        except errors.NotFound:
            return False
        return True

    def pod_log(
        self, name: str, namespace: str, *, tail_lines: int | None = 50, previous: bool = False, limit_bytes: int = 0
    ) -> str:
        """The container log: its last ``tail_lines`` lines, or (None) from the start, at most
        ``limit_bytes`` of it when that is set."""
        query: Query = [("tailLines", tail_lines)] if tail_lines is not None else []
        if limit_bytes:
            query.append(("limitBytes", limit_bytes))
        if previous:
            query.append(("previous", "true"))
        resp = self._call(
            "GET",
            kinds.ref_of("Pod").path(namespace, name, "log"),
            query=query,
            stream=True,
            what=f"log of pod {name}",
        )
        try:
            return bytes(resp.data).decode("utf-8", "replace")
        finally:
            resp.release_conn()

    def whoami(self) -> str:
        """The authenticated user name, as the API server sees it (SelfSubjectReview)."""
        review = self._review("authentication.k8s.io/v1", "SelfSubjectReview", "who am I")
        return str(kube_status.mapping(review.get("userInfo")).get("username", "unknown"))

    def can_i(self, verb: str, resource: str, namespace: str | None, *, group: str = "", subresource: str = "") -> bool:
        """Whether the API server would allow this request (SelfSubjectAccessReview)."""
        attributes = {"verb": verb, "resource": resource, "group": group}
        if namespace:
            attributes["namespace"] = namespace
        if subresource:
            attributes["subresource"] = subresource
        spec = {"resourceAttributes": attributes}
        return bool(self._review(_AUTHORIZATION, "SelfSubjectAccessReview", "access review", spec).get("allowed"))

    def granted_by_rules(self, namespace: str, wanted: Sequence[tuple[str, str, str, str]]) -> tuple[bool, ...]:
        """Which of ``wanted`` (verb, group, resource, subresource) are granted in ``namespace``,
        as far as one SelfSubjectRulesReview shows: one round trip for any number of permissions.

        True is a grant of the Node and RBAC authorizers, matched by RBAC's own rules. False means
        "not shown", never "denied": when the review is ``incomplete`` (a webhook authorizer, which
        cannot list its rules and may also deny what RBAC allows) or may not be asked, every answer
        is False, and the caller asks ``can_i``, which is authoritative, for each.
        """
        try:
            status = self._review(_AUTHORIZATION, "SelfSubjectRulesReview", "rules review", {"namespace": namespace})
        except (errors.Forbidden, errors.NotFound):
            return (False,) * len(wanted)
        rules = [] if status.get("incomplete") else kube_status.mappings(status.get("resourceRules"))
        return tuple(any(kinds.rule_grants(rule, *w) for rule in rules) for w in wanted)

    def _review(
        self, group_version: str, kind: str, what: str, spec: Mapping[str, object] | None = None
    ) -> Mapping[str, object]:
        """The status of a self review of ``kind`` (who am I, may I), created and answered in one call."""
        body: dict[str, object] = {"apiVersion": group_version, "kind": kind}
        if spec is not None:
            body["spec"] = spec
        review = self._object("POST", f"/apis/{group_version}/{kind.lower()}s", body=body, what=what)
        return kube_status.mapping(review.get("status"))

    def server_version(self) -> str:
        data = self._call("GET", "/version", what="server version")
        return str(data.get("gitVersion", "unknown"))

    @property
    def api_client(self) -> k8s.ApiClient:
        """For the port-forwarder, which speaks websockets through the same credentials."""
        return self._api


def _identity(obj: Mapping[str, object]) -> tuple[str, str, str | None]:
    """The kind, name and namespace (None for a cluster-scoped kind) of an object to write."""
    kind, meta = obj.get("kind"), kube_status.mapping(obj.get("metadata"))
    if not isinstance(kind, str):
        raise errors.UsageError(f"an object to write has no kind: {errors.shorten(str(obj), 200)}")
    namespace = meta.get("namespace")
    scoped = isinstance(namespace, str) and kinds.ref_of(kind).namespaced
    return kind, kube_status.text(meta.get("name")), namespace if scoped and isinstance(namespace, str) else None


def connect(kubeconfig: str | None = None, context: str | None = None) -> Kube:
    """Load a kubeconfig (or the in-cluster service account) into a Kube, without network calls.

    The API server is reached as the kubeconfig says: directly, or through its cluster's
    ``proxy-url``. HTTPS_PROXY/HTTP_PROXY/NO_PROXY are ignored, as for the gate endpoint
    (``orchestrator.http``): a CI runner's proxy for internet egress must not carry cluster
    traffic, and an air-gapped deployment must not depend on what a shell exports. The
    port-forward's websocket follows the same rule (``orchestrator.kube.portforward``).
    """
    path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    configuration = k8s.Configuration()
    _no_environment_proxy(configuration)
    try:
        if (
            kubeconfig is None
            and not os.path.exists(path.split(os.pathsep)[0])
            and os.environ.get("KUBERNETES_SERVICE_HOST")
        ):
            k8s_config.load_incluster_config(client_configuration=configuration)
            context_name = "in-cluster"
        else:
            first = path.split(os.pathsep)[0]
            if not os.path.exists(first):
                raise errors.UsageError(f"kubeconfig {first} does not exist; pass --kubeconfig or set KUBECONFIG")
            if os.path.isdir(first):
                raise errors.UsageError(f"kubeconfig {first} is a directory; give the kubeconfig file")
            for each in path.split(os.pathsep):
                # The client reads the files itself, unbounded: /dev/zero or a FIFO would hang it.
                if each and os.path.exists(each):
                    user_files.check(each, "kubeconfig", user_files.KUBECONFIG_BYTES)
            contexts, active = k8s_config.list_kube_config_contexts(config_file=path)
            names = [c["name"] for c in contexts]
            if context and context not in names:
                raise errors.UsageError(
                    f"context {context!r} is not in kubeconfig {path}; it has: {', '.join(names) or 'none'}"
                )
            context_name = context or (active or {}).get("name", "")
            k8s_config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
    except ConfigException as e:
        raise errors.UsageError(f"cannot use kubeconfig {path}: {errors.shorten(str(e), 200)}") from e
    except PermissionError as e:
        raise errors.UsageError(f"cannot read kubeconfig {path}: permission denied") from e
    except (OSError, ValueError, yaml.YAMLError) as e:  # unreadable or malformed YAML
        raise errors.UsageError(f"cannot read kubeconfig {path}: {errors.shorten(str(e), 200)}") from e
    except (TypeError, KeyError, AttributeError) as e:
        # The client's loader indexes the document without checking its shape (a YAML list, a
        # context that is a string): that is a file that is not a kubeconfig, not a crash.
        raise errors.UsageError(
            f"cannot use kubeconfig {path}: it is not a kubeconfig ({type(e).__name__}: "
            f"{errors.shorten(str(e), 120)}); check the file, or pass another with --kubeconfig"
        ) from e
    configuration.retries = 0  # we retry where it is safe, with our own deadlines
    return Kube(k8s.ApiClient(configuration), context_name, configuration.host)


def _no_environment_proxy(configuration: k8s.Configuration) -> None:
    """Drop the proxy the client took from the environment; a kubeconfig ``proxy-url`` still applies.

    Assigning ``proxy`` also stops the client from re-reading the environment when the host is set.
    """
    configuration.proxy = None
    configuration.no_proxy = None


class _Throttled(Exception):
    """A 429 from the API server: the error to raise once retrying is over, and how long to wait."""

    def __init__(self, error: errors.DeployctlError, headers: Mapping[str, str] | None) -> None:
        super().__init__(str(error))
        self.error = error
        try:
            wait = float((headers or {}).get("Retry-After", 1))
        except ValueError:  # an HTTP date instead of seconds: not worth parsing for a moment's wait
            wait = 1.0
        self.retry_after = min(max(wait, 0.2), 5.0)
