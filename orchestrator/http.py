"""The only module that imports httpx: HTTP to the inference endpoint, with our own errors.

Everything the health gate and the smoke benchmark send goes through here. httpx exceptions are
converted at this boundary (``raise ... from e``) into children of
:class:`orchestrator.errors.EndpointError`, so no library exception reaches the pipeline:

* :class:`EndpointUnreachable`: connection refused, DNS failure, connect timeout, or a connection
  closed before any answer (a refused connection behind a port-forward or proxy).
* :class:`EndpointTimeout`: a stalled stream (no byte within the read timeout) or a write/pool timeout.
* :class:`EndpointStatusError`: an HTTP status other than the one expected.
* :class:`EndpointProtocolError`: the connection dropped or the answer was not what HTTP/JSON allows.

An API key (vLLM's ``--api-key``) travels as ``Authorization: Bearer KEY`` on the ``/v1/*`` calls
only; ``/health`` stays unauthenticated, as vLLM leaves it. The key is a header and nothing else:
no message built here quotes a request's headers, so it cannot leak into an error or a record.

Proxy variables from the environment are ignored (``trust_env=False``): the endpoint is an
in-cluster or on-prem address, and a proxy in the path would both distort timings and send
benchmark traffic somewhere it was never meant to go. The CA variables are honoured on their own:
an on-prem Ingress usually has a certificate from the company's CA, which ``SSL_CERT_FILE`` or
``SSL_CERT_DIR`` (as OpenSSL, curl and Python read them) adds to the public roots.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import ssl
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

import httpx

from orchestrator import errors

Clock = Callable[[], float]

# Keep-alive must outlive the gap between two requests of one stream slot, and a connection may
# sit idle during warm-up → measurement hand-over; 60 s is what vLLM's own benchmark uses.
KEEPALIVE_EXPIRY_S = 60.0
CONNECT_TIMEOUT_S = 10.0
_ERROR_BODY_LIMIT = 2048  # bytes of an error answer worth reading for the message
MODELS_BODY_LIMIT = 1 << 20  # a /v1/models list of a few models is a few KiB; a flood is cut here
# An engine's /metrics is tens to hundreds of KiB (a histogram per model and LoRA adapter); a flood is cut here.
METRICS_BODY_LIMIT = 16 << 20


class EndpointUnreachable(errors.EndpointError):
    """No connection could be made (refused, unknown host, connect timeout)."""


class EndpointTimeout(errors.EndpointError):
    """Connected, but the server went silent for longer than the read timeout."""


class EndpointStatusError(errors.EndpointError):
    """The server answered with an unexpected HTTP status; ``status`` and a cut ``body`` are kept."""

    def __init__(self, message: str, status: int, body: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class EndpointProtocolError(errors.EndpointError):
    """The connection dropped mid-answer or the answer broke HTTP or JSON rules."""


def _convert(exc: httpx.HTTPError, url: str) -> errors.EndpointError:
    """Map an httpx exception onto ours; the message names the URL, the condition and the fix."""
    detail = errors.excerpt(str(exc) or type(exc).__name__)
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return EndpointUnreachable(
            f"{url}: cannot connect ({detail}); check that the server is up and the URL and port are right"
        )
    if isinstance(exc, httpx.RemoteProtocolError) and "without sending a response" in str(exc):
        # httpcore's words for a connection closed before a single byte of answer. Through a
        # port-forward, proxy or load balancer that is what a refused connection looks like (the
        # hop in front accepts, then finds nothing listening), so it means "could not measure".
        return EndpointUnreachable(
            f"{url}: the connection closed before any answer ({detail}); through a port-forward or "
            "proxy this is a refused connection: check that the server is up and listens on that port"
        )
    if isinstance(exc, httpx.TimeoutException):
        return EndpointTimeout(
            f"{url}: no data within the read timeout ({type(exc).__name__}); the server is stalled "
            "or overloaded, or the timeout is too short for this load"
        )
    if isinstance(exc, httpx.UnsupportedProtocol):
        return EndpointUnreachable(f"{url}: unsupported URL scheme ({detail}); use http:// or https://")
    return EndpointProtocolError(f"{url}: the connection failed mid-answer ({type(exc).__name__}: {detail})")


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The header an OpenAI-compatible server checks its ``--api-key`` against; none without a key."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def is_unauthorized(exc: errors.EndpointError) -> bool:
    """True when the server refused the request's credentials (HTTP 401 or 403)."""
    return isinstance(exc, EndpointStatusError) and exc.status in (401, 403)


