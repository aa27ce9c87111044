"""The KV cache as a hierarchy: HBM pages (`cache.PagedCache`) over host DRAM and, optionally, a storage tier below
it (local NVMe or a remote store), one structure both clocks drive.

Pages spill down as the engine's policy says — write-through (every page copied to each tier once computed: SGLang
HiCache's default, vLLM's offloading connector) or write-back (copied down only when HBM evicts it, and from host to
storage when host evicts it) — and a prefix found below HBM is loaded back into fresh HBM pages instead of being
recomputed. The hierarchy is inclusive, as HiCache's: a page loaded back keeps its copy below, so evicting it again
moves nothing. Each tier is a fixed number of page slots with a prefix index and an LRU list, compiled like the HBM
cache's bookkeeping (`cache.py`): a prompt's pages move a hundred at a time.

Integrity follows a page down and back: every slot carries a generation tag, changed whenever its content is
overwritten, and the tier's index records the tag it wrote with each key. A load compares the two first; a slot
overwritten behind the index's back (the bookkeeping bug the check exists for, `Tier.force_reuse`) is caught there,
its entry dropped and the prefix recomputed from that page on (fail closed: stale KV is never read). A page loaded
into HBM takes a fresh HBM tag like any allocation, so the decode-time check covers it as any other page.

What a tier holds is priced elsewhere (`pricing/tier_pricing.py`); the replay executor copies the pages for real,
reading the moves a cache logs when asked to (`moves`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from simulator.serving import prefix_index as px
from simulator.serving.cache import (
    KEY,
    KEYED,
    N_CACHED,
    N_EVICTED,
    NXT,
    PRV,
    REF,
    PagedCache,
    _link_newest,
    _take,
    _unlink,
)
from simulator.serving.tables import BlockTable

# A tier's per-slot columns: its key, its LRU links (the HBM cache's NXT/PRV columns, so one pair of list
# operations serves both), the tag its index recorded.
TKEY, TNXT, TPRV, WTAG = 0, NXT, PRV, 3
USED, NEXT_TAG, STALE = range(3)  # a tier's meta: slots ever filled, the next tag, stale slots it let go
HBM, HOST, STORAGE = range(3)  # where a prefix page was found
TIER_NAMES = ("host", "storage")
# Moves a cache logs for the replay (`TieredCache.moves`): (op, tier, source, destination)
DOWN, UP, FETCH, CASCADE = range(4)  # HBM page -> tier slot; tier slot -> HBM page; storage -> host; host -> storage


# -- one tier's compiled bookkeeping --------------------------------------------------------------------------------
@njit(cache=True)
def _t_put(
    keys: np.ndarray,
    ts: np.ndarray,
    ttag: np.ndarray,
    tmeta: np.ndarray,
    tindex: np.ndarray,
    slots: np.ndarray,
    evicted: np.ndarray,
) -> int:
    """Write each key's page into the tier, in order: slots[i] is the slot written (>= 0), -2 when the key is there
    already (only made the newest), -1 when every slot is pinned (dropped); evicted[i] the key whose slot it took
    (-1: none, or a slot overwritten behind its index's back: its content is no page to pass on, counted in
    tmeta[STALE]). Returns the slots written."""
    cap = ts.shape[0] - 1
    head = cap
    written = 0
    for i in range(len(keys)):
        k = keys[i]
        evicted[i] = -1
        s = px.lookup(tindex, k)
        if s != px.EMPTY:
            if ts[s, TNXT] >= 0:  # (a pinned slot stays out of the list)
                _unlink(ts, s)
                _link_newest(ts, s)
            slots[i] = -2
            continue
        if tmeta[USED] < cap:
            s = tmeta[USED]
            tmeta[USED] += 1
        else:
            s = ts[head, TNXT]
            if s == head:  # every slot pinned by a load in flight
                slots[i] = -1
                continue
            _unlink(ts, s)
            if ts[s, TKEY] >= 0:
                if ttag[s] == ts[s, WTAG]:
                    evicted[i] = ts[s, TKEY]
                else:
                    tmeta[STALE] += 1
                px.delete(tindex, ts[s, TKEY])
        ts[s, TKEY] = k
        ttag[s] = ts[s, WTAG] = tmeta[NEXT_TAG]
        tmeta[NEXT_TAG] += 1
        px.insert(tindex, k, s)
        _link_newest(ts, s)
        slots[i] = s
        written += 1
    return written


@njit(cache=True)
def _t_pin(ts: np.ndarray, slots: np.ndarray, pin: bool) -> None:
    """Take slots out of the LRU list while loads read them (`pin`), or put them back as the newest."""
    for s in slots:
        if pin:
            _unlink(ts, s)
        else:
            _link_newest(ts, s)


@njit(cache=True)
def _walk(
    keys: np.ndarray,
    index: np.ndarray,
    st: np.ndarray,
    t0: np.ndarray,
    t0tag: np.ndarray,
    t0index: np.ndarray,
    t1: np.ndarray,
    t1tag: np.ndarray,
    t1index: np.ndarray,
    where: np.ndarray,
    found: np.ndarray,
) -> tuple[int, int, int]:
    """The prefix pages found anywhere in the hierarchy, in order until the first found nowhere: where[i] the tier
    (HBM, HOST, STORAGE), found[i] the page or slot. A tier entry whose slot was overwritten since its index wrote it
    (stale) ends the walk and is dropped from the index. Returns (pages found, HBM pages found that someone holds,
    the tier of a stale entry caught, or -1)."""
    held = 0
    stale = -1
    n = 0
    while n < len(keys):
        k = keys[n]
        p = px.lookup(index, k)
        if p != px.EMPTY:
            where[n], found[n] = HBM, p
            held += 1 if st[p, REF] else 0
            n += 1
            continue
        s = px.lookup(t0index, k)
        tier, ts, ttag, tindex = HOST, t0, t0tag, t0index
        if s == px.EMPTY:
            s = px.lookup(t1index, k)
            tier, ts, ttag, tindex = STORAGE, t1, t1tag, t1index
        if s == px.EMPTY:
            break
        if ttag[s] != ts[s, WTAG]:  # overwritten behind the index's back: never read it
            px.delete(tindex, k)
            ts[s, TKEY] = -1
            stale = tier
            break
        where[n], found[n] = tier, s
        n += 1
    return n, held, stale


@njit(cache=True)
def _hold_walked(
    keys: np.ndarray,
    where: np.ndarray,
    found: np.ndarray,
    n: int,
    pages: int,
    meta: np.ndarray,
    st: np.ndarray,
    tag: np.ndarray,
    index: np.ndarray,
    out: np.ndarray,
    tpages: np.ndarray,
    ttags: np.ndarray,
    lens: np.ndarray,
    row: int,
    dest: np.ndarray,
) -> None:
    """Fill the empty table in one row of the store: the walk's HBM pages held, a fresh page for each page found
    below HBM (keyed at once, so the next request finds it in HBM: its load is on its way; dest[i] = the page) and
    fresh pages up to `pages`. Fresh pages evict the oldest cached ones (their keys and ids in out[2:4]); the caller
    has checked that everything fits."""
    hbm = 0
    for i in range(n):
        if where[i] == HBM:
            p = found[i]
            if st[p, REF] == 0:
                _unlink(st, p)
                meta[N_CACHED] -= 1
            st[p, REF] += 1
            hbm += 1
    fresh = pages - hbm
    _take(fresh, meta, st, tag, index, out)
    f = 0
    for i in range(n):
        if where[i] == HBM:
            p = found[i]
        else:
            p = out[0, f]
            f += 1
            st[p, KEYED] = 1
            st[p, KEY] = keys[i]
            px.insert(index, keys[i], p)
            dest[i] = p
        tpages[row, i] = p
        ttags[row, i] = tag[p]
    for i in range(n, pages):
        tpages[row, i] = out[0, f]
        ttags[row, i] = out[1, f]
        f += 1
    lens[row] = pages


@njit(cache=True)
def _keyed_leading(pages: np.ndarray, n: int, keys: np.ndarray, st: np.ndarray, out: np.ndarray) -> int:
    """The leading pages of a table that hold their own key (what write-through copies down), as (key, page) in
    out[0:2]; returns how many."""
    m = 0
    for i in range(min(n, len(keys))):
        p = pages[i]
        if 0 <= p < st.shape[0] - 1 and st[p, KEYED] and st[p, KEY] == keys[i]:
            out[0, m] = keys[i]
            out[1, m] = p
            m += 1
    return m


# -- one tier ------------------------------------------------------------------------------------------------------
class Tier:
    """`slots` page slots below HBM: a prefix index, an LRU list (oldest first; pinned slots off it) and tags."""

    def __init__(self, name: str, slots: int) -> None:
        self.name = name
        self.slots = slots
        self.ts = np.full((slots + 1, 4), -1, dtype=np.int64)
        self.ts[slots, TNXT] = self.ts[slots, TPRV] = slots  # the sentinel: an empty list
        self.ttag = np.zeros(max(slots, 1), dtype=np.int64)
        self.tmeta = np.array([0, 1, 0], dtype=np.int64)
        self.tindex = px.new_index(max(slots, 1))
        self.hit_tokens = 0
        self.pages_written = 0  # pages copied into this tier
        self.pages_loaded = 0  # pages read back toward HBM
        self.dropped = 0  # pages that found no room (every slot pinned) or were evicted with no tier below
        self._stale_walked = 0  # stale entries a walk caught (`stale_caught` adds those an eviction let go)
        self._slots = np.empty(0, dtype=np.int64)
        self._evicted = np.empty(0, dtype=np.int64)

    def put(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Copy the pages of these keys in: each key's slot (>= 0 written, -2 there already, -1 dropped) and the key
        its slot held before (-1: none)."""
        if len(self._slots) < len(keys):
            self._slots = np.empty(2 * len(keys), dtype=np.int64)
            self._evicted = np.empty(2 * len(keys), dtype=np.int64)
        slots, evicted = self._slots[: len(keys)], self._evicted[: len(keys)]
        self.pages_written += _t_put(keys, self.ts, self.ttag, self.tmeta, self.tindex, slots, evicted)
        self.dropped += int((slots == -1).sum())
        return slots, evicted

    @property
    def stale_caught(self) -> int:
        """Stale slots caught: by a load's walk, or when their slot was taken (never passed on down)."""
        return self._stale_walked + int(self.tmeta[STALE])

    def caught(self) -> None:
        self._stale_walked += 1

    def find(self, key: int) -> int:
        """The slot holding `key`, or -1."""
        s = px.lookup(self.tindex, key)
        return -1 if s == px.EMPTY else int(s)

    def pin(self, slots: np.ndarray, pin: bool = True) -> None:
        _t_pin(self.ts, slots, pin)

    def force_reuse(self, slot: int) -> None:
        """Fault injection only: overwrite a slot's content behind its index's back (a stale mapping below HBM)."""
        self.ttag[slot] = self.tmeta[NEXT_TAG]
        self.tmeta[NEXT_TAG] += 1

    # -- inspection (tests) -------------------------------------------------------------------------------------
    def keys(self) -> dict[int, int]:
        """Every key the tier's index maps, and its slot; each slot's own key agrees."""
        out = {}
        for s in range(min(int(self.tmeta[USED]), self.slots)):
            k = int(self.ts[s, TKEY])
            if k >= 0 and px.lookup(self.tindex, k) == s:
                out[k] = s
        return out

    def lru(self) -> list[int]:
        """The slots on the LRU list, oldest first (pinned ones are off it)."""
        out, s = [], int(self.ts[self.slots, TNXT])
        while s != self.slots:
            out.append(s)
            s = int(self.ts[s, TNXT])
        return out


