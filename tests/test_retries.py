"""Clients retrying failed requests (`traffic.retries`): the backoff and its limit, which failures are retried, a
request counted once in goodput, the work retries redo, a pool's preemption limit, and determinism."""

from __future__ import annotations

import json
import math
from typing import Any

from test_engine import scenario

from simulator.engine.run import simulate

# Prompts up to 60K tokens on decode instances holding about 40K: some are rejected at arrival, every time
REJECTING = {
    "traffic.requests": 6,
    "traffic.sessions.turns": 1,
    "traffic.arrival": "poisson",
    "deployment.decode.mem_fraction": 0.125,
    "traffic.prompt_tokens": {"dist": "uniform", "low": 100, "high": 60000},
}
# Integrity faults planted often: decode steps abort requests, which clients retry
FAULTY = {"integrity.fault_rate": 0.004, "traffic.requests": 80, "traffic.rate": 10.0}


def run(**over: Any) -> tuple[dict[str, Any], Any]:
    return simulate(scenario(**over))


def test_a_rejected_request_is_retried_after_doubling_backoffs_then_given_up() -> None:
    result, record = run(**REJECTING, **{"traffic.retries": {"max": 3, "on": ["rejected"], "jitter": 0}})
    rejected = [r for r in record.requests if r.status == "rejected"]
    assert rejected and all(r.retries == 3 for r in rejected)
    for r in rejected:  # 0.5 + 1 + 2 s after its first send, rejected for good
        assert math.isclose(r.finish - r.arrival, 3.5, abs_tol=1e-9)
    m = result["metrics"]
    assert m["requests"] == 6 and m["rejected"] == len(rejected)
    assert m["retries"]["retries"] == 3 * len(rejected) and m["retries"]["failed"] == len(rejected)
    assert m["retries"]["tokens_recomputed"] == {"prompt": 0, "output": 0}  # rejected before any work


def test_the_backoff_is_capped_and_jittered() -> None:
    capped = {"max": 3, "on": ["rejected"], "multiplier": 10, "max_backoff_s": 1.0}
    _, record = run(**REJECTING, **{"traffic.retries": {**capped, "jitter": 0}})
    waits = [r.finish - r.arrival for r in record.requests if r.status == "rejected"]
    assert all(math.isclose(w, 0.5 + 1.0 + 1.0, abs_tol=1e-9) for w in waits)
    _, record = run(**REJECTING, **{"traffic.retries": {**capped, "jitter": 0.25}})
    jittered = [r.finish - r.arrival for r in record.requests if r.status == "rejected"]
    assert all(0.75 * 2.5 - 1e-9 <= w <= 2.5 for w in jittered)
    assert len(set(jittered)) == len(jittered)  # drawn per request and attempt


def test_rejections_are_not_retried_unless_asked_and_nothing_is_by_default() -> None:
    result, record = run(**REJECTING, **{"traffic.retries": {"max": 3}})  # on: integrity, preemption
    assert result["metrics"]["rejected"] and all(r.retries == 0 for r in record.requests)
    result, _ = run(**REJECTING)  # max 0: benchmark clients
    assert "retries" not in result["metrics"]


def test_aborted_requests_are_retried_and_counted_once() -> None:
    plain, _ = run(**FAULTY)
    result, record = run(**FAULTY, **{"traffic.retries": {"max": 2}})
    m, it = result["metrics"], result["integrity"]
    assert plain["metrics"]["aborted"] > 0
    assert m["requests"] == plain["metrics"]["requests"] == len(record.requests) == 80
    assert m["completed"] + m["aborted"] + m["rejected"] + m["unfinished"] == 80
    assert m["completed"] > plain["metrics"]["completed"]  # retries recover requests a check aborted
    r = m["retries"]
    # every abort is a retry or a request given up on (out of retries)
    assert it["aborted_requests"] == r["retries"] + m["aborted_by_reason"].get("integrity", 0)
    assert r["recovered"] + r["failed"] >= r["retried_requests"] - m["unfinished"]
    # the retried attempts had prefilled their prompts and generated some output: done again, and priced
    assert r["tokens_recomputed"]["prompt"] >= r["retries"] * 100 and r["prefill_s"] > 0
    assert 0 < r["tokens_recomputed"]["output"] <= it["tokens_lost"]  # the last attempts' losses are not redone
    # goodput: a request within the SLO counts once, however many attempts it took (over the whole run)
    assert m["full_run"]["slo_attainment"] <= m["completed"] / m["requests"]


def test_latency_of_a_retried_request_runs_from_its_first_send() -> None:
    _, record = run(**FAULTY, **{"traffic.retries": {"max": 2, "jitter": 0}})
    recovered = [r for r in record.requests if r.retries and r.status == "completed"]
    assert recovered
    assert all(r.first_token - r.arrival >= 0.5 for r in recovered)  # at least the first backoff


def test_a_preemption_past_the_pools_limit_aborts_the_request() -> None:
    short = {
        "deployment.decode.mem_fraction": 0.13,
        "deployment.decode.decode_reserve_tokens": 0,
        "traffic.rate": 30.0,
        "traffic.output_tokens": {"dist": "lognormal", "median": 600, "sigma": 0.7, "max": 3000},
    }
    result, _ = run(**short)
    assert result["metrics"]["preempted"] > 0 and result["metrics"]["aborted"] == 0  # recomputed, never aborted
    result, record = run(**short, **{"deployment.decode.max_preemptions": 0})
    m = result["metrics"]
    assert m["aborted_by_reason"].get("preemption", 0) > 0
    assert m["preempted"] >= m["aborted_by_reason"]["preemption"]
    result, _ = run(**short, **{"deployment.decode.max_preemptions": 0, "traffic.retries": {"max": 3}})
    assert result["metrics"]["retries"]["retries"] > 0


def test_retries_repeat_with_the_seed_and_on_both_clocks() -> None:
    over = {**FAULTY, "traffic.retries": {"max": 2}, "deployment.decode.max_preemptions": 1}
    a, _ = run(**over)
    b, _ = run(**over)
    step, _ = simulate(scenario(**over), step_mode=True)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True) == json.dumps(step, sort_keys=True)
    c, _ = run(**over, seed=11)
    assert json.dumps(a, sort_keys=True) != json.dumps(c, sort_keys=True)
