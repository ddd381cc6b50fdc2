"""Fakes for the HTTP-facing tests: a settable clock and streamed bodies for ``httpx.MockTransport``.

A :class:`Script` is a list of steps played by the response body: a number advances the fake
clock (the server "takes that long"), bytes are sent as one network chunk, and an exception is
raised where it stands (a timeout or a dropped connection mid-stream). Timings are exact.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence

import httpx

Step = float | bytes | Exception


class FakeClock:
    """A clock that only moves when a test (or a scripted body) moves it."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Script(httpx.AsyncByteStream):
    def __init__(self, clock: FakeClock, steps: Sequence[Step]) -> None:
        self.clock = clock
        self.steps = list(steps)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for step in self.steps:
            if isinstance(step, Exception):
                raise step
            if isinstance(step, bytes):
                yield step
            else:
                self.clock.advance(step)


def event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def token_event(text: str = "x") -> bytes:
    return event({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}}]})


ROLE_EVENT = event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
DONE_EVENT = b"data: [DONE]\n\n"


def usage_event(prompt: int, completion: int) -> bytes:
    return event({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})


def vllm_steps(ttft: float, itl: float, tokens: int, prompt_tokens: int | None = 100) -> list[Step]:
    """A well-formed stream: role + first token after ``ttft``, one token every ``itl``, usage, [DONE]."""
    steps: list[Step] = [ttft, ROLE_EVENT + token_event()]
    for _ in range(tokens - 1):
        steps += [itl, token_event()]
    if prompt_tokens is not None:
        steps.append(usage_event(prompt_tokens, tokens))
    steps.append(DONE_EVENT)
    return steps


def streaming(clock: FakeClock, respond: Callable[[httpx.Request], Sequence[Step]]) -> httpx.MockTransport:
    """A transport answering 200 text/event-stream with the steps ``respond`` picks per request."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=Script(clock, respond(request))
        )

    return httpx.MockTransport(handler)
