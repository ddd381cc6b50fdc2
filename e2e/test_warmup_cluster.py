"""The warm-up before the swap (rollout.warmup, model.verify) on the real control plane, with the wheel's
deployctl: warm-up pods land on exactly the target nodes, are awaited and deleted; a one-at-a-time
rollout starts its first new pod while the next node still warms; a weights mismatch stops the
rollout before any GPU pod starts, recorded; a failed warm-up stops or goes on as the profile says.

kwok runs no container: its stage ends a warm-up pod (e2e/cluster/sim-stages.yaml), and the pod's
log is the output of the real warm-up script, the wheel's own orchestrator/data/warmup_read.py,
run here on a real model directory (tests/data/model_signing/model, signed with the real
model-signing 1.1.1), so deployctl judges what the script really reports.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import kubernetes
import kwoksim
from deployhelpers import ReleaseEnv, profile

ROOT = Path(__file__).resolve().parent.parent
SIGNED = ROOT / "tests" / "data" / "model_signing"
NVLINK_A100 = {"gpu-a100-nvl-0", "gpu-a100-nvl-1"}  # one TP=4 copy fills each: no spare node
WARMUP = {"enabled": True, "timeoutSeconds": 60}


def _script_log(env: ReleaseEnv, model: Path, manifest: str, name: str = "warmup.log") -> None:
    kwoksim.serve_warmup_report(env.cluster, env.namespace, model, env.tmp / name, manifest)


def _sums(model: Path) -> Path:
    """A copy of the signed model with a SHA256SUMS beside it, as `sha256sum` writes it."""
    copy = Path(shutil.copytree(SIGNED / "model", model))
    files = sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file())
    sums = subprocess.run(["sha256sum", *files], cwd=copy, capture_output=True, text=True, check=True).stdout
    (copy / "SHA256SUMS").write_text(sums)
    return copy


def _warm(env: ReleaseEnv, verify: dict[str, Any] | None = None, **warmup: Any) -> dict[str, Any]:
    doc = profile(env.namespace, tp=4, rollout={"replicas": 2, "allowDowntime": False, "warmup": {**WARMUP, **warmup}})
    if verify is not None:
        doc["model"]["verify"] = verify
    return doc


def _warmup_pods(env: ReleaseEnv) -> list[Any]:
    core = kubernetes.client.CoreV1Api(env.api)
    return list(core.list_namespaced_pod(env.namespace, label_selector="deployctl.dev/warmup=llm").items)


def _engine_nodes(env: ReleaseEnv) -> set[str]:
    core = kubernetes.client.CoreV1Api(env.api)
    pods = core.list_namespaced_pod(env.namespace, label_selector="deployctl.dev/release=llm").items
    return {p.spec.node_name for p in pods if p.metadata.deletion_timestamp is None}


def _warmed(env: ReleaseEnv, revision: int) -> dict[str, dict[str, Any]]:
    nodes = env.record(revision)["time_to_serving"]["warmup"]["nodes"]
    return {n["node"]: n for n in nodes}


def test_the_warmup_reads_and_verifies_on_exactly_the_target_nodes_and_leaves_nothing(env: ReleaseEnv) -> None:
    model = _sums(env.tmp / "model")
    _script_log(env, model, "SHA256SUMS")
    result = env.apply(_warm(env, {"sha256Manifest": "SHA256SUMS"}))
    assert result.code == 0, result.stdout + result.stderr
    warmed = _warmed(env, 1)
    assert set(warmed) == NVLINK_A100 == _engine_nodes(env)
    for node in warmed.values():
        assert node["state"] == "done" and node["files"] == 5, node
        check = node["verification"]
        assert check["verified"] is True and check["method"] == "sha256" and check["manifest"] == "SHA256SUMS"
        assert check["manifest_sha256"] and check["files"] == 4  # the manifest does not list itself
    assert _warmup_pods(env) == []  # deleted once done, and their deny-all NetworkPolicy with them
    policies = kubernetes.client.NetworkingV1Api(env.api).list_namespaced_network_policy(
        env.namespace, label_selector="deployctl.dev/warmup=llm"
    )
    assert policies.items == []
    # The warm-up came before the first write, and the progress said what each node read.
    err = result.stderr
    assert err.index("warming 2 node(s)") < err.index("server-side apply"), err
    assert "weights read (0.00 GiB in 5 files)" in err and "verified against SHA256SUMS" in err, err
    status = env.status()["time_to_serving"]["warmup"]
    assert {n["node"] for n in status["nodes"]} == NVLINK_A100


def test_one_at_a_time_starts_the_first_new_pod_while_the_next_node_warms(env: ReleaseEnv) -> None:
    _script_log(env, _sums(env.tmp / "model"), "")
    assert env.apply(profile(env.namespace, tp=4, rollout={"replicas": 2, "allowDowntime": False})).code == 0
    upgrade = _warm(env)
    upgrade["engine"]["maxNumSeqs"] = 16
    # gpu-a100-nvl-1 takes 8 s to warm, gpu-a100-nvl-0 one.
    upgrade["placement"]["podAnnotations"]["sim.deployctl.dev/warmup-delay.gpu-a100-nvl-1"] = "8s"
    result = env.apply(upgrade, filename="upgrade.yaml")
    assert result.code == 0, result.stdout + result.stderr
    assert "strategy: one-at-a-time" in result.stderr, result.stderr
    err = result.stderr
    first, second = err.index("node gpu-a100-nvl-0: weights read"), err.index("node gpu-a100-nvl-1: weights read")
    assert first < err.index("server-side apply") < second, err  # the swap began while nvl-1 still warmed
    assert set(_warmed(env, 2)) == NVLINK_A100 and all(n["state"] == "done" for n in _warmed(env, 2).values())
    assert _warmup_pods(env) == []


def test_a_changed_weights_file_stops_the_rollout_before_any_gpu_pod_and_is_recorded(env: ReleaseEnv) -> None:
    _script_log(env, _sums(env.tmp / "model"), "")
    assert env.apply(profile(env.namespace, tp=4, rollout={"replicas": 2, "allowDowntime": False})).code == 0
    before = env.deployment().spec.template
    tampered = Path(shutil.copytree(SIGNED / "model", env.tmp / "tampered"))
    (tampered / "model.safetensors").write_bytes(b"not the weights that were signed")
    _script_log(env, tampered, "model.sig", "tampered.log")
    key = (SIGNED / "TEST-ONLY-model-key.pub").read_text()
    upgrade = _warm(env, {"signature": "model.sig", "publicKey": key})
    upgrade["engine"]["maxNumSeqs"] = 16
    result = env.apply(upgrade, filename="tampered.yaml")
    assert result.code == 5, result.stdout + result.stderr
    out = result.json
    assert out["result"] == "refused" and out["failure"]["class"] == "weights_mismatch", out
    assert "model.safetensors" in out["failure"]["message"] and "No GPU pod was started" in out["failure"]["message"]
    assert env.deployment().spec.template == before  # nothing of the release changed
    assert _warmup_pods(env) == []
    record = env.record(2)
    assert record["outcome"] == "failed" and record["failure"]["class"] == "weights_mismatch"
    for node in _warmed(env, 2).values():
        check = node["verification"]
        assert check["verified"] is False and check["method"] == "model-signing" and check["signer"], check
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "deployed"), (2, "failed")]


def test_the_same_signature_on_the_untouched_weights_verifies_with_the_signer(env: ReleaseEnv) -> None:
    _script_log(env, Path(shutil.copytree(SIGNED / "model", env.tmp / "model")), "model.sig")
    key = (SIGNED / "TEST-ONLY-model-key.pub").read_text()
    result = env.apply(_warm(env, {"signature": "model.sig", "publicKey": key}))
    assert result.code == 0, result.stdout + result.stderr
    checks = [n["verification"] for n in _warmed(env, 1).values()]
    assert all(c["verified"] and c["method"] == "model-signing" for c in checks), checks
    assert len({c["signer"] for c in checks}) == 1 and "signed by key" in result.stderr


def test_a_failed_warmup_stops_or_goes_on_as_the_profile_says(env: ReleaseEnv) -> None:
    _script_log(env, _sums(env.tmp / "model"), "")
    failing = _warm(env)
    failing["placement"]["podAnnotations"]["sim.deployctl.dev/warmup-behavior"] = "fail"
    stopped = env.apply(failing)
    assert stopped.code == 5, stopped.stdout + stopped.stderr
    assert stopped.json["failure"]["class"] == "warmup_failed", stopped.json
    assert "exit code 1" in stopped.json["failure"]["message"] and env.deployment() is None
    assert _warmup_pods(env) == []

    going_on = _warm(env, onFailure="continue")
    going_on["placement"]["podAnnotations"]["sim.deployctl.dev/warmup-behavior"] = "fail"
    result = env.apply(going_on, filename="continue.yaml")
    assert result.code == 0, result.stdout + result.stderr
    assert any("the warm-up failed and the rollout goes on unwarmed" in w for w in result.json["warnings"])
    assert _warmup_pods(env) == []


def test_a_public_key_that_is_no_key_is_exit_2_before_any_write(env: ReleaseEnv) -> None:
    bad = "-----BEGIN PUBLIC KEY-----\nbm90IGEga2V5\n-----END PUBLIC KEY-----\n"
    result = env.apply(_warm(env, {"signature": "model.sig", "publicKey": bad}))
    assert result.code == 2, result.stdout + result.stderr
    assert "model.verify.publicKey" in result.stderr and "Traceback" not in result.stderr
    assert env.deployment() is None and _warmup_pods(env) == []


def test_a_claim_that_attaches_to_one_node_only_is_explained_before_the_swap(env: ReleaseEnv) -> None:
    _script_log(env, _sums(env.tmp / "model"), "")
    doc = _warm(env)
    doc["placement"]["podAnnotations"]["sim.deployctl.dev/warmup-behavior"] = "hang"  # waits on its volume
    core = kubernetes.client.CoreV1Api(env.api)

    def attach_error() -> None:
        """What the attach-detach controller says of a ReadWriteOnce claim attached to another node."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pods = [p for p in _warmup_pods(env) if p.spec.node_name == "gpu-a100-nvl-1"]
            if pods:
                pod = pods[0]
                core.create_namespaced_event(
                    env.namespace,
                    {
                        "metadata": {"generateName": "warmup-attach-"},
                        "involvedObject": {
                            "kind": "Pod",
                            "namespace": env.namespace,
                            "name": pod.metadata.name,
                            "uid": pod.metadata.uid,
                        },
                        "reason": "FailedAttachVolume",
                        "type": "Warning",
                        "message": 'Multi-Attach error for volume "pvc-models" Volume is already used by pod(s) '
                        "llm-old-0",
                    },
                )
                return
            time.sleep(0.2)

    thread = threading.Thread(target=attach_error, daemon=True)
    thread.start()
    result = env.apply(doc)
    thread.join(timeout=5)
    assert result.code == 5, result.stdout + result.stderr
    failure = result.json["failure"]
    assert failure["class"] == "warmup_failed" and "gpu-a100-nvl-1" in failure["message"], failure
    assert "Multi-Attach" in failure["message"] and "ReadWriteOnce claim is attached to one node" in failure["message"]
    assert env.deployment() is None and _warmup_pods(env) == []
