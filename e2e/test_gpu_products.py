"""A GPU outside the catalog on the real control plane: a kwok node labelled NVIDIA-B200 (as GPU
feature discovery would label a B200) takes the release whose profile names that product in
hardware.productLabels, and the real scheduler keeps the pods off every other GPU node."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from deployhelpers import ReleaseEnv, profile, wait_until

PRODUCT = "NVIDIA-B200"


def _usable(node: Any) -> bool:
    ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
    return ready and not any(t.key.startswith("node.kubernetes.io/") for t in node.spec.taints or [])


@pytest.fixture
def b200_node(env: ReleaseEnv) -> Iterator[str]:
    """One 8-GPU node with the B200's product label, for this test only (kwok plays its kubelet)."""
    core = kubernetes.client.CoreV1Api(env.api)
    name = f"gpu-b200-{env.namespace}"[:63]
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "3Ti", "nvidia.com/gpu": "8"}
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": PRODUCT,
        "nvidia.com/gpu.count": "8",
        "deployctl.dev/nvlink": "true",
    }
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"}, "labels": labels},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        # A node's status may be set at creation; kwok keeps the capacity and reports it Ready.
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }
    core.create_node(node)
    try:
        wait_until(lambda: _usable(core.read_node(name)), 60, f"node {name} Ready and untainted")
        yield name
    finally:
        core.delete_node(name)


def test_a_custom_gpu_release_is_scheduled_only_on_nodes_with_its_product_label(
    env: ReleaseEnv, b200_node: str
) -> None:
    doc = profile(env.namespace, hardware={"memoryGiB": 179, "fp8": True, "productLabels": [PRODUCT], "gpusPerNode": 8})
    del doc["hardware"]["gpu"]
    result = env.apply(doc)
    assert result.code == 0, result.stdout + result.stderr
    core = kubernetes.client.CoreV1Api(env.api)
    pods = core.list_namespaced_pod(env.namespace, label_selector="app.kubernetes.io/instance=llm").items
    assert pods and {p.spec.node_name for p in pods} == {b200_node}
    terms = pods[0].spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
    products = [e.values for t in terms.node_selector_terms for e in t.match_expressions if e.key.endswith("product")]
    assert products == [[PRODUCT]]


def test_a_custom_gpu_without_its_product_label_is_refused_before_anything_is_applied(env: ReleaseEnv) -> None:
    doc = profile(env.namespace, hardware={"memoryGiB": 179, "gpusPerNode": 8})
    del doc["hardware"]["gpu"]
    started = time.monotonic()
    result = env.apply(doc)
    assert result.code == 2, result.stdout + result.stderr
    assert "hardware.productLabels" in result.stdout + result.stderr
    assert time.monotonic() - started < 30
    assert env.deployment() is None
