"""The decode batch's compiled passes against the plain per-sequence arithmetic they replace."""

from __future__ import annotations

from types import SimpleNamespace

import hypothesis.strategies as st
import numpy as np
from hypothesis import given, settings

from simulator.serving.batch import NEVER, DecodeBatch, growth


def _seq(order: int, row: int, computed: int, remaining: int, fault_in: int) -> SimpleNamespace:
    return SimpleNamespace(
        order=order, table=SimpleNamespace(row=row), _computed=computed, _remaining=remaining, _fault_in=fault_in
    )


members = st.lists(
    st.tuples(st.integers(0, 5000), st.integers(1, 900), st.integers(-1, 300)),  # computed, remaining, fault_in
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(members=members, ps=st.sampled_from([1, 4, 16, 64]), at=st.integers(0, 10_000), data=st.data())
def test_batch_answers_what_each_sequence_says(
    members: list[tuple[int, int, int]], ps: int, at: int, data: st.DataObject
) -> None:
    orders = data.draw(st.permutations(range(len(members))))
    seqs = [_seq(o * 3 + 1, i, *m) for i, (o, m) in enumerate(zip(orders, members, strict=True))]
    batch = DecodeBatch(ps, capacity=4)  # grows while joining
    for s in seqs:
        batch.join(s, s.order, s.table.row, s._computed, s._remaining, s._fault_in, at)
    gone = data.draw(st.sets(st.sampled_from(range(len(seqs))))) if seqs else set()
    for i in gone:
        batch.leave(seqs[i].order)
    live = sorted((s for i, s in enumerate(seqs) if i not in gone), key=lambda s: s.order)
    assert batch.seqs == live
    assert batch.rows.tolist() == [s.table.row for s in live]

    lens = np.arange(len(seqs), dtype=np.int64) * 7 % 13
    later = at + data.draw(st.integers(0, 200))  # a plan made some steps after they joined
    need = np.empty(ps, dtype=np.int64)
    pages, first_end, first_fault = batch.summary(lens, later, need)
    # a sequence with c tokens cached at its join needs a page at the step counts where its length is a
    # multiple of the page size: at + j with (c + j) % ps == 0
    assert need.tolist() == [sum((s._computed + later + k - at) % ps == 0 for s in live) for k in range(ps)]
    assert pages == sum(int(lens[s.table.row]) for s in live)
    assert first_end == min((at + s._remaining for s in live), default=NEVER)
    faults = [at + s._fault_in for s in live if s._fault_in >= 0 and at + s._fault_in >= later]
    assert first_fault == min(faults, default=-1)

    n = data.draw(st.integers(1, 3 * ps + 5))
    g, grown = growth(need, n)
    assert g.tolist() == np.cumsum([need[i % ps] for i in range(n)]).tolist()
    assert grown.tolist() == np.cumsum(g).tolist()

    b = data.draw(st.integers(0, n - 1))
    rows, steps, counts = batch.due(later, need, b, n, int(g[n - 1] - (g[b - 1] if b else 0)))
    expect = [(k, [s.table.row for s in live if (s._computed + later + k - at) % ps == 0]) for k in range(b, n)]
    expect = [(k, r) for k, r in expect if r]
    assert steps.tolist() == [k for k, _ in expect]
    assert counts.tolist() == [len(r) for _, r in expect]
    assert rows.tolist() == [x for _, r in expect for x in r]

    now = later + data.draw(st.integers(0, 900))
    assert batch.ended(now) == [s for s in live if at + s._remaining <= now]
