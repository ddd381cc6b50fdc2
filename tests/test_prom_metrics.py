"""The canary's metrics source `prometheus`: the query it sends, how an answer becomes per-pod scrapes
the analysis reads, and what of a bad answer reaches a message (e2e: a real Prometheus scraping the
simulator and the real vLLM, e2e/test_pod_monitor_cluster.py and e2e/test_real_vllm.py)."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from test_canary_profile import with_rollout
from test_canary_workload import CANARY

from orchestrator import errors, http
from orchestrator.apply import prom_metrics
from orchestrator.apply.pod_metrics import Target
from orchestrator.engines import metric_table
from orchestrator.gate import live_metrics
from orchestrator.profile import model as profile

TABLE = metric_table.table("vllm", "0.32.0")
TARGETS = {"llm-7d9-abc": Target("stable", 8000), "llm-canary-5f-xyz": Target("canary", 8001)}


def test_the_query_asks_for_the_analysed_series_and_up_of_the_listed_pods_within_the_release() -> None:
    query = prom_metrics.query(TABLE, "prod", "llm", list(TARGETS))
    assert 'namespace="prod"' in query and 'deployctl_dev_release="llm"' in query
    names = re.search(r'__name__=~"([^"]*)"', query)
    pods = re.search(r'pod=~"([^"]*)"', query)
    assert names and pods, query
    # A PromQL string's \\ is one backslash: the regex Prometheus runs is the unescaped one.
    name_regex = re.compile(names.group(1).replace("\\\\", "\\"))
    for wanted in ("up", "vllm:time_to_first_token_seconds_bucket", "http_requests_total", "vllm:num_requests_waiting"):
        assert name_regex.fullmatch(wanted), wanted
    assert not name_regex.fullmatch("vllm:time_to_first_token_seconds_bucketX")
    pod_regex = re.compile(pods.group(1).replace("\\\\", "\\"))
    assert all(pod_regex.fullmatch(pod) for pod in TARGETS) and not pod_regex.fullmatch("llm-7d9-abcd")


def test_every_analysed_role_has_its_stored_names() -> None:
    names = prom_metrics.series_names(TABLE)
    for role in ("ttft", "e2e"):
        series = TABLE.role(role)
        assert series is not None and series.family.name + "_bucket" in names
    assert "vllm:prompt_tokens_total" in names and "vllm:kv_cache_usage_perc" in names


def _series(pod: str, name: str, value: float, **labels: str) -> tuple[dict[str, str], float]:
    base = {"__name__": name, "pod": pod, "namespace": "prod", "job": "prod/llm", "instance": "10.0.0.1:8000"}
    return {**base, **labels}, value


def test_an_answer_becomes_what_each_pod_would_have_said() -> None:
    stable, canary = list(TARGETS)
    ok = {"handler": "/v1/chat/completions", "status": "2xx", "method": "POST"}
    vector = [
        _series(stable, "up", 1),
        _series(stable, "http_requests_total", 40, **ok),
        # The same pod scraped by a second job that also copies a pod label: counted once.
        _series(stable, "http_requests_total", 40, **ok, job="another-scrape", pod_template_hash="7d9"),
        _series(canary, "up", 1),
        _series(canary, "http_requests_total", 10, **ok),
        _series("someone-else", "up", 1),
        _series("someone-else", "http_requests_total", 999, **ok),
    ]
    answered = prom_metrics.split(vector, TARGETS, prom_metrics.series_labels(TABLE))
    assert answered.unanswered == {}
    window = live_metrics.window(TABLE, [], answered.scrapes, "stable")
    assert window.requests == 40  # counted once, and not the other pod's
    assert live_metrics.window(TABLE, [], answered.scrapes, "canary").requests == 10
    assert {s.pod: s.track for s in answered.scrapes} == {stable: "stable", canary: "canary"}


def test_a_pod_prometheus_has_not_scraped_or_failed_to_scrape_is_left_out_and_named() -> None:
    stable, canary = list(TARGETS)
    vector = [_series(stable, "up", 0), _series(stable, "up", 1, job="x")]
    answered = prom_metrics.split(vector, TARGETS, prom_metrics.series_labels(TABLE))
    assert answered.scrapes == []
    assert "up 0" in answered.unanswered[stable] and "no scrape of it yet" in answered.unanswered[canary]


def test_an_engine_label_a_target_label_took_the_name_of_is_read_back_from_exported() -> None:
    # SGLang names its route `endpoint`; the operator gives every target `endpoint` (the port name),
    # and Prometheus keeps the engine's as `exported_endpoint`. Where nothing clashed, it is as served.
    table = metric_table.table("sglang", "0.5.23")
    stable, canary = list(TARGETS)
    ok, name = {"method": "POST", "status_code": "200"}, "sglang:http_responses_total"
    vector = [
        _series(stable, "up", 1),
        _series(stable, name, 12, endpoint="http", exported_endpoint="/v1/chat/completions", **ok),
        _series(stable, name, 99, endpoint="http", exported_endpoint="/health", **ok),
        _series(canary, "up", 1),
        _series(canary, name, 5, endpoint="/v1/completions", **ok),
    ]
    answered = prom_metrics.split(vector, TARGETS, prom_metrics.series_labels(table))
    assert live_metrics.window(table, [], answered.scrapes, "stable").requests == 12
    assert live_metrics.window(table, [], answered.scrapes, "canary").requests == 5


def _prometheus_profile(url: str, interval: str = "15s") -> str:
    rollout = CANARY + f"  metrics: {{source: prometheus, prometheusUrl: '{url}'}}\n"
    return with_rollout(rollout, monitoring={"podMonitor": {"enabled": True, "interval": interval}})


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://prom.internal:9090/admin#", "fragment"),
        ("http://prom.internal:9090/x?a=1", "query"),
        ("http://admin:pw@prom.internal:9090", "user information"),
    ],
)
def test_a_prometheus_url_that_could_reach_another_path_is_refused_at_validation(url: str, said: str) -> None:
    with pytest.raises(errors.InvalidProfile) as refused:
        profile.loads(_prometheus_profile(url), "canary.yaml")
    assert said in str(refused.value) and "prometheusUrl" in str(refused.value)
    assert "pw" not in str(refused.value).replace(url, "")


def test_a_podmonitor_interval_under_a_second_is_refused_with_the_prometheus_source() -> None:
    with pytest.raises(errors.InvalidProfile) as refused:
        profile.loads(_prometheus_profile("http://prom.internal:9090", interval="500ms"), "canary.yaml")
    assert "monitoring.podMonitor.interval" in str(refused.value) and "at least 1s" in str(refused.value)


def test_the_prometheus_host_must_be_on_the_operators_allow_list() -> None:
    prof = profile.loads(_prometheus_profile("http://prom.monitoring.svc:9090"), "canary.yaml")
    with pytest.raises(errors.InvalidProfile) as refused:
        prom_metrics.check_source(prof)
    assert "--allow-gate-host prom.monitoring.svc" in refused.value.message, refused.value.message
    assert "Nothing was written" in refused.value.message
    prom_metrics.check_source(prof, ("prom.monitoring.svc",))
    prom_metrics.check_source(profile.loads(with_rollout(CANARY), "pods.yaml"))  # source pods: nothing to allow


def _answer(status: int, body: bytes) -> httpx.MockTransport:
    return httpx.MockTransport(lambda request: httpx.Response(status, content=body))


def test_the_vector_is_read_with_its_labels_and_values() -> None:
    body = {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": {"a": "b"}, "value": [1, "2.5"]}]},
    }
    found = http.prometheus_vector("http://prom:9090", "up", transport=_answer(200, json.dumps(body).encode()))
    assert found == [({"a": "b"}, 2.5)]


@pytest.mark.parametrize(
    ("status", "body", "said", "hidden"),
    [
        (200, b"<html>internal wiki: db password hunter2</html>", "not the Prometheus API's JSON", "hunter2"),
        (401, b'{"token": "hunter2"}', "HTTP 401", "hunter2"),
        (400, b'{"status": "error", "errorType": "bad_data", "error": "parse error"}', "bad_data: parse error", ""),
        (200, b'{"status": "success", "data": {"resultType": "matrix", "result": []}}', "not an instant vector", ""),
    ],
)
def test_an_answer_that_is_not_prometheus_json_is_never_quoted(
    status: int, body: bytes, said: str, hidden: str
) -> None:
    # The URL is a profile author's: a page behind it must not be copied into a record or a status.
    with pytest.raises(errors.EndpointError) as raised:
        http.prometheus_vector("http://somewhere:80", "up", transport=_answer(status, body))
    assert said in raised.value.message
    assert not hidden or hidden not in raised.value.message


def test_an_unreachable_prometheus_leaves_every_pod_unanswered_with_the_reason() -> None:
    reader = prom_metrics.Reader("http://127.0.0.1:9", TABLE, "prod", "llm", TARGETS)
    with reader:
        round_ = reader.read(timeout=2)
    assert round_.scrapes == [] and set(round_.unanswered) == set(TARGETS)
    assert all("Prometheus did not answer" in why for why in round_.unanswered.values())
