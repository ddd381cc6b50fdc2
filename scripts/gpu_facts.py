#!/usr/bin/env python3
"""Read the facts the planner's GPU catalog relies on off a real GPU; needs only PyTorch.

Prints one JSON object: the device, its total memory as CUDA reports it (what vLLM budgets
against: total × gpuMemoryUtilization), the memory a process holds outside PyTorch's allocator
once CUDA and cuBLAS are initialised (the planner's single-GPU "non-torch" term), and whether
fp8 (e4m3) matrix products run natively. Run it where a GPU is, e.g. the device machine:
`python3 scripts/gpu_facts.py > gpu_facts.json`; tests/test_catalog.py holds the readings.
"""

from __future__ import annotations

import json
import sys

import torch

GIB = 1024**3


def _non_torch_gib(total: int) -> float:
    free, _ = torch.cuda.mem_get_info()
    return (total - free - torch.cuda.memory_reserved()) / GIB


def main() -> int:
    if not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device"}))
        return 1
    _free, total = torch.cuda.mem_get_info()  # creates the CUDA context
    facts: dict[str, object] = {
        "device": torch.cuda.get_device_name(),
        "compute_capability": ".".join(map(str, torch.cuda.get_device_capability())),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "total_gib": round(total / GIB, 3),
        "non_torch_gib_after_context": round(_non_torch_gib(total), 3),
    }
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()  # initialises cuBLAS and its workspace, as vLLM's first forward pass does
    torch.cuda.synchronize()
    facts["non_torch_gib_after_cublas"] = round(_non_torch_gib(total), 3)
    try:
        x = torch.randn(256, 256, device="cuda").to(torch.float8_e4m3fn)
        y = torch.randn(256, 256, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0, device="cuda")
        torch._scaled_mm(x, y, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        facts["fp8_matmul"] = True
    except (RuntimeError, AttributeError, TypeError) as e:
        facts["fp8_matmul"] = False
        facts["fp8_error"] = str(e)[:200]
    print(json.dumps(facts, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