def check_url(base_url: str) -> str:
    """The URL without a trailing slash; UsageError if it can never work (not http(s), no host)."""
    try:
        url = httpx.URL(base_url)
    except httpx.InvalidURL as e:
        raise errors.UsageError(f"endpoint URL {base_url!r} is not a valid URL: {e}") from e
    if url.scheme not in ("http", "https") or not url.host:
        raise errors.UsageError(
            f"endpoint URL {base_url!r} must look like http://host:port (got scheme {url.scheme!r})"
        )
    return base_url.rstrip("/")


class StreamClient:
    """An async HTTP client sized for ``concurrency`` simultaneous streams to one endpoint.

    Use as ``async with StreamClient(...) as client``. ``read_timeout`` bounds the silence between
    two reads, so a stream that stalls mid-answer fails after that long instead of hanging.
    ``clock`` timestamps every chunk (tests inject a fake one); ``transport`` replaces the network
    (tests pass ``httpx.MockTransport``).
    """

    def __init__(
        self,
        base_url: str,
        concurrency: int,
        *,
        read_timeout: float,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        clock: Clock = time.perf_counter,
        transport: httpx.AsyncBaseTransport | None = None,
        api_key: str | None = None,
    ) -> None:
        self.base_url = check_url(base_url)
        self.clock = clock
        self._api_key = api_key  # only to redact it from an error answer that echoes it
        # Compression would make the server buffer tokens, which distorts inter-token timing.
        headers = {"Accept-Encoding": "identity", **auth_headers(api_key)}
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            limits=httpx.Limits(
                max_connections=concurrency,
                max_keepalive_connections=concurrency,
                keepalive_expiry=KEEPALIVE_EXPIRY_S,
            ),
            # The pool wait is bounded like a connect: every stream slot owns a connection, so
            # waiting longer than that for one means the pool is misconfigured, not busy.
            timeout=httpx.Timeout(connect=connect_timeout, read=read_timeout, write=read_timeout, pool=connect_timeout),
            transport=transport,
            trust_env=False,
            verify=_tls(),
            headers=headers,
        )

    async def __aenter__(self) -> StreamClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def stream_post(
        self, path: str, body: bytes, on_sent: Callable[[float], None] | None = None
    ) -> AsyncGenerator[tuple[float, bytes], None]:
        """POST a JSON ``body`` and yield ``(arrival_time, bytes)`` for each chunk as it arrives.

        ``on_sent`` gets the clock time at which the request started going onto the wire. When
        many requests start at once, httpx interleaves their sends, so that moment can be tens of
        milliseconds after the call; it is the moment the server's clock starts, so latencies
        measured from it do not charge the client's own send queue to the server. (It is not
        called where no wire exists, as with a mock transport.)

        A status other than 200 raises :class:`EndpointStatusError` before anything is yielded.
        Close the iterator (``contextlib.aclosing``) when leaving it early, so the connection
        goes back to the pool.
        """
        url = self.base_url + path
        extensions: dict[str, Any] = {}
        if on_sent is not None:
            clock = self.clock

            async def trace(event: str, info: dict[str, Any]) -> None:
                if event.endswith("send_request_headers.started"):
                    on_sent(clock())

            extensions["trace"] = trace
        request = self._client.build_request(
            "POST", path, content=body, headers={"Content-Type": "application/json"}, extensions=extensions
        )
        try:
            response = await self._client.send(request, stream=True)
            try:
                if response.status_code != 200:
                    body = await _read_some(response)
                    raise _status_error(url, response.status_code, body, secrets=(self._api_key,))
                # Raw bytes skip httpx's decoder layer, a measurable share of the per-chunk cost;
                # only a server that compresses despite "Accept-Encoding: identity" needs decoding.
                encoded = response.headers.get("content-encoding", "identity") != "identity"
                chunks = response.aiter_bytes() if encoded else response.aiter_raw()
                async for chunk in chunks:
                    yield self.clock(), chunk
            finally:
                await response.aclose()
        except httpx.HTTPError as e:
            raise _convert(e, url) from e


