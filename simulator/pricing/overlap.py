"""Shared experts beside routed experts: a MoE layer in a decode step takes the longer of its two streams.

Serving engines run a MoE layer's shared experts on a second CUDA stream while the router and the routed
experts run on the first: SGLang's DeepseekV2MoE `forward_normal_dual_stream` (up to 1,024 tokens, when the
shared experts are not fused into the routed call and no DeepEP all-to-all is used), TRT-LLM's
`maybe_execute_in_parallel` under CUDA graphs; AIConfigurator prices it as `generation_moe_overlap`, the
max of the two groups' sums, in decode only (its prefill runs them in sequence). The same here: in a
decode-only step of a pool with `shared_expert_overlap` (the default), each stream's ops are priced as
they would be alone, and the shorter stream's ops are left out of the step — it runs entirely under the
longer one. A speculative verify step overlaps the same way over its (k+1)·batch rows (the engine runs it as
one forward pass of that many tokens). Mixed and prefill steps and DP attention (DeepEP) keep both streams in
sequence.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from simulator.config.scenario import Pool
from simulator.config.specs import ModelSpec
from simulator.pricing.ops import Op, moe_streams

DUAL_STREAM_TOKENS = 1024  # SGLang's DUAL_STREAM_TOKEN_THRESHOLD (models/deepseek_v2.py)


def applies(model: ModelSpec, pool: Pool, rows: int) -> bool:
    """Whether a decode step of `rows` rows on a rank runs its shared experts beside the routed ones."""
    return (
        pool.shared_expert_overlap
        and model.moe is not None
        and model.moe.shared_experts > 0
        and pool.dp == 1
        and 0 < rows <= DUAL_STREAM_TOKENS
    )


def overlapped(
    ops: list[Op], model: ModelSpec, pool: Pool, rows: int, fused_moe: bool, price_us: Callable[[Op], float]
) -> list[Op]:
    """`ops` (a decode step's `step_ops`) without the shorter MoE stream; `price_us(op)`: one op's
    microseconds, all `count` of them."""
    routed, shared = moe_streams(model, pool, rows, fused_moe)
    hidden = shared if sum(map(price_us, shared)) <= sum(map(price_us, routed)) else routed
    drop = Counter({(op.family, op.shape): op.count for op in hidden})
    out = []
    for op in ops:
        k = drop.pop((op.family, op.shape), 0)
        assert k <= op.count, (op.family, op.shape)
        if op.count > k:
            out.append(Op(op.family, op.shape, op.count - k))
    assert not drop, drop
    return out
