"""Turn the bytes of an OpenAI-compatible streaming response into chat-completion events.

Two layers, both pure and incremental so they work on whatever chunk boundaries the network
produces (a chunk may end inside a UTF-8 character, inside ``\\r\\n`` or inside a JSON object):

* :class:`EventDecoder` does Server-Sent Events framing (WHATWG "event stream" rules): lines end
  in LF, CRLF or CR; a blank line ends an event; lines starting with ``:`` are comments (servers
  send them as keep-alive pings); several ``data:`` lines join with a newline.
* :func:`classify` reads one event's payload as a chat-completion chunk and says what it means
  for the benchmark: a token chunk, the usage summary, an error the server put inside its
  ``200 OK`` stream, the ``[DONE]`` sentinel, or nothing of interest.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping

_BOM = b"\xef\xbb\xbf"


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """One dispatched SSE event: its type (``message`` unless an ``event:`` line said otherwise) and data."""

    data: str
    event: str = "message"


class EventDecoder:
    """Incremental SSE framing: :meth:`feed` bytes as they arrive, :meth:`close` at end of stream."""

    def __init__(self) -> None:
        self._buffer = b""
        # A chunk ending in CR cannot be classified yet: the next chunk may start with the LF of a CRLF.
        self._pending_cr = False
        self._at_start = True

    def feed(self, chunk: bytes) -> list[Event]:
        """Add bytes; return the events that are now complete, in order."""
        if self._at_start and chunk:
            # The spec allows one leading BOM; it must not become part of the first field name.
            self._buffer += chunk
            if len(self._buffer) < len(_BOM) and _BOM.startswith(self._buffer):
                return []
            self._at_start = False
            chunk, self._buffer = self._buffer.removeprefix(_BOM), b""
        if self._pending_cr:
            chunk = b"\r" + chunk
            self._pending_cr = False
        if chunk.endswith(b"\r"):
            chunk = chunk[:-1]
            self._pending_cr = True
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        self._buffer += chunk
        if b"\n\n" not in self._buffer:
            return []
        *blocks, self._buffer = self._buffer.split(b"\n\n")
        events: list[Event] = []
        for block in blocks:
            event = _parse_block(block)
            if event is not None:
                events.append(event)
        return events

    def close(self) -> list[Event]:
        """End of stream: return an event left without its closing blank line, if any.

        The spec discards such an event, but several servers omit the final blank line; the
        caller still validates the payload (a cut-off JSON object fails to parse there).
        """
        block = self._buffer
        self._buffer = b""
        self._pending_cr = False
        event = _parse_block(block.rstrip(b"\n"))
        return [] if event is None else [event]


def _parse_block(block: bytes) -> Event | None:
    if not block:
        return None
    data: list[str] = []
    event_type = "message"
    for raw_line in block.split(b"\n"):
        if not raw_line or raw_line.startswith(b":"):
            continue
        line = raw_line.decode("utf-8", errors="replace")
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
        elif field == "event":
            event_type = value
        # "id" and "retry" only matter to a reconnecting browser client.
    if not data:
        return None
    return Event(data="\n".join(data), event=event_type)


class Kind(enum.Enum):
    """What one event means for a benchmark request."""

    TOKEN = "token"  # a chunk that carries generated output (content, reasoning or tool-call text)
    USAGE = "usage"  # the usage summary (with stream_options.include_usage)
    ERROR = "error"  # the server reported a failure inside the stream
    DONE = "done"  # the "[DONE]" sentinel: the stream ended normally
    MALFORMED = "malformed"  # not JSON, or not an object
    OTHER = "other"  # e.g. the role-only preamble or an empty finish chunk: no output token


@dataclasses.dataclass(frozen=True, slots=True)
class Item:
    """The meaning of one event; ``usage`` fields and ``message`` are filled only where they apply."""

    kind: Kind
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    message: str = ""


DONE = Item(Kind.DONE)
TOKEN = Item(Kind.TOKEN)
OTHER = Item(Kind.OTHER)

_OUTPUT_FIELDS = ("content", "reasoning_content", "reasoning", "tool_calls")


def classify(event: Event) -> list[Item]:
    """Say what one event means; a chunk that carries a token and usage yields both, token first."""
    data = event.data.strip()
    if data == "[DONE]":
        return [DONE]
    try:
        payload: object = json.loads(data)
    except json.JSONDecodeError:
        return [Item(Kind.MALFORMED, message=f"event data is not JSON: {data[:120]!r}")]
    if not isinstance(payload, dict):
        return [Item(Kind.MALFORMED, message=f"event data is not a JSON object: {data[:120]!r}")]
    if event.event == "error" or payload.get("error") is not None or payload.get("object") == "error":
        return [Item(Kind.ERROR, message=_error_message(payload))]
    items: list[Item] = []
    choices = payload.get("choices")
    if isinstance(choices, list) and choices and _carries_output(choices[0]):
        items.append(TOKEN)
    usage = payload.get("usage")
    if isinstance(usage, dict):
        items.append(
            Item(
                Kind.USAGE,
                prompt_tokens=_int_or_none(usage.get("prompt_tokens")),
                completion_tokens=_int_or_none(usage.get("completion_tokens")),
            )
        )
    return items or [OTHER]


def _carries_output(choice: object) -> bool:
    # vLLM's own benchmark counts any chunk with choices, including the role-only preamble. vLLM
    # sends that preamble together with the first token, but a server that sends it at once would
    # make TTFT read ~0 ms, so we count only chunks that carry generated output.
    if not isinstance(choice, dict):
        return False
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        # /v1/completions-style chunk: {"text": ...}
        return bool(choice.get("text"))
    return any(delta.get(name) for name in _OUTPUT_FIELDS)


def _error_message(payload: Mapping[str, object]) -> str:
    error = payload.get("error")
    if isinstance(error, dict):
        return str(error.get("message") or error)
    if isinstance(error, str):
        return error
    return str(payload.get("message") or payload)


def _int_or_none(value: object) -> int | None:
    # bool is an int subclass; a server sending true/false for a count is broken, not "1 token".
    return value if isinstance(value, int) and not isinstance(value, bool) else None
