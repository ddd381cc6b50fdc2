"""Time to serving on the real control plane: every revision's record, `apply -o json`, the progress
stream, `status` and `history` say how long it took from the write to the first token and where the
time went; an SLO on it rolls a slow start back.

The pods are kwok's: their status times come from the real API server, the kubelet's pull event
from deployctl's sim stage (e2e/cluster/sim-stages.yaml), and the container log is a public vLLM
0.19 GPU log (tests/data/startup_phases, source named in the file), so the engine's phases are those
of a real start.
"""

from __future__ import annotations

from pathlib import Path

import kwoksim
from deployhelpers import IMAGE, ReleaseEnv, deployctl, profile

GPU_LOG = Path(__file__).resolve().parent.parent / "tests" / "data" / "startup_phases" / "vllm-0.19-llmd-llama31-8b.log"
READY_DELAY = 3  # seconds from the container's start to Ready (the sim's model load)


def _loading(env: ReleaseEnv, **sections: object) -> dict[str, object]:
    log = env.tmp / "vllm-gpu.log"
    log.write_text(GPU_LOG.read_text())
    kwoksim.set_namespace_logs(env.cluster, env.namespace, log)
    placement = {"podAnnotations": {"sim.deployctl.dev/ready-delay": f"{READY_DELAY}s"}}
    return profile(env.namespace, placement=placement, **sections)


def test_a_revision_records_its_time_to_serving_by_step_pod_and_engine_phase(env: ReleaseEnv) -> None:
    result = env.apply(_loading(env))
    assert result.code == 0, result.stdout + result.stderr
    serving = result.json["time_to_serving"]
    assert serving["until"] == "first_token"
    assert set(serving["steps"]) == {"rollout", "health", "first_token"}
    assert 0 < serving["steps"]["first_token"] < 5  # the smoke run's first token, its warm-up request's
    assert serving["steps"]["rollout"] >= READY_DELAY - 1  # the API server's clock counts whole seconds
    (pod,) = serving["pods"]
    assert pod["node"] and pod["pod"].startswith("llm-")
    # The kubelet's event: 150ms pulling, 180ms with the wait, and the image's size.
    assert pod["steps"]["image_pull"] == 0.15 and pod["pull_waited"] == 0.18 and pod["image_bytes"] == 8123456789
    assert pod["steps"]["engine_start"] >= READY_DELAY - 1
    assert pod["engine"] == {
        "weights_read": 13.49,
        "model_load": 14.43,
        "dynamo": 4.29,
        "compile": 10.84,
        "profiling": 0.46,
        "cuda_graphs": 3.0,
        "engine_init": 21.45,
    }
    assert "time to serving: " in result.stderr and "slowest pod llm-" in result.stderr, result.stderr

    record = env.record(1)
    assert record["format"] >= 4 and record["time_to_serving"] == serving  # format 4 added time_to_serving
    assert env.history()[0]["time_to_serving"] == serving["seconds"]
    assert env.status()["time_to_serving"] == serving
    text = deployctl(env.kubeconfig, "status", "llm", "-n", env.namespace)
    assert text.code == 0, text.stderr
    assert f"time to serving: {serving['seconds']:.1f} s until the first token" in text.stdout, text.stdout
    assert "image pull 0.1 s" in text.stdout or "image pull 0.2 s" in text.stdout, text.stdout
    assert "engine: weights read 13.5 s" in text.stdout, text.stdout
    table = deployctl(env.kubeconfig, "history", "llm", "-n", env.namespace)
    assert "SERVING" in table.stdout and f" {serving['seconds']:.0f}s " in table.stdout, table.stdout


def test_a_pod_of_another_image_has_no_pull_step_and_says_so(env: ReleaseEnv) -> None:
    other = IMAGE.replace("4f1c7b0d" * 8, "0123abcd" * 8)
    result = env.apply(_loading(env, engine={"image": other}))
    assert result.code == 0, result.stdout + result.stderr
    (pod,) = result.json["time_to_serving"]["pods"]
    assert pod["steps"]["image_pull"] is None and pod["image_bytes"] is None
    assert pod["steps"]["container_start"] is not None  # the whole wait, pull included


