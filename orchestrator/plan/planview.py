"""The capacity table `deployctl plan` prints: one GPU's memory split, what fits, and why."""

from __future__ import annotations

from orchestrator import output
from orchestrator.plan.planner import Plan
from orchestrator.profile.model import Profile

_SEVERITY_COLOR = {"invalid": "red", "error": "red", "warning": "yellow", "info": "dim"}


def render_table(profile: Profile, plan: Plan, *, color: bool) -> str:
    m = plan.memory
    i = plan.inputs
    verdict = "FITS" if plan.fits else "DOES NOT FIT"
    head = (
        f"{profile.metadata.name}: {i['model']} on {i['gpus_per_replica']}× {i.get('gpu') or 'GPU'} "
        f"(TP={i['tensor_parallel_size']}, PP={i['pipeline_parallel_size']}), "
        f"{profile.engine.engine.title} {i['engine_version']}"
    )
    rows = [
        ["GPU memory (as CUDA reports it)", f"{m.total_gib:.2f} GiB"],
        [f"budget ({i['memory_flag']} {i['gpu_memory_utilization']})", f"{m.budget_gib:.2f} GiB"],
        ["  weights", f"{m.weights_gib:.2f} GiB"],
        [
            f"  activation peak ({i['max_num_batched_tokens']} batched tokens)",
            f"{m.activation_peak_gib:.2f} GiB",
        ],
        ["  non-torch (CUDA context, NCCL)", f"{m.non_torch_gib:.2f} GiB"],
        ["  CUDA graphs", f"{m.cuda_graphs_gib:.2f} GiB"],
        ["  KV cache", _kv_cache(m.kv_cache_gib)],
        ["headroom outside the budget", f"{m.headroom_gib:.2f} GiB"],
        [
            f"KV per token per GPU ({i['kv_cache_dtype']}, {i['kv_heads_per_gpu']} KV heads/GPU)",
            f"{plan.kv_bytes_per_token_per_gpu:,} B ({plan.kv_bytes_per_token_per_gpu / 1024:g} KiB)",
        ],
        [
            "KV cache size",
            f"{plan.kv_cache_tokens:,} tokens ({plan.kv_cache_blocks:,} blocks of {i['block_size']})",
        ],
        [f"max concurrency at {i['max_model_len']:,} tokens", f"{plan.max_concurrency:.2f}×"],
        ["maxNumSeqs", f"{i['max_num_seqs']}"],
    ]
    parts = [
        ("weights", max(m.weights_gib, 0.0)),
        ("activations+non-torch+graphs", m.activation_peak_gib + m.non_torch_gib + m.cuda_graphs_gib),
        ("KV cache", max(m.kv_cache_gib, 0.0)),
        ("headroom", max(m.headroom_gib, 0.0)),
    ]
    rule = f"KV cache: {i['memory_rule']}"
    lines = [
        head,
        plan.layout_line(),
        rule,
        "",
        output.table(["PER GPU", "VALUE"], rows),
        "",
        output.bar(parts, m.total_gib),
    ]
    painted = verdict
    if color:
        painted = f"\033[{'32' if plan.fits else '31'}m{verdict}\033[0m"
    lines += ["", f"verdict: {painted}"]
    for f in plan.findings:
        sev = f.severity
        label = (
            f"\033[{ {'red': '31', 'yellow': '33', 'dim': '2'}[_SEVERITY_COLOR[sev]] }m{sev}\033[0m" if color else sev
        )
        lines.append(f"  {label}: {f.message}")
    return "\n".join(lines)


def _kv_cache(gib: float) -> str:
    """The KV cache row: its size, or how far the other terms overrun the budget (never a negative size)."""
    return f"{gib:.2f} GiB" if gib >= 0 else f"none: short by {-gib:.2f} GiB"
