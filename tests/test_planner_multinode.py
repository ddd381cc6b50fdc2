"""The planner on copies that span nodes: the memory split per stage, the layout findings and the
traffic figures they give, and the layout line `deployctl plan` prints."""

from __future__ import annotations

import pathlib
import re
from typing import Any

import docblocks
import pytest
import yaml
from test_planner import DATAPOINTS, codes, make_profile

from orchestrator.plan import planner, planview
from orchestrator.profile import model as profile_schema

GIB = 1 << 30
LLAMA_405B = {"architecture": "llama-3.1-405b", "gpu": "H100-80GB", "gpus_per_node": 8, "max_model_len": 8192}


def _plan(**kwargs: Any) -> planner.Plan:
    return planner.plan(make_profile(**kwargs))


# --- the memory split of a copy over two nodes ------------------------------------------------------


def test_405b_at_tp8_pp2_on_two_h100_nodes_fits_each_gpu_holding_its_stage() -> None:
    plan = _plan(**LLAMA_405B, tp=8, pp=2, node_interconnect="infiniband", max_num_seqs=64)
    assert plan.verdict == "fits"
    i = plan.inputs
    assert (i["nodes_per_copy"], i["gpus_per_pod"], i["gpus_per_replica"]) == (2, 8, 16)
    assert i["layers_per_gpu"] == 63  # 126 layers over 2 stages
    # Each GPU keeps 1 of the 8 KV heads of its stage's 63 layers.
    assert plan.kv_bytes_per_token_per_gpu == 2 * 63 * 1 * 128 * 2
    # Half the layers over 8 GPUs plus one of embedding / LM head (1/8 of 128256 × 16384 × 2 bytes).
    layers_gib = (i["params"] - 2 * 128256 * 16384) * 2 / 16 / GIB
    assert plan.weights_gib_per_gpu == pytest.approx(layers_gib + 128256 * 16384 * 2 / 8 / GIB, rel=0.005)
    assert plan.weights_gib_per_gpu == pytest.approx(47.28, abs=0.01)
    assert plan.kv_cache_gib_per_gpu == pytest.approx(19.23, abs=0.01)
    assert plan.kv_cache_tokens == 640_000  # 78 full 8K sequences per copy
    assert plan.max_concurrency == pytest.approx(78.12, abs=0.01)
    assert set(codes(plan)) == {"pp-bubbles"}


def test_pipeline_stages_split_layers_where_tensor_parallelism_splits_heads() -> None:
    # Same 16 GPUs: TP=16 replicates the 8 KV heads (one per GPU, all 126 layers); TP=8 × PP=2 holds
    # one head of 63 layers, so a GPU's KV per token halves and the copy holds about twice the tokens.
    tp16 = _plan(**LLAMA_405B, tp=16, allow_cross_node_tp=True)
    pp2 = _plan(**LLAMA_405B, tp=8, pp=2)
    assert tp16.kv_bytes_per_token_per_gpu == 2 * pp2.kv_bytes_per_token_per_gpu
    assert (pp2.kv_cache_tokens, tp16.kv_cache_tokens) == (640_000, 297_488)  # docs/capacity.md


def test_pp_without_tp_keeps_the_single_gpu_non_torch_figure_the_pp2_log_shows() -> None:
    pp2 = next(dp for dp in DATAPOINTS if dp.name == "llama-3.1-8b h100 pp2")
    plan = _plan(**pp2.profile)
    assert plan.memory.non_torch_gib == planner.NON_TORCH_GIB_SINGLE
    # The tensor-parallel figure would put the plan 1.4 % under the logged tokens.
    assert plan.kv_cache_tokens == pytest.approx(pp2.kv_tokens, rel=0.005)
    assert _plan(**LLAMA_405B, tp=8, pp=2).memory.non_torch_gib == planner.NON_TORCH_GIB_TENSOR_PARALLEL


def test_weights_that_need_a_second_node_suggest_pipeline_stages_not_a_cross_node_tp() -> None:
    f = codes(_plan(**LLAMA_405B, tp=8))["weights-do-not-fit"]
    assert "tensorParallelSize 8 × pipelineParallelSize 2 (2 nodes per copy)" in f.message
    assert "tensorParallelSize 16" not in f.message


def test_plan_inputs_say_how_a_single_node_copy_sits() -> None:
    i = _plan(architecture="llama-3-70b", tp=4, gpus_per_node=4).inputs
    assert (i["nodes_per_copy"], i["gpus_per_pod"], i["gpus_per_replica"], i["node_interconnect"]) == (1, 4, 4, None)


# --- tensor parallelism across nodes ------------------------------------------------------------------