async def _read_some(response: httpx.Response) -> bytes:
    body = b""
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= _ERROR_BODY_LIMIT:
            break
    return body[:_ERROR_BODY_LIMIT]


def _status_error(url: str, status: int, body: bytes, secrets: tuple[str | None, ...] = ()) -> EndpointStatusError:
    text = errors.excerpt(body.decode("utf-8", errors="replace"), secrets=secrets)
    return EndpointStatusError(f"{url}: HTTP {status}: {text or '(empty body)'}", status=status, body=text)


@dataclasses.dataclass(frozen=True)
class HealthResult:
    """One /health probe: ``ok`` only for HTTP 200; ``detail`` says what was seen otherwise."""

    ok: bool
    status: int | None
    detail: str
    elapsed_s: float


def check_health(
    base_url: str, *, timeout: float = 5.0, path: str = "/health", transport: httpx.BaseTransport | None = None
) -> HealthResult:
    """Probe ``GET {base_url}{path}`` once; never raises for an unhealthy or unreachable server.

    The caller polls until its deadline, so "not yet" is data, not an exception. Only a URL that
    can never work raises (:class:`orchestrator.errors.UsageError`).
    """
    url = check_url(base_url) + path
    started = time.perf_counter()
    try:
        with _sync_client(timeout, transport) as client:
            status, body = _get(client, url, {}, _ERROR_BODY_LIMIT)
    except httpx.HTTPError as e:
        return HealthResult(False, None, _convert(e, url).message, time.perf_counter() - started)
    elapsed = time.perf_counter() - started
    if status == 200:
        return HealthResult(True, 200, "healthy", elapsed)
    text = errors.excerpt(body.decode("utf-8", errors="replace"))
    return HealthResult(False, status, f"HTTP {status}: {text}", elapsed)


def served_models(
    base_url: str,
    *,
    timeout: float = 10.0,
    transport: httpx.BaseTransport | None = None,
    api_key: str | None = None,
) -> list[str]:
    """The model ids that ``GET {base_url}/v1/models`` lists; raises an EndpointError on failure."""
    url = check_url(base_url) + "/v1/models"
    try:
        with _sync_client(timeout, transport) as client:
            status, body = _get(client, url, auth_headers(api_key), MODELS_BODY_LIMIT)
    except httpx.HTTPError as e:
        raise _convert(e, url) from e
    if status != 200:
        raise _status_error(url, status, body[:_ERROR_BODY_LIMIT], secrets=(api_key,))
    shown = errors.excerpt(body[:_ERROR_BODY_LIMIT].decode("utf-8", errors="replace"), secrets=(api_key,))
    if len(body) > MODELS_BODY_LIMIT:
        raise EndpointProtocolError(f"{url}: the model list is larger than {MODELS_BODY_LIMIT:,} bytes: {shown}")
    try:
        payload: Any = json.loads(body)
    except (ValueError, RecursionError) as e:  # not JSON, not UTF-8, or nested past the parser's stack
        raise EndpointProtocolError(f"{url}: the answer is not JSON: {shown}") from e
    entries = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(entries, list):
        raise EndpointProtocolError(f"{url}: expected an OpenAI model list {{'data': [...]}}, got {shown}")
    return [str(entry["id"]) for entry in entries if isinstance(entry, dict) and "id" in entry]


def metrics_text(
    base_url: str, path: str, *, timeout: float = 10.0, transport: httpx.BaseTransport | None = None
) -> str:
    """The Prometheus exposition ``GET {base_url}{path}`` answers; raises an EndpointError on failure."""
    url = check_url(base_url) + path
    try:
        with _sync_client(timeout, transport) as client:
            status, body = _get(client, url, {}, METRICS_BODY_LIMIT)
    except httpx.HTTPError as e:
        raise _convert(e, url) from e
    if status != 200:
        raise _status_error(url, status, body[:_ERROR_BODY_LIMIT])
    if len(body) > METRICS_BODY_LIMIT:
        raise EndpointProtocolError(f"{url}: the metrics page is larger than {METRICS_BODY_LIMIT:,} bytes")
    return body.decode("utf-8", errors="replace")


