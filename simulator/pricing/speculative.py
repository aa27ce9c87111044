"""A speculative decode step: the target model verifies k+1 positions per sequence after k draft steps.

The step is priced as it runs: one verify step (the target's op list over (k+1)·batch query rows, attention
with k+1 queries per sequence, one read of each cache) plus its k draft steps (the model's MTP module k times,
or a draft model's decode step k times). How many tokens it gives each sequence (1..k+1) is not the price's
business: the scheduler draws it per sequence and step from the seed (`serving/speculation.py`), so TPOT and
throughput follow from the steps that ran and the tokens they gave. A step with prefill chunks runs them alone,
as SGLang does with speculation on (it turns mixed chunked prefill off).
"""

from __future__ import annotations

from simulator.capacity import draft_pool
from simulator.config.scenario import Pool
from simulator.config.specs import ModelSpec
from simulator.pricing.ops import Op, mtp_draft_ops, step_ops


def verify_ops(
    model: ModelSpec, pool: Pool, batch: int, context: int, integrity_pages: int = 0, fused_moe: bool = False
) -> list[Op]:
    """The target model over k+1 positions of each of `batch` sequences (one read of each cache)."""
    assert pool.speculative is not None
    return step_ops(
        model, pool, batch, context, (), integrity_pages, queries=pool.speculative.draft_tokens + 1, fused_moe=fused_moe
    )


def draft_ops(model: ModelSpec, pool: Pool, batch: int, context: int) -> list[Op]:
    """k draft steps: the model's MTP module k times, or a draft model's decode step k times on each DP rank."""
    spec = pool.speculative
    assert spec is not None
    if spec.method == "mtp":
        one = mtp_draft_ops(model, pool, batch, context)
    else:
        assert spec.draft_model is not None
        one = step_ops(spec.draft_model, draft_pool(pool), -(-batch // pool.dp), context)
    return [Op(op.family, op.shape, op.count * spec.draft_tokens) for op in one]


def speculative_step_ops(model: ModelSpec, pool: Pool, batch: int, context: int, integrity_pages: int = 0) -> list[Op]:
    """One verify step and its draft steps."""
    return verify_ops(model, pool, batch, context, integrity_pages) + draft_ops(model, pool, batch, context)
