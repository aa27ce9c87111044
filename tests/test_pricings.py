"""Whether the pricing decides a study: the other bundled pricings, the decision a sweep turns on, and the one line
`sweep` and `plan` print where another pricing reverses it (the app's Compare rule, `results.compare`)."""

from __future__ import annotations

from pathlib import Path

from simulator.config import loader
from simulator.planning import pricings
from simulator.results.compare import HEADLINE, deltas, reversals

ROOT = Path(__file__).resolve().parents[1]
KIMI_STUDY = ROOT / "scenarios" / "kimi-k2.6-kv-formats.yaml"


def _result(tput: float, ttft: float, cost: float) -> dict:
    m = {
        "output_tokens_per_s": tput,
        "output_tokens_per_s_per_gpu": tput / 8,
        "input_tokens_per_s": 0.0,
        "ttft_ms": {"p50": ttft, "p95": ttft},
        "tpot_ms": {"p50": 30.0, "p95": 30.0},
        "e2e_ms": {"p95": 1.0},
        "slo_attainment": 1.0,
        "cost_per_mtok_usd": cost,
        "max_running": 1,
        "preempted": 0,
        "kv_occupancy": {"max": 0.5},
        "completed": 1,
        "gpus": 8,
    }
    m["ci95"] = {  # ±2% on every headline figure: the runs' noise
        "output_tokens_per_s": [tput * 0.98, tput * 1.02],
        "ttft_ms": {"p95": [ttft * 0.98, ttft * 1.02]},
        "tpot_ms": {"p95": [29.4, 30.6]},
        "slo_attainment": [1.0, 1.0],
        "cost_per_mtok_usd": [cost * 0.98, cost * 1.02],
    }
    return {"metrics": m}


def test_the_other_pricings_of_a_study_are_its_gpus_profiles_and_the_other_engines() -> None:
    sc, _ = loader.load(KIMI_STUDY)
    alts = pricings.of(sc, KIMI_STUDY.parent)
    profiles = [a.override["profile"] for a in alts if "profile" in a.override]
    engines = [a.override["engine"] for a in alts if "engine" in a.override]
    assert sc.profile == "roofline" and "roofline" not in profiles  # its own is not an alternative
    assert profiles == ["../profiles/h200-modeled.json", "../profiles/h200-sglang.json"]  # the H200's only
    assert engines and sc.engine.name not in engines


def test_a_sweeps_decision_is_its_first_field_that_is_not_the_load_at_its_focus() -> None:
    sc, raw = loader.load(KIMI_STUDY)
    axis, values, at = pricings.sweep_decision(sc, raw, str(KIMI_STUDY))
    assert axis == "deployment.decode.kv_cache" and values == ["bf16", "fp8_e4m3"]
    assert at == {"traffic.concurrency": 64}  # the study's focus


def test_a_reversed_sweep_is_one_line_with_both_pricings_figures() -> None:
    sc, raw = loader.load(KIMI_STUDY)
    at = {"traffic.concurrency": 64}
    results = [
        {"point": {**at, "deployment.decode.kv_cache": "bf16"}, **_result(1000.0, 500.0, 20.0)},
        {"point": {**at, "deployment.decode.kv_cache": "fp8_e4m3"}, **_result(1200.0, 500.0, 16.0)},
    ]
    priced = iter([_result(1100.0, 500.0, 18.0), _result(450.0, 500.0, 44.0)] + [_result(1000.0, 500.0, 20.0)] * 8)

    def run(jobs: list) -> list[dict]:
        assert all(s.sweep == {} for s, _ in jobs)  # single points
        return [next(priced) for _ in jobs]

    rev = pricings.sweep_reversals(sc, raw, str(KIMI_STUDY), KIMI_STUDY.parent, results, run)
    assert [r["pricing"].split(":")[0] for r in rev["reversed"]] == ["h200-modeled.json"]
    line = pricings.sweep_line(rev)
    assert "\n" not in line and line.startswith("the pricing decides this study: kv_cache=fp8_e4m3 vs bf16 at")
    assert "output throughput +20%" in line and "output throughput -59% (450 tok/s vs 1,100 tok/s)" in line
    assert pricings.sweep_line({**rev, "reversed": []}) is None  # every pricing agrees: nothing printed