def test_tp16_on_8_gpu_nodes_is_refused_with_the_traffic_and_tp8_pp2_as_the_fix() -> None:
    plan = _plan(**LLAMA_405B, tp=16, node_interconnect="infiniband")
    assert plan.verdict == "does-not-fit"
    f = codes(plan)["cross-node-tp"]
    assert (f.severity, f.field) == ("error", "engine.tensorParallelSize")
    assert "a node has 8" in f.message
    # 2 × 126 layers × 16384 × 2 bytes × 2·15/16 = 15,482,880 bytes per token per GPU.
    assert "2 × 126 layers × 16384 hidden × 2 bytes × 2(16-1)/16 = 15.5 MB per token" in f.message
    assert "InfiniBand NDR (400 Gb/s per GPU), 50 GB/s each way, instead of NVLink (450 GB/s" in f.message
    assert "310 µs per token instead of 34 µs" in f.message
    assert "79 ms of network time in every decode step of 256 sequences" in f.message
    assert "2 × 16384 × 2 bytes = 64 KiB per token, 236× less" in f.message
    assert "use tensorParallelSize 8 and pipelineParallelSize 2 (2 nodes × 8 GPUs" in f.message
    assert "engine.allowCrossNodeTP" in f.message
    assert "exceeds-node" not in codes(plan)


def test_allow_cross_node_tp_turns_the_refusal_into_a_warning_with_the_traffic() -> None:
    plan = _plan(**LLAMA_405B, tp=16, node_interconnect="infiniband", allow_cross_node_tp=True, max_num_seqs=32)
    assert plan.verdict == "fits"
    f = codes(plan)["cross-node-tp-allowed"]
    assert (f.severity, f.field) == ("warning", "engine.tensorParallelSize")
    assert "15.5 MB per token" in f.message and "10 ms of network time in every decode step of 32" in f.message
    assert "cross-node-tp" not in codes(plan)


def test_tp4_on_2_gpu_nodes_suggests_tp2_pp2() -> None:
    plan = _plan(architecture="llama-3-70b", gpu="A100-80GB", tp=4, gpus_per_node=2)
    f = codes(plan)["cross-node-tp"]
    assert f.severity == "error" and "a node has 2" in f.message
    assert "NVLink (300 GB/s each way per GPU)" in f.message  # A100's NVLink 3
    assert "at best InfiniBand NDR" in f.message  # nodeInterconnect unset: the best case
    assert "use tensorParallelSize 2 and pipelineParallelSize 2 (2 nodes × 2 GPUs" in f.message
    assert plan.verdict == "does-not-fit"


def test_a_tp_group_that_straddles_a_node_boundary_is_refused_and_the_fix_keeps_groups_whole() -> None:
    # 12 GPUs on 8-GPU nodes: 2 pods of 6, which TP=4 groups do not divide. TP=4 is valid and ≤ 8 but
    # still straddles; TP=2 × PP=6 fills each 6-GPU pod with 3 whole stages.
    f = codes(_plan(architecture="llama-3-70b", tp=4, pp=3))["cross-node-tp"]
    assert "pods have 6 GPUs each, which 4-GPU tensor-parallel groups do not divide" in f.message
    assert "use tensorParallelSize 2 and pipelineParallelSize 6 (2 nodes × 6 GPUs" in f.message


def test_tp_beyond_an_explicit_pods_gpus_crosses_nodes() -> None:
    f = codes(_plan(architecture="llama-3-70b", tp=8, nodes_per_copy=2))["cross-node-tp"]
    assert "each of the copy's 2 pods (one per node) has 4" in f.message


LAYOUT_CODES = {"cross-node-tp", "uneven-node-split", "exceeds-node"}


@pytest.mark.parametrize("gpus_per_node", [1, 2, 4, 8])
@pytest.mark.parametrize("pp", [1, 2, 3, 4])
@pytest.mark.parametrize("tp", [1, 2, 4, 8, 16])
def test_the_suggested_layout_keeps_every_tp_group_in_a_node(tp: int, pp: int, gpus_per_node: int) -> None:
    plan = _plan(architecture="llama-3-70b", tp=tp, pp=pp, gpus_per_node=gpus_per_node)
    found = codes(plan)
    i = plan.inputs
    if not LAYOUT_CODES & found.keys():
        assert tp <= i["gpus_per_pod"] <= gpus_per_node and i["gpus_per_pod"] % tp == 0
        return
    if "cross-node-tp" not in found:
        return
    match = re.search(r"use tensorParallelSize (\d+) and pipelineParallelSize (\d+)", found["cross-node-tp"].message)
    assert match, found["cross-node-tp"].message
    new_tp, new_pp = int(match[1]), int(match[2])
    assert new_tp * new_pp == tp * pp
    again = _plan(architecture="llama-3-70b", tp=new_tp, pp=new_pp, gpus_per_node=gpus_per_node)
    assert not LAYOUT_CODES & codes(again).keys(), [f.message for f in again.findings]


