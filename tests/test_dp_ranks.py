"""DP attention ranks: each rank its own pages and sequences, stepped in lock-step by the slowest rank."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simulator.capacity import pool_capacity
from simulator.config import loader
from simulator.config.scenario import Scenario
from simulator.engine.run import simulate
from simulator.pricing.costmodel import CostModel
from simulator.pricing.dpstep import DPSteps
from simulator.pricing.profile import Profile
from simulator.serving.rank import build_ranks
from simulator.serving.routing import dp_rank
from simulator.workload.request import Request

# tiny-mla-moe on two H200s as one instance: attention data-parallel over 2 ranks, experts over both
DP2 = {
    "instances": 1,
    "tp": 2,
    "dp": 2,
    "ep": 2,
    "weights": "bf16",
    "kv_cache": "bf16",
    "page_size": 16,
    "decode_reserve_tokens": 0,
    "max_running": 8,
    "max_batch_tokens": 4096,
    "frontend_accept_us": 0,  # requests sent at once reach the ranks at once: no API server spreads them
    "frontend_prepare_us": 0,
}


def scenario(**over: Any) -> Scenario:
    base: dict[str, Any] = {
        "name": "dp",
        "model": "tiny-mla-moe",
        "hardware": "h200",
        "profile": "roofline",
        "deployment": {"mode": "colocated", "decode": DP2},
        "traffic": {"rate": 1.0, "requests": 4, "prompt_tokens": 16, "output_tokens": 4},
        "seed": 1,
    }
    return loader.validate(loader.apply_overrides(base, over), "test")


def ten_pages_per_rank() -> Scenario:
    """A reserve that leaves each rank exactly 10 pages of 16 tokens (tiny-mla-moe: 2 layers × 576 × 2 B =
    2,304 B a token, 36,864 B a page)."""
    sc = scenario()
    cap = pool_capacity(sc.model, sc.hardware, sc.deployment.decode)
    assert cap.kv_bytes_per_token == 2 * 576 * 2
    spare = cap.kv_budget_gib_per_gpu - 10.5 * 16 * 2304 / 1024**3  # half a page over 10, against rounding
    sc = scenario(**{"deployment.decode.reserve_gib": spare})
    assert pool_capacity(sc.model, sc.hardware, sc.deployment.decode).per_rank["pages"] == 10  # type: ignore[index]
    return sc


def req(i: int, prompt: int, output: int) -> Request:
    return Request(id=i, arrival=0.0, prompt_tokens=prompt, output_tokens=output)


def test_a_rank_runs_out_of_pages_while_another_has_room() -> None:
    sc = ten_pages_per_rank()
    pool = sc.deployment.decode
    ranks = build_ranks(sc, "decode", pool, pool_capacity(sc.model, sc.hardware, pool), None, 1)
    assert [r.cache.num_pages for r in ranks] == [10, 10]
    assert [r.sched.max_running for r in ranks] == [4, 4]  # max_running 8 counts the instance: 8 // 2 a rank
    a = ranks[0]
    # rank 0: A's prompt of 144 tokens takes 9 pages, B's of 16 the 10th: the rank is full, rank 1 empty
    for q in (req(1, 144, 50), req(2, 16, 50)):
        a.sched.enqueue(a.sched.new_seq(q, q.prompt_tokens, q.output_tokens))
    plan = a.sched.schedule()
    assert [c for _, c in plan.prefill] == [144, 16] and a.cache.available == 0
    a.sched.advance(plan, 1)  # both prompts prefilled; each sampled its first token
    # A's first decode step writes token 145, on an 11th page: rank 0 has none free, so it preempts B (the
    # newest) although rank 1 holds 10 free pages; one pool of 20 pages would have had room for both.
    plan = a.sched.schedule()
    assert [s.req.id for s in plan.decode] == [1]
    assert a.sched.counters.preempted == 1 and [s.req.id for s in a.sched.waiting] == [2]
    assert ranks[1].cache.available == 10 and ranks[1].sched.counters.preempted == 0


def test_requests_go_to_the_least_loaded_rank_and_stay(tmp_path: Path) -> None:
    assert dp_rank([3, 1, 1]) == 1  # ties to the lowest rank
    # four requests at once, placed one by one on the rank with the fewest pages held or queued: each queues
    # one page (16 prompt tokens), so they alternate 0, 1, 0, 1, and each rank runs two in lock-step
    rows = [{"arrival": 0.0, "prompt_tokens": 16, "output_tokens": 4}] * 4
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    sc = scenario(traffic={"trace": "t.jsonl"})
    result, run = simulate(sc, base_dir=tmp_path)
    inst = run.pools["decode"].instances[0]
    assert result["metrics"]["completed"] == 4
    assert inst.counters.preempted == 0
    assert [r.lookup_tokens for r in inst.ranks] == [32, 32]  # two 16-token prompts looked up on each
    even = {
        "ranks": 2,
        "batch_max_over_mean": 1.0,
        "kv_max_over_mean": 1.0,
        "kv_peak_rank_occupancy": pytest.approx(2 / inst.ranks[0].log.pages, abs=1e-4),
    }
    assert result["metrics"]["dp_ranks"]["decode"] == even
    # a long prompt first (10 pages queued on rank 0): the three short ones all go to rank 1 (1, 2, 3 pages)
    rows = [{"arrival": 0.0, "prompt_tokens": 160, "output_tokens": 4}] + rows[:3]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result, run = simulate(sc, base_dir=tmp_path)
    assert [r.lookup_tokens for r in run.pools["decode"].instances[0].ranks] == [160, 48]
    # rank 0 decodes 1 sequence, rank 1 three: the busiest rank's batch is 3 against a mean of 2
    assert result["metrics"]["dp_ranks"]["decode"]["batch_max_over_mean"] == 1.5


def test_the_slowest_rank_sets_the_step() -> None:
    sc = scenario()
    pool = sc.deployment.decode
    cost = CostModel(sc.model, sc.hardware, pool, Profile.for_scenario(sc), False)
    dp = DPSteps(cost)
    growth = np.zeros(3, dtype=np.int64)
    # rank 0: 3 sequences of 1,000 tokens; rank 1: 1 sequence of 100; three steps (the context each step reads)
    ctx0, ctx1 = np.array([3003, 3006, 3009]), np.array([101, 102, 103])
    steps, ends = dp.decode_run([(3, ctx0, 189 + growth), (1, ctx1, 7 + growth)], 0.0)
    own0 = dp.rank_pricing(3).price(ctx0, 189 + growth).us
    own1 = dp.rank_pricing(1).price(ctx1, 7 + growth).us
    shared = dp.shared(4).us  # the routed experts over both ranks' 4 tokens
    assert (own0 > own1).all()  # the busier rank is the slower one
    step = own0 + shared  # = max(own0, own1) + shared: rank 1's own part is hidden behind rank 0's
    assert ends == pytest.approx(np.cumsum(step) * 1e-6, rel=1e-15)
    # balanced over the same 4 tokens (2 + 2) the step is shorter: only the own part moved
    two = 2 * np.arange(1, 4)
    _, even = dp.decode_run([(2, 2000 + two, 126 + growth), (2, 1100 + two, 70 + growth)], 0.0)
    assert even[0] < ends[0]
    # a rank that has nothing to run adds nothing of its own, but the step still pays the routed experts
    _, alone = dp.decode_run([(1, ctx1, 7 + growth)], 0.0)
    assert alone[0] == pytest.approx((own1[0] + dp.shared(1).us) * 1e-6, rel=1e-15)


def test_even_ranks_price_as_the_instance_did() -> None:
    """Every rank with the same batch and context: the ranks' own ops plus the shared ones are exactly the
    instance's op list (the uniform split the cost model prices), so the times agree to rounding."""
    sc = scenario()
    pool = sc.deployment.decode
    cost = CostModel(sc.model, sc.hardware, pool, Profile.for_scenario(sc), False)
    dp = DPSteps(cost)
    growth = np.zeros(4, dtype=np.int64)
    ctx = 8 * 700 + 8 * np.arange(1, 5)
    _, ends = dp.decode_run([(8, ctx, 8 * 44 + growth), (8, ctx, 8 * 44 + growth)], 0.0)
    _, uniform = cost.decode_run(16, 16 * 700, 16 * 44, growth, 0.0)
    assert ends == pytest.approx(uniform, rel=1e-12)


