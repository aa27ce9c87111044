"""KV tiers below HBM: spill and load-back bookkeeping under random operation sequences (hypothesis state machine),
checked against a shadow copy of every page's content moved exactly as the cache's move log says (what the replay
executor does with real tensors): no page is lost or read back wrong, tags follow a page down and back, and a stale
slot is never loaded."""

from __future__ import annotations

from pathlib import Path

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from simulator.config import loader
from simulator.engine.timer import with_loads
from simulator.pricing.tier_pricing import TierPricing
from simulator.serving.cache import page_keys
from simulator.serving.integrity import check_rows
from simulator.serving.scheduler import Plan
from simulator.serving.sequence import Seq, StepCounter
from simulator.serving.tables import BlockTable
from simulator.serving.tiers import CASCADE, DOWN, FETCH, UP, Loads, Tier, TieredCache
from simulator.workload.request import Request

ROOT = Path(__file__).resolve().parent.parent

PAGE = 4
GARBAGE = -7  # what a page holds once a decode step has written into it (no prefix content)


class TierMachine(RuleBasedStateMachine):
    """Sequences share prefixes, grow, finish; HBM evicts into host (and storage), prefixes load back."""

    @initialize(write_back=st.booleans(), storage=st.booleans(), host=st.integers(2, 12))
    def build(self, write_back: bool, storage: bool, host: int) -> None:
        tiers = [Tier("host", host)] + ([Tier("storage", 10)] if storage else [])
        self.cache = TieredCache(16, PAGE, True, tiers, write_back)
        self.cache.moves = []
        self.hbm = {p: None for p in range(16)}  # what each HBM page holds: the key it was computed for
        self.slots = [dict() for _ in tiers]  # what each tier slot holds
        self.live: dict[int, tuple[BlockTable, np.ndarray]] = {}
        self.published: set[int] = set()
        self.next_id = 0
        self.loaded = 0

    def _apply_moves(self) -> None:
        for op, t, src, dst in self.cache.moves:
            if op == DOWN:
                self.slots[t][dst] = self.hbm[src]
            elif op == UP:
                self.hbm[dst] = self.slots[t][src]
            elif op == FETCH:
                self.slots[0][dst] = self.slots[1][src]
            else:
                assert op == CASCADE
                self.slots[1][dst] = self.slots[0][src]
        self.cache.moves.clear()

    @rule(family=st.integers(0, 3), length=st.integers(1, 6), extra=st.integers(0, 2))
    def admit(self, family: int, length: int, extra: int) -> None:
        own = tuple(10_000 + self.next_id * 10 + j for j in range(extra))
        blocks = tuple(family * 100 + i for i in range(length)) + own
        keys = page_keys(blocks, PAGE, PAGE, len(blocks) * PAGE)
        table = BlockTable()
        n = self.cache.hold(table, keys, len(keys))
        self._apply_moves()
        if n < 0:
            assert table.n == 0
            return
        loads = self.cache.take_loads()
        self.loaded += 0 if loads is None else loads.pages
        pages = table.live_pages().tolist()
        # every reused page, found in HBM or loaded back from below, holds exactly its prefix's content
        assert [self.hbm[p] for p in pages[:n]] == keys[:n].tolist()
        for i in range(n, len(pages)):  # the prefill computes the rest
            self.hbm[pages[i]] = int(keys[i])
        self.cache.publish(table, keys)
        self._apply_moves()
        self.published.update(keys.tolist())
        self.live[self.next_id] = (table, keys)
        self.next_id += 1

    @precondition(lambda self: self.live)
    @rule(data=st.data(), n=st.integers(1, 3))
    def grow(self, data: st.DataObject, n: int) -> None:
        sid = data.draw(st.sampled_from(sorted(self.live)))
        table, _ = self.live[sid]
        if n > self.cache.available:
            return
        before = table.n
        self.cache.allocate(table, n)
        self._apply_moves()  # spills of what the new pages evicted read them before the step writes them
        for p in table.live_pages()[before:].tolist():
            self.hbm[p] = GARBAGE

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(sorted(self.live)))
        table, _ = self.live.pop(sid)
        self.cache.release(table)

    @rule(data=st.data())
    def overwrite_a_slot(self, data: st.DataObject) -> None:
        """A stale mapping below HBM: a slot's content replaced behind its index's back."""
        t = data.draw(st.integers(0, len(self.cache.tiers) - 1))
        keys = self.cache.tiers[t].keys()
        if not keys:
            return
        slot = data.draw(st.sampled_from(sorted(keys.values())))
        self.cache.tiers[t].force_reuse(slot)
        self.slots[t][slot] = GARBAGE

    @invariant()
    def every_keyed_page_holds_its_content(self) -> None:
        for page, key in self.cache.prefix_index().items():
            assert self.hbm[page] == key, f"HBM page {page} keyed {key} holds {self.hbm[page]}"
        for t, tier in enumerate(self.cache.tiers):
            for key, slot in tier.keys().items():
                if tier.ttag[slot] == tier.ts[slot, 3]:  # (a slot overwritten behind its back is caught at load)
                    assert self.slots[t][slot] == key, f"{tier.name} slot {slot} keyed {key} holds the wrong page"

    @invariant()
    def no_slot_lost_or_shared(self) -> None:
        for tier in self.cache.tiers:
            used = min(int(tier.tmeta[0]), tier.slots)
            lru = tier.lru()
            assert sorted(lru) == list(range(used)), "every filled slot is on the LRU list once (none pinned)"
            keys = tier.keys()
            assert len(set(keys.values())) == len(keys), "two keys in one slot"

    @invariant()
    def no_page_lost(self) -> None:
        """A page ever computed is in HBM or a tier, or the bottom tier (or a full, pinned tier) let it go."""
        present = set(self.cache.prefix_index().values())
        for tier in self.cache.tiers:
            present |= set(tier.keys())
        dropped = sum(t.dropped + t.stale_caught for t in self.cache.tiers)
        lost = self.published - present
        assert len(lost) <= dropped

    @invariant()
    def tags_check_clean(self) -> None:
        """Loaded pages took fresh HBM tags that their tables recorded: the decode check finds nothing wrong."""
        rows = np.array([t.row for t, _ in self.live.values() if t.store is not None], dtype=np.int64)
        violations, _ = check_rows(rows, self.cache)
        assert not violations