# --- how many nodes and pods ------------------------------------------------------------------------


def test_gpus_that_do_not_split_evenly_over_the_nodes_are_invalid() -> None:
    # 9 stages on 8-GPU nodes: 2 nodes by default, and 9 GPUs make no two equal pods.
    plan = _plan(architecture="llama-3-8b", pp=9)
    f = codes(plan)["uneven-node-split"]
    assert (f.severity, f.field) == ("invalid", "placement.nodesPerCopy")
    assert "9 GPUs do not split evenly over 2 nodes" in f.message
    assert "placement.nodesPerCopy 3 or 9" in f.message
    assert plan.verdict == "invalid"
    explicit = codes(_plan(architecture="llama-3-70b", tp=8, nodes_per_copy=3))["uneven-node-split"]
    assert "(placement.nodesPerCopy)" in explicit.message and "nodesPerCopy 1, 2, 4 or 8" in explicit.message


def test_too_few_explicit_nodes_is_exceeds_node_naming_the_nodes_that_would_do() -> None:
    plan = _plan(**LLAMA_405B, tp=8, pp=2, nodes_per_copy=1)
    f = codes(plan)["exceeds-node"]
    assert (f.severity, f.field) == ("error", "placement.nodesPerCopy")
    assert "puts 16 GPUs in each pod" in f.message and "a node has 8" in f.message
    assert "Use placement.nodesPerCopy 2 (8 GPUs on each node)" in f.message
    assert plan.verdict == "does-not-fit"
    # 12 GPUs, TP=4: 2 nodes would hold 6 each (TP groups straddle), so the fix is 3 nodes of 4.
    f = codes(_plan(architecture="llama-3-70b", tp=4, pp=3, nodes_per_copy=1))["exceeds-node"]
    assert "Use placement.nodesPerCopy 3 (4 GPUs on each node)" in f.message


def test_explicit_nodes_for_a_copy_one_node_holds_warns() -> None:
    plan = _plan(architecture="llama-3-70b", tp=4, pp=2, nodes_per_copy=2, node_interconnect="infiniband")
    f = codes(plan)["spans-nodes-needlessly"]
    assert (f.severity, f.field) == ("warning", "placement.nodesPerCopy")
    assert "over 2 nodes though one node has 8" in f.message and "Leave placement.nodesPerCopy unset" in f.message
    assert plan.fits
    assert "spans-nodes-needlessly" not in codes(_plan(architecture="llama-3-70b", tp=4, pp=2))
    assert "spans-nodes-needlessly" not in codes(_plan(**LLAMA_405B, tp=8, pp=2, nodes_per_copy=2))


# --- the network between the nodes -----------------------------------------------------------------


def test_a_multi_node_copy_without_node_interconnect_asks_for_an_rdma_fabric() -> None:
    f = codes(_plan(**LLAMA_405B, tp=8, pp=2))["node-interconnect-unset"]
    assert (f.severity, f.field) == ("warning", "hardware.nodeInterconnect")
    assert "spans 2 nodes" in f.message and "InfiniBand or RoCE, with GPUDirect RDMA" in f.message
    assert "64 KiB" in f.message
    assert "node-interconnect-unset" not in codes(_plan(**LLAMA_405B, tp=8, pp=2, node_interconnect="roce"))
    assert "node-interconnect-unset" not in codes(_plan(architecture="llama-3-70b", tp=4))  # one node


def test_pipeline_stages_over_plain_ethernet_warn_with_the_activation_traffic() -> None:
    plan = _plan(**LLAMA_405B, tp=8, pp=2, node_interconnect="ethernet")
    f = codes(plan)["pp-over-ethernet"]
    assert (f.severity, f.field) == ("warning", "hardware.nodeInterconnect")
    # 8192 tokens × 64 KiB = 512 MiB a step: 43 ms at 12.5 GB/s, 11 ms at 50; 4 steps/s = 2.1 GB/s.
    assert "64 KiB per token" in f.message and "prefill step of 8192 tokens" in f.message
    assert "512 MiB across it, 43 ms at line rate" in f.message and "11 ms over InfiniBand NDR" in f.message
    assert "estimated 4 such steps a second (32,768 tokens/s) that is 2.1 GB/s, 17% of the link" in f.message
    assert plan.fits
    assert "pp-over-ethernet" not in codes(_plan(**LLAMA_405B, tp=8, pp=2, node_interconnect="infiniband"))


