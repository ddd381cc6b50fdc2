"""`deployctl bench` end to end against a real local HTTP server: exit codes, URLs, bad input.

The server is a few lines of ``http.server`` on 127.0.0.1 that answers like vLLM: the model
``m`` streams a short answer, any other model gets vLLM's 404, any other path a plain 404, and the
model ``flaky`` fails request number 1 with a 500. Nothing of ours is patched: the command runs
as a user runs it, through click's CliRunner.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import click.testing
import localserver
import pytest
from streamfakes import DONE_EVENT, ROLE_EVENT, token_event, usage_event

from orchestrator.cli import app as cli
from orchestrator.errors import ExitCode
from orchestrator.gate import metrics, workload

CHAT_PATH = "/v1/chat/completions"
OUTPUT_TOKENS = 3


class _VllmLike(localserver.QuietHandler):
    streamed = 0  # answers begun, over every test of the module: a background run's progress

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != CHAT_PATH:
            self.send_json(404, {"detail": "Not Found"})
            return
        model = body["model"]
        nonce = str(body["messages"][0]["content"]).split(" ", 1)[0]
        if model not in ("m", "flaky"):
            self.send_json(
                404,
                {
                    "object": "error",
                    "message": f"The model `{model}` does not exist.",
                    "type": "NotFoundError",
                    "code": 404,
                },
            )
            return
        if model == "flaky" and re.fullmatch(r"[0-9a-f]+-1", nonce):  # measured request number 1
            self.send_json(500, {"object": "error", "message": "engine overloaded", "code": 500})
            return
        _VllmLike.streamed += 1
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()  # HTTP/1.0: the body ends when the connection closes
        chunks = [ROLE_EVENT + token_event()] + [token_event()] * (OUTPUT_TOKENS - 1)
        for chunk in [*chunks, usage_event(10, OUTPUT_TOKENS), DONE_EVENT]:
            self.wfile.write(chunk)
            self.wfile.flush()


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The base URL of a vLLM-like server on a free local port."""
    with localserver.serve(_VllmLike) as url:
        yield url


@pytest.fixture
def refusing() -> str:
    """The base URL of a local port nothing listens on: every connection is refused."""
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def bench(url: str, *extra: str, model: str = "m") -> click.testing.Result:
    args = ["bench", "--url", url, "--model", model, "--concurrency", "2", "--requests", "4"]
    args += ["--warmup", "1", "--input-tokens", "8", "--output-tokens", str(OUTPUT_TOKENS), "--timeout", "10"]
    return click.testing.CliRunner().invoke(cli.main, [*args, *extra], prog_name="deployctl")


def assert_no_traceback(result: click.testing.Result) -> None:
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"uncaught {type(result.exception).__name__}") from result.exception
    assert "Traceback" not in result.output


def reason(result: click.testing.Result) -> str:
    """The one-line reason on stderr."""
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


# --- exit codes ------------------------------------------------------------------------------------


def test_a_run_where_every_request_completes_exits_0_with_the_table(server: str) -> None:
    result = bench(server)
    assert result.exit_code == ExitCode.OK, result.output
    assert "Successful requests:" in result.stdout and "Failed requests:" in result.stdout
    assert "error:" not in result.stderr


def test_every_request_refused_exits_5_after_printing_the_table(refusing: str) -> None:
    result = bench(refusing)
    assert_no_traceback(result)
    assert result.exit_code == ExitCode.ROLLOUT_FAILED, result.output
    assert "Serving Benchmark Result" in result.stdout  # the report is still shown
    assert "nothing was measured" in reason(result) and "cannot connect" in reason(result)


def test_every_request_refused_without_warmup_exits_5(refusing: str) -> None:
    result = bench(refusing, "--warmup", "0")
    assert result.exit_code == ExitCode.ROLLOUT_FAILED, result.output
    assert "4 of 4 requests could not connect" in reason(result)


def test_a_wrong_model_exits_5_and_names_the_servers_404(server: str) -> None:
    result = bench(server, model="no-such-model")
    assert_no_traceback(result)
    assert result.exit_code == ExitCode.ROLLOUT_FAILED, result.output
    assert "Failed requests:" in result.stdout
    line = reason(result)
    assert "no request completed" in line and "HTTP 404" in line and "no-such-model` does not exist" in line


def test_an_error_rate_above_max_error_rate_exits_5(server: str) -> None:
    result = bench(server, "--warmup", "0", model="flaky")
    assert result.exit_code == ExitCode.ROLLOUT_FAILED, result.output
    line = reason(result)
    assert "error rate 0.2500 is above --max-error-rate 0" in line and "engine overloaded" in line


def test_an_error_rate_within_max_error_rate_exits_0(server: str) -> None:
    result = bench(server, "--warmup", "0", "--max-error-rate", "0.25", model="flaky")
    assert result.exit_code == ExitCode.OK, result.output
    assert re.search(r"^Failed requests: +1$", result.stdout, re.MULTILINE), result.stdout


def test_a_failed_run_with_json_output_keeps_stdout_one_report(refusing: str) -> None:
    result = bench(refusing, "--output", "json")
    assert result.exit_code == ExitCode.ROLLOUT_FAILED
    report = json.loads(result.stdout)  # the whole of stdout: the report, no error object after it
    assert report["completed"] == 0 and report["aborted"]
    assert "nothing was measured" in reason(result)


