"""What a modeled-clock instance records (busy time, steps, pages held over time) and the one wake-up a run of
steps waits on; shared by the plain instance (`engine`) and the DP-attention one (`dp`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import simpy


@dataclass
class InstanceStats:
    busy_s: float = 0.0
    steps: int = 0
    decode_seq_steps: int = 0  # sum over steps of the decode batch size: mean batch = this / steps
    max_batch: int = 0
    # KV pages held, as (time, change) pairs: changes commute, so the record is the same however the clock
    # was cut into runs, and the occupancy curve is their running sum in time order.
    page_t: list[float] = field(default_factory=list)
    page_d: list[int] = field(default_factory=list)

    def pages_changed(self, t: float, delta: int) -> None:
        if delta:
            self.page_t.append(t)
            self.page_d.append(delta)

    def page_changes(self) -> tuple[np.ndarray, np.ndarray]:
        """All (time, change) pairs, in no particular order."""
        return np.array(self.page_t, dtype=float), np.array(self.page_d, dtype=np.int64)


RUN_END = object()  # the value of a wake-up by the run's own timer


def wake_at_end(env: simpy.Environment, wake: simpy.Event, delay: float) -> None:
    """Fire `wake` (valued `RUN_END`) after `delay` unless a notify fires it first, so a run waits on one
    event: the end of the run one hop after its timer, a cut one hop after its cause (an `a | b` condition
    took one hop more)."""
    env.timeout(delay).callbacks.append(lambda _: wake.triggered or wake.succeed(RUN_END))
