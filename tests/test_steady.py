"""Steady state: the warm-up MSER-5 finds, batch-means intervals, the stopping rule, and the Result's window fields."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import invoke

from simulator.config import loader, scenario
from simulator.engine.run import simulate
from simulator.planning import stopping
from simulator.planning.slo import SLO
from simulator.planning.trial import Trial, compact, run_trial
from simulator.results import steady

ROOT = Path(__file__).resolve().parents[1]
KIMI_STUDY = ROOT / "scenarios" / "kimi-k2.6-kv-formats.yaml"


def test_t_quantile_is_students() -> None:
    from scipy import stats

    assert steady.T975 == pytest.approx(float(stats.t.ppf(0.975, steady.BATCHES - 1)), rel=1e-12)


@pytest.mark.parametrize("end", [20, 40, 70])
def test_mser5_cuts_a_known_transient(end: int) -> None:
    """A level shift that settles at observation `end` of 200 (noise sd 1, offset 6 sd): the cut lands within a
    batch or two of it, inside the first half."""
    rng = np.random.default_rng(1)
    y = rng.normal(10.0, 1.0, 200)
    y[:end] += np.linspace(-6.0, 0.0, end)  # a batch filling: low, rising to the level
    cut, inside = steady.mser5(y)
    assert inside and end - 10 <= cut <= end + 10, cut


def test_mser5_says_when_the_transient_outlasts_half_the_run() -> None:
    y = np.concatenate([np.linspace(0.0, 10.0, 150), np.full(50, 10.0)]) + np.random.default_rng(2).normal(0, 0.1, 200)
    cut, inside = steady.mser5(y)
    assert not inside and cut == 100  # the latest cut it may take: the middle


def test_mser5_keeps_a_stationary_series_nearly_whole() -> None:
    cuts = [steady.mser5(np.random.default_rng(s).normal(5.0, 1.0, 200))[0] for s in range(50)]
    assert np.median(cuts) <= 25  # nothing to cut: most cuts are in the first few batches


def test_batch_means_interval_has_its_half_width_and_coverage() -> None:
    """Ten batch values of known spread: the half-width is t(0.975, 9) s / sqrt(10), and over many runs the
    interval around the mean holds the true mean 95% of the time."""
    rng = np.random.default_rng(3)
    values = rng.normal(100.0, 4.0, steady.BATCHES)
    lo, hi = steady.t_interval(values, float(values.mean()))
    assert (hi - lo) / 2 == pytest.approx(steady.T975 * values.std(ddof=1) / np.sqrt(steady.BATCHES))
    held = 0
    for _ in range(4000):
        v = rng.normal(100.0, 4.0, steady.BATCHES)
        lo, hi = steady.t_interval(v, float(v.mean()))
        held += lo <= 100.0 <= hi
    assert 0.94 <= held / 4000 <= 0.96
    assert steady.t_interval(np.array([1.0, np.nan, *[1.0] * 8]), 1.0) is None  # a batch without a value


def test_cumulative_is_exact_at_any_time() -> None:
    rng = np.random.default_rng(4)
    start = rng.uniform(0, 10, 50)
    end = start + rng.uniform(0, 3, 50) * (rng.random(50) > 0.2)  # some end where they start: all at once
    amount, jump = rng.uniform(0, 100, 50), rng.integers(0, 2, 50).astype(float)
    times = np.linspace(-1, 14, 97)
    frac = np.where(end > start, np.clip((times[:, None] - start) / np.where(end > start, end - start, 1), 0, 1), 0)
    frac = np.where(end > start, frac, times[:, None] >= start)
    want = (jump * (times[:, None] >= start) + amount * frac).sum(axis=1)
    assert np.allclose(steady.cumulative(times, start, end, amount, jump), want)


def test_stopping_rule_takes_the_doublings_the_interval_asks_for() -> None:
    assert stopping.doublings_needed(None) == 1  # no steady state yet: one at a time
    assert stopping.doublings_needed(0.06) == 1  # (0.06 / 0.05)^2 = 1.44: twice as long
    assert stopping.doublings_needed(0.10) == 2  # 4x
    assert stopping.doublings_needed(0.20) == 4  # 16x (the cap stops it at 4x)


def test_a_precise_trial_is_lengthened_to_its_precision_or_the_cap_and_its_length_reproduces_it() -> None:
    base = ("traffic.concurrency=null", "traffic.rate=0.5", "traffic.requests=40")
    sc, _ = loader.load(KIMI_STUDY, base)
    slo = SLO.parse("ttft_p95_ms=60000,tpot_p95_ms=100", sc)
    out = run_trial(Trial(sc, KIMI_STUDY.parent, slo, precise=True))
    assert out["meets"] and not out["stopped_early"]
    assert 1 <= out["doublings"] <= stopping.DOUBLINGS
    assert out["overrides"] == {"traffic.requests": 40 * 2 ** out["doublings"]}
    assert out["doublings"] == stopping.DOUBLINGS or out["precision"] <= stopping.PRECISION
    again, _ = loader.load(KIMI_STUDY, (*base, *(f"{k}={v}" for k, v in out["overrides"].items())))
    assert compact(simulate(again, KIMI_STUDY.parent)[0]["metrics"]) == out["metrics"]  # the written length
    once = run_trial(Trial(sc, KIMI_STUDY.parent, slo, lengthen=False))
    assert once["doublings"] == 0 and once["overrides"] == {}


def test_run_json_says_its_window_cut_and_intervals(monkeypatch, capsys, tmp_path: Path) -> None:
    code, out, _ = invoke(monkeypatch, capsys, "init", "--rate", "2", "--out", str(tmp_path / "s.yaml"))
    assert code == 0
    code, out, err = invoke(monkeypatch, capsys, "run", str(tmp_path / "s.yaml"), "--json")
    assert code == 0, err
    m = json.loads(out)["metrics"]
    lo, hi = m["window_s"]
    state = m["steady_state"]
    assert 0 < lo < hi and state["reached"] and state["why"] is None and state["warmup_cut_s"] == lo
    assert state["batches"] == steady.BATCHES and "MSER-5" in state["method"]
    for path in (("output_tokens_per_s",), ("cost_per_mtok_usd",), ("ttft_ms", "p95"), ("tpot_ms", "p95")):
        ci, v = m["ci95"], m
        for k in path:
            ci, v = ci[k], v[k]
        assert ci[0] <= v <= ci[1], path
    assert set(m["full_run"]) >= {"output_tokens_per_s", "ttft_ms", "tpot_ms", "cost_per_mtok_usd", "duration_s"}
    code, text, _ = invoke(monkeypatch, capsys, "run", str(tmp_path / "s.yaml"))
    assert f"steady state from {lo:,.0f} s to {hi:,.0f} s" in " ".join(text.split())
    assert "TTFT p95" in text and " ± " in text and "whole run, fill and drain included" in " ".join(text.split())


def test_a_closed_loops_first_wave_is_cut_from_the_figures() -> None:
    """The KV study's 64 clients start at t = 0: their prompts queue together, and in a run of 256 requests that
    wave's TTFT is the whole run's p95; the window starts after it, and its p95 is under the wave's median."""
    sets = ("traffic.concurrency=64", "traffic.requests=256", "deployment.decode.kv_cache=fp8_e4m3")
    sc, _ = loader.load(KIMI_STUDY, sets)
    result, run = simulate(sc, KIMI_STUDY.parent)
    m = result["metrics"]
    wave = np.median([(r.first_token - r.arrival) * 1e3 for r in run.requests if r.arrival == 0.0])
    assert m["window_s"][0] > 0 and m["full_run"]["ttft_ms"]["p95"] > wave > m["ttft_ms"]["p95"]


