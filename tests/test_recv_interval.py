"""SGLang's --scheduler-recv-interval (`Pool.recv_interval`): a request that reaches a decoding instance waits for
the scheduler's next poll — a counter gaining 1 a decode step and the whole interval a step with prefill rows —
while an idle instance polls at once."""

from __future__ import annotations

import json
from typing import Any

import pytest

from simulator.config import loader
from simulator.config.scenario import Scenario
from simulator.deploy import sglang, vllm
from simulator.engine.run import simulate
from simulator.errors import InputError


def scenario(**over: Any) -> Scenario:
    base: dict[str, Any] = {
        "name": "t",
        "model": "llama-3.1-70b",
        "hardware": "h200",
        "deployment": {"mode": "colocated", "decode": {"tp": 4, "weights": "fp8", "kv_cache": "fp8_e4m3"}},
        "traffic": {
            "concurrency": 8,
            "requests": 64,
            "prompt_tokens": {"dist": "uniform", "low": 800, "high": 1000},
            "output_tokens": {"dist": "uniform", "low": 100, "high": 300},
        },
        "integrity": {"enabled": False},
        "prefix_cache": {"enabled": False},
        "seed": 5,
    }
    return loader.validate(loader.apply_overrides(base, over), "test")


def _run(**over: Any) -> tuple[dict[str, Any], list[Any]]:
    result, ran = simulate(scenario(**over))
    return result, [r for r in ran.requests if r.status == "completed"]


def test_one_client_finds_the_scheduler_idle_and_waits_for_no_poll() -> None:
    """With one client every request reaches an idle instance, which polls at once: the run is the same."""
    one, _ = _run(**{"traffic.concurrency": 1, "traffic.requests": 6})
    polled, _ = _run(**{"traffic.concurrency": 1, "traffic.requests": 6, "deployment.decode.recv_interval": 30})
    assert json.dumps(one["metrics"]) == json.dumps(polled["metrics"])


def test_a_request_reaching_a_decoding_instance_waits_for_the_next_poll() -> None:
    """At 8 clients a request arrives while others decode: it waits up to the interval's decode steps. The wait
    grows with the interval and stays within it (a poll at most `interval` decode steps away, each step at most
    the run's longest decode step), and what is decoded is the same."""
    base, done1 = _run()
    waits = []
    for n in (10, 30):
        res, done = _run(**{"deployment.decode.recv_interval": n})
        assert sorted((r.id, r.output) for r in done) == sorted((r.id, r.output) for r in done1)
        wait = _mean_ttft_s(done) - _mean_ttft_s(done1)
        step = max(res["metrics"]["tpot_ms"]["p99"], base["metrics"]["tpot_ms"]["p99"]) / 1000
        assert 0 < wait <= n * step
        waits.append(wait)
    assert waits[0] < waits[1]


def _mean_ttft_s(done: list[Any]) -> float:
    return sum(r.first_token - r.arrival for r in done) / len(done)


def test_both_clocks_give_the_same_timeline_with_polls() -> None:
    """The segment clock ends a run at the next poll while a request waits; the one-step clock polls at each
    step's end: the same timeline, byte for byte."""
    for over in (
        {"deployment.decode.recv_interval": 7, "traffic.concurrency": 12},
        {"deployment.decode.recv_interval": 3, "traffic.concurrency": None, "traffic.rate": 9.0},
    ):
        sc = scenario(**over)
        seg, _ = simulate(sc)
        step, _ = simulate(sc, step_mode=True)
        assert json.dumps(seg, sort_keys=True) == json.dumps(step, sort_keys=True)


def test_dp_attention_refuses_a_poll_interval() -> None:
    with pytest.raises(InputError, match="recv_interval 10 with dp 2"):
        scenario(
            **{
                "model": "deepseek-r1",
                "deployment.decode": {"tp": 8, "dp": 2, "weights": "fp8", "kv_cache": "fp8_e4m3", "recv_interval": 10},
            }
        )


def test_the_launch_commands_carry_or_note_the_interval() -> None:
    sc = scenario(**{"deployment.decode.recv_interval": 30})
    argv = sglang.launch(sc).commands[0].argv
    assert argv[argv.index("--scheduler-recv-interval") + 1] == "30"
    assert "--scheduler-recv-interval" not in sglang.launch(scenario()).commands[0].argv
    notes = vllm.launch(sc).notes
    assert any("recv_interval 30 is SGLang's --scheduler-recv-interval" in n for n in notes)
