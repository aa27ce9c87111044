"""The compiled prefix index against a Python dict: any mix of inserts and deletes, on keys chosen to collide."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings

from simulator.serving import prefix_index as px

# Few distinct keys in a small table: long probe runs, wrap-around and deletions inside runs all happen.
_KEYS = st.one_of(st.integers(0, 40), st.integers(-(2**63), 2**63 - 1))


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), _KEYS), max_size=120))
def test_index_agrees_with_a_dict(ops: list[tuple[bool, int]]) -> None:
    index = px.new_index(32)  # 64 slots: room for the 32 keys it may hold at most
    model: dict[int, int] = {}
    for page, (add, key) in enumerate(ops):
        if add and key not in model and len(model) < 32:
            px.insert(index, key, page)
            model[key] = page
        elif not add:
            px.delete(index, key)
            model.pop(key, None)
        for k in {k for _, k in ops}:
            assert px.lookup(index, k) == model.get(k, px.EMPTY)


def test_index_sizes_for_half_load() -> None:
    index = px.new_index(1000)
    assert index.shape == (2048, 2) and (index[:, 1] == px.EMPTY).all()