@dataclass
class Loads:
    """Pages a sequence's hold found below HBM, by tier: its load-back, priced at its first prefill step (or with its
    KV hand-off on a decode instance)."""

    host: int = 0
    storage: int = 0

    @property
    def pages(self) -> int:
        return self.host + self.storage


_NO_TIER = Tier("none", 0)  # what a hierarchy without a storage tier walks in its place


class TieredCache(PagedCache):
    """An HBM cache with tiers below it (host, then optionally storage): the same interface, so the scheduler and
    both clocks drive it as they drive `PagedCache`; `take_loads` says what the last hold found below HBM."""

    tiered = True

    def __init__(
        self, num_pages: int, page_size: int, prefix_caching: bool, tiers: list[Tier], write_back: bool
    ) -> None:
        super().__init__(num_pages, page_size, prefix_caching)
        if not 1 <= len(tiers) <= 2:
            raise ValueError("a hierarchy has a host tier and at most one below it")
        self.tiers = tiers
        self.write_back = write_back
        self._meta = np.concatenate((self._meta, [0]))  # N_EVICTED: evictions to spill after each call
        self._out = np.empty((4, num_pages), dtype=np.int64)
        self.hbm_hit_tokens = 0
        self.moves: list[tuple[int, int, int, int]] | None = None  # the replay sets a list: (op, tier, from, to)
        self._loads: Loads | None = None
        self._where = np.empty(0, dtype=np.int64)
        self._found = np.empty(0, dtype=np.int64)

    # -- allocation (HBM evictions spill down under write-back) ----------------------------------------------
    def allocate(self, table: BlockTable, count: int) -> None:
        super().allocate(table, count)
        self._spill_evicted()

    def allocate_rows(self, rows: np.ndarray) -> None:
        super().allocate_rows(rows)
        self._spill_evicted()

    def _spill_evicted(self) -> None:
        m = int(self._meta[N_EVICTED])
        if not m:
            return
        self._meta[N_EVICTED] = 0
        if self.write_back:
            self._down(0, self._out[2, :m].copy(), self._out[3, :m].copy(), DOWN)
        # write-through: the tiers got the page once it was computed; an eviction moves nothing

    def _down(self, t: int, keys: np.ndarray, sources: np.ndarray, op: int) -> np.ndarray:
        """Copy pages into tier t — from HBM pages (`op` DOWN), host slots (CASCADE) or storage slots (FETCH) — and
        return their slots (`Tier.put`); what it evicts cascades to the tier below under write-back, logged before
        the write that overwrites its slot."""
        tier = self.tiers[t]
        slots, evicted = tier.put(keys)
        slots, evicted = slots.copy(), evicted.copy()
        below = t + 1 < len(self.tiers)
        for i in range(len(keys)):
            if evicted[i] >= 0:
                if below and self.write_back:
                    self._down(t + 1, np.array([evicted[i]]), np.array([slots[i]]), CASCADE)
                elif not below:
                    tier.dropped += 1  # the bottom tier lets the page go
            if slots[i] >= 0:
                self._log(op, t, int(sources[i]), int(slots[i]))
        return slots

    # -- admission through the whole hierarchy ------------------------------------------------------------------
    def _walk(self, keys: np.ndarray) -> tuple[int, int]:
        if len(self._where) < len(keys):
            self._where = np.empty(2 * len(keys), dtype=np.int64)
            self._found = np.empty(2 * len(keys), dtype=np.int64)
        host = self.tiers[0]
        low = self.tiers[1] if len(self.tiers) > 1 else _NO_TIER
        n, held, stale = _walk(
            keys,
            self._index,
            self._st,
            host.ts,
            host.ttag,
            host.tindex,
            low.ts,
            low.ttag,
            low.tindex,
            self._where,
            self._found,
        )
        if stale >= 0:
            self.tiers[stale - HOST].caught()
        return n, held

    def match_prefix(self, keys: np.ndarray) -> int:
        """Leading pages of `keys` found anywhere in the hierarchy (a page below HBM is a hit too: it loads back)."""
        return self._walk(keys)[0] if self.prefix_caching else 0

    def cost(self, keys: np.ndarray, pages: int) -> int:
        """What holding the sequence takes of `available`: every page not already in HBM is a fresh page, and an HBM
        page nobody holds stops being evictable."""
        if not self.prefix_caching:
            return pages
        n, held = self._walk(keys)
        return pages - held

    def hold(self, table: BlockTable, keys: np.ndarray, pages: int, reserve: int = 0) -> int:
        """`PagedCache.hold` through the hierarchy: the prefix pages found in HBM shared, those found below loaded
        back into fresh pages (`take_loads`), the rest fresh. Returns the prefix pages reused, or -1."""
        if table.store is not None:
            raise ValueError("hold fills an empty table")
        n, held = self._walk(keys) if self.prefix_caching else (0, 0)
        cost = pages - held
        if cost + reserve > self.available:
            self._loads = None
            return -1
        where, found = self._where[:n].copy(), self._found[:n].copy()
        table.attach(self.store)
        store = self.store
        store.fit(pages)
        dest = np.full(n, -1, dtype=np.int64)
        _hold_walked(
            keys,
            where,
            found,
            n,
            pages,
            self._meta,
            self._st,
            self.tag,
            self._index,
            self._out,
            store.pages,
            store.tags,
            store.lens,
            table.row,
            dest,
        )
        self.available -= cost
        self.hit_tokens += n * self.page_size
        self.hbm_hit_tokens += int((where == HBM).sum()) * self.page_size
        self._load(keys, where, found, dest)
        return n

    def _load(self, keys: np.ndarray, where: np.ndarray, found: np.ndarray, dest: np.ndarray) -> None:
        """After a hold: spill what its fresh pages evicted (the slots being read pinned meanwhile), then the loads:
        a host page straight up, a storage page through host (kept there: HiCache prefetches L3 into L2)."""
        loads = Loads()
        pinned = [found[where == HOST + t] for t in range(len(self.tiers))]
        for t, slots in enumerate(pinned):
            self.tiers[t].pin(slots)
        self._spill_evicted()
        for i in np.flatnonzero(where != HBM).tolist():
            t, slot, page = int(where[i]) - HOST, int(found[i]), int(dest[i])
            self.tiers[t].hit_tokens += self.page_size
            self.tiers[t].pages_loaded += 1
            if t == 0:
                loads.host += 1
                self._log(UP, 0, slot, page)
                continue
            loads.storage += 1
            up = self._down(0, keys[i : i + 1], np.array([slot]), FETCH)  # staged in host on its way up
            if up[0] >= 0:
                self._log(UP, 0, int(up[0]), page)
            else:
                self._log(UP, 1, slot, page)
        for t, slots in enumerate(pinned):
            self.tiers[t].pin(slots, pin=False)
        self._loads = loads if loads.pages else None

    def _log(self, op: int, tier: int, src: int, dst: int) -> None:
        if self.moves is not None:
            self.moves.append((op, tier, src, dst))

    def take_loads(self) -> Loads | None:
        """What the last successful hold found below HBM (None: nothing), handed over once."""
        loads, self._loads = self._loads, None
        return loads

    def publish(self, table: BlockTable, keys: np.ndarray) -> None:
        """Key the table's leading pages; under write-through also copy each keyed page down (a page already in a
        tier is only made its newest)."""
        super().publish(table, keys)
        store = table.store
        if self.write_back or not self.prefix_caching or store is None:
            return
        m = _keyed_leading(store.pages[table.row], int(store.lens[table.row]), keys, self._st, self._out)
        if m:
            keys_m, pages_m = self._out[0, :m].copy(), self._out[1, :m].copy()
            for t in range(len(self.tiers)):
                self._down(t, keys_m, pages_m, DOWN)

    # -- inspection (tests) -------------------------------------------------------------------------------------
    def counters(self) -> dict[str, int]:
        """Hits and page moves by tier, as plain numbers (summed into a Result's `metrics.kv_tiers`)."""
        out = {"lookup_tokens": self.lookup_tokens, "hit_tokens_hbm": self.hbm_hit_tokens}
        for t in self.tiers:
            out[f"hit_tokens_{t.name}"] = t.hit_tokens
            out[f"pages_written_{t.name}"] = t.pages_written
            out[f"pages_loaded_{t.name}"] = t.pages_loaded
            out[f"pages_dropped_{t.name}"] = t.dropped
            out[f"stale_caught_{t.name}"] = t.stale_caught
        return out


def cache_for(
    num_pages: int,
    page_size: int,
    prefix_caching: bool,
    host_pages: int,
    storage_pages: int,
    write_back: bool,
) -> PagedCache:
    """The cache of one rank: plain HBM without tiers (the hot path costs nothing extra), else the hierarchy."""
    if host_pages <= 0 and storage_pages <= 0:
        return PagedCache(num_pages, page_size, prefix_caching)
    tiers = [Tier(TIER_NAMES[0], max(host_pages, 0))]
    if storage_pages > 0:
        tiers.append(Tier(TIER_NAMES[1], storage_pages))
    return TieredCache(num_pages, page_size, prefix_caching, tiers, write_back)
