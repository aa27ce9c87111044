"""Speculative decoding in the serving model: tokens drawn per sequence and verify step, and what a run of verify
steps needs of the cache, pinned by hand and restated as plain step-by-step arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_engine import dumps, scenario

from simulator.config.parallel import Speculative
from simulator.engine.run import simulate
from simulator.serving.batch import DecodeBatch
from simulator.serving.speculation import Speculation, _chain


def test_a_mean_accepted_length_is_read_as_one_rate_per_position() -> None:
    # k = 2, τ = 2.4: 1 + p + p² = 2.4, so p = (−1 + √(1 + 4·1.4)) / 2 = (−1 + √6.6) / 2 = 0.784523...
    (p1, p2) = Speculative(method="mtp", draft_tokens=2, acceptance=2.4).position_probs
    assert p1 == p2 == pytest.approx((-1 + math.sqrt(6.6)) / 2, abs=1e-12)
    assert Speculative(method="mtp", draft_tokens=3, acceptance=1.0).position_probs == (0.0, 0.0, 0.0)
    assert Speculative(method="mtp", draft_tokens=1, acceptance=2.0).position_probs == (1.0,)
    assert Speculative(method="mtp", draft_tokens=2, acceptance=[0.9, 0.5]).position_probs == (0.9, 0.5)


def test_draws_follow_the_acceptance_chain_and_repeat() -> None:
    spec = Speculative(method="mtp", draft_tokens=3, acceptance=[0.9, 0.7, 0.5])
    s = Speculation(spec, seed=5, page_size=16)
    a = s.accepted(req_id=42, output=200_000)
    assert a.min() >= 1 and a.max() <= 4
    # P(a = 1) = 0.1, P(2) = 0.9·0.3 = 0.27, P(3) = 0.9·0.7·0.5 = 0.315, P(4) = 0.9·0.7·0.5 = 0.315; mean 2.845
    freq = np.bincount(a, minlength=5)[1:] / len(a)
    assert freq == pytest.approx([0.1, 0.27, 0.315, 0.315], abs=0.005)
    assert a.mean() == pytest.approx(spec.tokens_per_step, rel=0.005)
    # One stream per request, row g for output position g: a shorter request draws the same prefix.
    assert np.array_equal(s.accepted(42, 1000), a[:1000])
    assert np.array_equal(Speculation(spec, seed=5, page_size=16).accepted(42, 1000), a[:1000])
    assert not np.array_equal(s.accepted(43, 1000), a[:1000])
    assert not np.array_equal(Speculation(spec, seed=6, page_size=16).accepted(42, 1000), a[:1000])


def test_a_chain_walks_output_positions_and_cuts_the_last_step() -> None:
    a = np.array([2, 1, 3, 2, 4, 1, 1, 1], dtype=np.int64)
    out = np.empty(6, dtype=np.int64)
    # Produced 1 token (the prefill's), 5 to go: a[1] = 1 → 1; a[2] = 3 → 4; a[5] = 1 → 5: three verify steps.
    assert _chain(a, 1, 5, out) == 3
    assert out[:4].tolist() == [0, 1, 4, 5]
    # From position 3 with 4 to go: a[3] = 2 → 2, a[5] = 1 → 3, a[6] = 1 → 4.
    assert _chain(a, 3, 4, out) == 3 and out[:4].tolist() == [0, 2, 3, 4]
    # From position 4 with 2 to go: a[4] = 4 gives 4, cut to the 2 the request has left.
    assert _chain(a, 4, 2, out) == 1 and out[:2].tolist() == [0, 2]


class _Seq:
    """What the batch carries for a sequence here: nothing it reads."""


def _joined(
    page_size: int, k: int, seqs: list[tuple[int, np.ndarray, int]], at: int
) -> tuple[Speculation, DecodeBatch[_Seq], list[np.ndarray]]:
    """A batch of sequences (row, drawn accepted counts a(g), cached tokens), each having produced one token."""
    spec = Speculative(method="mtp", draft_tokens=k, acceptance=1.0)
    s = Speculation(spec, seed=0, page_size=page_size)
    batch: DecodeBatch[_Seq] = DecodeBatch(page_size)
    chains = []
    for order, (row, a, cached) in enumerate(seqs, start=1):
        s.accepted = lambda req_id, output, a=a: a  # type: ignore[method-assign]
        held = -(-cached // page_size)
        gains = s.join(order, order, len(a), 1, len(a) - 1, cached, held, at)
        batch.join(_Seq(), order, row, cached, len(gains) - 1, -1, at)
        chains.append(gains)
    return s, batch, chains


def test_pages_and_context_of_a_run_of_verify_steps_by_hand() -> None:
    # Page size 4, k = 2: a verify step writes 3 positions, so it needs pages for cached + 3 tokens.
    # Sequence A: 6 cached (2 pages held), draws a(1) = 3, a(4) = 2, a(6) = 1, then 1s; 9 tokens left.
    #   step 0: 6 cached → ⌈9/4⌉ = 3 pages: takes 1; gains 3
    #   step 1: 9 cached → ⌈12/4⌉ = 3: takes 0;     gains 2
    #   step 2: 11 cached → ⌈14/4⌉ = 4: takes 1;    gains 1
    # Sequence B: 4 cached (1 page), a(1) = 1, a(2) = 1, a(3) = 3: step 0: ⌈7/4⌉ = 2 (takes 1); 5 cached → ⌈8/4⌉ = 2
    #   (0); 6 cached → ⌈9/4⌉ = 3 (1).
    a_seq = np.array([1, 3, 1, 1, 2, 1, 1, 1, 1, 1], dtype=np.int64)
    b_seq = np.array([1, 1, 1, 3, 1, 1, 1, 1, 1, 1], dtype=np.int64)
    s, batch, _ = _joined(4, 2, [(7, a_seq, 6), (9, b_seq, 4)], at=10)
    assert s.first_pages(10) == 2
    growth, grown, ctx = s.horizon(10, 3)
    assert growth.tolist() == [2, 2, 4]  # cumulative new pages: (1 + 1), (0 + 0), (1 + 1)
    assert grown.tolist() == [2, 4, 8]
    assert ctx.tolist() == [6 + 4 + 2, 9 + 5 + 2, 11 + 6 + 2]  # Σ cached + one position per sequence
    rows, steps, counts = s.due(batch.rows, 10, 0, 3)
    assert rows.tolist() == [7, 9, 7, 9] and steps.tolist() == [0, 2] and counts.tolist() == [2, 2]
    rows, steps, counts = s.due(batch.rows, 10, 1, 3)  # the same run after its first step was booked
    assert rows.tolist() == [7, 9] and steps.tolist() == [2] and counts.tolist() == [2]
    # One step later (a new plan at step count 11), the run continues where it was.
    assert s.horizon(11, 2)[0].tolist() == [0, 2]
    s.advanced(10, 3)
    assert (s.verify_seq_steps, s.tokens) == (6, 3 + 2 + 1 + 1 + 1 + 3)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 16),
    st.integers(1, 4),
    st.lists(st.tuples(st.integers(0, 200), st.integers(2, 60)), min_size=1, max_size=6),
    st.integers(0, 2**31),
    st.data(),
)
def test_a_run_needs_what_its_steps_need_one_by_one(
    page_size: int, k: int, shapes: list[tuple[int, int]], seed: int, data: st.DataObject
) -> None:
    """`horizon` and `due` against plain per-step arithmetic: each step, each sequence needs pages for its cache plus
    k + 1 positions; it gains its draw at its output position, the last cut to what is left."""
    rng = np.random.default_rng(seed)
    seqs = [(10 + i, rng.integers(1, k + 2, size=out), cached) for i, (cached, out) in enumerate(shapes)]
    s, batch, chains = _joined(page_size, k, seqs, at=0)
    n = min(len(g) - 1 for g in chains)  # a run stops at the first end
    b = data.draw(st.integers(0, n - 1))
    need = np.zeros(n, dtype=np.int64)
    ctx = np.full(n, len(seqs), dtype=np.int64)
    rows: list[int] = []
    per_step: list[list[int]] = [[] for _ in range(n)]
    for row, a, cached in seqs:
        held, g, left = -(-cached // page_size), 1, len(a) - 1
        for step in range(n):
            pages = -(-(cached + k + 1) // page_size)
            per_step[step] += [row] * (pages - held)
            need[step] += pages - held
            ctx[step] += cached
            held = pages
            gain = min(int(a[g]), left)
            g, left, cached = g + gain, left - gain, cached + gain
    for step in range(b, n):
        rows += per_step[step]
    growth, grown, got_ctx = s.horizon(0, n)
    assert growth.tolist() == np.cumsum(need).tolist()
    assert grown.tolist() == np.cumsum(np.cumsum(need)).tolist()
    assert got_ctx.tolist() == ctx.tolist()
    got_rows, steps, counts = s.due(batch.rows, 0, b, n)
    assert got_rows.tolist() == rows
    assert steps.tolist() == [i for i in range(b, n) if need[i]] and counts.tolist() == [int(x) for x in need[b:] if x]


def test_a_speculative_run_gives_its_drawn_tokens_and_repeats() -> None:
    sc = scenario(
        **{
            "deployment.decode.speculative": {
                "method": "draft",
                "draft_tokens": 2,
                "draft_model": "llama-3.1-8b",
                "acceptance": [0.8, 0.5],
            },
            "traffic.output_tokens": {"dist": "lognormal", "median": 400, "sigma": 0.5, "max": 2000},
        }
    )
    result, sim = simulate(sc)
    again, _ = simulate(sc)
    assert dumps(result) == dumps(again)
    other, _ = simulate(sc.model_copy(update={"seed": sc.seed + 1}))
    assert other["metrics"] != result["metrics"]
    steps, tokens = sim.pools["decode"].verify_seq_steps, sim.pools["decode"].accepted_tokens
    # Expected 1 + 0.8 + 0.8·0.5 = 2.2 a step; the last step of each request is cut to what it had left.
    assert tokens / steps == pytest.approx(2.2, rel=0.05)
    assert result["step_anatomy"]["decode"]["speculative"]["accepted_per_step"] == round(tokens / steps, 4)
    # Every output token was decoded: the prefill's first, then the verify steps' (nothing preempted here).
    assert result["metrics"]["preempted"] == 0
    assert tokens == sum(r.output - 1 for r in sim.requests if r.status == "completed")


def test_chains_survive_leaves_and_the_store_compacting() -> None:
    """Sequences join and leave in any order while the chain store compacts and grows: a run's needs stay those of
    the sequences in the batch, computed afresh."""
    rng = np.random.default_rng(7)
    seqs = [
        (100 + i, rng.integers(1, 4, size=int(rng.integers(300, 900))), int(rng.integers(0, 500))) for i in range(40)
    ]
    s, batch, _ = _joined(16, 2, seqs, at=0)
    for order in rng.permutation(np.arange(1, 41))[:25].tolist():
        batch.leave(order)
        s.leave(order)
    s._compact(0)  # what a join finding the store full does
    kept = sorted(o for o in range(1, 41) if o in set(batch.orders.tolist()))
    fresh, fresh_batch, _ = _joined(16, 2, [seqs[o - 1] for o in kept], at=0)
    assert np.array_equal(batch.rows, fresh_batch.rows)
    for got, want in zip(s.horizon(0, 200), fresh.horizon(0, 200), strict=True):
        assert np.array_equal(got, want)
    assert np.array_equal(s.due(batch.rows, 0, 5, 150)[0], fresh.due(fresh_batch.rows, 0, 5, 150)[0])
    assert s._used == s._live == fresh._used  # nothing of the sequences that left is kept
