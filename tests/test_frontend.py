"""The API server in front of an instance (`engine.frontend`): one CPU, one request at a time, in the order requests
reach it; a burst's requests reach the scheduler spread over the time it needs for all of them."""

from __future__ import annotations

import statistics

import pytest
import simpy

from simulator.config import loader
from simulator.config.scenario import Pool
from simulator.engine.frontend import FrontEnd
from simulator.engine.run import simulate


def handoffs(accept_us: float, prepare_us: float, arrivals: list[float]) -> list[float]:
    """When each request, sent at its arrival time, reaches the scheduler."""
    env = simpy.Environment()
    front = FrontEnd.of(env, Pool(frontend_accept_us=accept_us, frontend_prepare_us=prepare_us))
    assert front is not None
    out: dict[int, float] = {}

    def send(i: int, t: float):
        yield env.timeout(t)
        front.take(t, lambda ready: out.__setitem__(i, ready))

    for i, t in enumerate(arrivals):
        env.process(send(i, t))
    env.run()
    return [out[i] for i in range(len(arrivals))]


def test_a_front_end_that_takes_no_time_is_none() -> None:
    assert FrontEnd.of(simpy.Environment(), Pool()) is None


def test_preparing_alone_is_a_queue_in_arrival_order() -> None:
    """Prepare only: a burst leaves one request every `prepare` seconds; requests further apart than that wait for
    nothing but their own preparation."""
    s = 0.004
    assert handoffs(0, s * 1e6, [0.0] * 5) == pytest.approx([s * k for k in range(1, 6)], rel=1e-12)
    assert handoffs(0, s * 1e6, [0.0, 0.01, 0.05]) == pytest.approx([s, 0.01 + s, 0.05 + s], rel=1e-12)


def test_a_burst_is_accepted_whole_before_any_request_is_prepared() -> None:
    """Two visits: each request's preparation queues behind every request that arrived while it was accepted, so a
    burst of n reaches the scheduler from n·accept + prepare on; a lone request takes accept + prepare."""
    a, p, n = 0.010, 0.001, 6
    assert handoffs(a * 1e6, p * 1e6, [0.0] * n) == pytest.approx([n * a + k * p for k in range(1, n + 1)], rel=1e-12)
    assert handoffs(a * 1e6, p * 1e6, [0.0, 1.0]) == pytest.approx([a + p, 1.0 + a + p], rel=1e-12)
    # one arriving while another is accepted goes ahead of that one's preparation
    assert handoffs(a * 1e6, p * 1e6, [0.0, 0.005]) == pytest.approx([2 * a + p, 2 * a + 2 * p], rel=1e-12)


def burst(frontend: dict[str, float]) -> list[float]:
    """First-token times (s after sending) of a burst of 64 short prompts on one small instance."""
    sc = loader.validate(
        {
            "name": "burst",
            "model": "llama-3.1-8b",
            "hardware": "h100",
            "deployment": {"mode": "colocated", "decode": {"tp": 1, "weights": "bf16", **frontend}},
            "traffic": {"concurrency": 64, "requests": 64, "prompt_tokens": 128, "output_tokens": 4},
        },
        "test",
    )
    return [r.first_token - r.arrival for r in simulate(sc)[1].requests]


def test_a_burst_waits_for_its_front_end() -> None:
    """A burst of 64 through a front end that prepares a request in 20 ms: the k-th request cannot have its first
    token before the front end prepared it (the last not before 1.28 s), where without one all 64 share the first
    prefill step."""
    none = burst({"frontend_accept_us": 0, "frontend_prepare_us": 0})
    fifo = sorted(burst({"frontend_accept_us": 0, "frontend_prepare_us": 20_000}))
    assert all(t >= 0.020 * (k + 1) for k, t in enumerate(fifo))
    assert max(none) - min(none) < 1e-9 and max(fifo) >= 64 * 0.020 > statistics.mean(fifo) > statistics.mean(none)
    whole = burst({"frontend_accept_us": 20_000, "frontend_prepare_us": 0})  # accepted whole, then handed on
    assert min(whole) >= 64 * 0.020