TestTiers = TierMachine.TestCase
TestTiers.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def _keys(blocks: tuple[int, ...]) -> np.ndarray:
    return page_keys(blocks, PAGE, PAGE, len(blocks) * PAGE)


def test_a_prefix_evicted_from_hbm_loads_back_from_host() -> None:
    cache = TieredCache(4, PAGE, True, [Tier("host", 8)], write_back=True)
    a, b = _keys((1, 2, 3)), _keys((7, 8, 9, 10))
    ta, tb = BlockTable(), BlockTable()
    assert cache.hold(ta, a, 3) == 0
    cache.publish(ta, a)
    cache.release(ta)
    assert cache.hold(tb, b, 4) == 0  # takes every page: a's three are evicted to host (write-back)
    assert cache.tiers[0].pages_written == 3 and cache.match_prefix(a) == 3
    cache.release(tb)
    tc = BlockTable()
    assert cache.hold(tc, a, 3) == 3  # a again: all three found below HBM
    loads = cache.take_loads()
    assert loads is not None and (loads.host, loads.storage) == (3, 0)
    assert cache.tiers[0].hit_tokens == 3 * PAGE and cache.hbm_hit_tokens == 0


def test_a_stale_host_slot_is_caught_and_never_loaded() -> None:
    cache = TieredCache(4, PAGE, True, [Tier("host", 8)], write_back=False)
    a = _keys((1, 2, 3))
    ta = BlockTable()
    cache.hold(ta, a, 3)
    cache.publish(ta, a)  # write-through: in host at once
    cache.release(ta)
    tb = BlockTable()
    cache.hold(tb, _keys((5, 6, 7, 8)), 4)  # evicts a from HBM
    cache.release(tb)
    host = cache.tiers[0]
    host.force_reuse(host.find(int(a[1])))  # the second page's slot overwritten behind the index's back
    tc = BlockTable()
    assert cache.hold(tc, a, 3) == 1  # the first page loads; the walk stops at the stale one
    assert host.stale_caught == 1 and host.find(int(a[1])) == -1


def test_tier_pricing_against_hand_arithmetic() -> None:
    """Kimi K2.6 on 8 H200, FP8 cache: 61 layers × 576 B = 35,136 B a token a GPU (MLA: every GPU the whole
    latent), 2,248,704 B a 64-token page; host link 50 GB/s one way; storage 10 GB/s after 2 ms."""
    sc, _ = loader.load(
        ROOT / "scenarios" / "mooncake-conversation.yaml",
        [
            "deployment.prefill.host_tier_gib=1024",
            "deployment.prefill.storage_tier={capacity_gib: 10240, bandwidth_gbs: 10, latency_ms: 2}",
        ],
    )
    sglang = TierPricing(sc.model, sc.hardware, sc.deployment.prefill)
    assert sglang.gpu_page_bytes == 64 * 61 * 576 == 2_248_704
    assert sglang.link_s(10) == pytest.approx(10 * 2_248_704 / 50e9)  # 0.4497 ms
    assert sglang.storage_s(4) == pytest.approx(2e-3 + 4 * 2_248_704 / 10e9)  # 2.8995 ms
    assert sglang.bytes_moved("host", 10) == 10 * 2_248_704 * 8  # each of the 8 GPUs moves its copy
    assert sglang.bytes_moved("storage", 10) == 10 * 2_248_704  # one copy of the latent
    # HiCache: loads overlap the compute layer by layer; the first layer's load is exposed
    assert sglang.step_s(5e-3, 10, 0) == pytest.approx(5e-3 + 0.44974e-3 / 61, rel=1e-4)
    assert sglang.step_s(5e-3, 6, 4) == pytest.approx(2.8995e-3 + 5e-3 + 0.44974e-3 / 61, rel=1e-4)
    vllm = TierPricing(sc.model, sc.hardware, sc.deployment.prefill.model_copy(update={"kv_tier_layerwise": False}))
    assert vllm.step_s(5e-3, 10, 0) == pytest.approx(5e-3 + 0.44974e-3, rel=1e-4)  # the whole load, then compute


def test_the_step_timer_prices_a_load_back_with_the_step() -> None:
    sc, _ = loader.load(ROOT / "scenarios" / "mooncake-conversation.yaml", ["deployment.prefill.host_tier_gib=1024"])
    tiers = TierPricing(sc.model, sc.hardware, sc.deployment.prefill)
    req = Request(0, 0.0, 4096, 10)
    seq = Seq(req, 4096, StepCounter(), 10, np.zeros(0, dtype=np.int64))
    seq.loads = Loads(host=40)
    plan = Plan(prefill=[(seq, 1024)])
    assert with_loads(tiers, 0.3, [plan]) == pytest.approx(tiers.step_s(0.3, 40, 0))
    assert seq.load_s == pytest.approx(40 * 2_248_704 / 50e9)  # its own load-back, counted in its TTFT
    other = Seq(req, 4096, StepCounter(), 10, np.zeros(0, dtype=np.int64))
    assert with_loads(tiers, 0.3, [Plan(prefill=[(other, 1024)])]) == 0.3  # nothing to load: the step as priced
