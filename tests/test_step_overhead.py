"""The executor's work beyond its kernels as a term of a CPU profile (`simulator.pricing.step_overhead`): its
arithmetic, its fit from probe steps, the kernels' in-step share, and where the engine's step timer adds them —
each with its hand arithmetic."""

from __future__ import annotations

from dataclasses import replace
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
        "kernel_share": 0.0,
        "probes": 0,
    }


def test_the_kernels_in_step_slowdown_is_their_price_times_the_share_measured_on_probes() -> None:
    term = StepOverhead(0.0, 0.0, 0.0, 0.0, 0.0, kernel_share=0.12)
    assert term.in_step(5e-3) == pytest.approx(0.6e-3)  # 5 ms of kernels priced alone: 0.6 ms more in a step
    assert term.in_step(np.array([1000.0, 2500.0])) == pytest.approx([120.0, 300.0])  # µs of a decode run
    assert term.as_doc()["kernel_share"] == 0.12
    with pytest.raises(ValueError, match="kernel_share"):
        StepOverhead(0.0, 0.0, 0.0, 0.0, 0.0, kernel_share=12.0)  # kernels 13x slower in a step: not a measurement
    with pytest.raises(ValueError, match="kernel_share"):
        StepOverhead(0.0, 0.0, 0.0, 0.0, 0.0, kernel_share=float("nan"))


def test_the_kernel_share_is_the_probes_median_kernel_time_over_their_price() -> None:
    """Probe a: kernels took 1.0, 1.2, 1.1 ms (median 1.1) against 1.0 priced; probe b: 2.5 ms (median of 2.4,
    2.5, 3.0) against 2.0; the glue's families and collectives count on neither side. (1.1 + 2.5) / 3.0 − 1 = 0.2."""
    from kernels.executor.overhead import kernel_share

    def took(gemm_ms: float) -> dict[str, float]:
        return {"gemm": gemm_ms * 0.6e-3, "decode_attention_mla": gemm_ms * 0.4e-3, "elementwise": 5e-3}

    a = ([took(1.0), took(1.2), took(1.1)], {"gemm": 0.6e-3, "decode_attention_mla": 0.4e-3, "elementwise": 1e-4})
    b = ([took(2.4), took(3.0), took(2.5)], {"gemm": 2.0e-3, "kv_write": 1e-4, "allreduce": 1.0})
    assert kernel_share([a, b]) == pytest.approx(0.2)
    assert kernel_share([]) == 0.0  # nothing priced, nothing to scale


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
    assert fit(points, kernel_share=0.07).kernel_share == 0.07  # measured apart, carried as it is
    assert fit(points, kernel_share=-0.03).kernel_share == 0.0  # kernels faster in a step than alone: none


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


def test_the_step_timer_scales_the_kernels_by_their_in_step_share_then_adds_the_glue() -> None:
    """A step is priced kernels · (1 + kernel_share) + glue: with a share of 0.1, 10% of its plain price more."""
    share = replace(TERM, kernel_share=0.1)
    chunk = Plan(prefill=[(SimpleNamespace(computed=0), 96)])
    plain = CostTimer().time_run(_inst(None, "prefill"), [chunk], 1)[0][0] - 2.0  # type: ignore[arg-type]
    termed = CostTimer().time_run(_inst(share, "prefill"), [chunk], 1)[0][0] - 2.0  # type: ignore[arg-type]
    assert termed == pytest.approx(1.1 * plain + 312e-6)
    batch = Plan(decode=[SimpleNamespace()] * 4, ctx0=400, pages0=28)
    plain_ends = CostTimer().time_run(_inst(None, "decode"), [batch], 3)[0]  # type: ignore[arg-type]
    termed_ends = CostTimer().time_run(_inst(share, "decode"), [batch], 3)[0]  # type: ignore[arg-type]
    plain_steps, termed_steps = np.diff([2.0, *plain_ends]), np.diff([2.0, *termed_ends])
    assert termed_steps == pytest.approx(1.1 * plain_steps + np.array([390e-6, 392e-6, 394e-6]))
