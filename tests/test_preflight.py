"""Preflight against hand-built Nodes and Pods shaped like the local test cluster (e2e/cluster/nodes.yaml).

Two 4×A100-SXM4-80GB NVLink nodes, one 4×A100-PCIE-80GB node, one 8×H100 NVLink node and a
CPU-only node, with GPU feature discovery labels and the nvidia.com/gpu taint.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator import conventions, errors, preflight, profile

NAMESPACE = "inference"
RELEASE = "llama3-70b"


def make_profile(tp: int = 4, replicas: int = 1, **overrides: Any) -> profile.Profile:
    doc: dict[str, Any] = {
        "apiVersion": "deployctl/v1",
        "kind": "InferenceProfile",
        "metadata": {"name": RELEASE, "namespace": NAMESPACE},
        "model": {
            "name": "meta-llama/Meta-Llama-3-70B-Instruct",
            "architecture": "llama-3-70b",
            "source": {"pvc": "models", "path": "/models/llama3-70b"},
        },
        "engine": {
            "image": "registry.internal/vllm@sha256:" + "a" * 64,
            "tensorParallelSize": tp,
            "maxModelLen": 8192,
        },
        "hardware": {"gpu": "A100-80GB", "gpusPerNode": 4},
        "rollout": {"replicas": replicas},
    }
    for section, values in overrides.items():
        doc.setdefault(section, {}).update(values)
    return profile.Profile.model_validate(doc)


def node(
    name: str,
    product: str | None = None,
    gpus: int = 0,
    nvlink: bool | None = None,
    unschedulable: bool = False,
    **labels: str,
) -> dict[str, Any]:
    all_labels = {"kubernetes.io/hostname": name, **labels}
    spec: dict[str, Any] = {}
    allocatable = {"cpu": "64", "memory": "512Gi"}
    if gpus:
        all_labels |= {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": str(gpus)}
        allocatable["nvidia.com/gpu"] = str(gpus)
        spec["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    if product:
        all_labels["nvidia.com/gpu.product"] = product
    if nvlink is not None:
        all_labels["deployctl.dev/nvlink"] = "true" if nvlink else "false"
    if unschedulable:
        spec["unschedulable"] = True
        spec.setdefault("taints", []).append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    return {
        "metadata": {"name": name, "labels": all_labels},
        "spec": spec,
        "status": {"capacity": dict(allocatable), "allocatable": allocatable},
    }


def cluster() -> list[dict[str, Any]]:
    return [
        node("gpu-a100-nvl-0", "NVIDIA-A100-SXM4-80GB", 4, nvlink=True),
        node("gpu-a100-nvl-1", "NVIDIA-A100-SXM4-80GB", 4, nvlink=True),
        node("gpu-a100-pcie-0", "NVIDIA-A100-PCIE-80GB", 4, nvlink=False),
        node("gpu-h100-nvl-0", "NVIDIA-H100-80GB-HBM3", 8, nvlink=True),
        node("cpu-0"),
    ]


def pod(
    name: str,
    on: str | None,
    gpus: int,
    release: str | None = None,
    namespace: str = NAMESPACE,
    phase: str = "Running",
) -> dict[str, Any]:
    labels = {"deployctl.dev/release": release} if release else {}
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
    }
    if on:
        spec["nodeName"] = on
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
        "status": {"phase": phase},
    }


def own(on: str, gpus: int = 4, name: str = "llama3-70b-abc") -> dict[str, Any]:
    return pod(name, on, gpus, release=RELEASE)


def other(on: str, gpus: int = 4) -> dict[str, Any]:
    return pod(f"training-{on}", on, gpus, namespace="research")


def report(result: preflight.Preflight, name: str) -> preflight.NodeReport:
    return next(r for r in result.nodes if r.name == name)


# --- eligibility ------------------------------------------------------------------------------


def test_tp4_a100_is_eligible_only_on_the_two_nvlink_a100_nodes() -> None:
    result = preflight.check(make_profile(tp=4), cluster(), [], deployment_exists=False)

    assert result.eligible_nodes == ["gpu-a100-nvl-0", "gpu-a100-nvl-1"]
    assert result.refusal is None
    assert report(result, "gpu-a100-pcie-0").reasons == (
        "missing NVLink label deployctl.dev/nvlink=true (TP=4 > 2 needs NVLink)",
    )
    (h100_reason,) = report(result, "gpu-h100-nvl-0").reasons
    assert h100_reason.startswith("product NVIDIA-H100-80GB-HBM3 does not match hardware.gpu A100-80GB")
    assert report(result, "cpu-0").reasons == ("no GPUs",)
    assert report(result, "gpu-a100-nvl-0").nvlink is True
    assert report(result, "gpu-a100-pcie-0").nvlink is False


def test_tp8_a100_is_refused_naming_the_4_gpu_limit_and_the_h100_product_exclusion() -> None:
    result = preflight.check(make_profile(tp=8), cluster(), [], deployment_exists=False)

    assert result.eligible_nodes == []
    assert result.refusal is not None
    text = result.refusal
    assert "needs 8 GPUs (TP=8) of product A100-80GB on one node with deployctl.dev/nvlink=true" in text
    assert "(gpu-a100-nvl-0, gpu-a100-nvl-1) has 4 GPUs" in text
    assert "gpu-h100-nvl-0: product NVIDIA-H100-80GB-HBM3 does not match hardware.gpu A100-80GB" in text
    assert "gpu-a100-pcie-0: missing NVLink label deployctl.dev/nvlink=true" in text
    assert "cpu-0: no GPUs" in text
    assert "\n" not in text


def test_tp2_may_use_the_pcie_node_because_nvlink_is_only_required_above_tp2() -> None:
    result = preflight.check(make_profile(tp=2), cluster(), [], deployment_exists=False)

    assert result.eligible_nodes == ["gpu-a100-nvl-0", "gpu-a100-nvl-1", "gpu-a100-pcie-0"]
    assert result.capacity_slots == 6


def test_require_nvlink_keeps_tp2_off_the_pcie_node_and_says_which_setting() -> None:
    result = preflight.check(
        make_profile(tp=2, placement={"requireNvlink": True}), cluster(), [], deployment_exists=False
    )

    assert "gpu-a100-pcie-0" not in result.eligible_nodes
    assert report(result, "gpu-a100-pcie-0").reasons == (
        "missing NVLink label deployctl.dev/nvlink=true (placement.requireNvlink)",
    )


def test_product_is_not_checked_when_match_gpu_product_is_off() -> None:
    result = preflight.check(
        make_profile(tp=4, placement={"matchGpuProduct": False}), cluster(), [], deployment_exists=False
    )

    assert result.eligible_nodes == ["gpu-a100-nvl-0", "gpu-a100-nvl-1", "gpu-h100-nvl-0"]


def test_gpu_taint_not_tolerated_excludes_every_gpu_node_and_names_the_taint() -> None:
    result = preflight.check(make_profile(placement={"tolerations": []}), cluster(), [], deployment_exists=False)

    assert result.eligible_nodes == []
    assert report(result, "gpu-a100-nvl-0").reasons == (
        "taint nvidia.com/gpu=present:NoSchedule not tolerated (add it to placement.tolerations)",
    )
    assert result.refusal is not None
    assert "taint nvidia.com/gpu=present:NoSchedule not tolerated" in result.refusal


def test_toleration_with_equal_operator_must_match_the_taint_value() -> None:
    wrong = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent", "effect": "NoSchedule"}
    right = dict(wrong, value="present")

    refused = preflight.check(make_profile(placement={"tolerations": [wrong]}), cluster(), [], False)
    accepted = preflight.check(make_profile(placement={"tolerations": [right]}), cluster(), [], False)

    assert refused.eligible_nodes == []
    assert accepted.eligible_nodes == ["gpu-a100-nvl-0", "gpu-a100-nvl-1"]


def test_cordoned_node_is_not_eligible_and_reported_once_as_cordoned() -> None:
    nodes = cluster()
    nodes[0] = node("gpu-a100-nvl-0", "NVIDIA-A100-SXM4-80GB", 4, nvlink=True, unschedulable=True)

    result = preflight.check(make_profile(), nodes, [], deployment_exists=False)

    assert result.eligible_nodes == ["gpu-a100-nvl-1"]
    assert report(result, "gpu-a100-nvl-0").reasons == ("cordoned (spec.unschedulable)",)


def test_node_selector_label_missing_or_different_is_a_reason() -> None:
    nodes = cluster()
    nodes[1] = node("gpu-a100-nvl-1", "NVIDIA-A100-SXM4-80GB", 4, nvlink=True, pool="batch")

    result = preflight.check(make_profile(placement={"nodeSelector": {"pool": "serving"}}), nodes, [], False)

    assert result.eligible_nodes == []
    assert report(result, "gpu-a100-nvl-0").reasons == ("nodeSelector label pool=serving missing",)
    assert report(result, "gpu-a100-nvl-1").reasons == (
        "nodeSelector label pool=serving missing (node has pool=batch)",
    )
    assert result.refusal is not None
    assert "with deployctl.dev/nvlink=true, pool=serving" in result.refusal


def test_more_replicas_than_the_eligible_nodes_could_ever_hold_is_refused() -> None:
    result = preflight.check(make_profile(tp=4, replicas=3), cluster(), [], deployment_exists=False)

    assert result.refusal is not None
    assert "needs 3 replicas of 4 GPUs" in result.refusal
    assert "at most 2 even with nothing else running" in result.refusal
    assert "Lower rollout.replicas to 2" in result.refusal


def test_empty_cluster_is_refused_plainly() -> None:
    result = preflight.check(make_profile(), [], [], deployment_exists=False)

    assert result.refusal == "No node can host llama3-70b: the cluster reports no nodes."


# --- strategy ---------------------------------------------------------------------------------


def test_upgrade_surges_when_a_spare_nvlink_node_is_free() -> None:
    result = preflight.check(make_profile(), cluster(), [own("gpu-a100-nvl-0")], deployment_exists=True)

    assert result.spare_slots == 1
    assert result.strategy_name == "surge"
    assert result.strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert (result.downtime, result.refusal, result.warnings) == (False, None, [])


def test_upgrade_replaces_one_at_a_time_when_both_nvlink_nodes_are_taken() -> None:
    pods = [own("gpu-a100-nvl-0", name="a"), own("gpu-a100-nvl-1", name="b")]

    result = preflight.check(make_profile(replicas=2), cluster(), pods, deployment_exists=True)

    assert result.spare_slots == 0
    assert result.strategy_name == "one-at-a-time"
    assert result.strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    assert (result.downtime, result.refusal) == (False, None)


def test_single_replica_upgrade_without_a_spare_slot_is_refused_as_downtime() -> None:
    pods = [own("gpu-a100-nvl-0"), other("gpu-a100-nvl-1")]

    result = preflight.check(make_profile(replicas=1), cluster(), pods, deployment_exists=True)

    assert result.downtime is True
    assert result.strategy_name == "one-at-a-time"
    assert result.refusal is not None
    assert "would take it offline" in result.refusal
    assert "gpu-a100-nvl-1 0 of 4 free" in result.refusal
    assert "rollout.allowDowntime: true" in result.refusal
    assert "rollout.replicas: 2 or more" in result.refusal


def test_single_replica_upgrade_without_a_spare_slot_proceeds_with_a_warning_when_downtime_is_allowed() -> None:
    pods = [own("gpu-a100-nvl-0"), other("gpu-a100-nvl-1")]

    result = preflight.check(make_profile(rollout={"allowDowntime": True}), cluster(), pods, True)

    assert (result.downtime, result.refusal, result.strategy_name) == (True, None, "one-at-a-time")
    assert any("nothing serves" in w for w in result.warnings)


def test_forced_surge_without_room_is_refused_because_the_surge_pod_would_stay_pending() -> None:
    pods = [own("gpu-a100-nvl-0"), other("gpu-a100-nvl-1")]

    result = preflight.check(make_profile(rollout={"strategy": "surge"}), cluster(), pods, True)

    assert result.refusal is not None
    assert "Pending forever" in result.refusal


def test_forced_no_surge_with_one_replica_is_downtime_even_with_room() -> None:
    result = preflight.check(make_profile(rollout={"strategy": "no-surge"}), cluster(), [own("gpu-a100-nvl-0")], True)

    assert result.downtime is True
    assert result.refusal is not None
    assert "use strategy auto" in result.refusal


def test_recreate_on_upgrade_needs_allow_downtime() -> None:
    refused = preflight.check(make_profile(rollout={"strategy": "recreate"}), cluster(), [own("gpu-a100-nvl-0")], True)
    allowed = preflight.check(
        make_profile(rollout={"strategy": "recreate", "allowDowntime": True}),
        cluster(),
        [own("gpu-a100-nvl-0")],
        True,
    )

    assert refused.strategy == {"type": "Recreate"}
    assert refused.refusal is not None and "rollout.allowDowntime: true" in refused.refusal
    assert (allowed.downtime, allowed.refusal) == (True, None)


def test_first_install_is_never_downtime_whatever_the_strategy() -> None:
    for strategy in ("auto", "surge", "no-surge", "recreate"):
        result = preflight.check(make_profile(rollout={"strategy": strategy}), cluster(), [], False)
        assert (result.downtime, result.refusal) == (False, None), strategy


def test_first_install_with_gpus_taken_by_another_workload_warns_instead_of_refusing() -> None:
    result = preflight.check(make_profile(replicas=2), cluster(), [other("gpu-a100-nvl-1")], False)

    assert result.refusal is None
    assert result.capacity_slots == 1
    assert result.warnings == [
        "only 1 of 2 replicas can be scheduled now; the rest will stay Pending until GPUs free up on "
        "gpu-a100-nvl-0, gpu-a100-nvl-1"
    ]


def test_own_pods_count_as_replaceable_capacity_but_not_as_spare_room() -> None:
    pods = [own("gpu-a100-nvl-0", name="a"), own("gpu-a100-nvl-1", name="b")]

    result = preflight.check(make_profile(replicas=2), cluster(), pods, deployment_exists=True)

    assert (result.spare_slots, result.capacity_slots) == (0, 2)
    assert result.warnings == []
    assert report(result, "gpu-a100-nvl-0").gpus_release == 4
    assert report(result, "gpu-a100-nvl-0").gpus_free == 0


def test_same_release_name_in_another_namespace_is_not_our_pod() -> None:
    stranger = pod("llama3-70b-x", "gpu-a100-nvl-0", 4, release=RELEASE, namespace="elsewhere")

    result = preflight.check(make_profile(), cluster(), [stranger], deployment_exists=False)

    assert report(result, "gpu-a100-nvl-0").gpus_release == 0
    assert result.capacity_slots == 1


# --- counting GPUs ----------------------------------------------------------------------------


def test_finished_and_unscheduled_pods_hold_no_gpus() -> None:
    pods = [
        pod("done", "gpu-a100-nvl-0", 4, phase="Succeeded"),
        pod("crashed", "gpu-a100-nvl-0", 4, phase="Failed"),
        pod("pending", None, 4, phase="Pending"),
    ]

    result = preflight.check(make_profile(), cluster(), pods, deployment_exists=False)

    assert report(result, "gpu-a100-nvl-0").gpus_free == 4


def test_init_containers_count_at_their_peak_and_sidecars_alongside_the_containers() -> None:
    def gpus(n: int) -> dict[str, Any]:
        return {"requests": {"nvidia.com/gpu": str(n)}}

    p = pod("mixed", "gpu-h100-nvl-0", 1)
    p["spec"]["initContainers"] = [
        {"name": "sidecar", "restartPolicy": "Always", "resources": gpus(1)},
        {"name": "warmup", "resources": gpus(6)},
        {"name": "check", "resources": gpus(2)},
    ]
    # warmup runs with the sidecar: 1 + 6 = 7; afterwards sidecar + main container = 2.
    result = preflight.check(make_profile(), cluster(), [p], deployment_exists=False)

    assert report(result, "gpu-h100-nvl-0").gpus_free == 1


@pytest.mark.parametrize(
    ("text", "value"),
    [("4", 4), (8, 8), ("2k", 2000), ("1Ki", 1024), ("1500m", 1.5), ("2e3", 2000), ("1E", 10**18)],
)
def test_kubernetes_quantities_parse(text: object, value: float) -> None:
    assert conventions.parse_quantity(text) == pytest.approx(value)


def test_a_malformed_gpu_quantity_is_a_cluster_error_naming_the_node() -> None:
    bad = node("gpu-a100-nvl-0", "NVIDIA-A100-SXM4-80GB", 4, nvlink=True)
    bad["status"]["allocatable"]["nvidia.com/gpu"] = "four"

    with pytest.raises(errors.ClusterError, match=r"node gpu-a100-nvl-0 allocatable nvidia\.com/gpu"):
        preflight.check(make_profile(), [bad], [], deployment_exists=False)


def test_objects_with_missing_fields_are_read_as_empty() -> None:
    result = preflight.check(make_profile(), [{}, {"metadata": {"name": "bare"}}], [{}, {"spec": {}}], False)

    assert [r.reasons for r in result.nodes] == [("no GPUs",), ("no GPUs",)]
    assert result.refusal is not None


def test_to_json_is_serialisable() -> None:
    result = preflight.check(make_profile(tp=8), cluster(), [], deployment_exists=False)

    doc = json.loads(json.dumps(result.to_json()))

    assert doc["nodes"][0]["name"] == "gpu-a100-nvl-0"
    assert doc["refusal"] == result.refusal


# --- inventory --------------------------------------------------------------------------------


def test_gpu_pools_group_gpu_nodes_by_product_and_nvlink() -> None:
    nodes = [*cluster(), node("gpu-a100-nvl-2", "NVIDIA-A100-SXM4-80GB", 4, nvlink=True, unschedulable=True)]
    pods = [
        own("gpu-a100-nvl-0", gpus=4),
        other("gpu-h100-nvl-0", gpus=2),
        pod("done", "gpu-a100-nvl-1", 4, phase="Failed"),
    ]

    pools = preflight.gpu_pools(nodes, pods)

    assert pools == [
        {"product": "NVIDIA-A100-PCIE-80GB", "nvlink": False, "nodes": 1, "gpus_total": 4, "gpus_free": 4},
        # The cordoned third node adds GPUs to the total but none to what a new pod could use.
        {"product": "NVIDIA-A100-SXM4-80GB", "nvlink": True, "nodes": 3, "gpus_total": 12, "gpus_free": 4},
        {"product": "NVIDIA-H100-80GB-HBM3", "nvlink": True, "nodes": 1, "gpus_total": 8, "gpus_free": 6},
    ]
