"""The simulator serves what deployctl's metric tables say each engine serves, role by role.

Dashboards, alerts and the canary's analysis read the engines' /metrics through the tables
(orchestrator/engines/metric_table.py), and the e2e tests that exercise them run against the
simulator, so each of its engine modes must answer every role the table of that engine's newest
version names (e2e/test_real_vllm.py holds vLLM's table to the real server).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import metricshelpers
import pytest

from orchestrator.engines import metric_table
from orchestrator.gate import exposition

CHAT = {"model": "m", "messages": [{"role": "user", "content": "one two three"}], "max_tokens": 4, "stream": True}


def post(url: str, body: dict[str, object]) -> int:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            answer.read()
            return int(answer.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return str(answer.read().decode())


@pytest.mark.parametrize("engine", ["vllm", "sglang", "tgi", "trtllm"])
def test_each_engine_mode_answers_every_role_of_its_newest_table(simulator: Callable[..., Any], engine: str) -> None:
    # Half the requests fail (seeded): counters of failures appear only once one was recorded.
    sim = simulator(model="m", ttft_ms=5, itl_ms=2, engine=engine, failure_rate=50, seed=3)
    statuses = [post(f"{sim.url}/v1/chat/completions", CHAT) for _ in range(8)]
    assert 200 in statuses and 500 in statuses, statuses
    table = metric_table.table(engine, metric_table.versions(engine)[-1])
    text = scrape(sim.url + table.path)
    assert metricshelpers.unanswered(table, text) == []


def test_the_vllm_counters_split_answers_as_the_roles_matchers_expect(simulator: Callable[..., Any]) -> None:
    sim = simulator(model="m", ttft_ms=5, itl_ms=2)
    assert post(f"{sim.url}/v1/chat/completions", CHAT) == 200
    assert post(f"{sim.url}/v1/chat/completions", {**CHAT, "stream": False}) == 200
    assert post(f"{sim.url}/v1/chat/completions", {**CHAT, "model": "other"}) == 404
    table = metric_table.table("vllm", metric_table.versions("vllm")[-1])
    families = exposition.parse(scrape(sim.url + table.path))
    statuses = {(s.labels["handler"], s.labels["status"]): s.value for s in families["http_requests_total"].samples}
    # Two answered and one client error: succeeded and failed (5xx) leave the 4xx out.
    assert statuses[("/v1/chat/completions", "2xx")] == 2 and statuses[("/v1/chat/completions", "4xx")] == 1
    e2e = {s.name: s.value for s in families["vllm:e2e_request_latency_seconds"].samples if "le" not in s.labels}
    assert e2e["vllm:e2e_request_latency_seconds_count"] == 2
    itl = {s.name: s.value for s in families["vllm:inter_token_latency_seconds"].samples if "le" not in s.labels}
    assert itl["vllm:inter_token_latency_seconds_count"] == 3  # the stream's gaps between its four tokens
