"""How one model copy is split across GPUs and nodes, and what the split costs on the wire.

A copy runs tensorParallelSize × pipelineParallelSize GPUs, one pod on each node it spans. ``Split``
holds the numbers the planner's memory formulas and the layout findings share; ``findings`` keeps
tensor-parallel groups inside a node, pipeline stages across nodes, and says in this model's numbers
what crosses the network between them and at which link speeds; ``line`` is the layout line
`deployctl plan` prints.

Pure: takes a profile and its split, returns findings and text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from orchestrator.catalog import config as catalog
from orchestrator.catalog import quantization
from orchestrator.profile import model as profile_schema
from orchestrator.profile import placement as profile_placement

Severity = Literal["invalid", "error", "warning", "info"]

KIB = 1 << 10
ACTIVATION_BYTES = 2  # activations run in the 16-bit model dtype

# Link speeds the traffic figures use, in GB/s (10^9 bytes/s) per GPU and per direction: a ring
# all-reduce sends and receives at once, so one direction is what bounds it. NVLink is NVIDIA's
# per-GPU figure halved (H100/H200 SXM 900 GB/s both ways, A100 and H100 NVL's bridge 600); PCIe 4.0
# x16 32 GB/s. Between nodes: one 400 Gb/s NIC per GPU, as HGX H100 nodes have, for InfiniBand NDR
# and RoCE; one 100 GbE link for plain Ethernet.
_NVLINK_GB_S: dict[str, float] = {
    "A100-40GB": 300.0,
    "A100-80GB": 300.0,
    "H100-80GB": 450.0,
    "H100-NVL": 300.0,
    "H200": 450.0,
}
_NVLINK_GB_S_OTHER = 450.0
_PCIE_GB_S = 32.0
_NODE_LINKS: dict[str | None, tuple[str, float]] = {
    "infiniband": ("InfiniBand NDR (400 Gb/s per GPU)", 50.0),
    "roce": ("RoCE (400 GbE per GPU)", 50.0),
    "ethernet": ("100 GbE over TCP", 12.5),
    None: ("the network: at best InfiniBand NDR (400 Gb/s per GPU; hardware.nodeInterconnect is unset)", 50.0),
}
# The prefill pace the Ethernet figure assumes: full steps of max_num_batched_tokens per second. An
# estimate only; the real pace depends on the model, the GPUs and the prompts.
_PREFILL_STEPS_PER_S = 4


@dataclass(frozen=True)
class Finding:
    """One thing the planner has to say, about one profile field."""

    code: str
    severity: Severity
    message: str
    field: str  # the profile path, e.g. engine.tensorParallelSize, so the CLI can show the YAML line

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "severity": self.severity, "message": self.message, "field": self.field}


@dataclass(frozen=True)
class Split:
    """How one model copy is split: the numbers every formula of the planner and this module needs."""

    arch: catalog.ModelArch
    tp: int
    pp: int
    quant: quantization.Quantization | None  # how the linear weights are stored; None: 16-bit
    kv_bytes: int  # per KV element

    @property
    def layers_per_gpu(self) -> int:
        # vLLM spreads layers as evenly as it can; the stage with the most layers bounds the KV cache.
        return math.ceil(self.arch.num_hidden_layers / self.pp)

    @property
    def kv_heads_per_gpu(self) -> int:
        # Fewer KV heads than GPUs: vLLM replicates KV heads so each GPU holds at least one.
        return math.ceil(self.arch.num_key_value_heads / self.tp)

    @property
    def q_heads_per_gpu(self) -> int:
        return math.ceil(self.arch.num_attention_heads / self.tp)

    @property
    def mlp_width_per_gpu(self) -> int:
        width = self.arch.experts.width or self.arch.intermediate_size
        return math.ceil(width / self.tp)


def valid_tensor_parallel_sizes(arch: catalog.ModelArch, limit: int = 64) -> list[int]:
    """TP sizes vLLM accepts for ``arch``: they divide the attention heads and the MLP width, and the
    KV heads either split evenly across them or are replicated an equal number of times."""
    kv = arch.num_key_value_heads
    width = arch.experts.width or arch.intermediate_size
    return [
        tp
        for tp in range(1, limit + 1)
        if arch.num_attention_heads % tp == 0 and width % tp == 0 and (kv % tp == 0 or tp % kv == 0)
    ]


def nodes_for(gpus: int, gpus_per_node: int, tp: int) -> int:
    """Nodes a copy of ``gpus`` GPUs takes by default, or 0 when that split leaves a pod of unequal
    size or a tensor-parallel group across a node boundary."""
    nodes = -(-gpus // gpus_per_node)
    pod = gpus // nodes
    return nodes if gpus % nodes == 0 and pod % tp == 0 else 0


@dataclass(frozen=True)
class _Context:
    """What the layout findings read: the profile, its model and split, and the tokens of a prefill step."""

    profile: profile_schema.Profile
    arch: catalog.ModelArch
    split: Split
    batched_tokens: int


def _in_node_layout(c: _Context) -> tuple[int, int, int] | None:
    """(TP, PP, nodes) for the same GPUs with every tensor-parallel group inside one node: the largest
    valid TP up to a node's GPUs, pipeline stages for the rest."""
    gpus, gpn = c.profile.gpus_per_copy, c.profile.hardware.gpusPerNode
    for tp in reversed(valid_tensor_parallel_sizes(c.arch)):
        nodes = nodes_for(gpus, gpn, tp) if tp <= gpn and gpus % tp == 0 else 0
        if nodes and gpus // tp <= c.arch.num_hidden_layers:
            return tp, gpus // tp, nodes
    return None


