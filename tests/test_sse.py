"""SSE framing and chat-chunk classification, on every chunk boundary a network can produce."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence

import hypothesis
import hypothesis.strategies as st
import pytest

from orchestrator.gate import sse


def data(obj: object) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


def token(text: str) -> dict[str, object]:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": text}}],
    }


ROLE = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
USAGE = {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}}

# What vLLM sends for a 3-token answer, with a keep-alive comment and a multi-byte token.
VLLM_STREAM = (
    b": ping\n\n"
    + data(ROLE)
    + data(token("Hé"))
    + data(token(" 日本"))
    + data({"choices": [{"index": 0, "delta": {"content": "!"}, "finish_reason": "length"}]})
    + data(USAGE)
    + b"data: [DONE]\n\n"
)


def decode(chunks: Sequence[bytes]) -> list[sse.Event]:
    decoder = sse.EventDecoder()
    events: list[sse.Event] = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    return events + decoder.close()


def splits(blob: bytes, cuts: Sequence[int]) -> list[bytes]:
    edges = [0, *sorted(cuts), len(blob)]
    return [blob[a:b] for a, b in itertools.pairwise(edges)]


def kinds(events: Sequence[sse.Event]) -> list[sse.Kind]:
    return [item.kind for event in events for item in sse.classify(event)]


def test_whole_vllm_stream_yields_role_tokens_usage_done() -> None:
    events = decode([VLLM_STREAM])
    assert kinds(events) == [
        sse.Kind.OTHER,
        sse.Kind.TOKEN,
        sse.Kind.TOKEN,
        sse.Kind.TOKEN,
        sse.Kind.USAGE,
        sse.Kind.DONE,
    ]
    assert json.loads(events[2].data)["choices"][0]["delta"]["content"] == " 日本"


def test_one_split_at_every_byte_gives_the_same_events() -> None:
    expected = decode([VLLM_STREAM])
    for cut in range(1, len(VLLM_STREAM)):
        assert decode(splits(VLLM_STREAM, [cut])) == expected, cut


def test_two_splits_at_every_pair_of_bytes_give_the_same_events() -> None:
    expected = decode([VLLM_STREAM])
    for first in range(1, len(VLLM_STREAM)):
        for second in range(first, len(VLLM_STREAM), 7):  # every 7th second cut keeps this under a second
            assert decode(splits(VLLM_STREAM, [first, second])) == expected, (first, second)


def test_byte_by_byte_gives_the_same_events() -> None:
    assert decode([bytes([b]) for b in VLLM_STREAM]) == decode([VLLM_STREAM])


@hypothesis.given(st.lists(st.integers(min_value=1, max_value=len(VLLM_STREAM) - 1), max_size=12))
def test_any_set_of_splits_gives_the_same_events(cuts: list[int]) -> None:
    assert decode(splits(VLLM_STREAM, cuts)) == decode([VLLM_STREAM])


@pytest.mark.parametrize("newline", [b"\r\n", b"\r"])
def test_crlf_and_cr_line_endings_split_anywhere(newline: bytes) -> None:
    blob = VLLM_STREAM.replace(b"\n", newline)
    expected = decode([VLLM_STREAM])
    for cut in range(1, len(blob)):
        assert decode(splits(blob, [cut])) == expected, cut


def test_comment_only_blocks_and_blank_runs_yield_nothing() -> None:
    assert decode([b": keep-alive\n\n\n\n: another\n: two lines\n\n"]) == []


def test_multiline_data_joins_with_newline_and_event_type_is_kept() -> None:
    events = decode([b"event: error\ndata: first\ndata:second\nid: 7\nretry: 10\n\n"])
    assert events == [sse.Event(data="first\nsecond", event="error")]


def test_leading_bom_is_dropped_even_when_split() -> None:
    blob = b"\xef\xbb\xbf" + data(token("a"))
    for cut in range(1, 4):
        assert decode(splits(blob, [cut])) == decode([data(token("a"))])


def test_event_without_final_blank_line_is_returned_at_close() -> None:
    decoder = sse.EventDecoder()
    assert decoder.feed(b"data: [DONE]") == []
    assert decoder.close() == [sse.Event("[DONE]")]
    assert decoder.close() == []


def test_role_only_preamble_is_not_a_token() -> None:
    assert kinds([sse.Event(json.dumps(ROLE))]) == [sse.Kind.OTHER]


@pytest.mark.parametrize(
    "delta",
    [
        {"content": "x"},
        {"reasoning_content": "think"},
        {"reasoning": "think"},
        {"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]},
    ],
)
def test_any_generated_output_is_a_token(delta: dict[str, object]) -> None:
    assert kinds([sse.Event(json.dumps({"choices": [{"delta": delta}]}))]) == [sse.Kind.TOKEN]


def test_completions_style_text_chunk_is_a_token() -> None:
    assert kinds([sse.Event(json.dumps({"choices": [{"text": "x"}]}))]) == [sse.Kind.TOKEN]


def test_empty_finish_chunk_is_not_a_token() -> None:
    chunk = {"choices": [{"delta": {}, "finish_reason": "length"}]}
    assert kinds([sse.Event(json.dumps(chunk))]) == [sse.Kind.OTHER]


def test_usage_counts_are_read_and_a_token_with_usage_yields_both() -> None:
    [usage] = sse.classify(sse.Event(json.dumps(USAGE)))
    assert (usage.kind, usage.prompt_tokens, usage.completion_tokens) == (sse.Kind.USAGE, 12, 3)
    both = sse.classify(sse.Event(json.dumps({**token("x"), "usage": USAGE["usage"]})))
    assert [i.kind for i in both] == [sse.Kind.TOKEN, sse.Kind.USAGE]


def test_usage_without_completion_tokens_or_with_nonsense_gives_none() -> None:
    [item] = sse.classify(sse.Event(json.dumps({"choices": [], "usage": {"prompt_tokens": True}})))
    assert (item.prompt_tokens, item.completion_tokens) == (None, None)


@pytest.mark.parametrize(
    "payload, message",
    [
        ({"error": {"message": "engine died", "type": "InternalServerError", "code": 500}}, "engine died"),
        ({"object": "error", "message": "out of KV cache", "code": 500}, "out of KV cache"),
        ({"error": "plain text"}, "plain text"),
    ],
)
def test_error_payloads_inside_a_200_stream_are_errors(payload: dict[str, object], message: str) -> None:
    [item] = sse.classify(sse.Event(json.dumps(payload)))
    assert item.kind is sse.Kind.ERROR
    assert item.message == message


def test_error_event_type_is_an_error_whatever_the_payload() -> None:
    [item] = sse.classify(sse.Event(json.dumps({"detail": "x"}), event="error"))
    assert item.kind is sse.Kind.ERROR


def test_null_error_field_is_not_an_error() -> None:
    assert kinds([sse.Event(json.dumps({**token("x"), "error": None}))]) == [sse.Kind.TOKEN]


@pytest.mark.parametrize("payload", ['{"choices": [', "[1, 2]", "not json"])
def test_malformed_payloads_are_reported(payload: str) -> None:
    [item] = sse.classify(sse.Event(payload))
    assert item.kind is sse.Kind.MALFORMED
    assert item.message


def test_done_sentinel_tolerates_surrounding_space() -> None:
    assert sse.classify(sse.Event(" [DONE] ")) == [sse.DONE]