PROMETHEUS_BODY_LIMIT = 16 << 20  # a window's instant vector of one release: a few thousand series at most


def prometheus_vector(
    base_url: str, query: str, *, timeout: float = 10.0, transport: httpx.BaseTransport | None = None
) -> list[tuple[dict[str, str], float]]:
    """The instant vector ``GET {base_url}/api/v1/query?query=...`` answers: each series' labels and value.

    The URL comes from a profile, which the controller runs for any author: nothing of an answer that
    is not Prometheus' own JSON is quoted in an error (only its status), so an address that is not a
    Prometheus cannot have its page copied into a log, a record or a status.
    """
    url = check_url(base_url) + "/api/v1/query"
    deadline = time.monotonic() + timeout  # for the whole answer: a server that drips bytes holds no window
    try:
        with _sync_client(timeout, transport) as client, client.stream("GET", url, params={"query": query}) as answer:
            body = bytearray()
            for chunk in answer.iter_bytes():
                body += chunk
                if len(body) > PROMETHEUS_BODY_LIMIT:
                    raise EndpointProtocolError(f"{url}: the answer is larger than {PROMETHEUS_BODY_LIMIT:,} bytes")
                if time.monotonic() > deadline:
                    raise EndpointTimeout(f"{url}: the answer took longer than {timeout:g} s")
            status = answer.status_code
    except httpx.HTTPError as e:
        raise _convert(e, url) from e
    try:
        payload: Any = json.loads(body)
    except (ValueError, RecursionError):
        payload = None
    if not isinstance(payload, dict) or payload.get("status") not in ("success", "error"):
        raise EndpointProtocolError(f"{url}: HTTP {status}, and the answer is not the Prometheus API's JSON")
    if payload["status"] == "error" or status != 200:
        said = errors.excerpt(f"{payload.get('errorType', '')}: {payload.get('error', '')}")
        raise EndpointStatusError(f"{url}: HTTP {status}: Prometheus says {said}", status=status, body=said)
    data = payload.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise EndpointProtocolError(f"{url}: the answer is not an instant vector")
    found = []
    for entry in data["result"]:
        try:
            labels = {str(k): str(v) for k, v in entry["metric"].items()}
            found.append((labels, float(entry["value"][1])))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            raise EndpointProtocolError(f"{url}: a series of the answer is not shaped as the API gives it") from e
    return found


def _get(client: httpx.Client, url: str, headers: dict[str, str], limit: int) -> tuple[int, bytes]:
    """GET ``url``: the status and at most ``limit`` + 1 bytes of the answer (more would be a flood,
    read no further; the extra byte tells the caller the answer was cut)."""
    with client.stream("GET", url, headers=headers) as response:
        body = b""
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > limit:
                break
        return response.status_code, body[: limit + 1]


def _sync_client(timeout: float, transport: httpx.BaseTransport | None) -> httpx.Client:
    return httpx.Client(timeout=timeout, transport=transport, trust_env=False, verify=_tls())


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context per process: httpx loads the CA bundle for every client otherwise (15-30 ms
    each, two clients per health check). The public roots, plus SSL_CERT_FILE / SSL_CERT_DIR."""
    context = httpx.create_ssl_context(trust_env=False)
    for variable, kind in (("SSL_CERT_FILE", "cafile"), ("SSL_CERT_DIR", "capath")):
        where = os.environ.get(variable)
        if not where:
            continue
        try:
            context.load_verify_locations(**{kind: where})
        except (OSError, ssl.SSLError) as e:
            raise errors.EndpointError(
                f"{variable}={where}: cannot load CA certificates from it ({e}); point it at a PEM file "
                "(SSL_CERT_FILE) or a hashed directory (SSL_CERT_DIR) of your CA, or unset it"
            ) from e
    return context