def _pp_bytes_per_token(a: catalog.ModelArch) -> int:
    # vLLM's decoder models hand the next stage the hidden state and the residual (IntermediateTensors).
    return 2 * a.hidden_size * ACTIVATION_BYTES


def _tp_bytes_per_token(c: _Context) -> float:
    # Two all-reduces of the hidden state per layer (after attention, after the MLP); a ring all-reduce
    # over n GPUs sends 2(n-1)/n of the message from each GPU.
    tp = c.split.tp
    return 2 * c.split.layers_per_gpu * c.arch.hidden_size * ACTIVATION_BYTES * 2 * (tp - 1) / tp


def _intra_node_link(hw: profile_placement.HardwareSpec) -> tuple[str, float]:
    if hw.interconnect == "pcie":
        return "PCIe", _PCIE_GB_S
    return "NVLink", _NVLINK_GB_S.get(hw.gpu or "", _NVLINK_GB_S_OTHER)


def _tp_traffic(c: _Context) -> str:
    """Why a tensor-parallel group belongs inside a node, in this model's numbers."""
    a, tp, layers = c.arch, c.split.tp, c.split.layers_per_gpu
    per_token, pp_bytes = _tp_bytes_per_token(c), _pp_bytes_per_token(a)
    link_name, link = _NODE_LINKS[c.profile.hardware.nodeInterconnect]
    nv_name, nv = _intra_node_link(c.profile.hardware)
    seqs = c.profile.engine.maxNumSeqs
    return (
        "Tensor parallelism all-reduces every layer's activations twice per token, so each GPU moves "
        f"2 × {layers} layers × {a.hidden_size} hidden × 2 bytes × 2({tp}-1)/{tp} = {per_token / 1e6:.1f} MB "
        f"per token. Between nodes that goes over {link_name}, {link:g} GB/s each way, instead of {nv_name} "
        f"({nv:g} GB/s each way per GPU): {per_token / link / 1e3:.0f} µs per token instead of "
        f"{per_token / nv / 1e3:.0f} µs, {seqs * per_token / link / 1e6:.0f} ms of network time in every "
        f"decode step of {seqs} sequences (maxNumSeqs), plus the latency of {2 * layers} all-reduces per step. "
        "Pipeline stages across nodes send only the hidden state and residual at a stage boundary: "
        f"2 × {a.hidden_size} × 2 bytes = {pp_bytes / KIB:g} KiB per token, {per_token / pp_bytes:.0f}× less"
    )


def findings(profile: profile_schema.Profile, split: Split, batched_tokens: int) -> list[Finding]:
    """How a copy's GPUs sit on nodes (one pod per node) and what crosses the network between them."""
    c = _Context(profile, split.arch, split, batched_tokens)
    prof = c.profile
    gpus, nodes, gpn = prof.gpus_per_copy, prof.nodes_per_copy, prof.hardware.gpusPerNode
    tp, pp = c.split.tp, c.split.pp
    if gpus % nodes:
        return [_uneven_split(c)]  # the pod size is not defined, so nothing below is either
    pod = gpus // nodes
    out: list[Finding] = []
    if pod > gpn:
        out.append(_exceeds_node(c))
    elif nodes > 1 and gpus <= gpn:
        msg = (
            f"placement.nodesPerCopy {nodes} spreads a copy of {gpus} GPUs (TP × PP) over {nodes} nodes though "
            f"one node has {gpn}: its GPUs then talk over the network instead of inside the node, and the copy "
            f"needs {nodes} nodes free at once and stops when any of them goes. Leave placement.nodesPerCopy "
            "unset to keep the copy on one node."
        )
        out.append(Finding("spans-nodes-needlessly", "warning", msg, "placement.nodesPerCopy"))
    if tp > gpn or tp > pod or pod % tp:
        out.append(_cross_node_tp(c, pod))
    if nodes > 1:
        out += _network_findings(c, nodes)
    if nodes > 1 and pp > 1:
        out.append(_pp_bubbles(c, nodes))
    return out


