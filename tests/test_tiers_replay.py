"""KV tiers on the real clock: the tiny CPU scenario with a host tier replayed with the pages really copied to host
memory and back, hits per tier as the simulation's (identical on the modeled clock; on the measured one, whose step
times move the turns, the same tiers hit and the same total), and a page loaded back holding the bytes spilled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from kernels.executor.paged_kv import PagedKV  # noqa: E402
from kernels.executor.replay import replay  # noqa: E402
from kernels.executor.tiers import TierBuffers  # noqa: E402
from simulator.config import loader  # noqa: E402
from simulator.engine.run import simulate  # noqa: E402
from simulator.serving.cache import page_keys  # noqa: E402
from simulator.serving.tables import BlockTable  # noqa: E402
from simulator.serving.tiers import Tier, TieredCache  # noqa: E402

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "tiny-cpu.yaml"
# A prefill instance holding ~200 pages of 16 tokens, three-turn conversations behind a shared prefix: turns come
# back after their pages left HBM, and find them in the 291-page host tier.
TIERED = (
    "deployment.prefill.mem_fraction=0.003",
    "deployment.prefill.host_tier_gib=0.01",
    "prefix_cache.enabled=true",
    "traffic.sessions.turns=3",
    "traffic.sessions.think_time_s=0.5",
    "traffic.shared_prefix_tokens=64",
    "traffic.requests=48",
)


def tiered() -> Any:
    return loader.load(SCENARIO, TIERED)[0]


def hits(result: dict[str, Any]) -> dict[str, int]:
    return result["metrics"]["kv_tiers"]["pools"]["prefill"]["hit_tokens"]


def test_the_modeled_clock_replays_the_tiers_as_run_does() -> None:
    sc = tiered()
    ran, _ = simulate(sc, SCENARIO.parent)
    rep = replay(sc, SCENARIO.parent, "cpu", clock="modeled")
    assert hits(ran)["host"] > 0, "the scenario loads pages back from host"
    assert rep.result["metrics"] == ran["metrics"]  # kv_tiers included
    copies = rep.result["provenance"]["replay"]["kv_tiers"]["prefill/0"]
    tier = ran["metrics"]["kv_tiers"]["pools"]["prefill"]
    # every spill and every load-back was a real copy (but those logged after the instance's last step)
    assert (
        copies["pages_moved"] + copies["pages_left_to_move"]
        == tier["pages_written"]["host"] + tier["pages_loaded"]["host"]
    )
    assert copies["pages_moved"] > tier["pages_loaded"]["host"] > 0


def test_the_measured_clock_finds_the_same_tiers_and_hits_in_all() -> None:
    sc = tiered()
    ran, _ = simulate(sc, SCENARIO.parent)
    measured = replay(sc, SCENARIO.parent, "cpu").result
    # The measured clock's step times move the turns, so which tier a returning turn finds is a wall-clock figure:
    # on this 2-core VM the host tier's hits ranged 1,152-1,376 over four quiet runs and fell to 960 and 896 under the
    # whole test suite's load (CI failed a factor-of-two bound on 896), against the model's 1,872. The total moves
    # too, less: 6,080-6,144 quiet and 5,568 under a clean clone's whole suite (2026-12-07; a 10% bound failed on
    # it), against 6,208. So neither is held to the model here (the modeled clock's test holds both exactly): every
    # tier the model finds must be found (a tier the replay lost finds nothing), the total can reuse no more than
    # the run's prompts hold, and it keeps at least half the model's (a cache that found little would not).
    model, real = hits(ran), hits(measured)
    assert sum(model.values()) / 2 <= sum(real.values()) <= measured["metrics"]["input_tokens"]
    assert {t for t, n in real.items() if n > 0} == {t for t, n in model.items() if n > 0}
    assert measured["metrics"]["kv_tiers"]["load_back_ms"]["p50"] > 0


def test_a_page_loaded_back_holds_the_bytes_that_were_spilled() -> None:
    sc = tiered()
    pool = sc.deployment.prefill
    page = pool.page_size
    cache = TieredCache(4, page, True, [Tier("host", 8)], write_back=True)
    kv = PagedKV(sc.model, pool, 2, 4, 4, torch.device("cpu"))
    buffers = TierBuffers(kv, cache)
    keys = page_keys((1, 2, 3), page, page, 3 * page)
    a = BlockTable()
    cache.hold(a, keys, 3)
    kv.data[:, a.live_pages()] = torch.randn(kv.data[:, :3].shape).to(kv.data.dtype)
    written = kv.data[:, a.live_pages()].clone()
    cache.publish(a, keys)
    cache.release(a)
    b = BlockTable()
    cache.hold(b, page_keys((9, 8, 7, 6), page, page, 4 * page), 4)  # every HBM page: a's are spilled to host
    buffers.drain()
    kv.data.zero_()  # the new request's prefill overwrites them
    cache.release(b)
    c = BlockTable()
    assert cache.hold(c, keys, 3) == 3
    moved, up = buffers.drain()
    assert up == 3 and moved >= 3
    assert torch.equal(kv.data[:, c.live_pages()], written)
