"""The fast pricers restated as plain arithmetic: every step price the cost model computes (decode runs folded
into lines and compiled, parts of mixed steps cached per count, lines priced a block of counts at a time) equals
`reference.price` of the step's op list, priced op by op top to bottom — on every pool of every bundled study,
with the roofline and with measured tables, and on fuzzed shapes.

Only the order of the sums differs between the two, so they agree to rounding (a relative 1e-12), not bit for bit.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.config import loader
from simulator.config.scenario import Scenario
from simulator.config.specs import MLA
from simulator.pricing import reference
from simulator.pricing.costmodel import CostModel
from simulator.pricing.ops import LINES, Spec, compiled_kernels, line_ops, step_ops
from simulator.pricing.profile import Profile
from simulator.pricing.usage import Usage

ROOT = Path(__file__).resolve().parents[1]
STUDIES = sorted(p for p in (ROOT / "scenarios").glob("*.yaml") if p.stem != "tiny-cpu")
TABLES = ROOT / "profiles" / "h200-sglang.json"  # AIConfigurator's measured H200 tables, imported
REL = 1e-12


@cache
def study(path: Path) -> Scenario:
    return loader.load(path)[0]


@cache
def tables() -> Profile:
    return Profile.load(TABLES)


def models(path: Path, measured: bool) -> list[CostModel]:
    sc = study(path)
    profile = tables() if measured and sc.hardware.name == "h200" else Profile.roofline(sc.hardware)
    return [
        CostModel(sc.model, sc.hardware, pool, profile, sc.integrity.enabled) for pool in sc.deployment.pools().values()
    ]


def reference_decode_s(cost: CostModel, batch: int, context: int) -> float:
    """A decode-only step priced op by op, under the decode step's CUDA graph floor, and the engine's cost per
    layer the graphed step runs (`decode_layer_us`: the model's layers and each draft step's)."""
    pages = batch * -(-context // cost.pool.page_size) if cost.integrity else 0
    ops_us = reference.price(cost.decode_ops(batch, context, pages), cost.profile, cost.decode_hw).us
    spec, layers = cost.pool.speculative, cost.model.layers
    if spec is not None:
        layers += spec.draft_tokens * (cost.model.mtp_layers if spec.method == "mtp" else spec.draft_model.layers)
    return (ops_us + cost.pool.decode_layer_us * layers) * 1e-6


def fast_decode_s(cost: CostModel, batch: int, context: int) -> float:
    pages = batch * -(-context // cost.pool.page_size) if cost.integrity else 0
    return float(cost.decode_step_s(batch, np.array([float(batch * context)]), np.array([float(pages)]), Usage())[0])


def reference_mixed_s(cost: CostModel, batch: int, context: int, chunks: list[tuple[int, int]]) -> float:
    """A step with prefill chunks priced op by op, eagerly (no CUDA graph): its whole op list, and at least its
    kernels' launches where no piecewise graph captures it (`eager_kernel_us` a kernel, a compiled chain's one a
    call): SGLang 0.5.10's graphs take up to the chunk size (2,048 tokens under MLA), not under DP attention,
    speculation or a DSA model."""
    pool, model = cost.pool, cost.model
    pages = batch * -(-context // pool.page_size) if cost.integrity else 0
    ops = step_ops(model, pool, batch, context, tuple(chunks), pages, fused_moe=cost.fused_moe)
    gpu_us = reference.price(ops, cost.profile, cost.hw).us
    tokens = batch + sum(t for t, _ in chunks)
    limit = 2048 if isinstance(model.attention, MLA) else pool.chunk_size
    graphed = pool.prefill_graphs and pool.dp == 1 and pool.speculative is None and model.indexer is None
    if graphed and tokens <= limit:
        return gpu_us * 1e-6
    launches = sum(op.count for op in ops) - compiled_kernels(model, pool)
    return max(gpu_us, launches * pool.eager_kernel_us) * 1e-6


def fast_mixed_s(cost: CostModel, batch: int, context: int, chunks: list[tuple[int, int]]) -> float:
    pages = batch * -(-context // cost.pool.page_size) if cost.integrity else 0
    return cost.step_s(batch, batch * context, pages, chunks, usage=Usage())


@pytest.mark.parametrize("measured", [False, True], ids=["roofline", "tables"])
@pytest.mark.parametrize("path", STUDIES, ids=[p.stem for p in STUDIES])
def test_every_bundled_pool_prices_as_its_op_list(path: Path, measured: bool) -> None:
    for cost in models(path, measured):
        for batch, context in ((1, 1), (1, 4096), (8, 2000), (64, 16384), (256, 700)):
            assert fast_decode_s(cost, batch, context) == pytest.approx(
                reference_decode_s(cost, batch, context), rel=REL
            )
        chunk = min(cost.pool.chunk_size, cost.pool.max_batch_tokens)
        for batch, context, chunks in ((0, 0, [(chunk, 0)]), (0, 0, [(chunk // 2, 3000)]), (4, 3000, [(511, 0)])):
            if cost.pool.dp > 1 and len(chunks) > 1:
                continue  # a DP step prices its chunks on the busiest rank: not the whole list
            assert fast_mixed_s(cost, batch, context, chunks) == pytest.approx(
                reference_mixed_s(cost, batch, context, chunks), rel=REL
            )


@settings(max_examples=60, deadline=None)
@given(
    path=st.sampled_from(STUDIES),
    measured=st.booleans(),
    batch=st.integers(1, 512),
    context=st.integers(1, 100_000),
    chunk=st.integers(1, 16_384),
    before=st.integers(0, 50_000),
)
def test_fuzzed_shapes_price_as_their_op_lists(
    path: Path, measured: bool, batch: int, context: int, chunk: int, before: int
) -> None:
    for cost in models(path, measured):
        assert fast_decode_s(cost, batch, context) == pytest.approx(reference_decode_s(cost, batch, context), rel=REL)
        chunks = [(chunk, before)]
        decode = batch if cost.pool.speculative is None else 0  # a speculative pool runs its chunks alone
        assert fast_mixed_s(cost, decode, context, chunks) == pytest.approx(
            reference_mixed_s(cost, decode, context, chunks), rel=REL
        )


@settings(max_examples=40, deadline=None)
@given(path=st.sampled_from(STUDIES), measured=st.booleans(), x=st.integers(1, 40_000))
def test_a_line_priced_a_block_at_a_time_equals_its_ops_at_that_count(path: Path, measured: bool, x: int) -> None:
    for cost in models(path, measured):
        for line in LINES:
            ops = [
                Spec(
                    op.family, {k: v.item() if isinstance(v, np.ndarray) else v for k, v in op.params.items()}, op.count
                )
                for op in line_ops(cost.model, cost.pool, line, np.array([x]), cost.fused_moe)
            ]
            want = reference.price(ops, cost.profile, cost.hw)
            usage = Usage()
            assert cost.line_us(line, x, usage) == pytest.approx(want.us, rel=REL)
            charged = sum(usage.seconds.values()) * 1e6
            assert charged == pytest.approx(want.us, rel=1e-9)
