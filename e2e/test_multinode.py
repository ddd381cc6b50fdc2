"""A model copy across nodes, on the local control plane with KubeRay's real ray-operator.

Llama 3.1 405B at TP=8 × PP=2: each copy is one RayCluster whose head and worker take one 8-GPU
H100 node each (the cluster has four, all on fabric ib-a). The ray-operator creates the pods,
the real scheduler places them, kwok plays their kubelets and the vLLM simulator answers on the
head's port. What cannot run here: Ray itself and GPUs (kwok pods run no containers), and a
LeaderWorkerSet controller (its Go module is not served here; LWS is covered by golden renders).
"""

from __future__ import annotations

import base64
import gzip
import threading
import time
from collections.abc import Iterator
from typing import Any

import kubernetes
import kwoksim
import pytest
from deployhelpers import ReleaseEnv, deployctl, profile, start_deployctl, wait_until, write_profile

H100_NODES = [f"gpu-h100-8x-{i}" for i in range(4)]
FABRIC_LABEL = "network.deployctl.dev/fabric"
CUDA_OOM_LOG = """\
INFO 11-29 10:00:01 [gpu_model_runner.py:2000] Model loading took 47.3 GiB
ERROR 11-29 10:00:09 [core.py:700] EngineCore failed to start.
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. \
GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free.
"""


def two_node(namespace: str, **sections: Any) -> dict[str, Any]:
    """The 405B on two H100 nodes per copy, test-sized (seconds, not minutes)."""
    doc = profile(
        namespace,
        tp=8,
        model={
            "name": "sim-model",
            "architecture": "llama-3.1-405b",
            "source": {"pvc": "models", "path": "/models/llama-3.1-405b"},
        },
        hardware={"gpu": "H100-80GB", "gpusPerNode": 8, "nodeInterconnect": "infiniband"},
        rollout={"replicas": 1, "progressDeadlineSeconds": 120, "groupJoinSeconds": 30},
    )
    doc["engine"] = {**doc["engine"], "pipelineParallelSize": 2, "maxModelLen": 8192, "maxNumSeqs": 32}
    doc["placement"] = {**doc["placement"], "topologyKey": FABRIC_LABEL}
    for key, value in sections.items():
        doc[key] = {**doc.get(key, {}), **value} if isinstance(value, dict) else value
    return doc


def with_pod_annotations(doc: dict[str, Any], **annotations: str) -> dict[str, Any]:
    doc["placement"] = {
        **doc["placement"],
        "podAnnotations": {**doc["placement"]["podAnnotations"], **annotations},
    }
    return doc


def rayclusters(env: ReleaseEnv) -> list[dict[str, Any]]:
    api = kubernetes.client.CustomObjectsApi(env.api)
    items: list[dict[str, Any]] = api.list_namespaced_custom_object("ray.io", "v1", env.namespace, "rayclusters")[
        "items"
    ]
    return items


def pods(env: ReleaseEnv) -> list[Any]:
    core = kubernetes.client.CoreV1Api(env.api)
    return list(core.list_namespaced_pod(env.namespace, label_selector="deployctl.dev/release=llm").items)


def _ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


@pytest.fixture
def nodes(env: ReleaseEnv) -> Iterator[kubernetes.client.CoreV1Api]:
    """The four H100 nodes, uncordoned again after the test whatever it cordoned."""
    core = kubernetes.client.CoreV1Api(env.api)
    yield core
    for node in H100_NODES:
        core.patch_node(node, {"spec": {"unschedulable": None}})


def cordon(core: kubernetes.client.CoreV1Api, *names: str) -> None:
    for node in names:
        core.patch_node(node, {"spec": {"unschedulable": True}})