def test_a_start_slower_than_its_slo_is_rolled_back_with_the_evidence(env: ReleaseEnv) -> None:
    assert env.apply(profile(env.namespace)).code == 0
    slow = _loading(env)
    slow["gate"]["smoke"]["slo"] = {**slow["gate"]["smoke"]["slo"], "time_to_serving_s": "<=1"}  # type: ignore[index]
    result = env.apply(slow, filename="slow.yaml")
    assert result.code == 6, result.stdout + result.stderr
    out = result.json
    assert out["result"] == "rolled_back" and out["failure"]["class"] == "slo_failed"
    assert "time_to_serving_s" in out["failure"]["message"]
    (check,) = [c for c in out["gate"]["checks"] if c["metric"] == "time_to_serving_s"]
    assert check["verdict"] == "fail" and check["measured"] >= READY_DELAY - 1
    failed = env.record(2)
    assert failed["outcome"] == "failed" and abs(failed["time_to_serving"]["seconds"] - check["measured"]) < 0.01
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "superseded"), (2, "failed"), (3, "deployed")]


def test_a_startup_probe_shorter_than_the_last_start_is_said_before_it_kills_a_loading_pod(env: ReleaseEnv) -> None:
    assert env.apply(_loading(env)).code == 0
    tight = _loading(env, engine={"startupSeconds": 30, "maxNumSeqs": 16})
    result = env.apply(tight, filename="tight.yaml")
    assert result.code == 0, result.stdout + result.stderr
    # Revision 1 took about READY_DELAY seconds to load: 1.5 times that, in whole minutes, is 60 s.
    (warning,) = [w for w in result.json["warnings"] if "startup probe" in w]
    assert "the startup probe allows 30 s but revision 1's pods took up to" in warning, warning
    assert "set engine.startupSeconds to at least 60" in warning, warning
    probe = env.deployment().spec.template.spec.containers[0].startup_probe
    assert probe.failure_threshold * probe.period_seconds == 30  # the profile's word stands


KV_LOG = """\
INFO 12-06 10:00:01 [gpu_model_runner.py:2000] Model loading took 7.48 GiB memory and 12.5 seconds
INFO 12-06 10:00:30 [kv_cache_utils.py:1087] GPU KV cache size: 400,000 tokens
INFO 12-06 10:00:30 [kv_cache_utils.py:1091] Maximum concurrency for 4,096 tokens per request: 97.66x
"""


def test_skip_memory_profiling_starts_from_the_live_revisions_kv_cache(env: ReleaseEnv) -> None:
    log = env.tmp / "kv.log"
    log.write_text(KV_LOG)
    kwoksim.set_namespace_logs(env.cluster, env.namespace, log)
    assert env.apply(profile(env.namespace)).code == 0
    assert env.record(1)["observed"][0]["kv_cache_tokens"] == 400_000
    skip = profile(env.namespace, engine={"skipMemoryProfiling": True, "maxNumSeqs": 16})
    result = env.apply(skip, filename="skip.yaml")
    assert result.code == 0, result.stdout + result.stderr
    assert f"KV cache from the calibration of llm revision 1 in {env.namespace}" in result.stderr, result.stderr
    args = env.deployment().spec.template.spec.containers[0].args
    per_token = env.record(2)["plan"]["kv_bytes_per_token_per_gpu"]
    rendered = int(args[args.index("--kv-cache-memory-bytes") + 1])
    assert abs(rendered - 400_000 * per_token) < 16 * per_token  # vLLM's 400,000 tokens, to a block
    assert env.record(2)["plan"]["inputs"]["calibration"]["source"] == f"llm revision 1 in {env.namespace}"


def test_skip_memory_profiling_on_a_first_install_is_exit_2_with_nothing_written(env: ReleaseEnv) -> None:
    result = env.apply(profile(env.namespace, engine={"skipMemoryProfiling": True}))
    assert result.code == 2, result.stdout + result.stderr
    assert "engine.skipMemoryProfiling needs a calibration" in result.stderr
    assert "deployctl plan PROFILE --calibrate-from llm" in result.stderr and "Traceback" not in result.stderr
    assert env.deployment() is None
    history = deployctl(env.kubeconfig, "history", "llm", "-n", env.namespace)
    assert history.code != 0  # no record was written either
