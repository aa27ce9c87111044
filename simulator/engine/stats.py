"""What an instance records (busy time, steps, batches) and how it waits out a run of steps."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Protocol

import simpy


@dataclass
class InstanceStats:
    """What an instance's runs add up to."""

    busy_s: float = 0.0
    steps: int = 0
    decode_seq_steps: int = 0  # Σ over steps of the decode batch, all ranks: mean batch = this / steps
    busiest_seq_steps: int = 0  # Σ over steps of the busiest rank's decode batch
    max_batch: int = 0


RUN_END = object()  # the value of a wake-up by the run's own timer


def wake_at_end(env: simpy.Environment, wake: simpy.Event, delay: float) -> None:
    """Fire `wake` (valued `RUN_END`) after `delay` unless a notify fires it first, so a run waits on one
    event: the end of the run one hop after its timer, a cut one hop after its cause (an `a | b` condition
    took one hop more)."""
    env.timeout(delay).callbacks.append(lambda _: wake.triggered or wake.succeed(RUN_END))


class Waiting(Protocol):
    """An instance as a run waits: its SimPy environment, the event a notify fires, and the time of the cause."""

    env: simpy.Environment
    wake: simpy.Event | None
    wake_at: float


def wait_for_run(inst: Waiting, ends: list[float], n: int) -> Generator[simpy.Event, Any, int]:
    """Wait out a run of n steps ending at `ends`; returns the steps that ran: all n, or, when a notify cut the run,
    those up to the one in flight at its cause (`inst.wake_at`)."""
    env = inst.env
    if n == 1:  # nothing can cut a single step short: no wake-up to arm
        inst.wake = None
        yield env.timeout(max(0.0, ends[0] - env.now))
        return 1
    wake = inst.wake = env.event()
    wake_at_end(env, wake, max(0.0, ends[-1] - env.now))
    yield wake
    m = n
    if wake.value is not RUN_END and inst.wake_at < ends[-1]:
        m = min(n, bisect_left(ends, inst.wake_at) + 1)
        if ends[m - 1] > env.now:
            yield env.timeout(ends[m - 1] - env.now)
    return m
