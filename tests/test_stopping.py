"""The stopping rule on hand-made runs: a trial is lengthened only while its verdict, or its rank, is in doubt.

Each case restates the rule in plain arithmetic: an interval [low, high] either holds a limit or lies on one side
of it, and a half-width shrinks as one over the root of the run's length.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

from simulator.config import loader
from simulator.planning import stopping
from simulator.planning.search import contenders
from simulator.planning.slo import MISSES_TTFT, SLO
from simulator.planning.trial import Trial, run_trial

ROOT = Path(__file__).resolve().parents[1]
KIMI_STUDY = ROOT / "scenarios" / "kimi-k2.6-kv-formats.yaml"
SLO_ = SLO(ttft_p95_ms=2000, tpot_p95_ms=50)


def _out(ttft: tuple[float, float, float], tpot: tuple[float, float, float], *, steady: bool = True) -> dict:
    """A trial's outcome with TTFT and TPOT p95 (low, value, high) and the point estimates' verdict."""
    metrics = {
        "ttft_ms": {"p95": ttft[1]},
        "tpot_ms": {"p95": tpot[1]},
        "slo_attainment": 0.99,
        "steady_state": {"reached": steady},
        "ci95": {"ttft_ms": {"p95": [ttft[0], ttft[2]]}, "tpot_ms": {"p95": [tpot[0], tpot[2]]}} if steady else {},
    }
    reason = SLO_.verdict({**metrics, "requests": 100, "rejected": 0, "unfinished": 0, "aborted": 0})
    return {"meets": reason is None, "reason": reason, "stopped_early": False, "metrics": metrics}


def test_a_clear_pass_or_a_clear_miss_is_not_lengthened() -> None:
    clear_pass = _out((1000, 1100, 1300), (30, 35, 40))  # both intervals wholly under their limits
    clear_miss = _out((2100, 2600, 3500), (30, 35, 60))  # TTFT wholly over: TPOT's doubt changes nothing
    for out in (clear_pass, clear_miss):
        assert stopping.settled(out, SLO_)
        assert stopping.wanted(out, SLO_, precise_figures=False) == 0
    assert clear_pass["meets"] and not clear_miss["meets"]


def test_a_limit_inside_its_interval_asks_for_the_doublings_that_clear_it() -> None:
    # TTFT p95 1,800 ± 400 ms: the limit (2,000) is inside; its distance is 200 / 1,800 = 11.1% of the p95, the
    # half-width 400 / 1,800 = 22.2%: (22.2 / 11.1)^2 = 4 times as long, 2 doublings
    out = _out((1400, 1800, 2200), (30, 35, 40))
    assert not stopping.settled(out, SLO_)
    assert stopping.wanted(out, SLO_, precise_figures=False) == 2 == math.ceil(math.log2((400 / 200) ** 2))
    # a close call (the limit 1% away) asks only for the ±5% precision: (0.10 / 0.05)^2 = 4 times, 2 doublings
    close = _out((1800, 1980, 2178), (30, 35, 40))
    assert stopping.wanted(close, SLO_, precise_figures=False) == 2
    # within ±5% already: stop, the verdict a call closer than the precision asked
    tight = _out((1950, 1990, 2030), (30, 35, 40))
    assert stopping.wanted(tight, SLO_, precise_figures=False) == 0


def test_no_steady_state_is_one_doubling_and_a_certain_miss_none() -> None:
    assert stopping.wanted(_out((0, 1000, 0), (0, 30, 0), steady=False), SLO_, precise_figures=False) == 1
    early = {**_out((1000, 1100, 1300), (30, 35, 40)), "stopped_early": True, "meets": False, "reason": MISSES_TTFT}
    assert stopping.wanted(early, SLO_, precise_figures=False) == 0
    never = {**_out((1000, 1100, 1300), (30, 35, 40)), "meets": False, "reason": "cannot sustain the rate: 3 of 9"}
    assert stopping.settled(never, SLO_)


def test_precise_figures_lengthen_a_clear_pass_to_five_percent() -> None:
    clear_pass = _out((900, 1100, 1300), (30, 35, 40))  # binding: TPOT 35 of 50 (70%) against TTFT 55%
    rel = 5 / 35  # TPOT's half-width as a share of its p95: (0.143 / 0.05)^2 = 8.2 times, 4 doublings
    assert stopping.binding_precision(clear_pass["metrics"], SLO_) == rel
    assert stopping.wanted(clear_pass, SLO_, precise_figures=True) == 4 == math.ceil(math.log2((rel / 0.05) ** 2))
    assert stopping.wanted(_out((900, 1100, 1300), (34, 35, 36)), SLO_, precise_figures=True) == 0


def _cand(gpus: int, cost: tuple[float, float]) -> SimpleNamespace:
    return SimpleNamespace(gpus=gpus, outcome={"metrics": {"ci95": {"cost_per_mtok_usd": list(cost)}}})


def test_contenders_are_those_whose_rank_the_intervals_leave_in_doubt() -> None:
    w, near, far, more = _cand(16, (9.0, 10.0)), _cand(16, (9.8, 11.0)), _cand(16, (10.5, 11.0)), _cand(24, (9, 10))
    assert contenders([w, near, far, more], "gpus") == [w, near]  # more GPUs can never rank ahead
    assert contenders([w, far], "gpus") == []  # nothing can overtake the winner: none is lengthened
    assert contenders([w, far, more], "cost") == [w, more]  # cost first: the GPU count does not rank first
    assert contenders([w], "gpus") == []


def test_a_clear_pass_runs_once_and_precise_goes_on_from_that_run() -> None:
    base = ("traffic.concurrency=null", "traffic.rate=0.4", "traffic.requests=400")
    sc, _ = loader.load(KIMI_STUDY, base)
    slo = SLO.parse("ttft_p95_ms=60000,tpot_p95_ms=100", sc)
    once = run_trial(Trial(sc, KIMI_STUDY.parent, slo))
    assert once["meets"] and stopping.settled(once, slo)
    assert once["doublings"] == 0 and once["overrides"] == {} and once["as_written"] is None
    more = run_trial(Trial(sc, KIMI_STUDY.parent, slo, precise=True, resume=once))
    fresh = run_trial(Trial(sc, KIMI_STUDY.parent, slo, precise=True))
    assert more == fresh  # going on from the run it has is the same trial as running it from the start
    assert more["doublings"] >= 1 and more["overrides"] == {"traffic.requests": 400 * 2 ** more["doublings"]}


def _watch(records: list, now: float, most: int = 20):
    from simulator.planning.trial import _Watch

    return _Watch(SLO_, most, {r.id: r for r in records}, since=10.0, settled=lambda: now)


def test_the_watch_counts_a_pending_request_once_its_wait_is_surely_over_the_limit() -> None:
    import pytest

    from simulator.planning.trial import _Missed
    from simulator.results.record import RequestRecord

    # of at most 20 requests, p95 (linear interpolation) is over a limit once 20 - floor(0.95 * 19) = 2 are
    assert _watch([], 0.0).over_p95 == 2 == 20 - math.floor(0.95 * 19)
    waiting = [RequestRecord(i, 11.0, 100, 50) for i in range(2)]  # no first token yet, arrived at 11 s
    _watch(waiting, now=12.9).check(0)  # waited 1.9 s by what is settled: no verdict yet
    with pytest.raises(_Missed, match="misses TTFT"):
        _watch(waiting, now=13.1).check(0)  # 2.1 s > 2 s, whatever happens next
    early = [RequestRecord(i, 9.0, 100, 50) for i in range(2)]  # arrived before `since`: maybe not in the window
    _watch(early, now=100.0).check(0)
    decoding = [RequestRecord(i, 11.0, 100, 51, first_token=11.5) for i in range(2)]  # 50 tokens after the first
    _watch(decoding, now=11.5 + 50 * 0.049).check(0)  # 49 ms a token so far
    with pytest.raises(_Missed, match="misses TPOT"):
        _watch(decoding, now=11.5 + 50 * 0.051).check(0)  # over 50 ms a token already, and more to come
    retried = [RequestRecord(i, 11.0, 100, 51, first_token=11.5, retries=1) for i in range(2)]
    _watch(retried, now=11.5 + 50 * 0.051).check(0)  # its first token may be a failed attempt's: not counted


def test_what_is_recorded_until_a_moment_holds_every_first_token_and_finish_before_it() -> None:
    """The bound the watch leans on, checked over a whole disaggregated run: at every progress call, a request
    not yet given its first token (or its finish) gets it no earlier than `recorded_until()` said."""
    from simulator.engine.simulation import Simulation

    fleet = ROOT / "scenarios" / "fleet-disaggregated.yaml"
    sc, _ = loader.load(fleet, ("traffic.duration_s=40", "traffic.rate=3"))
    sim = Simulation(sc, base_dir=fleet.parent)
    seen: list[tuple[float, list[int], list[int]]] = []

    def snapshot(done: int) -> None:
        pending = [r for r in sim.records.values() if r.status == "pending"]
        no_first = [r.id for r in pending if math.isnan(r.first_token)]
        seen.append((sim.recorded_until(), no_first, [r.id for r in pending]))

    sim.on_progress = snapshot
    sim.run()
    assert len(seen) > 100
    for bound, no_first, unfinished in seen:
        assert bound <= sim.env.now
        assert all(not sim.records[i].first_token < bound for i in no_first)  # NaN (never) passes too
        assert all(not sim.records[i].finish < bound for i in unfinished)


def test_max_rate_counts_a_rate_as_met_only_where_the_study_as_written_meets_it_too() -> None:
    from simulator.planning.maxrate import as_written

    both = {"meets": True, "reason": None, "as_written": None}
    assert as_written(both) == both
    longer_only = {"meets": True, "reason": None, "as_written": "misses TTFT: p95 2,100 ms > 2,000 ms"}
    got = as_written(longer_only)
    assert (
        not got["meets"]
        and got["reason"].startswith("misses TTFT: p95 2,100 ms")
        and "longer, it meets" in got["reason"]
    )
    missed = {"meets": False, "reason": "misses TPOT: p95 61.0 ms > 60 ms", "as_written": None}
    assert as_written(missed) == missed