def _uneven_split(c: _Context) -> Finding:
    prof = c.profile
    gpus, nodes, gpn = prof.gpus_per_copy, prof.nodes_per_copy, prof.hardware.gpusPerNode
    why = (
        "placement.nodesPerCopy" if prof.placement.nodesPerCopy is not None else f"as many as {gpn} GPUs per node need"
    )
    options = [n for n in range(1, gpus + 1) if gpus % n == 0 and gpus // n <= gpn]
    return Finding(
        "uneven-node-split",
        "invalid",
        f"tensorParallelSize × pipelineParallelSize = {gpus} GPUs do not split evenly over {nodes} nodes ({why}): "
        "every node of a copy runs one pod, and the pods request the same number of GPUs. Use "
        f"placement.nodesPerCopy {join_words(options)}, or a pipelineParallelSize that makes TP × PP a multiple "
        f"of {nodes}.",
        "placement.nodesPerCopy",
    )


def _exceeds_node(c: _Context) -> Finding:
    prof = c.profile
    gpus, nodes, gpn, tp = prof.gpus_per_copy, prof.nodes_per_copy, prof.hardware.gpusPerNode, c.split.tp
    fits = [n for n in range(nodes + 1, gpus + 1) if gpus % n == 0 and gpus // n <= gpn]
    whole_groups = [n for n in fits if (gpus // n) % tp == 0]
    fix = (whole_groups or fits)[0]
    return Finding(
        "exceeds-node",
        "error",
        f"placement.nodesPerCopy {nodes} puts {gpus // nodes} GPUs in each pod of the copy (TP × PP = {gpus} "
        f"over {nodes} node{'s' if nodes > 1 else ''}) but a node has {gpn}: the pods can never be scheduled. "
        f"Use placement.nodesPerCopy {fix} ({gpus // fix} GPUs on each node).",
        "placement.nodesPerCopy",
    )


def _cross_node_tp(c: _Context, pod: int) -> Finding:
    prof = c.profile
    tp, gpn, nodes = c.split.tp, prof.hardware.gpusPerNode, prof.nodes_per_copy
    if tp > gpn:
        where = f"tensorParallelSize {tp} needs {tp} GPUs in one tensor-parallel group but a node has {gpn}"
    elif tp > pod:
        where = (
            f"tensorParallelSize {tp} needs {tp} GPUs in one tensor-parallel group but each of the copy's "
            f"{nodes} pods (one per node) has {pod}"
        )
    else:
        where = f"the copy's pods have {pod} GPUs each, which {tp}-GPU tensor-parallel groups do not divide"
    where += ", so the group spans nodes"
    if prof.engine.allowCrossNodeTP:
        msg = (
            f"{where} (engine.allowCrossNodeTP is set). {_tp_traffic(c)}. Expect decoding far slower than in one node."
        )
        return Finding("cross-node-tp-allowed", "warning", msg, "engine.tensorParallelSize")
    better = _in_node_layout(c)
    if better is None:
        fix = "no split of these GPUs keeps tensor-parallel groups inside nodes; use GPUs per copy a node holds"
    else:
        b_tp, b_pp, b_nodes = better
        fix = (
            f"use tensorParallelSize {b_tp} and pipelineParallelSize {b_pp} ({b_nodes} node"
            f"{'s' if b_nodes > 1 else ''} × {b_tp * b_pp // b_nodes} GPUs, tensor parallelism inside each node)"
        )
    msg = f"{where}. {_tp_traffic(c)}. Fix: {fix}, or set engine.allowCrossNodeTP to accept the slowdown."
    return Finding("cross-node-tp", "error", msg, "engine.tensorParallelSize")


def _network_findings(c: _Context, nodes: int) -> list[Finding]:
    hw, a, pp = c.profile.hardware, c.arch, c.split.pp
    pp_bytes = _pp_bytes_per_token(a)
    if hw.nodeInterconnect is None:
        msg = (
            f"this copy spans {nodes} nodes but hardware.nodeInterconnect is unset. Pipeline stages hand every "
            f"token's hidden state and residual ({pp_bytes / KIB:g} KiB) to the next node, and vLLM waits on "
            "each hand-over: the nodes need an RDMA fabric, InfiniBand or RoCE, with GPUDirect RDMA, so NCCL "
            "moves activations between GPU memory and the NIC without a copy through host memory and the "
            "kernel's TCP stack. Set hardware.nodeInterconnect (infiniband, roce or ethernet) to the link the "
            "nodes have."
        )
        return [Finding("node-interconnect-unset", "warning", msg, "hardware.nodeInterconnect")]
    if hw.nodeInterconnect != "ethernet" or pp == 1:
        return []
    bt = c.batched_tokens
    step = bt * pp_bytes
    eth, ib = _NODE_LINKS["ethernet"][1], _NODE_LINKS["infiniband"][1]
    rate = _PREFILL_STEPS_PER_S * bt * pp_bytes / 1e9
    msg = (
        f"pipeline stages of this copy pass activations over plain Ethernet (hardware.nodeInterconnect "
        f"ethernet; assumed 100 GbE, {eth:g} GB/s, through NCCL's TCP sockets). Each stage boundary carries "
        f"the hidden state and residual, {pp_bytes / KIB:g} KiB per token: a full prefill step of {bt} tokens "
        f"(maxNumBatchedTokens) moves {step / (1 << 20):.0f} MiB across it, {step / eth / 1e6:.0f} ms at line "
        f"rate, which NCCL's socket transport seldom reaches, against {step / ib / 1e6:.0f} ms over InfiniBand "
        f"NDR. At an estimated {_PREFILL_STEPS_PER_S} such steps a second "
        f"({_PREFILL_STEPS_PER_S * bt:,} tokens/s) that is {rate:.1f} GB/s, {rate / eth:.0%} of the link. "
        "Fine for trials; for production use InfiniBand or RoCE with GPUDirect RDMA."
    )
    return [Finding("pp-over-ethernet", "warning", msg, "hardware.nodeInterconnect")]


def _pp_bubbles(c: _Context, nodes: int) -> Finding:
    eng, a = c.profile.engine, c.arch
    tp, pp, seqs = c.split.tp, c.split.pp, eng.maxNumSeqs
    idle = seqs < pp
    msg = (
        f"pipelineParallelSize {pp} across {nodes} nodes: vLLM keeps up to {pp} batches in flight, one per "
        f"stage, and a request rides in one of them, so maxNumSeqs {seqs} makes micro-batches of at most "
        f"{-(-seqs // pp)} sequences. "
        + (
            f"With maxNumSeqs below {pp} some stage always waits idle: raise it. "
            if idle
            else f"With fewer than {pp} requests running some stage waits idle; throughput grows with concurrency. "
        )
        + f"A single request gets no faster: its tokens pass the {pp} stages in turn "
        f"({c.split.layers_per_gpu} layers each) and cross {nodes - 1} network hop"
        f"{'s' if nodes > 2 else ''} per token, so it decodes at best as fast as one {tp}-GPU group running "
        f"all {a.num_hidden_layers} layers."
    )
    return Finding("pp-bubbles", "warning" if idle else "info", msg, "engine.pipelineParallelSize")


def line(tp: int, pp: int, nodes: int, pod: int, gpus_per_replica: int) -> str:
    """Where one copy's GPUs sit, e.g. `layout: 2 nodes × 8 GPUs (TP=8 inside each node, PP=2 across nodes)`
    (``pod``: GPUs per pod, one pod per node)."""
    where = f"layout: {nodes} node{'s' if nodes > 1 else ''} × {pod} GPU{'s' if pod > 1 else ''}"
    if nodes == 1:
        return f"{where} (TP={tp}, PP={pp}, one pod)"
    if gpus_per_replica != nodes * pod:
        return f"{where} (TP={tp}, PP={pp}: {gpus_per_replica} GPUs do not split evenly)"
    if tp > pod or pod % tp:
        return f"{where} (TP={tp} across nodes, PP={pp})"
    stages = pod // tp
    if stages == 1:
        return f"{where} (TP={tp} inside each node, PP={pp} across nodes)"
    return f"{where} (TP={tp} inside each node, PP={pp}: {stages} stages on each node)"


def join_words(items: Sequence[object], last: str = "or") -> str:
    """``items`` as a sentence lists them: "1, 2, 4 or 8"."""
    texts = [str(i) for i in items]
    if len(texts) <= 1:
        return "".join(texts)
    return ", ".join(texts[:-1]) + f" {last} " + texts[-1]