def test_a_plan_is_reversed_where_its_winner_misses_or_falls_behind() -> None:
    w = {"gpus": 16, "layout": "W", "overrides": {}, "trial": {}}
    r = {"gpus": 16, "layout": "R", "overrides": {}, "trial": {}}

    def out(meets: bool, cost: float, reason: str | None = None, noise: float = 0.02) -> dict:
        ci = {"cost_per_mtok_usd": [cost * (1 - noise), cost * (1 + noise)], "ttft_ms": {"p95": [0.9, 1.1]}}
        m = {"cost_per_mtok_usd": cost, "ttft_ms": {"p95": 1.0}, "ci95": ci}
        return {"meets": meets, "reason": reason, "stopped_early": reason is not None, "metrics": m}

    assert pricings._plan_flip([w, r], [out(True, 10.0), out(True, 11.0)], "gpus") is None
    assert "ranks ahead" in pricings._plan_flip([w, r], [out(True, 10.0), out(True, 9.0)], "gpus")
    # 0.02% cheaper, or 5% cheaper with ±5% noise on each: inside the runs' noise, not a reversal
    assert pricings._plan_flip([w, r], [out(True, 10.0), out(True, 9.998)], "gpus") is None
    assert pricings._plan_flip([w, r], [out(True, 10.0, noise=0.05), out(True, 9.5, noise=0.05)], "gpus") is None
    why = pricings._plan_flip(
        [w, r], [out(False, 10.0, "misses TTFT: p95 2,500 ms > 2,000 ms"), out(True, 9.0)], "gpus"
    )
    assert why == "the winner misses TTFT: p95 2,500 ms > 2,000 ms"
    line = pricings.plan_line(
        {"own": "roofline on the engine sglang-0.5", "reversed": [{"pricing": "x.json: k", "why": why}]}
    )
    assert line == (
        "the pricing decides this plan (its answer is priced by roofline on the engine sglang-0.5): "
        "priced by x.json, the winner misses TTFT: p95 2,500 ms > 2,000 ms"
    )


def test_without_intervals_only_a_change_beyond_the_unknown_noise_is_clear() -> None:
    a, b = {"metrics": {"output_tokens_per_s": 1000.0}}, {"metrics": {"output_tokens_per_s": 1050.0}}
    far = {"metrics": {"output_tokens_per_s": 400.0}}
    (d,) = [d for d in deltas(a, b) if d.label == "output throughput"]
    (e,) = [d for d in deltas(a, far) if d.label == "output throughput"]
    assert not d.clear and e.clear  # +5% inside UNKNOWN_NOISE (10%), -60% beyond it


def test_a_sweeps_change_inside_the_runs_noise_reverses_nothing() -> None:
    a, b = _result(1000.0, 500.0, 20.0), _result(1000.2, 500.0, 19.996)  # +0.02%, intervals of ±2%
    other_a, other_b = _result(1000.0, 500.0, 20.0), _result(990.0, 500.0, 20.2)  # -1%: the other way, as small
    assert all(not d.clear for d in deltas(a, b) if d.label in HEADLINE)
    assert reversals(deltas(a, b), deltas(other_a, other_b)) == []
    far = _result(450.0, 500.0, 44.0)  # -55%: beyond the noise, but the study's own +0.02% is not a decision
    assert reversals(deltas(a, b), deltas(other_a, far)) == []
    assert [d.label for d, _ in reversals(deltas(a, _result(1200.0, 500.0, 16.0)), deltas(other_a, far))] == [
        "output throughput",
        "cost",
    ]