class Sampler:
    """Samples the release's copies and pods every 0.2 s while an apply runs in the background."""

    def __init__(self, env: ReleaseEnv) -> None:
        self.env, self.samples, self.stop = env, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            ready_leaders = sum(
                1 for p in pods(self.env) if p.metadata.labels.get("deployctl.dev/group-role") == "leader" and _ready(p)
            )
            copies = {p.metadata.labels.get("deployctl.dev/copy") for p in pods(self.env)}
            names = sorted(rc["metadata"]["name"] for rc in rayclusters(self.env))
            self.samples.append({"ready_leaders": ready_leaders, "copies_with_pods": copies, "rayclusters": names})
            time.sleep(0.2)

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def test_405b_tp8_pp2_across_two_h100_nodes_plans_applies_gates_and_records(env: ReleaseEnv) -> None:
    path = write_profile(env.tmp, two_node(env.namespace))
    planned = deployctl(env.kubeconfig, "plan", str(path), "--output", "json")
    assert planned.code == 0, planned.stdout + planned.stderr
    assert planned.json["verdict"] == "fits" and planned.json["inputs"]["nodes_per_copy"] == 2

    result = env.apply(two_node(env.namespace))
    assert result.code == 0, result.stdout + result.stderr
    out = result.json
    assert out["result"] == "deployed" and out["revision"] == 1 and out["gate"]["verdict"] == "pass"

    (cluster,) = rayclusters(env)
    assert cluster["spec"]["workerGroupSpecs"][0]["replicas"] == 1
    assert cluster["status"].get("readyWorkerReplicas") == 1, "KubeRay reports the worker joined"
    members = pods(env)
    roles = sorted(p.metadata.labels["deployctl.dev/group-role"] for p in members)
    assert roles == ["leader", "worker"]
    placed = {p.spec.node_name for p in members}
    assert len(placed) == 2 and placed <= set(H100_NODES), "one pod per H100 node"
    for pod in members:
        assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "8"
        assert pod.metadata.labels["deployctl.dev/copy"] == cluster["metadata"]["name"]

    # The time to serving times every member of the copy, each on its own node.
    timed = out["time_to_serving"]["pods"]
    assert sorted(p["pod"] for p in timed) == sorted(p.metadata.name for p in members)
    assert {p["node"] for p in timed} == placed and all(p["steps"]["engine_start"] is not None for p in timed)

    status = env.status()
    assert status["replicas"] == {"desired": 1, "ready": 1, "updated": 1}
    assert sorted((p["role"], p["gpus"]) for p in status["pods"]) == [("leader", 8), ("worker", 8)]
    assert {p["node"] for p in status["pods"]} == placed
    text = deployctl(env.kubeconfig, "status", "llm", "-n", env.namespace)
    assert "COPY" in text.stdout and "worker" in text.stdout and "copies: 1/1 ready" in text.stdout
    stored = kubernetes.client.CoreV1Api(env.api).read_namespaced_config_map("deployctl.llm.v1", env.namespace)
    manifests = gzip.decompress(base64.b64decode(stored.binary_data["manifests.yaml.gz"])).decode()
    assert f"name: {cluster['metadata']['name']}" in manifests and "kind: RayCluster" in manifests
    verified = deployctl(env.kubeconfig, "audit", "verify", "llm", "-n", env.namespace)
    assert verified.code == 0, verified.stdout + verified.stderr


def test_upgrade_with_room_starts_a_new_copy_beside_the_old_and_never_stops_serving(env: ReleaseEnv) -> None:
    assert env.apply(two_node(env.namespace)).code == 0
    (old,) = (rc["metadata"]["name"] for rc in rayclusters(env))
    path = write_profile(env.tmp, two_node(env.namespace, engine={"maxNumSeqs": 16}), "v2.yaml")
    with Sampler(env) as sampler:
        proc = start_deployctl(env.kubeconfig, "apply", str(path), "--output", "json", log=env.tmp / "apply.log")
        assert proc.wait(timeout=240) == 0, (env.tmp / "apply.log").read_text()
    (new,) = (rc["metadata"]["name"] for rc in rayclusters(env))
    assert new != old, "an upgrade makes a new copy, never changes the old one in place"
    assert any(s["rayclusters"] == sorted([old, new]) for s in sampler.samples), "the new copy ran beside the old"
    assert all(s["ready_leaders"] >= 1 for s in sampler.samples), "a head was serving at every sample"
    assert "surge" in (env.tmp / "apply.log").read_text()
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "superseded"), (2, "deployed")]


def test_upgrade_without_room_is_refused_then_with_allow_downtime_replaces_the_copy_never_mixed(
    env: ReleaseEnv, nodes: kubernetes.client.CoreV1Api
) -> None:
    assert env.apply(two_node(env.namespace)).code == 0
    (old,) = (rc["metadata"]["name"] for rc in rayclusters(env))
    spare = [n for n in H100_NODES if n not in {p.spec.node_name for p in pods(env)}]
    cordon(nodes, *spare)

    strict = two_node(env.namespace, engine={"maxNumSeqs": 16}, rollout={"allowDowntime": False})
    refused = env.apply(strict)
    assert refused.code == 5, refused.stdout + refused.stderr
    assert refused.json["result"] == "refused"
    assert "allowDowntime" in refused.json["message"]
    assert [rc["metadata"]["name"] for rc in rayclusters(env)] == [old], "a refusal changes nothing"

    path = write_profile(env.tmp, two_node(env.namespace, engine={"maxNumSeqs": 16}), "v2.yaml")
    with Sampler(env) as sampler:
        proc = start_deployctl(env.kubeconfig, "apply", str(path), "--output", "json", log=env.tmp / "apply.log")
        assert proc.wait(timeout=240) == 0, (env.tmp / "apply.log").read_text()
    (new,) = (rc["metadata"]["name"] for rc in rayclusters(env))
    assert new != old
    assert all(len(s["rayclusters"]) <= 1 for s in sampler.samples), "the old copy went before the new one came"
    assert all(not ({old, new} <= s["copies_with_pods"]) for s in sampler.samples), "never old and new pods at once"
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "superseded"), (2, "deployed")]