def test_the_report_shows_the_ranks_imbalance(tmp_path: Path) -> None:
    from rich.console import Console

    from simulator.results.report import print_run

    rows = [{"arrival": 0.0, "prompt_tokens": 160, "output_tokens": 4}] + [
        {"arrival": 0.0, "prompt_tokens": 16, "output_tokens": 4}
    ] * 3
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result, _ = simulate(scenario(traffic={"trace": "t.jsonl"}), base_dir=tmp_path)
    console = Console(record=True, width=200)
    print_run(console, result)
    line = next(x for x in console.export_text().splitlines() if "decode DP ranks: busiest / mean" in x)
    assert "decode batch 1.50×, KV" in line and "over 2 ranks" in line
    # without DP attention the Result has no such entry (its bytes are as before)
    plain, _ = simulate(scenario(**{"deployment.decode": {**DP2, "dp": 1, "ep": 1}}))
    assert "dp_ranks" not in plain["metrics"]


def test_two_batch_overlap_takes_the_longer_of_compute_and_all_to_all() -> None:
    """The perfect bound (tbo_hidden_share 1; the engines' share is tested in test_engines.py), on steps the GPU
    bounds (no eager launch floor: `test_a_dp_step_lasts_at_least_its_slowest_ranks_launches`)."""
    sc = scenario(
        **{
            "deployment.decode.two_batch_overlap": True,
            "deployment.decode.tbo_hidden_share": 1.0,
            "deployment.decode.eager_kernel_us": 0.0,
        }
    )
    pool = sc.deployment.decode
    cost = CostModel(sc.model, sc.hardware, pool, Profile.for_scenario(sc), False)
    dp = DPSteps(cost)
    growth = np.zeros(2, dtype=np.int64)
    ctx = np.array([3003, 3006])
    _, ends = dp.decode_run([(3, ctx, 189 + growth), (1, np.array([101, 102]), 7 + growth)], 0.0)
    own = dp.rank_pricing(3).price(ctx, 189 + growth).us  # the slowest rank's own part
    shared, a2a = dp.shared(4).us, dp.alltoall(4).us  # routed experts over 4 tokens; of it the all-to-alls
    assert 0 < a2a < shared
    step = np.maximum(own + (shared - a2a), a2a)  # compute and communication side by side
    assert ends == pytest.approx(np.cumsum(step) * 1e-6, rel=1e-15)
    assert (step < own + shared).all()  # without the overlap: their sum
    # a step with prefill chunks: the same rule over its own parts
    bare = scenario(**{"deployment.decode.eager_kernel_us": 0.0}).deployment.decode
    off = DPSteps(CostModel(sc.model, sc.hardware, bare, Profile.for_scenario(sc), False))
    chunks: list[tuple[int, int]] = [(512, 0)]
    plain = off.step_s([(2, 2000, 126, (), False), (0, 0, 0, chunks, False)])
    comm = off._a2a_line.charge(514, cost.usage) * 1e-6  # 2 decode + 512 prompt tokens dispatched
    both = dp.step_s([(2, 2000, 126, (), False), (0, 0, 0, chunks, False)])
    assert both == pytest.approx(max(plain - comm, comm), rel=1e-12)