def test_pipeline_stages_across_nodes_explain_the_bubbles_with_the_profiles_numbers() -> None:
    f = codes(_plan(**LLAMA_405B, tp=8, pp=2, node_interconnect="infiniband"))["pp-bubbles"]
    assert (f.severity, f.field) == ("info", "engine.pipelineParallelSize")
    assert "maxNumSeqs 256 makes micro-batches of at most 128 sequences" in f.message
    assert "fewer than 2 requests running" in f.message
    assert "(63 layers each) and cross 1 network hop per token" in f.message
    assert "one 8-GPU group running all 126 layers" in f.message
    starved = codes(_plan(**LLAMA_405B, tp=8, pp=2, node_interconnect="infiniband", max_num_seqs=1))["pp-bubbles"]
    assert starved.severity == "warning" and "maxNumSeqs below 2" in starved.message
    assert "pp-bubbles" not in codes(_plan(architecture="llama-3-8b", pp=2))  # stages inside one node


# --- what `deployctl plan` prints --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "line"),
    [
        (
            {**LLAMA_405B, "tp": 8, "pp": 2},
            "layout: 2 nodes × 8 GPUs (TP=8 inside each node, PP=2 across nodes)",
        ),
        ({"architecture": "llama-3-70b", "tp": 4, "gpus_per_node": 4}, "layout: 1 node × 4 GPUs (TP=4, PP=1, one pod)"),
        (
            {**LLAMA_405B, "tp": 16, "allow_cross_node_tp": True},
            "layout: 2 nodes × 8 GPUs (TP=16 across nodes, PP=1)",
        ),
        (
            {"architecture": "llama-3-70b", "tp": 2, "pp": 4, "gpus_per_node": 4},
            "layout: 2 nodes × 4 GPUs (TP=2 inside each node, PP=4: 2 stages on each node)",
        ),
        (
            {"architecture": "llama-3-8b", "pp": 9},
            "layout: 2 nodes × 5 GPUs (TP=1, PP=9: 9 GPUs do not split evenly)",
        ),
    ],
)
def test_plan_table_shows_the_layout(kwargs: dict[str, Any], line: str) -> None:
    prof = make_profile(**kwargs)
    table = planview.render_table(prof, planner.plan(prof), color=False)
    assert table.splitlines()[1] == line


def _merge(base: dict[str, Any], changes: dict[str, Any]) -> None:
    for key, value in changes.items():
        if isinstance(value, dict):
            _merge(base.setdefault(key, {}), value)
        else:
            base[key] = value


def test_the_capacity_page_shows_the_405b_plan_as_deployctl_prints_it(tmp_path: pathlib.Path) -> None:
    page = docblocks.DOCS / "capacity.md"
    lines = page.read_text().splitlines()
    start = lines.index("## Multi-node layouts")
    end = next(n for n in range(start + 1, len(lines)) if lines[n].startswith("## "))
    blocks = [b for b in docblocks.blocks(page) if start < b.line <= end]
    changes = next(b for b in blocks if b.lang == "yaml")
    shown = next(b for b in blocks if b.lang == "text")
    doc = yaml.safe_load((docblocks.ROOT / "profiles" / "prod-tp4.yaml").read_text())
    _merge(doc, yaml.safe_load("\n".join(changes.lines)))
    path = tmp_path / "405b.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    prof = profile_schema.load(str(path))
    assert planview.render_table(prof, planner.plan(prof), color=False).splitlines() == shown.lines


def test_the_findings_table_lists_every_code_the_planner_gives() -> None:
    source = "".join(
        (docblocks.ROOT / "orchestrator" / name).read_text()
        for name in ("plan/planner.py", "plan/findings.py", "plan/layout.py")
    )
    emitted = set(re.findall(r'Finding\(\s*"([a-z0-9-]+)"', source))
    page = (docblocks.DOCS / "capacity.md").read_text().split("## Findings the planner gives", 1)[1]
    listed = set(re.findall(r"^\| `([a-z0-9-]+)` \|", page, flags=re.MULTILINE))
    assert {"cross-node-tp", "uneven-node-split", "pp-bubbles"} <= emitted
    assert listed == emitted


def test_a_calibration_carries_over_only_to_the_same_tensor_and_pipeline_split() -> None:
    recorded = planner.plan(make_profile(architecture="llama-3.1-405b", tp=8, pp=2)).to_json()
    assert planner.same_setup(recorded, make_profile(architecture="llama-3.1-405b", tp=8, pp=2))
    # Same TP, another PP: each GPU holds other layers, so the overhead seen does not carry over.
    assert not planner.same_setup(recorded, make_profile(architecture="llama-3.1-405b", tp=8, pp=4))
    assert not planner.same_setup(recorded, make_profile(architecture="llama-3.1-405b", tp=4, pp=2))