def test_init_writes_a_steady_state_and_a_minute_is_too_short_for_it(monkeypatch, capsys, tmp_path: Path) -> None:
    path = str(tmp_path / "k.yaml")
    args = ["init", "--rate", "5", "--prompt-tokens", "8192", "--output-tokens", "1024", "--out", path]
    assert invoke(monkeypatch, capsys, *args)[0] == 0
    code, out, _ = invoke(monkeypatch, capsys, "run", path, "--json")
    assert code == 0 and json.loads(out)["metrics"]["steady_state"]["reached"]  # init's length shows one
    code, out, _ = invoke(monkeypatch, capsys, "run", path, "--set", "traffic.duration_s=60", "--json")
    m = json.loads(out)["metrics"]
    assert code == 0 and not m["steady_state"]["reached"] and m["steady_state"]["why"]
    assert "ttft_ms" not in m["ci95"]  # no latency interval to mislead; throughput's arrivals still have one
    code, text, _ = invoke(monkeypatch, capsys, "run", path, "--set", "traffic.duration_s=60")
    assert "NO STEADY STATE" in text


def test_a_closed_loop_without_a_length_runs_long_enough_for_a_steady_state() -> None:
    """A closed loop given no count or duration sends twice the window its 10 batches need, each a lifetime (one
    request a client) and 20 completions long: the steady-state reading's own shape, so its answer is one."""
    for clients in (1, 3, 8, 20, 21, 64, 1000):
        per_client = 2 * steady.BATCHES * max(1, steady.MIN_PER_BATCH / clients)
        assert scenario.Traffic(concurrency=clients).requests == clients * math.ceil(per_client)
    sc, _ = loader.load(KIMI_STUDY, ("traffic.concurrency=8", "deployment.decode.kv_cache=fp8_e4m3"))
    assert sc.traffic.requests == 400  # the study names no count
    assert simulate(sc, KIMI_STUDY.parent)[0]["metrics"]["steady_state"]["reached"]


def test_a_window_from_a_closed_loops_start_does_not_count_its_first_wave() -> None:
    """The prefill study's 32 clients send 8K-token prompts at t = 0; MSER-5 cuts nothing at 640 requests, and a
    window from 0 counts the arrivals after it — each a completion of its seconds — not the wave, whose 262K
    tokens would read 5% more than the fleet serves."""
    study = ROOT / "scenarios" / "glm-5.2-prefill.yaml"
    sc, _ = loader.load(study, ("deployment.prefill.weights=int4", "traffic.requests=640"))
    m = simulate(sc, study.parent)[0]["metrics"]
    assert m["window_s"][0] == 0.0 and m["steady_state"]["requests"] == 640 - 32
    assert m["input_tokens_per_s"] == pytest.approx(m["full_run"]["input_tokens_per_s"], rel=0.01)
