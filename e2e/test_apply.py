"""`deployctl apply`, `rollback`, `history`, `status`, `audit`, `diff` and `gate` on the real control plane.

Every test gets a fresh namespace with a bound `models` claim and vLLM simulators reached by
port-forward through the API server (kwok forwards pod port 8000 to a healthy simulator and
8001 to whatever the test wants a bad revision to meet).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import kubernetes
import kwoksim
from deployhelpers import ReleaseEnv, deployctl, profile, start_deployctl, wait_until, write_profile

CUDA_OOM_LOG = """\
INFO 11-29 10:00:01 [gpu_model_runner.py:2000] Model loading took 15.0 GiB
ERROR 11-29 10:00:09 [core.py:700] EngineCore failed to start.
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. \
GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free.
"""


def _bad_port(env: ReleaseEnv, simulator: Callable[..., Any], **sim_flags: Any) -> None:
    """Pod port 8001 reaches a simulator configured by ``sim_flags``; 8000 stays healthy."""
    bad = simulator(model="sim-model", **sim_flags)
    env.forward_8001(bad.port)


def test_good_apply_records_revision_1_deployed(env: ReleaseEnv) -> None:
    result = env.apply(profile(env.namespace))
    assert result.code == 0, result.stdout + result.stderr
    out = result.json
    assert out["result"] == "deployed" and out["revision"] == 1 and out["failure"] is None
    assert set(out["timings"]) >= {"plan", "preflight", "apply", "rollout", "health", "smoke"}
    assert out["gate"]["verdict"] == "pass"
    rows = env.history()
    assert [(r["revision"], r["status"]) for r in rows] == [(1, "deployed")]
    assert rows[0]["image"].endswith("4f1c7b0d" * 8)
    dep = env.deployment()
    assert dep.spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"] == "2"


def test_upgrade_surges_onto_a_spare_node_and_records_revision_2(env: ReleaseEnv) -> None:
    assert env.apply(profile(env.namespace, tp=4)).code == 0
    upgraded = profile(env.namespace, tp=4, engine={"maxNumSeqs": 16})
    result = env.apply(upgraded)
    assert result.code == 0, result.stdout + result.stderr
    assert result.json["revision"] == 2
    strategy = env.deployment().spec.strategy
    assert strategy.rolling_update.max_surge == 1 and strategy.rolling_update.max_unavailable == 0
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "superseded"), (2, "deployed")]


def test_profile_no_node_can_host_is_refused_before_anything_is_applied(env: ReleaseEnv) -> None:
    result = env.apply(profile(env.namespace, tp=8, hardware={"gpu": "A100-80GB", "gpusPerNode": 8}))
    assert result.code == 5, result.stdout + result.stderr
    out = result.json
    assert out["result"] == "refused"
    assert "8 GPUs" in out["message"] and "has 4" in out["message"]
    assert env.deployment() is None


def test_gpus_taken_at_run_time_is_detected_in_seconds_and_removed(env: ReleaseEnv) -> None:
    apps = kubernetes.client.AppsV1Api(env.api)
    blocker = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "batch-job", "namespace": env.namespace},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "batch"}},
            "template": {
                "metadata": {"labels": {"app": "batch"}},
                "spec": {
                    "nodeSelector": {
                        "deployctl.dev/nvlink": "true",
                        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                    },
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                    "containers": [
                        {
                            "name": "train",
                            "image": "registry.internal/train@sha256:" + "0" * 64,
                            "resources": {"limits": {"nvidia.com/gpu": "4"}},
                        }
                    ],
                },
            },
        },
    }
    apps.create_namespaced_deployment(env.namespace, blocker)
    wait_until(
        lambda: (apps.read_namespaced_deployment("batch-job", env.namespace).status.ready_replicas or 0) == 2,
        60,
        "blocker pods",
    )
    started = time.monotonic()
    result = env.apply(profile(env.namespace, tp=4))
    elapsed = time.monotonic() - started
    assert result.code == 5, result.stdout + result.stderr
    out = result.json
    assert out["failure"]["class"] == "unschedulable"
    assert "nvidia.com/gpu" in out["failure"]["message"]
    assert elapsed < 30
    assert env.deployment() is None  # a failed first install leaves nothing behind
    assert [r["status"] for r in env.history()] == ["failed"]


def test_crash_loop_with_cuda_oom_is_explained_and_rolled_back(env: ReleaseEnv) -> None:
    assert env.apply(profile(env.namespace)).code == 0
    log = env.tmp / "oom.log"
    log.write_text(CUDA_OOM_LOG)
    kwoksim.set_namespace_logs(env.cluster, env.namespace, log)
    bad = profile(
        env.namespace,
        engine={"maxNumSeqs": 31},
        placement={"podAnnotations": {"sim.deployctl.dev/behavior": "crash-loop", "sim.deployctl.dev/backoff": "2s"}},
    )
    started = time.monotonic()
    result = env.apply(bad)
    assert result.code == 5, result.stdout + result.stderr
    out = result.json
    assert out["result"] == "rolled_back" and out["rolled_back_to"] == 1
    assert out["failure"]["class"] == "oom"
    assert "CUDA out of memory" in out["failure"]["message"]
    assert out["timings"]["rollout"] < 20
    assert time.monotonic() - started < 60
    rows = env.history()
    assert [(r["revision"], r["status"]) for r in rows] == [(1, "superseded"), (2, "failed"), (3, "deployed")]
    assert rows[2]["description"].startswith("rollback to 1")
    assert env.deployment().spec.template.spec.containers[0].args.count("--max-num-seqs") == 1
    assert "32" in env.deployment().spec.template.spec.containers[0].args


def test_failing_health_rolls_back_with_exit_6(env: ReleaseEnv, simulator: Callable[..., Any]) -> None:
    assert env.apply(profile(env.namespace)).code == 0
    _bad_port(env, simulator, fault="health-fail")
    result = env.apply(profile(env.namespace, port=8001))
    assert result.code == 6, result.stdout + result.stderr
    out = result.json
    assert out["failure"]["class"] == "health" and out["rolled_back_to"] == 1
    assert "/health" in out["failure"]["message"]
    assert env.deployment().spec.template.spec.containers[0].ports[0].container_port == 8000


def test_rollback_to_1_history_status_and_audit(env: ReleaseEnv) -> None:
    assert env.apply(profile(env.namespace)).code == 0
    assert env.apply(profile(env.namespace, engine={"maxNumSeqs": 16})).code == 0
    result = deployctl(env.kubeconfig, "rollback", "llm", "-n", env.namespace, "--to", "1", "--output", "json")
    assert result.code == 0, result.stdout + result.stderr
    assert result.json["revision"] == 3 and result.json["rolled_back_to"] == 1
    rows = env.history()
    assert rows[-1]["description"] == "rollback to 1" and rows[-1]["status"] == "deployed"
    args = env.deployment().spec.template.spec.containers[0].args
    assert args[args.index("--max-num-seqs") + 1] == "32"
    status = deployctl(env.kubeconfig, "status", "llm", "-n", env.namespace, "--output", "json")
    assert status.code == 0, status.stderr
    data = status.json
    assert data["live_revision"] == 3 and data["replicas"]["ready"] == 1
    assert data["pods"][0]["node"] and data["pods"][0]["gpus"] == 2
    verify = deployctl(env.kubeconfig, "audit", "verify", "llm", "-n", env.namespace, "--output", "json")
    assert verify.code == 0 and verify.json["ok"] and verify.json["records"] == 3


def test_audit_verify_reports_an_edited_record_with_its_revision(env: ReleaseEnv) -> None:
    assert env.apply(profile(env.namespace)).code == 0
    assert env.apply(profile(env.namespace, engine={"maxNumSeqs": 16})).code == 0
    exported = env.tmp / "export.json"
    assert (
        deployctl(env.kubeconfig, "audit", "export", "llm", "-n", env.namespace, "--output-file", str(exported)).code
        == 0
    )
    core = kubernetes.client.CoreV1Api(env.api)
    name = "deployctl.llm.v1"
    cm = core.read_namespaced_config_map(name, env.namespace)
    record = json.loads(cm.data["record.json"])
    record["actor"]["user"] = "someone-else"
    # Records are immutable ConfigMaps: a tamperer must delete and re-create, as here.
    core.delete_namespaced_config_map(name, env.namespace)
    cm.metadata.resource_version = None
    cm.metadata.uid = None
    cm.metadata.creation_timestamp = None
    cm.data["record.json"] = json.dumps(record, sort_keys=True, separators=(",", ":"))
    core.create_namespaced_config_map(env.namespace, cm)
    result = deployctl(env.kubeconfig, "audit", "verify", "llm", "-n", env.namespace, "--output", "json")
    assert result.code == 9, result.stdout + result.stderr
    assert any(p["revision"] == 1 for p in result.json["problems"])
    # Deleting the newest record is caught against the export an auditor kept.
    core.delete_namespaced_config_map("deployctl.llm.v2", env.namespace)
    against = deployctl(
        env.kubeconfig,
        "audit",
        "verify",
        "llm",
        "-n",
        env.namespace,
        "--against",
        str(exported),
        "--output",
        "json",
    )
    assert against.code == 9
    assert any(p["revision"] == 2 for p in against.json["problems"])
    offline = deployctl(env.kubeconfig, "audit", "verify", "--file", str(exported), "--output", "json")
    assert offline.code == 0 and offline.json["ok"]


def test_two_concurrent_applies_one_gets_exit_8(env: ReleaseEnv) -> None:
    path = write_profile(
        env.tmp, profile(env.namespace, placement={"podAnnotations": {"sim.deployctl.dev/ready-delay": "4s"}})
    )
    first = start_deployctl(env.kubeconfig, "apply", str(path), "--output", "json", log=env.tmp / "first.log")
    wait_until(lambda: _lease_holder(env) is not None, 30, "the first apply to take the lock")
    second = deployctl(env.kubeconfig, "apply", str(path), "--output", "json")
    assert second.code == 8, second.stdout + second.stderr
    assert "locked by" in second.json["error"]
    assert first.wait(timeout=120) == 0, (env.tmp / "first.log").read_text()


def test_killed_apply_lock_expires_and_rerun_converges(env: ReleaseEnv) -> None:
    path = write_profile(
        env.tmp,
        profile(env.namespace, placement={"podAnnotations": {"sim.deployctl.dev/ready-delay": "30s"}}),
    )
    proc = start_deployctl(env.kubeconfig, "apply", str(path), "--lock-ttl", "5", log=env.tmp / "killed.log")
    wait_until(lambda: env.deployment() is not None, 30, "the apply to reach the watch")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    locked = deployctl(env.kubeconfig, "apply", str(path), "--output", "json", "--lock-ttl", "5")
    assert locked.code == 8  # still within the dead holder's lease
    time.sleep(6)
    fast = write_profile(env.tmp, profile(env.namespace), "fast.yaml")
    result = deployctl(env.kubeconfig, "apply", str(fast), "--output", "json", "--lock-ttl", "5")
    assert result.code == 0, result.stdout + result.stderr
    assert "taking over the lock" in result.stderr
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "deployed")]


def test_diff_shows_the_change_a_new_profile_would_make(env: ReleaseEnv) -> None:
    assert env.apply(profile(env.namespace)).code == 0
    same = write_profile(env.tmp, profile(env.namespace), "same.yaml")
    assert deployctl(env.kubeconfig, "diff", str(same)).code == 0
    changed = write_profile(env.tmp, profile(env.namespace, engine={"maxNumSeqs": 8}), "changed.yaml")
    result = deployctl(env.kubeconfig, "diff", str(changed))
    assert result.code == 11, result.stderr  # 11: changes (1 would be a usage error)
    assert (
        "Deployment/llm" in result.stdout and "+" in result.stdout and "'8'" in result.stdout
    ) or '"8"' in result.stdout


def test_gitops_gate_waits_for_the_synced_profile_then_gates_and_records(env: ReleaseEnv) -> None:
    doc = profile(env.namespace)
    path = write_profile(env.tmp, doc)
    render = deployctl(env.kubeconfig, "render", str(path), "--output-dir", str(env.tmp / "out"))
    assert render.code == 0, render.stderr

    def gitops_sync() -> None:  # what Argo CD would do a moment after the pipeline starts waiting
        time.sleep(3)
        for file in sorted((env.tmp / "out").glob("*.yaml")):
            kubernetes.utils.create_from_yaml(env.api, str(file))

    syncer = threading.Thread(target=gitops_sync)
    syncer.start()
    result = deployctl(env.kubeconfig, "gate", str(path), "--output", "json", "--timeout", "90")
    syncer.join()
    assert result.code == 0, result.stdout + result.stderr
    assert result.json["revision"] == 1 and result.json["gate"]["verdict"] == "pass"
    assert env.history()[0]["description"].startswith("gitops")


def _lease_holder(env: ReleaseEnv) -> str | None:
    try:
        lease = kubernetes.client.CoordinationV1Api(env.api).read_namespaced_lease("deployctl-llm", env.namespace)
    except kubernetes.client.ApiException:
        return None
    holder: str | None = lease.spec.holder_identity
    return holder


def test_slo_only_change_replaces_no_pod_and_is_not_refused_as_downtime(env: ReleaseEnv) -> None:
    # One replica of TP=4 on each NVLink A100 node: no spare node for a surge.
    first = profile(env.namespace, tp=4, rollout={"replicas": 2, "allowDowntime": False})
    assert env.apply(first).code == 0
    pods_before = {
        p.metadata.name
        for p in kubernetes.client.CoreV1Api(env.api)
        .list_namespaced_pod(env.namespace, label_selector="deployctl.dev/release=llm")
        .items
    }
    slo_only = profile(env.namespace, tp=4, rollout={"replicas": 2, "allowDowntime": False})
    slo_only["gate"]["smoke"]["slo"]["p95_ttft_ms"] = "<=400"
    result = env.apply(slo_only)
    assert result.code == 0, result.stdout + result.stderr
    assert "pods unchanged" in result.json["message"]
    pods_after = {
        p.metadata.name
        for p in kubernetes.client.CoreV1Api(env.api)
        .list_namespaced_pod(env.namespace, label_selector="deployctl.dev/release=llm")
        .items
    }
    assert pods_after == pods_before
    changed = profile(env.namespace, tp=4, rollout={"replicas": 2, "allowDowntime": False}, engine={"maxNumSeqs": 16})
    # A real change with no spare node: two replicas go one at a time, so one keeps serving.
    result = env.apply(changed)
    assert result.code == 0, result.stdout + result.stderr
    strategy = env.deployment().spec.strategy.rolling_update
    assert (strategy.max_surge, strategy.max_unavailable) == (0, 1)
