"""`deployctl controller` on the local control plane: InferenceProfile objects deployed, gated, reported.

The controller runs as a real process (as in a pod, with a kubeconfig instead of a ServiceAccount),
against the real API server, with the CRD installed. An object is written the way a GitOps tool
writes it (server-side apply); `kubectl wait --for=condition=Ready` reads the status it gets.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import kwoksim
import yaml
from components import BIN_DIR
from controllerhelpers import apply_object, conditions, get_object, object_doc, settled, wait_ready
from deployhelpers import ReleaseEnv, deployctl, exists, wait_until

from orchestrator.controller import crd


def test_an_object_is_deployed_gated_and_ready_for_kubectl_wait(
    crd_installed: None, env: ReleaseEnv, controllers: Callable[..., Any]
) -> None:
    controllers()
    apply_object(env, object_doc(env))
    waited = wait_ready(env)
    assert waited.returncode == 0, waited.stderr + (env.tmp / "controller-a.log").read_text()[-3000:]
    obj = get_object(env)
    status = obj["status"]
    assert status["observedGeneration"] == 1 and status["liveRevision"] == 1
    assert status["gate"]["verdict"] == "pass"
    conds = conditions(env)
    assert [conds[k]["status"] for k in ("Planned", "Applied", "RolledOut", "Gated")] == ["True"] * 4
    assert conds["Stalled"]["status"] == "False" and conds["Ready"]["observedGeneration"] == 1
    assert "deployctl.dev/release" in obj["metadata"]["finalizers"]
    events = kubernetes.client.CoreV1Api(env.api).list_namespaced_event(
        env.namespace, field_selector="involvedObject.kind=InferenceProfile"
    )
    assert {"Reconciling", "Deployed"} <= {e.reason for e in events.items}
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "deployed")]


def test_a_generation_that_misses_its_slo_keeps_the_last_good_one_serving_and_is_not_retried_until_asked(
    crd_installed: None, env: ReleaseEnv, controllers: Callable[..., Any], simulator: Callable[..., Any]
) -> None:
    controllers()
    apply_object(env, object_doc(env))
    assert wait_ready(env).returncode == 0
    slow = simulator(model="sim-model", ttft_ms=900, itl_ms=5)  # p95 TTFT 900 ms against "<=500"
    env.forward_8001(slow.port)
    apply_object(env, object_doc(env, engine={"port": 8001}))
    wait_until(lambda: settled(env, 2), 120, "generation 2 judged")
    conds = conditions(env)
    assert conds["Ready"]["status"] == "False" and conds["Ready"]["reason"] == "slo_failed"
    assert conds["Stalled"]["status"] == "True" and conds["Gated"]["reason"] == "slo_failed"
    status = get_object(env)["status"]
    assert status["failure"]["class"] == "slo_failed" and status["liveRevision"] == 3
    assert env.deployment().spec.template.spec.containers[0].ports[0].container_port == 8000, "revision 1 serves"
    history = [(r["revision"], r["status"]) for r in env.history()]
    assert history == [(1, "superseded"), (2, "failed"), (3, "deployed")]
    # Several resyncs later (2 s each) the failed generation has not been tried again.
    time.sleep(6)
    assert len(env.history()) == 3, "a failed generation is not retried in a loop"
    # The retry annotation asks for it again: it fails again, recorded.
    custom = kubernetes.client.CustomObjectsApi(env.api)
    custom.patch_namespaced_custom_object(
        crd.GROUP,
        crd.VERSION,
        env.namespace,
        crd.PLURAL,
        "llm",
        {"metadata": {"annotations": {"deployctl.dev/retry": "1"}}},
    )
    wait_until(lambda: len(env.history()) == 5, 120, "the retried generation recorded")
    # A fix: the next generation deploys and everything is Ready again.
    apply_object(env, object_doc(env, engine={"maxNumSeqs": 16}))
    assert wait_ready(env).returncode == 0
    wait_until(lambda: settled(env, 3), 60, "generation 3 settled")
    assert conditions(env)["Ready"]["status"] == "True" and get_object(env)["status"].get("failure") is None


def test_an_on_call_rollback_is_reported_and_not_fought_until_the_spec_changes(
    crd_installed: None, env: ReleaseEnv, controllers: Callable[..., Any]
) -> None:
    controllers()
    apply_object(env, object_doc(env))
    assert wait_ready(env).returncode == 0
    apply_object(env, object_doc(env, engine={"maxNumSeqs": 16}))
    wait_until(lambda: settled(env, 2) and get_object(env)["status"]["liveRevision"] == 2, 120, "generation 2 live")
    rolled = deployctl(env.kubeconfig, "rollback", "llm", "-n", env.namespace, "--to", "1")
    assert rolled.code == 0, rolled.stdout + rolled.stderr
    wait_until(
        lambda: (get_object(env)["status"] or {}).get("manualRollback") is True, 30, "the manual rollback reported"
    )
    ready = conditions(env)["Ready"]
    assert ready["status"] == "True" and ready["reason"] == "ManualRollback"
    assert "revision 3 is a manual rollback to revision 1" in ready["message"]
    time.sleep(6)
    assert len(env.history()) == 3, "the controller did not re-apply generation 2 over the rollback"


def test_a_controller_killed_mid_apply_is_replaced_by_a_second_that_converges_without_a_duplicate_revision(
    crd_installed: None, env: ReleaseEnv, controllers: Callable[..., Any]
) -> None:
    first = controllers("a")
    wait_until(lambda: "leading as" in (env.tmp / "controller-a.log").read_text(), 30, "controller a leads")
    second = controllers("b")
    slow = object_doc(env, placement={"podAnnotations": {"sim.deployctl.dev/ready-delay": "8s"}})
    apply_object(env, slow)
    wait_until(lambda: env.deployment() is not None, 60, "controller a applied the Deployment")
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert wait_ready(env, timeout=150).returncode == 0, (env.tmp / "controller-b.log").read_text()[-3000:]
    assert "leading as" in (env.tmp / "controller-b.log").read_text()
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "deployed")], "no duplicate revision"
    assert second.poll() is None


def test_deleting_the_object_removes_the_workload_and_keeps_the_records(
    crd_installed: None, env: ReleaseEnv, controllers: Callable[..., Any]
) -> None:
    controllers()
    apply_object(env, object_doc(env))
    assert wait_ready(env).returncode == 0
    kubernetes.client.CustomObjectsApi(env.api).delete_namespaced_custom_object(
        crd.GROUP, crd.VERSION, env.namespace, crd.PLURAL, "llm"
    )
    wait_until(lambda: env.deployment() is None, 60, "the workload removed by the finalizer")
    # The controller removes its finalizer just after the workload: the object goes a moment later.
    wait_until(lambda: not exists(lambda: get_object(env)), 30, "the object deleted once its finalizer is removed")
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "deployed")], "the audit trail stays"


def test_render_format_controller_is_accepted_by_the_api_server(crd_installed: None, env: ReleaseEnv) -> None:
    image = "registry.internal/deployctl/controller@sha256:" + "1" * 64
    rendered = deployctl(
        Path(), "render", "--format", "controller", "--controller-namespace", env.namespace, "--image", image
    )
    assert rendered.code == 0, rendered.stderr
    applied = subprocess.run(
        [str(BIN_DIR / "kubectl"), "--kubeconfig", str(env.kubeconfig), "apply", "--dry-run=server", "-f", "-"],
        input=rendered.stdout,
        text=True,
        capture_output=True,
        check=False,
    )
    assert applied.returncode == 0, applied.stderr
    kinds = [doc["kind"] for doc in yaml.safe_load_all(rendered.stdout) if doc]
    assert kinds == [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Lease",
        "Role",
        "RoleBinding",
        "Role",  # reads the records' signing key, by name
        "RoleBinding",
        "Deployment",
    ]


def test_a_controller_for_all_namespaces_deploys_an_object_in_any_of_them(
    crd_installed: None, env: ReleaseEnv, controllers: Callable[..., Any]
) -> None:
    controllers("all", all_namespaces=True)
    apply_object(env, object_doc(env))
    waited = wait_ready(env)
    assert waited.returncode == 0, waited.stderr + (env.tmp / "controller-all.log").read_text()[-3000:]
    assert get_object(env)["status"]["liveRevision"] == 1
    assert "leading as" in (env.tmp / "controller-all.log").read_text()


def test_the_controller_warms_and_verifies_with_its_own_role(
    crd_installed: None, env: ReleaseEnv, controllers: Callable[..., Any]
) -> None:
    model = env.tmp / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"approved weights")
    subprocess.run("sha256sum model.safetensors > SHA256SUMS", shell=True, cwd=model, check=True)
    kwoksim.serve_warmup_report(env.cluster, env.namespace, model, env.tmp / "warmup.log", "SHA256SUMS")
    controllers()
    doc = object_doc(
        env,
        model={"verify": {"sha256Manifest": "SHA256SUMS"}},
        rollout={"replicas": 1, "allowDowntime": True, "progressDeadlineSeconds": 120, "warmup": {"enabled": True}},
    )
    apply_object(env, doc)
    waited = wait_ready(env)
    assert waited.returncode == 0, waited.stderr + (env.tmp / "controller-a.log").read_text()[-3000:]
    warmed = env.record(1)["time_to_serving"]["warmup"]["nodes"]
    assert warmed and all(n["state"] == "done" and n["verification"]["verified"] for n in warmed), warmed
    left = kubernetes.client.CoreV1Api(env.api).list_namespaced_pod(
        env.namespace, label_selector="deployctl.dev/warmup=llm"
    )
    assert left.items == []


def test_a_canary_run_by_the_controller_shows_progressing_and_obeys_its_rollout_annotation(
    crd_installed: None, env: ReleaseEnv, controllers: Callable[..., Any]
) -> None:
    """The controller runs rollout.canary's steps: `Progressing` names the step while it runs, the
    `deployctl.dev/rollout` annotation pauses and then promotes it mid-window (a window far longer
    than the test), and `Progressing` turns False, reason Promoted, once revision 2 is live."""
    controllers()
    apply_object(env, object_doc(env, rollout={"replicas": 2}))
    assert wait_ready(env).returncode == 0
    window = {"window": "10m", "minRequests": 10}
    canary = {"steps": [{"copies": 1, "analysis": window}], "metrics": {"interval": "2s"}}
    obj = object_doc(env, rollout={"replicas": 2, "canary": canary}, engine={"maxNumSeqs": 16})
    apply_object(env, obj)

    def canary_state() -> str:
        shown = deployctl(env.kubeconfig, "rollout", "status", "llm", "-n", env.namespace, "-o", "json").json
        return str((shown["canary"] or {}).get("state", ""))

    wait_until(lambda: canary_state() == "analysing", 120, "the canary's first window")
    progressing = conditions(env)["Progressing"]
    assert progressing["status"] == "True" and progressing["message"].startswith("step 1/1"), progressing
    obj["metadata"]["annotations"] = {"deployctl.dev/rollout": "pause"}
    apply_object(env, obj)
    wait_until(lambda: canary_state() == "paused", 60, "the canary paused")
    assert "paused" in conditions(env)["Progressing"]["message"]
    obj["metadata"]["annotations"] = {"deployctl.dev/rollout": "promote"}
    apply_object(env, obj)
    wait_until(lambda: settled(env, 2), 120, "generation 2 promoted")
    conds = conditions(env)
    assert conds["Ready"]["status"] == "True", conds
    assert (conds["Progressing"]["status"], conds["Progressing"]["reason"]) == ("False", "Promoted"), conds
    evidence = env.record(2)["canary"]
    assert evidence["result"] == "promoted" and "InferenceProfile" in evidence["promoted_by"]["by"], evidence
    assert env.deployment("llm-canary") is None