def test_a_dp_step_lasts_at_least_its_slowest_ranks_launches() -> None:
    """Under DP attention (no piecewise graphs) a rank running a prompt launches its kernels eagerly; the lock-step
    lasts at least the slowest rank's launches, whatever the others run."""
    sc = scenario(**{"deployment.decode.eager_kernel_us": 500.0})
    cost = CostModel(sc.model, sc.hardware, sc.deployment.decode, Profile.for_scenario(sc), False)
    gpu = DPSteps(
        CostModel(
            sc.model,
            sc.hardware,
            scenario(**{"deployment.decode.eager_kernel_us": 0.0}).deployment.decode,
            Profile.for_scenario(sc),
            False,
        )
    )
    ranks = [(2, 2000, 126, (), False), (0, 0, 0, [(64, 0)], False)]
    launches = cost.eager_floor_us(0, ((64, 0),))
    assert launches > 1e6 * gpu.step_s(ranks)  # the floor binds at 500 µs a kernel
    assert DPSteps(cost).step_s(ranks) == pytest.approx(launches * 1e-6, rel=1e-12)


def test_two_batch_overlap_needs_dp_attention() -> None:
    from simulator.errors import InputError

    with pytest.raises(InputError, match=r"deployment\.decode\.two_batch_overlap: .* needs dp > 1"):
        scenario(**{"deployment.decode": {**DP2, "dp": 1, "two_batch_overlap": True}})
    assert "two_batch_overlap" not in scenario().deployment.decode.model_dump()  # off: the pool's bytes as before


@pytest.mark.parametrize("dp", [1, 2])
def test_routing_load_is_the_ranks_load_written_out(monkeypatch: pytest.MonkeyPatch, dp: int) -> None:
    """`Instance.kv_load` writes `Rank.load` out for speed (routing reads every instance per request): at every
    routing decision of a run it equals the sum of its ranks' `load` at the steps started by then."""
    from simulator.engine.instance import Instance

    checked = []
    real = Instance.kv_load

    def kv_load(self: Instance, t: float) -> int:
        k = self._started(t)
        want = sum(r.load(k) for r in self.ranks)
        got = real(self, t)
        assert got == want
        checked.append(got)
        return got

    monkeypatch.setattr(Instance, "kv_load", kv_load)
    pool = DP2 if dp == 2 else {**DP2, "dp": 1, "ep": 1}
    over = {
        "deployment.decode": {**pool, "instances": 2},
        "routing": {"policy": "least_kv"},
        "traffic": {"rate": 200.0, "requests": 300, "prompt_tokens": 200, "output_tokens": 40},
    }
    result, _ = simulate(scenario(**over))
    assert result["metrics"]["completed"] > 0 and len(checked) > 10 and max(checked) > 0
