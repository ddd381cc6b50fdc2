"""orchestrator.http: streaming, health and model listing over a mock transport; no httpx error escapes."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json

import httpx
import pytest
from streamfakes import DONE_EVENT, FakeClock, Script, Step, streaming, token_event

from orchestrator import errors, http


def collect(client: http.StreamClient, body: bytes = b"{}") -> list[tuple[float, bytes]]:
    async def go() -> list[tuple[float, bytes]]:
        async with client:
            return [item async for item in client.stream_post("/v1/chat/completions", body)]

    return asyncio.run(go())


def client_for(transport: httpx.AsyncBaseTransport, clock: FakeClock | None = None) -> http.StreamClient:
    return http.StreamClient(
        "http://infer.test:8000/", 4, read_timeout=5.0, clock=clock or FakeClock(), transport=transport
    )


def test_stream_post_yields_each_chunk_with_its_arrival_time() -> None:
    clock = FakeClock(10.0)
    steps: list[Step] = [0.25, token_event("a"), 0.02, token_event("b"), DONE_EVENT]
    chunks = collect(client_for(streaming(clock, lambda _: steps), clock))
    assert chunks == [(10.25, token_event("a")), (10.27, token_event("b")), (10.27, DONE_EVENT)]


def test_stream_post_sends_the_body_as_json_without_compression() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, stream=Script(FakeClock(), [DONE_EVENT]))

    collect(client_for(httpx.MockTransport(handler)), b'{"model": "m"}')
    [request] = seen
    assert str(request.url) == "http://infer.test:8000/v1/chat/completions"
    assert request.method == "POST"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["accept-encoding"] == "identity"
    assert json.loads(request.content) == {"model": "m"}


def test_non_200_raises_status_error_with_a_cut_body() -> None:
    body = json.dumps({"object": "error", "message": "x" * 5000}).encode()
    transport = httpx.MockTransport(lambda _: httpx.Response(503, content=body))
    with pytest.raises(http.EndpointStatusError) as caught:
        collect(client_for(transport))
    assert caught.value.status == 503
    assert "HTTP 503" in caught.value.message
    assert len(caught.value.body) <= 300
    assert caught.value.exit_code == errors.EndpointError.exit_code


@pytest.mark.parametrize(
    "exc, ours",
    [
        (httpx.ConnectError("Connection refused"), http.EndpointUnreachable),
        (httpx.ConnectTimeout("timed out"), http.EndpointUnreachable),
        (httpx.PoolTimeout("no connection"), http.EndpointTimeout),
        (httpx.ReadTimeout("timed out"), http.EndpointTimeout),
        (httpx.WriteTimeout("timed out"), http.EndpointTimeout),
        (httpx.RemoteProtocolError("peer closed connection"), http.EndpointProtocolError),
        # What a refused connection behind a port-forward or proxy looks like (httpcore's words).
        (
            httpx.RemoteProtocolError("Server disconnected without sending a response."),
            http.EndpointUnreachable,
        ),
        (httpx.ReadError("reset by peer"), http.EndpointProtocolError),
        (httpx.UnsupportedProtocol("gopher"), http.EndpointUnreachable),
    ],
)
def test_httpx_errors_before_the_answer_become_ours(exc: httpx.HTTPError, ours: type[Exception]) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    with pytest.raises(ours) as caught:
        collect(client_for(httpx.MockTransport(handler)))
    assert isinstance(caught.value, errors.EndpointError)
    assert caught.value.__cause__ is exc
    assert "infer.test" in caught.value.message


@pytest.mark.parametrize(
    "exc, ours",
    [
        (httpx.ReadTimeout("stalled"), http.EndpointTimeout),
        (httpx.RemoteProtocolError("incomplete chunked read"), http.EndpointProtocolError),
    ],
)
def test_httpx_errors_mid_stream_become_ours(exc: httpx.HTTPError, ours: type[Exception]) -> None:
    clock = FakeClock()
    got: list[tuple[float, bytes]] = []

    async def go() -> None:
        async with client_for(streaming(clock, lambda _: [token_event(), 1.0, exc]), clock) as client:
            async for item in client.stream_post("/v1/chat/completions", b"{}"):
                got.append(item)

    with pytest.raises(ours):
        asyncio.run(go())
    assert len(got) == 1


def test_leaving_a_stream_early_closes_the_response() -> None:
    closed: list[bool] = []

    class Tracked(Script):
        async def aclose(self) -> None:
            closed.append(True)

    transport = httpx.MockTransport(
        lambda _: httpx.Response(200, stream=Tracked(FakeClock(), [token_event(), token_event()]))
    )

    async def go() -> None:
        client = client_for(transport)
        async with client, contextlib.aclosing(client.stream_post("/v1/chat/completions", b"{}")) as chunks:
            async for _ in chunks:
                break

    asyncio.run(go())
    assert closed == [True]


@pytest.mark.parametrize("url", ["ftp://infer:8000", "infer:8000", "http://"])
def test_a_url_that_can_never_work_is_a_usage_error(url: str) -> None:
    with pytest.raises(errors.UsageError, match="URL"):
        http.check_url(url)


def test_check_health_200_is_ok() -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(200 if r.url.path == "/health" else 404))
    result = http.check_health("http://infer.test:8000", transport=transport)
    assert (result.ok, result.status, result.detail) == (True, 200, "healthy")


def test_check_health_reports_a_bad_status_without_raising() -> None:
    transport = httpx.MockTransport(lambda _: httpx.Response(503, text="loading model"))
    result = http.check_health("http://infer.test:8000", transport=transport)
    assert (result.ok, result.status) == (False, 503)
    assert "loading model" in result.detail


def test_check_health_reports_a_refused_connection_without_raising() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("Connection refused")

    result = http.check_health("http://infer.test:8000", transport=httpx.MockTransport(refuse))
    assert (result.ok, result.status) == (False, None)
    assert "cannot connect" in result.detail


def test_served_models_lists_the_ids() -> None:
    payload = {"object": "list", "data": [{"id": "llama-3-70b", "object": "model"}, {"id": "lora-a"}]}
    transport = httpx.MockTransport(
        lambda r: httpx.Response(200, json=payload) if r.url.path == "/v1/models" else httpx.Response(404)
    )
    assert http.served_models("http://infer.test:8000/", transport=transport) == ["llama-3-70b", "lora-a"]


@pytest.mark.parametrize(
    "response, ours",
    [
        (httpx.Response(404, text="not found"), http.EndpointStatusError),
        (httpx.Response(200, text="<html>"), http.EndpointProtocolError),
        (httpx.Response(200, json={"data": 3}), http.EndpointProtocolError),
        (httpx.Response(200, json=[1, 2]), http.EndpointProtocolError),
    ],
)
def test_served_models_raises_ours_for_bad_answers(response: httpx.Response, ours: type[Exception]) -> None:
    with pytest.raises(ours):
        http.served_models("http://infer.test:8000", transport=httpx.MockTransport(lambda _: response))


def test_served_models_raises_unreachable_for_a_refused_connection() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("Connection refused")

    with pytest.raises(http.EndpointUnreachable) as caught:
        http.served_models("http://infer.test:8000", transport=httpx.MockTransport(refuse))
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


def test_a_server_that_compresses_anyway_is_decoded() -> None:
    body = gzip.compress(token_event("a") + DONE_EVENT)
    transport = httpx.MockTransport(
        lambda _: httpx.Response(200, headers={"content-encoding": "gzip"}, stream=Script(FakeClock(), [body]))
    )
    assert b"".join(chunk for _, chunk in collect(client_for(transport))) == token_event("a") + DONE_EVENT


def test_metrics_text_reads_the_page_and_names_a_refusal_or_a_flood() -> None:
    page = "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 3\n"
    ok = httpx.MockTransport(lambda request: httpx.Response(200, text=page if request.url.path == "/metrics" else ""))
    assert http.metrics_text("http://pod:8000", "/metrics", transport=ok) == page
    refused = httpx.MockTransport(lambda _: httpx.Response(403, text="forbidden"))
    with pytest.raises(http.EndpointStatusError, match="403"):
        http.metrics_text("http://pod:8000", "/metrics", transport=refused)
    flood = httpx.MockTransport(lambda _: httpx.Response(200, content=b"x" * (http.METRICS_BODY_LIMIT + 10)))
    with pytest.raises(http.EndpointProtocolError, match="larger than"):
        http.metrics_text("http://pod:8000", "/metrics", transport=flood)
