"""`deployctl bench` typed as `vllm bench serve` is typed: its flag names, its API key, its result file.

The CLI runs through click's CliRunner against a few lines of ``http.server`` on 127.0.0.1 that,
like ``vllm serve --api-key``, answers /v1/* only with the right Bearer token and /health always;
it serves both /v1/chat/completions and /v1/completions and records what each request carried.
Header handling below the CLI is checked with ``httpx.MockTransport``.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import pathlib
from collections.abc import Iterator
from typing import Any

import click.testing
import httpx
import localserver
import pytest
from streamfakes import DONE_EVENT, ROLE_EVENT, FakeClock, Script, event, token_event, usage_event

from orchestrator import http as http_mod
from orchestrator.cli import app as cli
from orchestrator.errors import ExitCode
from orchestrator.gate import bench, metrics, vllm_result, workload

KEY = "sk-test-" + "k3y" * 8
OUTPUT_TOKENS = 3
SEEN: list[dict[str, Any]] = []


class _KeyedVllm(localserver.QuietHandler):
    def _authorized(self) -> bool:
        if self.headers.get("Authorization") == f"Bearer {KEY}":
            return True
        self.send_json(401, {"error": "Unauthorized"})  # vLLM's answer without the key
        return False

    def do_GET(self) -> None:
        if self.path == "/health":
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self._authorized():
            self.send_json(200, {"object": "list", "data": [{"id": "org/served-model", "object": "model"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if not self._authorized():
            return
        SEEN.append({"path": self.path, "body": body})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if self.path == "/v1/completions":
            text = event({"object": "text_completion", "choices": [{"index": 0, "text": "x"}]})
            chunks = [text] * OUTPUT_TOKENS
        else:
            chunks = [ROLE_EVENT + token_event()] + [token_event()] * (OUTPUT_TOKENS - 1)
        for chunk in [*chunks, usage_event(10, OUTPUT_TOKENS), DONE_EVENT]:
            self.wfile.write(chunk)
            self.wfile.flush()


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with localserver.serve(_KeyedVllm) as url:
        yield url


def invoke(args: list[str], env: dict[str, str] | None = None) -> click.testing.Result:
    # A key in the caller's environment must not decide a test about keys.
    full_env: dict[str, str | None] = {"OPENAI_API_KEY": None, "DEPLOYCTL_BENCH_API_KEY": None, **(env or {})}
    return click.testing.CliRunner().invoke(cli.main, args, env=full_env, prog_name="deployctl")


VLLM_LINE = [
    "--dataset-name",
    "random",
    "--random-input-len",
    "8",
    "--random-output-len",
    str(OUTPUT_TOKENS),
    "--num-prompts",
    "5",
    "--max-concurrency",
    "2",
    "--num-warmups",
    "1",
    "--seed",
    "3",
    "--request-rate",
    "inf",
    "--ignore-eos",
    "--timeout",
    "10",
]


# --- flag names ------------------------------------------------------------------------------------


def test_a_vllm_bench_serve_command_line_runs_with_the_same_meaning(server: str) -> None:
    args = ["bench", "--base-url", server, "--model", "org/served-model", "--api-key", KEY, *VLLM_LINE]
    result = invoke([*args, "--output", "json"])
    assert result.exit_code == ExitCode.OK, result.output
    config = workload.BenchConfig.model_validate(json.loads(result.stdout)["config"])
    assert config == workload.BenchConfig(
        url=server,
        model="org/served-model",
        concurrency=2,
        requests=5,
        input_tokens=8,
        output_tokens=OUTPUT_TOKENS,
        warmup=1,
        seed=3,
        request_rate=None,  # vLLM's inf: everything at once under --max-concurrency
        timeout=10.0,
    )


def test_help_shows_both_spellings_of_each_aliased_option() -> None:
    text = invoke(["bench", "--help"]).stdout
    for ours, theirs in [
        ("--url", "--base-url"),
        ("--concurrency", "--max-concurrency"),
        ("--requests", "--num-prompts"),
        ("--input-tokens", "--random-input-len"),
        ("--output-tokens", "--random-output-len"),
        ("--warmup", "--num-warmups"),
    ]:
        assert f"{ours}, {theirs}" in text


@pytest.mark.parametrize("dataset", ["sharegpt", "hf"])
def test_a_dataset_other_than_random_is_refused_naming_the_flag_and_the_way_out(server: str, dataset: str) -> None:
    result = invoke(["bench", "--base-url", server, "--model", "m", "--dataset-name", dataset])
    assert result.exit_code == ExitCode.USAGE
    assert "--dataset-name" in result.stderr and "random" in result.stderr and "vllm bench serve" in result.stderr
    assert "Traceback" not in result.output


def test_the_completions_endpoint_sends_a_plain_prompt_with_max_tokens(server: str) -> None:
    SEEN.clear()
    args = ["bench", "--base-url", server, "--model", "org/served-model", "--endpoint", "/v1/completions"]
    result = invoke([*args, *VLLM_LINE], env={"OPENAI_API_KEY": KEY})
    assert result.exit_code == ExitCode.OK, result.output
    assert {s["path"] for s in SEEN} == {"/v1/completions"}
    body = SEEN[-1]["body"]
    assert "messages" not in body and isinstance(body["prompt"], str)
    assert body["max_tokens"] == OUTPUT_TOKENS and body["ignore_eos"] is True


def test_an_endpoint_we_do_not_speak_is_refused(server: str) -> None:
    result = invoke(["bench", "--base-url", server, "--model", "m", "--endpoint", "/v1/embeddings"])
    assert result.exit_code == ExitCode.USAGE and "--endpoint" in result.stderr


def test_without_model_the_first_model_the_server_lists_is_benchmarked(server: str) -> None:
    result = invoke(["bench", "--base-url", server, "--api-key", KEY, *VLLM_LINE, "--output", "json"])
    assert result.exit_code == ExitCode.OK, result.output
    assert json.loads(result.stdout)["config"]["model"] == "org/served-model"


# --- the API key -------------------------------------------------------------------------------------


def test_openai_api_key_from_the_environment_is_sent_as_a_bearer_token(server: str) -> None:
    args = ["bench", "--base-url", server, "--model", "org/served-model", *VLLM_LINE]
    result = invoke(args, env={"OPENAI_API_KEY": KEY})
    assert result.exit_code == ExitCode.OK, result.output


def test_without_the_key_the_run_exits_5_saying_unauthorized_and_never_shows_a_key(server: str) -> None:
    args = ["bench", "--base-url", server, "--model", "org/served-model", *VLLM_LINE]
    result = invoke([*args, "--api-key", "wrong-" + KEY])
    assert result.exit_code == ExitCode.ROLLOUT_FAILED, result.output
    assert "401" in result.stderr and "API key" in result.stderr
    assert KEY not in result.output


def test_without_model_or_key_the_model_list_refusal_names_the_fix(server: str) -> None:
    result = invoke(["bench", "--base-url", server, *VLLM_LINE])
    assert result.exit_code == ExitCode.ROLLOUT_FAILED
    assert "--api-key" in result.stderr and "OPENAI_API_KEY" in result.stderr


def _answer(request: httpx.Request) -> httpx.Response:
    seen_headers.append(dict(request.headers))
    stream = [ROLE_EVENT + token_event(), token_event(), usage_event(4, 2), DONE_EVENT]
    return httpx.Response(200, stream=Script(FakeClock(), stream), headers={"Content-Type": "text/event-stream"})


seen_headers: list[dict[str, str]] = []


@pytest.mark.parametrize("key, expected", [(KEY, f"Bearer {KEY}"), (None, None)])
def test_the_stream_client_sends_authorization_only_with_a_key(key: str | None, expected: str | None) -> None:
    seen_headers.clear()
    config = workload.BenchConfig(url="http://infer:8000", model="m", concurrency=1, requests=2, warmup=0)
    report = asyncio.run(bench.run_async(config, transport=httpx.MockTransport(_answer), api_key=key))
    assert report.completed == 2
    # The measured requests and the prompt-sizing probes before them alike.
    assert len(seen_headers) > 2 and {h.get("authorization") for h in seen_headers} == {expected}
    assert KEY not in report.to_json()


def test_a_401_counts_as_unauthorized_and_as_not_measured() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": "Unauthorized"})

    config = workload.BenchConfig(url="http://infer:8000", model="m", concurrency=1, requests=2, warmup=0)
    report = asyncio.run(bench.run_async(config, transport=httpx.MockTransport(refuse)))
    assert report.failures == {metrics.FailureKind.UNAUTHORIZED.value: 2}
    problem = report.measurement_problem()
    assert problem is not None and "unauthorized" in problem


def test_served_models_sends_the_key_and_health_does_not() -> None:
    headers: dict[str, str | None] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        headers[request.url.path] = request.headers.get("authorization")
        return httpx.Response(200, json={"data": [{"id": "m"}]})

    transport = httpx.MockTransport(handler)
    assert http_mod.served_models("http://infer:8000", transport=transport, api_key=KEY) == ["m"]
    assert http_mod.check_health("http://infer:8000", transport=transport).ok
    assert headers == {"/v1/models": f"Bearer {KEY}", "/health": None}


# --- --save-result -------------------------------------------------------------------------------


def test_save_result_writes_vllms_keys_under_vllms_file_name(
    server: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # vLLM's default place: the current directory
    args = ["bench", "--base-url", server, "--model", "org/served-model", "--api-key", KEY, *VLLM_LINE]
    result = invoke([*args, "--save-result", "--metadata", "tp=1"])
    assert result.exit_code == ExitCode.OK, result.output
    [written] = list(tmp_path.glob("openai-chat-infqps-concurrency2-served-model-*.json"))
    doc = json.loads(written.read_text())
    for key in ("mean_ttft_ms", "median_tpot_ms", "p99_itl_ms", "p99_ttft_ms", "request_throughput"):
        assert isinstance(doc[key], float), key
    assert doc["output_throughput"] > 0 and doc["completed"] == 5 and doc["failed"] == 0
    assert doc["num_prompts"] == 5 and doc["max_concurrency"] == 2 and doc["request_rate"] == "inf"
    assert doc["backend"] == "openai-chat" and doc["model_id"] == "org/served-model" and doc["tp"] == "1"
    datetime.datetime.strptime(doc["date"], "%Y%m%d-%H%M%S")
    assert written.name.endswith(f"-{doc['date']}.json")
    assert KEY not in written.read_text() and KEY not in result.output


def test_result_dir_and_filename_place_the_file_like_vllm(server: str, tmp_path: pathlib.Path) -> None:
    args = ["bench", "--base-url", server, "--model", "org/served-model", "--api-key", KEY, *VLLM_LINE]
    out = tmp_path / "results" / "nested"
    result = invoke([*args, "--save-result", "--result-dir", str(out), "--result-filename", "run.json"])
    assert result.exit_code == ExitCode.OK, result.output
    assert json.loads((out / "run.json").read_text())["completed"] == 5
    assert f"wrote {out / 'run.json'}" in result.stderr


def test_the_default_name_carries_label_rate_and_concurrency_as_vllm_prints_them() -> None:
    config = workload.BenchConfig(url="http://x:1", model="meta/Llama-3", concurrency=8, request_rate=10)
    now = datetime.datetime(2026, 1, 2, 3, 4, 5)
    path = vllm_result.result_path(config, label=None, now=now, result_dir=None, result_filename=None)
    assert path.name == "openai-chat-10.0qps-concurrency8-Llama-3-20260102-030405.json"
    labelled = vllm_result.result_path(config, label="nightly", now=now, result_dir="out", result_filename=None)
    assert labelled == pathlib.Path("out/nightly-10.0qps-concurrency8-Llama-3-20260102-030405.json")


def test_result_placement_without_save_result_is_refused(server: str) -> None:
    result = invoke(["bench", "--base-url", server, "--model", "m", "--result-dir", "x"])
    assert result.exit_code == ExitCode.USAGE
    assert "--result-dir" in result.stderr and "--save-result" in result.stderr
