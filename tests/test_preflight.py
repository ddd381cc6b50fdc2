"""Preflight against hand-built Nodes and Pods shaped like the local test cluster (e2e/cluster/nodes.yaml).

Two 4×A100-SXM4-80GB NVLink nodes, one 4×A100-PCIE-80GB node, one 8×H100 NVLink node and a
CPU-only node, with GPU feature discovery labels and the nvidia.com/gpu taint.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from orchestrator import conventions, errors
from orchestrator.plan import node_reports, preflight
from orchestrator.profile import model as profile

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


def report(result: preflight.Preflight, name: str) -> node_reports.NodeReport:
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
    # The profile expects 8-GPU nodes (one node per copy); with gpusPerNode 4 the copy would span nodes.
    prof = make_profile(tp=8, hardware={"gpusPerNode": 8})
    result = preflight.check(prof, cluster(), [], deployment_exists=False)

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

    pools = node_reports.gpu_pools(nodes, pods)

    assert pools == [
        {
            "product": "NVIDIA-A100-PCIE-80GB",
            "gpu": "A100-80GB",
            "nvlink": False,
            "nodes": 1,
            "gpus_total": 4,
            "gpus_free": 4,
        },
        # The cordoned third node adds GPUs to the total but none to what a new pod could use.
        {
            "product": "NVIDIA-A100-SXM4-80GB",
            "gpu": "A100-80GB",
            "nvlink": True,
            "nodes": 3,
            "gpus_total": 12,
            "gpus_free": 4,
        },
        {
            "product": "NVIDIA-H100-80GB-HBM3",
            "gpu": "H100-80GB",
            "nvlink": True,
            "nodes": 1,
            "gpus_total": 8,
            "gpus_free": 6,
        },
    ]


# --- copies that span nodes -------------------------------------------------------------------

FABRIC = "network.deployctl.dev/fabric"
H100 = "NVIDIA-H100-80GB-HBM3"


def make_405b(replicas: int = 1, **overrides: dict[str, Any]) -> profile.Profile:
    """Llama 3.1 405B at TP=8 × PP=2 on 8-GPU H100 nodes: a copy is 2 pods of 8 GPUs on 2 nodes."""
    sections: dict[str, dict[str, Any]] = {
        "model": {"architecture": "llama-3.1-405b"},
        "engine": {"tensorParallelSize": 8, "pipelineParallelSize": 2},
        "hardware": {"gpu": "H100-80GB", "gpusPerNode": 8},
    }
    for section, values in overrides.items():
        sections[section] = sections.get(section, {}) | values
    return make_profile(tp=8, replicas=replicas, **sections)


def h100(name: str, fabric: str | None = None, product: str = H100, unschedulable: bool = False) -> dict[str, Any]:
    labels = {FABRIC: fabric} if fabric else {}
    return node(name, product, 8, nvlink=True, unschedulable=unschedulable, **labels)


def h100s(count: int = 4) -> list[dict[str, Any]]:
    return [h100(f"gpu-h100-{i}") for i in range(count)]


def old_group(*on: str) -> list[dict[str, Any]]:
    return [own(n, gpus=8, name=f"{RELEASE}-old-{i}") for i, n in enumerate(on)]


@pytest.mark.parametrize(
    ("slots", "per_copy", "copies"),
    [
        ([1, 1, 1, 1], 2, 2),
        ([1, 1, 1], 2, 1),
        ([4], 2, 0),  # one node can hold every pod, but a copy's pods need different nodes
        ([4, 1], 2, 1),
        ([3, 3, 2], 2, 4),
        ([2, 2, 2], 3, 2),
        ([5, 1, 1, 1], 2, 3),  # the big node joins three copies, each with a small node
        ([0, 0, 2, 2], 2, 2),
        ([], 2, 0),
        ([3, 2], 1, 5),  # one node per copy: every slot is a copy
    ],
)
def test_copies_that_fit_counts_whole_copies_on_distinct_nodes(slots: list[int], per_copy: int, copies: int) -> None:
    assert preflight.copies_that_fit(slots, per_copy) == copies


def _most_copies_by_search(slots: list[int], per_copy: int) -> int:
    """Exhaustive: place one copy on every choice of per_copy distinct nodes, recurse, keep the best."""
    free = [i for i, s in enumerate(slots) if s > 0]
    best = 0
    for chosen in itertools.combinations(free, per_copy):
        rest = [s - (i in chosen) for i, s in enumerate(slots)]
        best = max(best, 1 + _most_copies_by_search(rest, per_copy))
    return best


def test_copies_that_fit_matches_an_exhaustive_search_on_small_clusters() -> None:
    for per_copy in (2, 3):
        for slots in itertools.product(range(4), repeat=4):
            expected = _most_copies_by_search(list(slots), per_copy)
            assert preflight.copies_that_fit(slots, per_copy) == expected, (slots, per_copy)


def test_copies_that_fit_refuses_a_copy_of_no_nodes() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        preflight.copies_that_fit([1], 0)


def test_405b_fits_twice_on_four_free_h100_nodes_and_installs() -> None:
    result = preflight.check(make_405b(), h100s(), [], deployment_exists=False)

    assert result.refusal is None
    assert result.copy_nodes == 2
    assert result.domains == {"all": ["gpu-h100-0", "gpu-h100-1", "gpu-h100-2", "gpu-h100-3"]}
    assert (result.spare_slots, result.capacity_slots) == (2, 2)
    assert (result.strategy_name, result.strategy, result.downtime) == ("install", {}, False)


def test_405b_upgrade_surges_when_two_free_nodes_hold_a_whole_new_group() -> None:
    pods = old_group("gpu-h100-0", "gpu-h100-1")

    result = preflight.check(make_405b(), h100s(), pods, deployment_exists=True)

    assert (result.spare_slots, result.capacity_slots) == (1, 2)
    assert (result.strategy_name, result.strategy) == ("surge", {})
    assert (result.downtime, result.refusal, result.warnings) == (False, None, [])


def test_405b_upgrade_without_room_beside_the_old_group_is_refused_as_downtime() -> None:
    # The old group holds two nodes and a training job the other two: no room for the new group.
    pods = [*old_group("gpu-h100-0", "gpu-h100-1"), other("gpu-h100-2", 8), other("gpu-h100-3", 8)]

    result = preflight.check(make_405b(), h100s(), pods, deployment_exists=True)

    assert (result.strategy_name, result.downtime, result.spare_slots) == ("replace", True, 0)
    assert result.refusal is not None
    text = result.refusal
    assert text.startswith("Updating llama3-70b would take it offline: a copy spans 2 nodes")
    assert "the old are deleted first" in text
    assert "A surge starts 1 new copy (2 nodes with 8 free GPUs each) beside the old groups, and 0 fit now" in text
    assert "gpu-h100-2 0 of 8 free" in text
    assert "2 more eligible nodes with 8 free GPUs (16 GPUs) would make room" in text
    assert "set rollout.allowDowntime: true" in text
    assert "\n" not in text


def test_405b_upgrade_without_room_replaces_the_groups_when_downtime_is_allowed() -> None:
    pods = [*old_group("gpu-h100-0", "gpu-h100-1"), other("gpu-h100-2", 8), other("gpu-h100-3", 8)]

    result = preflight.check(make_405b(rollout={"allowDowntime": True}), h100s(), pods, deployment_exists=True)

    assert (result.strategy_name, result.downtime, result.refusal) == ("replace", True, None)
    assert result.strategy == {}
    assert any("deletes llama3-70b's running groups before the new ones start" in w for w in result.warnings)


def test_405b_upgrade_counts_the_one_node_missing_for_a_surge() -> None:
    pods = [*old_group("gpu-h100-0", "gpu-h100-1"), other("gpu-h100-3", 8)]

    result = preflight.check(make_405b(), h100s(), pods, deployment_exists=True)

    assert result.refusal is not None
    assert "1 more eligible node with 8 free GPUs (8 GPUs) would make room" in result.refusal


def test_forced_surge_of_a_group_without_room_is_refused_even_with_downtime_allowed() -> None:
    pods = [*old_group("gpu-h100-0", "gpu-h100-1"), other("gpu-h100-2", 8), other("gpu-h100-3", 8)]
    prof = make_405b(rollout={"strategy": "surge", "allowDowntime": True})

    result = preflight.check(prof, h100s(), pods, deployment_exists=True)

    assert (result.strategy_name, result.downtime) == ("surge", False)
    assert result.refusal is not None
    assert "Pending forever" in result.refusal


@pytest.mark.parametrize("strategy", ["no-surge", "recreate"])
def test_group_strategies_that_never_surge_replace_even_with_room(strategy: str) -> None:
    pods = old_group("gpu-h100-0", "gpu-h100-1")

    refused = preflight.check(make_405b(rollout={"strategy": strategy}), h100s(), pods, True)
    allowed = preflight.check(make_405b(rollout={"strategy": strategy, "allowDowntime": True}), h100s(), pods, True)

    assert (refused.strategy_name, refused.downtime) == ("replace", True)
    assert refused.refusal is not None and "use strategy auto (there is room to surge now)" in refused.refusal
    assert (allowed.strategy_name, allowed.downtime, allowed.refusal) == ("replace", True, None)


def test_two_copies_surge_only_when_both_new_groups_fit_beside_the_old() -> None:
    pods = old_group("gpu-h100-0", "gpu-h100-1", "gpu-h100-2", "gpu-h100-3")

    full = preflight.check(make_405b(replicas=2), h100s(), pods, deployment_exists=True)
    roomy = preflight.check(make_405b(replicas=2), h100s(8), pods, deployment_exists=True)
    tight = preflight.check(make_405b(replicas=2), h100s(6), pods, deployment_exists=True)

    assert (full.capacity_slots, full.spare_slots, full.strategy_name) == (2, 0, "replace")
    assert full.refusal is not None and "4 more eligible nodes" in full.refusal
    assert (roomy.spare_slots, roomy.strategy_name, roomy.refusal) == (2, "surge", None)
    # One new group fits, but the old groups must not serve beside a half-updated set.
    assert (tight.spare_slots, tight.strategy_name) == (1, "replace")
    assert tight.refusal is not None and "2 more eligible nodes" in tight.refusal


def test_topology_domains_of_two_and_two_nodes_hold_two_copies() -> None:
    nodes = [h100("gpu-h100-0", "fabric-a"), h100("gpu-h100-1", "fabric-a")]
    nodes += [h100("gpu-h100-2", "fabric-b"), h100("gpu-h100-3", "fabric-b")]

    result = preflight.check(make_405b(replicas=2, placement={"topologyKey": FABRIC}), nodes, [], False)

    assert result.refusal is None
    assert result.domains == {"fabric-a": ["gpu-h100-0", "gpu-h100-1"], "fabric-b": ["gpu-h100-2", "gpu-h100-3"]}
    assert result.capacity_slots == 2


def test_topology_domains_of_three_and_one_node_hold_one_copy_and_say_so() -> None:
    nodes = [h100(f"gpu-h100-{i}", "fabric-a") for i in range(3)] + [h100("gpu-h100-3", "fabric-b")]

    with_key = preflight.check(make_405b(replicas=2, placement={"topologyKey": FABRIC}), nodes, [], False)
    without_key = preflight.check(make_405b(replicas=2), nodes, [], False)

    assert with_key.domains == {"fabric-a": ["gpu-h100-0", "gpu-h100-1", "gpu-h100-2"], "fabric-b": ["gpu-h100-3"]}
    assert with_key.capacity_slots == 1
    assert with_key.refusal is not None
    assert "can hold at most 1 even with nothing else running" in with_key.refusal
    assert f"(per {FABRIC} domain: fabric-a 1, fabric-b 0)" in with_key.refusal
    assert "Lower rollout.replicas to 1" in with_key.refusal
    # Without the key the lone fabric-b node pairs with the third fabric-a node.
    assert (without_key.capacity_slots, without_key.refusal) == (2, None)


def test_no_domain_with_enough_eligible_nodes_is_refused_per_domain() -> None:
    nodes = [h100("gpu-h100-0", "fabric-a"), h100("gpu-h100-1", "fabric-a", unschedulable=True)]
    nodes += [h100("gpu-h100-2", "fabric-b"), h100("gpu-h100-3", "fabric-c"), h100("gpu-h100-4")]

    result = preflight.check(make_405b(placement={"topologyKey": FABRIC}), nodes, [], False)

    assert report(result, "gpu-h100-4").reasons == (f"no {FABRIC} label (placement.topologyKey)",)
    assert result.refusal is not None
    text = result.refusal
    assert text.startswith(f"No topology domain ({FABRIC}) has 2 eligible nodes with 8 GPUs each")
    assert "fabric-a has 1 (gpu-h100-0; gpu-h100-1: cordoned (spec.unschedulable))" in text
    assert "fabric-b has 1 (gpu-h100-2)" in text
    assert f"Outside any domain: gpu-h100-4: no {FABRIC} label (placement.topologyKey)." in text
    assert "Make 1 more node(s) of one domain eligible" in text
    assert "unset placement.topologyKey" in text


def test_node_of_another_product_cannot_join_a_copy_and_says_why() -> None:
    nodes = [*h100s(3), h100("gpu-h200-0", product="NVIDIA-H200")]

    result = preflight.check(make_405b(replicas=2), nodes, [], deployment_exists=False)

    assert result.eligible_nodes == ["gpu-h100-0", "gpu-h100-1", "gpu-h100-2"]
    (reason,) = report(result, "gpu-h200-0").reasons
    assert reason.startswith("product NVIDIA-H200 does not match hardware.gpu H100-80GB")
    assert result.refusal is not None
    assert "can hold at most 1" in result.refusal


def test_too_few_eligible_nodes_for_one_copy_is_refused_naming_each_nodes_reason() -> None:
    nodes = [
        h100("gpu-h100-0"),
        h100("gpu-h100-1", unschedulable=True),
        h100("gpu-h200-0", product="NVIDIA-H200"),
        node("gpu-a100-0", "NVIDIA-A100-SXM4-80GB", 4, nvlink=True),
        node("cpu-0"),
    ]

    result = preflight.check(make_405b(), nodes, [], deployment_exists=False)

    assert result.capacity_slots == 0
    assert result.refusal is not None
    text = result.refusal
    assert text.startswith(
        "llama3-70b needs 2 nodes with 8 GPUs each (TP=8 × PP=2) of product H100-80GB with "
        "deployctl.dev/nvlink=true for one copy, but only 1 node(s) can host one of its pods (gpu-h100-0)."
    )
    assert "gpu-h100-1: cordoned (spec.unschedulable)" in text
    assert "gpu-h200-0: product NVIDIA-H200 does not match hardware.gpu H100-80GB" in text
    assert "gpu-a100-0: product NVIDIA-A100-SXM4-80GB does not match hardware.gpu H100-80GB" in text
    assert "only 4 allocatable GPUs but each pod of a copy needs 8" in text
    assert "cpu-0: no GPUs" in text
    assert "Make 1 more node(s) eligible" in text


def test_no_eligible_node_for_a_group_describes_the_whole_copy() -> None:
    nodes = [node(f"gpu-a100-{i}", "NVIDIA-A100-SXM4-80GB", 4, nvlink=True) for i in range(2)]

    result = preflight.check(make_405b(placement={"matchGpuProduct": False}), nodes, [], False)

    assert result.refusal is not None
    assert result.refusal.startswith(
        "No node can ever host a pod of llama3-70b: each copy needs 2 nodes with 8 GPUs each (TP=8 × PP=2)"
    )
    assert "(gpu-a100-0, gpu-a100-1) has 4 GPUs" in result.refusal
    assert "engine.pipelineParallelSize" in result.refusal


def test_group_partly_schedulable_now_warns_that_pending_members_hold_gpus() -> None:
    result = preflight.check(make_405b(replicas=2), h100s(), [other("gpu-h100-3", 8)], deployment_exists=False)

    assert result.refusal is None
    assert result.capacity_slots == 1
    assert len(result.warnings) == 1
    assert result.warnings[0].startswith("only 1 of 2 copies can be scheduled now")
    assert "partly scheduled copy" in result.warnings[0]


def test_group_to_json_carries_copy_nodes_and_domains() -> None:
    nodes = [h100("gpu-h100-0", "fabric-a"), h100("gpu-h100-1", "fabric-a")]

    doc = json.loads(
        json.dumps(preflight.check(make_405b(placement={"topologyKey": FABRIC}), nodes, [], False).to_json())
    )

    assert doc["copy_nodes"] == 2
    assert doc["domains"] == {"fabric-a": ["gpu-h100-0", "gpu-h100-1"]}
    assert doc["strategy"] == {}


def test_topology_key_is_ignored_for_a_copy_on_one_node() -> None:
    result = preflight.check(make_profile(placement={"topologyKey": FABRIC}), cluster(), [], False)

    assert result.eligible_nodes == ["gpu-a100-nvl-0", "gpu-a100-nvl-1"]
    assert (result.copy_nodes, result.domains) == (1, {"all": ["gpu-a100-nvl-0", "gpu-a100-nvl-1"]})


def test_surge_shortfall_is_counted_per_topology_domain() -> None:
    # fabric-a: the old copy on 0-1 and a free node 2; fabric-b: the old copy on 3-4.
    nodes = [h100(f"gpu-h100-{i}", "fabric-a") for i in range(3)]
    nodes += [h100(f"gpu-h100-{i}", "fabric-b") for i in (3, 4)]
    pods = old_group("gpu-h100-0", "gpu-h100-1", "gpu-h100-3", "gpu-h100-4")

    result = preflight.check(make_405b(replicas=2, placement={"topologyKey": FABRIC}), nodes, pods, True)

    assert (result.spare_slots, result.capacity_slots, result.strategy_name) == (0, 2, "replace")
    assert result.refusal is not None
    # One more node pairs with the free fabric-a node; fabric-b needs two for a whole copy.
    assert "3 more eligible nodes with 8 free GPUs (24 GPUs) in fabric-a (1), fabric-b (2)" in result.refusal


def test_refusal_names_the_best_domains_and_counts_the_rest() -> None:
    nodes = [h100(f"gpu-h100-{i}", f"fabric-{i}") for i in range(6)]

    result = preflight.check(make_405b(placement={"topologyKey": FABRIC}), nodes, [], False)

    assert result.refusal is not None
    assert "fabric-3 has 1 (gpu-h100-3), 2 more domains have at most 1." in result.refusal
    assert "fabric-4" not in result.refusal
