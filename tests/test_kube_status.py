"""The typed views of the kinds deployctl judges (orchestrator.kube.status)."""

from __future__ import annotations

from orchestrator.kube import status


def test_a_pod_view_reads_its_node_phase_readiness_and_container_states() -> None:
    pod = status.Pod.from_object(
        {
            "metadata": {"name": "p", "labels": {"a": "b"}, "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": "gpu-1"},
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "initContainerStatuses": [{"state": {"waiting": {"reason": "PodInitializing"}}}],
                "containerStatuses": [
                    {
                        "image": "vllm@sha256:1",
                        "restartCount": 3,
                        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                        "lastState": {"terminated": {"exitCode": 137}},
                    }
                ],
            },
        }
    )
    assert (pod.meta.name, pod.node, pod.phase, pod.ready) == ("p", "gpu-1", "Running", True)
    assert pod.meta.deleting and pod.meta.labels == {"a": "b"}
    assert pod.init_containers[0].waiting_reason == "PodInitializing"
    (container,) = pod.containers
    assert container == status.ContainerStatus("vllm@sha256:1", "CrashLoopBackOff", "back-off", True, 137, 3)


def test_a_pod_view_reads_the_times_its_start_is_measured_by() -> None:
    pod = status.Pod.from_object(
        {
            "metadata": {"name": "p", "creationTimestamp": "2026-12-06T10:00:00Z"},
            "spec": {"containers": [{"name": "vllm", "image": "vllm@sha256:1"}, {"name": "proxy", "image": "p:1"}]},
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-06T10:03:40Z"}],
                "containerStatuses": [{"name": "vllm", "state": {"running": {"startedAt": "2026-12-06T10:01:30Z"}}}],
            },
        }
    )
    assert pod.meta.created == "2026-12-06T10:00:00Z"
    assert pod.condition("Ready") is not None and pod.condition("Ready").since == "2026-12-06T10:03:40Z"  # type: ignore[union-attr]
    assert pod.containers[0].name == "vllm" and pod.containers[0].started_at == "2026-12-06T10:01:30Z"
    assert pod.specified == (("vllm", "vllm@sha256:1"), ("proxy", "p:1"))


def test_an_empty_or_malformed_object_reads_as_the_apis_defaults() -> None:
    pod = status.Pod.from_object({"metadata": {"name": "p"}, "status": {"conditions": "nope", "phase": 3}})
    assert (pod.node, pod.phase, pod.conditions, pod.ready) == ("", "", (), False)
    dep = status.Deployment.from_object({"metadata": {"name": "d", "generation": 2}})
    assert (dep.wanted, dep.replicas, dep.observed, dep.rolled_out) == (1, 0, False, False)
    assert status.ContainerStatus.from_object({"state": {"terminated": {}}}).terminated is False


def test_a_deployment_is_rolled_out_when_every_count_equals_its_replicas() -> None:
    obj = {
        "metadata": {"name": "d", "generation": 4, "annotations": {status.REVISION_ANNOTATION: "7"}},
        "spec": {"replicas": 2},
        "status": {"observedGeneration": 4, "replicas": 2, "readyReplicas": 2, "updatedReplicas": 2},
    }
    dep = status.Deployment.from_object(obj)
    assert dep.observed and dep.revision == "7" and not dep.rolled_out  # availableReplicas missing
    assert status.Deployment.from_object({**obj, "status": {**obj["status"], "availableReplicas": 2}}).rolled_out


def test_a_replicaset_and_a_raycluster_view() -> None:
    rs = status.ReplicaSet.from_object(
        {
            "metadata": {
                "name": "r",
                "labels": {"pod-template-hash": "abc"},
                "annotations": {status.REVISION_ANNOTATION: "2"},
                "ownerReferences": [{"uid": "u1"}],
            },
            "status": {"conditions": [{"type": "ReplicaFailure", "status": "True", "message": "quota"}]},
        }
    )
    assert (rs.pod_template_hash, rs.revision, rs.meta.owner_uids) == ("abc", "2", ("u1",))
    assert rs.conditions[0].true and rs.conditions[0].message == "quota"
    ray = status.RayCluster.from_object(
        {"metadata": {"name": "c"}, "status": {"readyWorkerReplicas": 3, "state": "ready"}}
    )
    assert (ray.ready_workers, ray.state) == (3, "ready")
