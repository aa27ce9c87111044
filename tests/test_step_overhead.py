"""The executor's work beyond its kernels as a term of a CPU profile (`simulator.pricing.step_overhead`): its
arithmetic, its fit from probe steps, and where the engine's step timer adds it — each with its hand arithmetic."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from simulator.config import loader
from simulator.engine.timer import CostTimer
from simulator.pricing.costmodel import CostModel
from simulator.pricing.profile import Profile
from simulator.pricing.step_overhead import StepOverhead, fit
from simulator.serving.scheduler import Plan

ROOT = Path(__file__).resolve().parents[1]
TERM = StepOverhead(
    base_us=100.0, decode_us=50.0, per_chunk_us=20.0, per_token_us=2.0, per_kv_token_us=0.5, check_us=30.0
)


def test_the_term_is_base_plus_decode_plus_per_chunk_plus_per_row_plus_per_cached_token() -> None:
    assert TERM.seconds(4, 0, 4, 400) == pytest.approx(358e-6)  # 100 + 50 + 2·4 + 0.5·400 µs: a decode batch of 4
    assert TERM.seconds(0, 2, 100, 0) == pytest.approx(340e-6)  # 100 + 2·20 + 2·100 µs: two chunks, 100 rows
    assert TERM.seconds(4, 1, 36, 200) == pytest.approx(342e-6)  # 100 + 50 + 20 + 2·36 + 0.5·200 µs: mixed
    assert TERM.seconds(4, 0, 4, 400, checked=True) == pytest.approx(388e-6)  # 358 + 30 µs: its pages checked
    assert TERM.seconds(0, 1, 32, 0, checked=True) == pytest.approx(184e-6)  # no decode rows, no check: 100+20+64
    assert TERM.as_doc() == {
        "base_us": 100.0,
        "decode_us": 50.0,
        "per_chunk_us": 20.0,
        "per_token_us": 2.0,
        "per_kv_token_us": 0.5,
        "check_us": 30.0,
        "probes": 0,
    }


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), 2e6])
def test_a_term_out_of_range_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="base_us"):
        StepOverhead(bad, 0.0, 0.0, 0.0, 0.0)


def test_the_fit_recovers_each_part_from_probe_steps() -> None:
    probes = [(1, 0, 1, 49), (8, 0, 8, 392), (8, 0, 8, 1544), (0, 1, 64, 0), (0, 2, 96, 0), (4, 1, 36, 196)]
    points = [(d, c, t, kv, TERM.seconds(d, c, t, kv) * 1e6) for d, c, t, kv in probes]
    got = fit(points, check_us=30.0)
    parts = (got.base_us, got.decode_us, got.per_chunk_us, got.per_token_us, got.per_kv_token_us, got.check_us)
    assert parts == pytest.approx((100, 50, 20, 2, 0.5, 30))
    assert got.probes == 6
    assert fit(points, check_us=-5.0).check_us == 0.0  # a check faster than its price takes no time back


def test_the_fit_drops_a_negative_part_and_leaves_an_unvaried_one_to_the_base() -> None:
    # decode-only probes: no chunk ever, so per chunk stays 0 and decode rows are indistinguishable from the base
    got = fit([(1, 0, 1, 48.0, 110.0), (8, 0, 8, 48.0, 180.0)])  # 100 + 10 a row; one context: none per token read
    parts = (got.base_us, got.decode_us, got.per_chunk_us, got.per_token_us, got.per_kv_token_us)
    assert parts == pytest.approx((100, 0, 0, 10, 0))
    # time that falls with the rows cannot be glue: per row is dropped, the base is the mean
    got = fit([(1, 0, 1, 48.0, 200.0), (8, 0, 8, 48.0, 100.0)])
    assert (got.base_us, got.per_token_us) == pytest.approx((150, 0))
    assert fit([]) == StepOverhead(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)


def _inst(term: StepOverhead | None, pool_name: str) -> SimpleNamespace:
    sc = loader.load(ROOT / "scenarios" / "tiny-cpu.yaml", [])[0]
    profile = Profile.for_scenario(sc, ROOT / "scenarios")
    if term is not None:
        profile.step_overhead[sc.model.name] = term
    pool = sc.deployment.pools()[pool_name]
    cost = CostModel(sc.model, sc.hardware, pool, profile, sc.integrity.enabled)
    sched = SimpleNamespace(growth=lambda plan, n: np.zeros(n, dtype=np.int64))
    return SimpleNamespace(
        pool_name=pool_name, index=0, pool=pool, cost=cost, clock=2.0, ranks=[SimpleNamespace(sched=sched)]
    )


def test_the_step_timer_adds_the_term_to_each_step_on_the_devices_clock() -> None:
    """tiny-cpu's pools do no CPU work of their own (host_step_us 0), so a step is its price plus the term."""
    chunk = Plan(prefill=[(SimpleNamespace(computed=0), 96)])
    plain = CostTimer().time_run(_inst(None, "prefill"), [chunk], 1)[0]  # type: ignore[arg-type]
    termed = CostTimer().time_run(_inst(TERM, "prefill"), [chunk], 1)[0]  # type: ignore[arg-type]
    assert termed[0] - plain[0] == pytest.approx(312e-6)  # 100 + 20 + 2·96 µs (no decode rows, nothing checked)
    batch = Plan(decode=[SimpleNamespace()] * 4, ctx0=400, pages0=28)
    plain = CostTimer().time_run(_inst(None, "decode"), [batch], 3)[0]  # type: ignore[arg-type]
    termed = CostTimer().time_run(_inst(TERM, "decode"), [batch], 3)[0]  # type: ignore[arg-type]
    # step i of 4 rows reads 400 + 4·(i+1) tokens, its pages checked (tiny-cpu checks integrity):
    # 100 + 50 + 2·4 + 0.5·404 + 30 = 390 µs, then 392 and 394 µs
    assert np.subtract(termed, plain) == pytest.approx([390e-6, 782e-6, 1176e-6])
