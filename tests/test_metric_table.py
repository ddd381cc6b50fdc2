"""The engines' metric tables: each shipped table answers every role with a family of the right kind.

The exposition parser is held to text written the way prometheus_client (vLLM, SGLang, TensorRT-LLM)
and metrics-exporter-prometheus (TGI) write it; vLLM 0.32.0's table is held to the real server's own
/metrics in e2e/test_real_vllm.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from orchestrator.engines import metric_table
from orchestrator.gate import exposition

ENGINES = ("vllm", "sglang", "tgi", "trtllm")
SHIPPED = [(engine, version) for engine in ENGINES for version in metric_table.versions(engine)]


def test_every_engine_has_a_table() -> None:
    assert {engine for engine, _ in SHIPPED} == set(ENGINES)


@pytest.mark.parametrize("engine, version", SHIPPED)
def test_each_shipped_table_answers_every_role_with_the_right_kind(engine: str, version: str) -> None:
    table = metric_table.table(engine, version)
    assert (table.engine, table.version) == (engine, version)
    assert metric_table.problems(table) == []
    assert table.source, "a table says where its names come from"
    # Latency and success are what a canary judges: every engine answers them.
    for role in ("e2e", "succeeded"):
        assert table.role(role) is not None, role


def test_vllm_names_follow_the_renames() -> None:
    table = metric_table.table("vllm", "0.32.0")
    itl, kv = table.role("itl"), table.role("kv_usage")
    assert itl is not None and itl.family.name == "vllm:inter_token_latency_seconds"
    assert kv is not None and kv.family.name == "vllm:kv_cache_usage_perc"
    failed = table.role("failed")
    assert failed is not None
    # A client's abort never reaches request_success_total (vllm#31503): 5xx answers are counted instead.
    assert failed.selector('namespace="ns"') == 'http_requests_total{handler=~"/v1/.*",status="5xx",namespace="ns"}'
    ttft = table.role("ttft")
    assert ttft is not None and ttft.selector(suffix="_bucket") == "vllm:time_to_first_token_seconds_bucket{}"
    assert "vllm:time_to_first_token_seconds_bucket" in table.names()
    assert "vllm:time_to_first_token_seconds" not in table.names()  # a histogram is queried by its series


def test_an_unknown_version_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"no metric table for vllm 0\.1\.0 \(known: 0\.15\.1, 0\.19\.0, 0\.32\.0"):
        metric_table.table("vllm", "0.1.0")
    with pytest.raises(KeyError, match="unknown metric role"):
        metric_table.table("vllm", "0.32.0").role("latency")


def broken(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(json.dumps(_raw("vllm", "0.32.0")))
    for key, value in changes.items():
        data["roles"][key] = value
    return data


def _raw(engine: str, version: str) -> dict[str, Any]:
    from importlib import resources

    path = resources.files("orchestrator").joinpath(f"data/engine_metrics/{engine}/{version}.json")
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


@pytest.mark.parametrize(
    "changes, words",
    [
        (
            {"ttft": {"family": "vllm:num_requests_waiting"}},
            "role ttft needs a histogram, vllm:num_requests_waiting is a gauge",
        ),
        ({"failed": {"family": "http_requests_total", "matchers": 'code="500"'}}, "matches on 'code'"),
        ({"latency": None}, "role latency is not one deployctl knows"),
    ],
)
def test_a_wrong_table_is_named(changes: dict[str, Any], words: str) -> None:
    problems = metric_table.problems(metric_table.parse(broken(**changes)))
    assert any(words in p for p in problems), problems


def test_a_role_on_a_family_the_table_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match="not one of the table's families"):
        metric_table.parse(broken(ttft={"family": "vllm:time_to_first_token"}))
    data = broken()
    del data["roles"]["kv_usage"]
    assert metric_table.problems(metric_table.parse(data)) == [
        "role kv_usage is missing (write null where the engine has no such metric)"
    ]


PROMETHEUS_CLIENT = """\
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 3.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="m"} 0.0
# HELP vllm:request_success_created Count of successfully processed requests.
# TYPE vllm:request_success_created gauge
vllm:request_success_created{engine="0",finished_reason="stop",model_name="m"} 1.7e+09
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="m"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 3.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 3.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.25
# TYPE http_requests_total counter
http_requests_total{handler="/v1/chat/completions",method="POST",status="2xx"} 3.0
"""

METRICS_RS = """\
# TYPE tgi_request_failure counter
tgi_request_failure{err="validation"} 2

# TYPE tgi_queue_size gauge
tgi_queue_size 0

# TYPE tgi_request_duration histogram
tgi_request_duration_bucket{le="0.00015"} 0
tgi_request_duration_bucket{le="+Inf"} 4
tgi_request_duration_sum 1.5
tgi_request_duration_count 4
"""


def test_prometheus_client_text_is_read_into_families() -> None:
    families = exposition.parse(PROMETHEUS_CLIENT)
    success = families["vllm:request_success_total"]
    assert success.kind == "counter" and len(success.samples) == 2
    assert success.label_names() == ("engine", "finished_reason", "model_name")
    ttft = families["vllm:time_to_first_token_seconds"]
    assert ttft.kind == "histogram" and len(ttft.samples) == 4
    assert ttft.label_names() == ("engine", "model_name")  # le is the bucket, not a label of the family
    inf = next(s for s in ttft.samples if s.labels.get("le") == "+Inf")
    assert inf.value == 3.0
    assert families["http_requests_total"].samples[0].labels["handler"] == "/v1/chat/completions"


def test_metrics_rs_text_is_read_into_families() -> None:
    families = exposition.parse(METRICS_RS)
    assert families["tgi_request_failure"].samples[0].value == 2
    assert families["tgi_queue_size"].kind == "gauge"
    assert families["tgi_request_duration"].kind == "histogram" and len(families["tgi_request_duration"].samples) == 4


def test_escaped_label_values_are_read() -> None:
    families = exposition.parse('# TYPE x gauge\nx{path="a\\"b\\\\c",other="d"} NaN\n')
    (sample,) = families["x"].samples
    assert sample.labels == {"path": 'a"b\\c', "other": "d"}


@pytest.mark.parametrize(
    "text, words",
    [
        ("# TYPE x gauge\nx{a=b} 1", "line 2: cannot read the labels"),
        ("x one", "line 1: 'one' is not a number"),
        ("{} 1", "line 1 is not a sample"),
    ],
)
def test_text_that_is_not_the_format_names_the_line(text: str, words: str) -> None:
    with pytest.raises(exposition.ExpositionError, match=re.escape(words)):
        exposition.parse(text)


def test_matchers_are_read_whatever_their_operator_and_value() -> None:
    labels = metric_table.matcher_labels('err!~"validation|input",handler=~"/v1/(a,b)",status!="5xx", x="y"')
    assert labels == ["err", "handler", "status", "x"]
    with pytest.raises(ValueError, match="not PromQL label matchers"):
        metric_table.matcher_labels("status=5xx")


def test_a_commit_named_version_sorts_before_the_releases() -> None:
    assert metric_table.versions("trtllm") == ("main-00209af",)
    assert list(metric_table.versions("vllm")) == ["0.15.1", "0.19.0", "0.32.0", "0.33.0"]


def test_timestamps_exemplars_and_braces_in_values_are_read() -> None:
    text = '# TYPE h histogram\nh_bucket{le="1",path="a}b"} 5 1700000000000 # {trace_id="t"} 0.5\n'
    (sample,) = exposition.parse(text)["h"].samples
    assert sample.labels == {"le": "1", "path": "a}b"} and sample.value == 5
