"""A speculative decode step: the target model verifies k+1 positions per sequence after k draft steps.

Priced per accepted token. The scheduler still advances a sequence one token per step; with speculation on,
a decode step's price is one verify step plus its k draft steps divided by the expected accepted length τ
(`Speculative.tokens_per_step`). This is the *expectation* model: every sequence gains τ tokens per verify step
on average and exactly, rather than a number drawn per sequence and step, so KV growth, pages, TPOT and
throughput follow the mean and both clocks apply it identically. What it leaves out: the spread of accepted
lengths (tokens arrive in bursts of 1..k+1 in reality), the transient KV of the k rejected-or-not draft
positions, and verify steps that carry prefill chunks (a step with chunks runs without speculation).
"""

from __future__ import annotations

from simulator.capacity import draft_pool
from simulator.config.scenario import Pool
from simulator.config.specs import ModelSpec
from simulator.pricing.ops import Op, mtp_draft_ops, step_ops


def verify_ops(model: ModelSpec, pool: Pool, batch: int, context: int, integrity_pages: int = 0) -> list[Op]:
    """The target model over k+1 positions of each of `batch` sequences (one read of each cache)."""
    assert pool.speculative is not None
    return step_ops(model, pool, batch, context, (), integrity_pages, queries=pool.speculative.draft_tokens + 1)


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


def speculative_step_ops(model: ModelSpec, pool: Pool, batch: int, context: int,
                         integrity_pages: int = 0) -> list[Op]:
    """One verify step and its draft steps (not divided by τ: that is the cost model's per-token price)."""
    return verify_ops(model, pool, batch, context, integrity_pages) + draft_ops(model, pool, batch, context)