def test_a_failed_run_still_saves_its_report(refusing: str, tmp_path: pathlib.Path) -> None:
    result = bench(refusing, "--save", str(tmp_path / "report.json"))
    assert result.exit_code == ExitCode.ROLLOUT_FAILED
    assert json.loads((tmp_path / "report.json").read_text())["completed"] == 0
    assert (tmp_path / "report.html").exists()


# --- the URL -------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["/v1", "/v1/"])
def test_an_openai_style_v1_base_url_is_normalised(server: str, suffix: str) -> None:
    result = bench(server + suffix, "--output", "json")
    assert result.exit_code == ExitCode.OK, result.output
    report = json.loads(result.stdout)
    assert report["config"]["url"] == server and report["completed"] == 4


@pytest.mark.parametrize("url", ["ftp://x", "infer:8000", "http://", "", "http://[::1"])
def test_a_url_that_can_never_work_exits_1_with_one_paragraph(url: str) -> None:
    result = bench(url)
    assert_no_traceback(result)
    assert result.exit_code == ExitCode.USAGE, result.output
    line = reason(result)
    assert "URL" in line and "http" in line
    assert result.stdout == ""  # nothing was run, so no report


# --- other bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra, words",
    [
        (("--model", ""), "--model"),
        (("--burstiness", "inf", "--request-rate", "5"), "--burstiness must be a finite number"),
    ],
)
def test_bad_option_values_exit_1_without_a_traceback(server: str, extra: tuple[str, ...], words: str) -> None:
    result = bench(server, *extra)
    assert_no_traceback(result)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert words in reason(result)


def test_an_unwritable_save_path_exits_1_after_the_table(server: str, tmp_path: pathlib.Path) -> None:
    (tmp_path / "file").write_text("")
    result = bench(server, "--save", str(tmp_path / "file" / "report.json"))
    assert_no_traceback(result)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "Serving Benchmark Result" in result.stdout
    assert "cannot write the benchmark report" in reason(result)


# --- options -------------------------------------------------------------------------------------


def test_every_option_reaches_the_config_the_report_was_run_with(server: str) -> None:
    result = bench(
        server + "/",
        "--request-rate",
        "200",
        "--burstiness",
        "0.5",
        "--seed",
        "7",
        "--processes",
        "1",
        "--duration",
        "30",
        "--output",
        "json",
    )
    assert result.exit_code == ExitCode.OK, result.output
    config = workload.BenchConfig.model_validate(json.loads(result.stdout)["config"])
    assert config == workload.BenchConfig(
        url=server,
        model="m",
        concurrency=2,
        requests=4,
        input_tokens=8,
        output_tokens=OUTPUT_TOKENS,
        warmup=1,
        duration=30.0,
        request_rate=200.0,
        burstiness=0.5,
        seed=7,
        timeout=10.0,
        processes=1,
    )


def test_max_error_rate_comes_from_the_environment_too(server: str) -> None:
    args = ["bench", "--url", server, "--model", "flaky", "--concurrency", "1", "--requests", "4", "--warmup", "0"]
    args += ["--input-tokens", "8", "--output-tokens", str(OUTPUT_TOKENS)]
    result = click.testing.CliRunner().invoke(
        cli.main, args, env={"DEPLOYCTL_BENCH_MAX_ERROR_RATE": "0.5"}, prog_name="deployctl"
    )
    assert result.exit_code == ExitCode.OK, result.output


def test_saturation_advice_names_only_options_that_bench_has() -> None:
    every_signal = metrics.client_load(
        processes=1,
        target_in_flight=64,
        mean_in_flight=10.0,
        cpu_seconds=10.0,
        duration=10.0,
        loop_lags=[0.2] * 10,
        dispatch_lags=[0.3] * 10,
        send_delays=[0.0],
    )
    named = {option for reason in every_signal.reasons for option in re.findall(r"--[a-z][a-z-]*", reason)}
    options = {opt for param in cli.bench_cmd.params for opt in param.opts}
    assert named <= options, f"the advice names {sorted(named - options)}, which `deployctl bench` lacks"


# --- stopped by whoever started it ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sig", "load"),
    [
        (signal.SIGTERM, ("--request-rate", "40", "--processes", "1")),  # open loop, one process
        (signal.SIGINT, ("--processes", "2")),  # closed loop, the parent passes it on to two shards
    ],
)
def test_a_background_run_stopped_by_a_signal_reports_what_it_measured(
    server: str, sig: signal.Signals, load: tuple[str, ...]
) -> None:
    """Live traffic for a canary runs until the canary is done: the first signal ends it with a report
    (exit 0 when nothing failed), not a traceback or a lost measurement."""
    argv = [sys.executable, "-m", "orchestrator", "bench", "--url", server, "--model", "m", "-o", "json"]
    argv += ["--duration", "10m", "--requests", "1000000", "--concurrency", "2", "--warmup", "0", *load]
    argv += ["--input-tokens", "8", "--output-tokens", str(OUTPUT_TOKENS)]
    before = _VllmLike.streamed
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        deadline = time.monotonic() + 120
        while _VllmLike.streamed < before + 20:  # sizing probes, then measured requests
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == ExitCode.OK, out + err
    assert "Traceback" not in err
    report = json.loads(out)
    assert report["stopped_early"].startswith(f"stopped by {sig.name} after "), report["stopped_early"]
    assert report["completed"] > 0 and report["failed"] == 0, report
    assert report["duration"] < 120