def test_a_worker_that_cannot_schedule_is_refused_or_failed_in_seconds_naming_it_and_why(
    env: ReleaseEnv, nodes: kubernetes.client.CoreV1Api
) -> None:
    # Preflight sees it coming: with three of the four nodes cordoned, no copy of two nodes fits.
    cordon(nodes, *H100_NODES[1:])
    refused = env.apply(two_node(env.namespace))
    assert refused.code == 5 and refused.json["result"] == "refused", refused.stdout + refused.stderr
    assert "cordoned" in refused.json["message"] and H100_NODES[1] in refused.json["message"]

    # Preflight counts GPUs; here the second node's CPUs are taken, so only the worker cannot land.
    nodes.patch_node(H100_NODES[1], {"spec": {"unschedulable": None}})
    all_cpus = nodes.read_node(H100_NODES[1]).status.allocatable["cpu"]
    cpu_hog = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cpu-hog", "namespace": env.namespace},
        "spec": {
            "nodeName": H100_NODES[1],
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "hog",
                    "image": "registry.internal/hog@sha256:" + "0" * 64,
                    "resources": {"requests": {"cpu": all_cpus}},
                }
            ],
        },
    }
    nodes.create_namespaced_pod(env.namespace, cpu_hog)
    started = time.monotonic()
    result = env.apply(two_node(env.namespace))
    assert result.code == 5, result.stdout + result.stderr
    failure = result.json["failure"]
    assert failure["class"] == "unschedulable"
    assert failure["message"].startswith("worker of copy ")
    assert "Insufficient cpu" in failure["message"]
    assert result.json["timings"]["rollout"] < 30 and time.monotonic() - started < 90
    assert rayclusters(env) == [], "the failed first install was removed"


def test_a_worker_in_a_crash_loop_is_classified_from_its_log_and_rolled_back(env: ReleaseEnv) -> None:
    assert env.apply(two_node(env.namespace)).code == 0
    (good,) = (rc["metadata"]["name"] for rc in rayclusters(env))
    log = env.tmp / "oom.log"
    log.write_text(CUDA_OOM_LOG)
    kwoksim.set_namespace_logs(env.cluster, env.namespace, log)
    bad = with_pod_annotations(
        two_node(env.namespace, engine={"maxNumSeqs": 31}),
        **{"sim.deployctl.dev/worker-behavior": "crash-loop", "sim.deployctl.dev/backoff": "2s"},
    )
    result = env.apply(bad)
    assert result.code == 5, result.stdout + result.stderr
    out = result.json
    assert out["result"] == "rolled_back" and out["rolled_back_to"] == 1
    assert out["failure"]["class"] == "oom"
    assert out["failure"]["message"].startswith("worker of copy ")
    assert "CUDA out of memory" in out["failure"]["message"]
    assert [rc["metadata"]["name"] for rc in rayclusters(env)] == [good]
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "superseded"), (2, "failed"), (3, "deployed")]


def test_workers_that_never_join_end_as_group_incomplete_naming_them(env: ReleaseEnv) -> None:
    stuck = with_pod_annotations(
        two_node(env.namespace, rollout={"groupJoinSeconds": 10}),
        **{"sim.deployctl.dev/worker-behavior": "never-ready"},
    )
    result = env.apply(stuck)
    assert result.code == 5, result.stdout + result.stderr
    failure = result.json["failure"]
    assert failure["class"] == "group_incomplete"
    worker = failure["message"].split("within rollout.groupJoinSeconds (10s): ")[1].split(" ")[0]
    assert "-worker-" in worker, failure["message"]
    assert rayclusters(env) == []


