"""The rollout judge and the health gate on hand-made states: no verdict before the evidence is in.

An apply that changes nothing finds its Deployment already rolled out in the very first watch
event. Judged before the ReplicaSets and Pods were listed, it passed with no new pods, and the
health gate passed vacuously on an empty list; both are checked here without a cluster.
"""

from __future__ import annotations

from typing import Any

from orchestrator import health, rollout

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
