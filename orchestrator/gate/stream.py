"""One streamed request of the benchmark: sent, and its SSE events folded into a RequestSample.

The sample holds the request's timings (time to first token, the gaps between tokens, latency),
the server's token counts, and the failure that ended it, if any: a failure is recorded in the
sample, never raised, so one bad answer never stops a run.
"""

from __future__ import annotations

import contextlib

from orchestrator import errors, http
from orchestrator.gate import metrics, sse, workload


class _Stream:
    """Folds one response's events into a RequestSample."""

    def __init__(self, sample: metrics.RequestSample) -> None:
        self.sample = sample
        self.decoder = sse.EventDecoder()
        self.done = False
        self.last = sample.start

    def take(self, arrival: float, events: list[sse.Event]) -> bool:
        """Apply events that arrived at ``arrival``; False once the stream must stop being read."""
        s = self.sample
        for event in events:
            for item in sse.classify(event):
                if item.kind is sse.Kind.TOKEN:
                    if s.ttft is None:
                        s.ttft = arrival - s.start
                    else:
                        s.itl.append(arrival - self.last)
                    self.last = arrival
                    s.latency = arrival - s.start
                    s.token_chunks += 1
                elif item.kind is sse.Kind.USAGE:
                    s.completion_tokens = item.completion_tokens
                    s.prompt_tokens = item.prompt_tokens
                elif item.kind is sse.Kind.DONE:
                    self.done = True
                    return False
                elif item.kind is sse.Kind.ERROR:
                    return self.fail(metrics.FailureKind.STREAM_ERROR, f"error event in stream: {item.message}")
                elif item.kind is sse.Kind.MALFORMED:
                    return self.fail(metrics.FailureKind.PROTOCOL, item.message)
        return True

    def fail(self, kind: metrics.FailureKind, message: str) -> bool:
        self.sample.failure = kind
        self.sample.error = errors.excerpt(message, 300)  # it is stored in the gate report
        return False

    def finish(self) -> None:
        if self.sample.failure is not None:
            return
        if not self.done:
            self.fail(metrics.FailureKind.PROTOCOL, "stream ended without data: [DONE] (answer cut short)")
        elif self.sample.ttft is None:
            generated = self.sample.completion_tokens
            if generated:
                # The server generated tokens that decode to no text (special tokens, partial
                # characters): nothing a user sees, and no first token to time.
                self.fail(
                    metrics.FailureKind.NO_TOKENS,
                    f"stream completed without any output text although the server counted {generated} "
                    "completion tokens: the model generates only special tokens or incomplete characters "
                    "(check its tokenizer and chat template)",
                )
            else:
                self.fail(metrics.FailureKind.NO_TOKENS, "stream completed without any output token")


async def send_one(
    client: http.StreamClient, body: bytes, prompt_tokens_estimate: int, timeout: float, path: str = workload.CHAT_PATH
) -> metrics.RequestSample:
    """Send one request and time it; failures are recorded in the sample, never raised."""
    called = client.clock()
    sample = metrics.RequestSample(start=called, prompt_tokens_estimate=prompt_tokens_estimate)
    stream = _Stream(sample)

    def sent(at: float) -> None:
        sample.start = stream.last = at
        sample.send_delay = at - called

    try:
        async with contextlib.aclosing(client.stream_post(path, body, sent)) as chunks:
            async for arrival, chunk in chunks:
                if not stream.take(arrival, stream.decoder.feed(chunk)):
                    break
                if arrival - sample.start > timeout:
                    stream.fail(metrics.FailureKind.TIMEOUT, f"request took longer than {timeout:g} s")
                    break
            else:
                stream.take(client.clock(), stream.decoder.close())
    except http.EndpointUnreachable as e:
        stream.fail(metrics.FailureKind.CONNECT, e.message)
    except http.EndpointTimeout as e:
        stream.fail(metrics.FailureKind.TIMEOUT, e.message)
    except http.EndpointStatusError as e:
        if http.is_unauthorized(e):
            stream.fail(metrics.FailureKind.UNAUTHORIZED, f"{e.message} (the server wants another API key)")
        else:
            stream.fail(metrics.FailureKind.HTTP_STATUS, e.message)
    except errors.EndpointError as e:
        stream.fail(metrics.FailureKind.PROTOCOL, e.message)
    sample.end = client.clock()
    stream.finish()
    return sample
