"""The rollout judge and the health gate on hand-made states: no verdict before the evidence is in.

An apply that changes nothing finds its Deployment already rolled out in the very first watch
event. Judged before the ReplicaSets and Pods were listed, it passed with no new pods, and the
health gate passed vacuously on an empty list; both are checked here without a cluster.
"""

from __future__ import annotations

from typing import Any

from orchestrator.apply import health, rollout

UID = "dep-uid"


def _deployment() -> dict[str, Any]:
    return {
        "metadata": {
            "name": "llm",
            "uid": UID,
            "generation": 2,
            "annotations": {"deployment.kubernetes.io/revision": "1"},
        },
        "spec": {"replicas": 1},
        "status": {
            "observedGeneration": 2,
            "replicas": 1,
            "updatedReplicas": 1,
            "readyReplicas": 1,
            "availableReplicas": 1,
        },
    }


def _replicaset() -> dict[str, Any]:
    return {
        "metadata": {
            "name": "llm-abc",
            "labels": {"pod-template-hash": "abc"},
            "annotations": {"deployment.kubernetes.io/revision": "1"},
            "ownerReferences": [{"uid": UID}],
        }
    }


def _pod() -> dict[str, Any]:
    return {
        "metadata": {"name": "llm-abc-1", "labels": {"pod-template-hash": "abc"}},
        "spec": {"nodeName": "gpu-0"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_a_rolled_out_deployment_is_not_judged_before_its_replicasets_and_pods_are_listed() -> None:
    state = rollout._State()
    judge = rollout._Judge(kube=None, namespace="ns", name="llm", start=0.0)  # type: ignore[arg-type]
    rollout._update(state, "Deployment", "SYNC", {"items": [_deployment()]})
    assert judge.evaluate(state) is None
    rollout._update(state, "ReplicaSet", "SYNC", {"items": [_replicaset()]})
    assert judge.evaluate(state) is None
    rollout._update(state, "Pod", "SYNC", {"items": [_pod()]})
    result = judge.evaluate(state)
    assert result is not None and result.ok and result.new_pods == ["llm-abc-1"]


def test_the_event_list_is_not_waited_for() -> None:
    state = rollout._State()
    judge = rollout._Judge(kube=None, namespace="ns", name="llm", start=0.0)  # type: ignore[arg-type]
    for kind, item in (("Deployment", _deployment()), ("ReplicaSet", _replicaset()), ("Pod", _pod())):
        rollout._update(state, kind, "SYNC", {"items": [item]})
    assert "Event" not in state.synced
    assert judge.evaluate(state) is not None


def test_health_gate_with_no_pods_to_check_fails_instead_of_passing_vacuously() -> None:
    report = health.wait_healthy({}, "m", timeout=5)
    assert not report.ok and "no new pods" in report.explain()


def _unschedulable_pod(message: str) -> dict[str, Any]:
    pod = _pod()
    pod["spec"] = {}
    pod["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}],
    }
    return pod


def test_a_pod_waiting_for_its_claim_is_explained_as_the_claim_not_as_gpus(monkeypatch: Any) -> None:
    monkeypatch.setattr(rollout, "UNSCHEDULABLE_GRACE_SECONDS", 0.0)
    judge = rollout.PodJudge(kube=None, namespace="ns")  # type: ignore[arg-type]
    # The kube-scheduler's words for a claim not yet bound (v1.37 VolumeBinding plugin).
    pod = _unschedulable_pod("0/9 nodes are available: pod has unbound immediate PersistentVolumeClaims.")
    failure = judge.failure(pod, [pod])
    assert failure is not None and failure.cls == "unschedulable"
    assert "PersistentVolumeClaim it mounts" in failure.message and "kubectl get pvc" in failure.message
    assert "Free GPUs" not in failure.message
    gpus = _unschedulable_pod("0/9 nodes are available: 9 Insufficient nvidia.com/gpu.")
    failure = judge.failure(gpus, [gpus])
    assert failure is not None and "not enough free nvidia.com/gpu" in failure.message and "pvc" not in failure.message