def test_rollback_to_revision_1_from_a_laptop_restores_its_copy(env: ReleaseEnv) -> None:
    assert env.apply(two_node(env.namespace)).code == 0
    (first,) = (rc["metadata"]["name"] for rc in rayclusters(env))
    assert env.apply(two_node(env.namespace, engine={"maxNumSeqs": 16})).code == 0
    assert [rc["metadata"]["name"] for rc in rayclusters(env)] != [first]
    # The on-call command needs nothing but a kubeconfig: no profile, no checkout.
    result = deployctl(env.kubeconfig, "rollback", "llm", "-n", env.namespace, "--to", "1", "--output", "json")
    assert result.code == 0, result.stdout + result.stderr
    assert result.json["revision"] == 3 and result.json["rolled_back_to"] == 1
    assert [rc["metadata"]["name"] for rc in rayclusters(env)] == [first]
    wait_until(lambda: all(_ready(p) for p in pods(env)) and len(pods(env)) == 2, 30, "revision 1's copy ready")
    assert deployctl(env.kubeconfig, "audit", "verify", "llm", "-n", env.namespace).code == 0


def test_tensor_parallelism_across_nodes_is_refused_with_the_reason_unless_allowed(env: ReleaseEnv) -> None:
    doc = two_node(env.namespace, engine={"tensorParallelSize": 16, "pipelineParallelSize": 1})
    path = write_profile(env.tmp, doc)
    planned = deployctl(env.kubeconfig, "plan", str(path))
    assert planned.code == 3, planned.stdout + planned.stderr
    assert "cross-node" in planned.stdout + planned.stderr or "across nodes" in planned.stdout + planned.stderr
    applied = env.apply(doc)
    assert applied.code == 3 and rayclusters(env) == [], "refused before anything touches the cluster"
    allowed = two_node(
        env.namespace, engine={"tensorParallelSize": 16, "pipelineParallelSize": 1, "allowCrossNodeTP": True}
    )
    path = write_profile(env.tmp, allowed, "allowed.yaml")
    assert deployctl(env.kubeconfig, "plan", str(path)).code == 0


def test_scaling_to_two_copies_adds_one_beside_the_running_copy_and_keeps_it(env: ReleaseEnv) -> None:
    assert env.apply(two_node(env.namespace)).code == 0
    (first,) = rayclusters(env)
    result = env.apply(two_node(env.namespace, rollout={"replicas": 2}))
    assert result.code == 0, result.stdout + result.stderr
    names = sorted(rc["metadata"]["name"] for rc in rayclusters(env))
    assert names == [first["metadata"]["name"], first["metadata"]["name"].removesuffix("-0") + "-1"]
    (kept,) = (rc for rc in rayclusters(env) if rc["metadata"]["name"] == first["metadata"]["name"])
    assert kept["metadata"]["uid"] == first["metadata"]["uid"], "the running copy was not replaced"
    assert len({p.spec.node_name for p in pods(env)}) == 4 and env.status()["replicas"]["ready"] == 2


def test_a_head_that_never_becomes_healthy_fails_the_health_gate_and_the_copy_is_rolled_back(
    env: ReleaseEnv, simulator: Any
) -> None:
    assert env.apply(two_node(env.namespace)).code == 0
    (good,) = (rc["metadata"]["name"] for rc in rayclusters(env))
    env.forward_8001(simulator(model="sim-model", fault="health-fail").port)
    sick = two_node(env.namespace, engine={"port": 8001}, gate={"health": {"timeoutSeconds": 10}})
    result = env.apply(sick)
    assert result.code == 6, result.stdout + result.stderr
    out = result.json
    assert out["failure"]["class"] == "health" and out["rolled_back_to"] == 1
    assert "-head-" in out["failure"]["message"], "the health gate names the head it asked"
    assert [rc["metadata"]["name"] for rc in rayclusters(env)] == [good]


def test_a_warmup_reads_the_weights_on_every_node_the_copy_can_land_on(
    env: ReleaseEnv, nodes: kubernetes.client.CoreV1Api
) -> None:
    cordon(nodes, *H100_NODES[2:])  # the copy's two pods can land only on the first two H100 nodes
    model = env.tmp / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights")
    kwoksim.serve_warmup_report(env.cluster, env.namespace, model, env.tmp / "warmup.log", digest=False)
    result = env.apply(two_node(env.namespace, rollout={"warmup": {"enabled": True, "timeoutSeconds": 60}}))
    assert result.code == 0, result.stdout + result.stderr
    warmed = {n["node"]: n for n in env.record(1)["time_to_serving"]["warmup"]["nodes"]}
    placed = {p.spec.node_name for p in pods(env)}
    assert set(warmed) == placed == set(H100_NODES[:2]), (warmed, placed)  # both members' nodes, no other
    assert all(n["state"] == "done" and n["files"] == 1 for n in warmed.values())
    core = kubernetes.client.CoreV1Api(env.api)
    assert core.list_namespaced_pod(env.namespace, label_selector="deployctl.dev/warmup=llm").items == []
