"""A request's life on one instance, and the step counter its progress is read from.

While a sequence is in the decode batch its progress is not written step by step: it reads its instance's step
counter, so a run of k steps advances the whole batch by adding k to one number. The sequence holds the counter,
not the scheduler, so it depends on nothing that schedules it. Under speculative decoding a step gives a sequence
1..k+1 tokens: its progress after j steps is then read from its chain of drawn gains (`serving/speculation.py`).
"""

from __future__ import annotations

import numpy as np

from simulator.serving.integrity import Fault
from simulator.serving.tables import BlockTable
from simulator.serving.tiers import Loads
from simulator.workload.request import Request

IN_BATCH = "a batch sequence's progress moves with the step count only"


class StepCounter:
    """Decode steps an instance has applied; batch sequences count their progress from it."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


class Seq:
    """A request's life on one instance.

    While it is in the decode batch its progress moves with the scheduler's step counter instead of being
    written step by step: the stored values are those at `_origin` (the counter when it joined), so a run of k
    steps advances the whole batch by adding k to one counter.
    """

    __slots__ = (
        "req",
        "target",
        "table",
        "keys",
        "order",
        "fault",
        "status",
        "_counter",
        "_origin",
        "_computed",
        "_remaining",
        "_generated",
        "_fault_in",
        "_gains",
        "loads",
        "load_s",
        "preemptions",
        "aborted_by",
    )

    def __init__(
        self, req: Request, target: int, counter: StepCounter, remaining: int, keys: np.ndarray, generated: int = 0
    ) -> None:
        self.req = req
        self.target = target  # tokens whose KV must be cached before decoding (prompt, or + output on recompute)
        self.table = BlockTable()
        self.keys = keys
        self.order = 0  # admission order: preemption takes the newest first
        self.fault: Fault | None = None
        self.status = "waiting"  # waiting | prefill | transfer | decode | prefilled | done | aborted
        self._counter = counter
        self._origin: int | None = None  # the counter when it joined the batch (None: not in it)
        self._computed = 0
        self._remaining = remaining
        self._generated = generated  # output tokens produced elsewhere (a transferred request's first)
        self._fault_in = -1
        self._gains: np.ndarray | None = None  # speculative decoding: tokens gained after j steps in the batch
        self.loads: Loads | None = None  # prefix pages its hold found below HBM, until a step loads them back
        self.load_s = 0.0  # seconds its load-back took (priced by the clock; part of its time to first token)
        self.preemptions = 0  # times preempted here (a pool's max_preemptions aborts it past its limit)
        self.aborted_by = ""  # why it was aborted: "integrity" or "preemption"

    def _moved(self) -> int:
        """Decode steps since it joined the batch."""
        return 0 if self._origin is None else self._counter.n - self._origin

    def _gained(self) -> int:
        """Tokens decoded since it joined the batch: one a step, or its drawn chain's under speculation."""
        moved = self._moved()
        return moved if self._gains is None else int(self._gains[moved])

    # Each count moves with the tokens decoded while the sequence is in the batch, and is set only outside it.
    @property
    def computed(self) -> int:
        """Tokens whose KV is in this instance's cache."""
        return self._computed if self._origin is None else self._computed + self._gained()

    @computed.setter
    def computed(self, value: int) -> None:
        if self._origin is not None:
            raise RuntimeError(IN_BATCH)
        self._computed = value

    @property
    def remaining(self) -> int:
        """Output tokens this instance still has to produce."""
        return self._remaining if self._origin is None else self._remaining - self._gained()

    @remaining.setter
    def remaining(self, value: int) -> None:
        if self._origin is not None:
            raise RuntimeError(IN_BATCH)
        self._remaining = value

    @property
    def generated(self) -> int:
        """Output tokens produced so far (a recompute must redo them)."""
        return self._generated if self._origin is None else self._generated + self._gained()

    @generated.setter
    def generated(self, value: int) -> None:
        if self._origin is not None:
            raise RuntimeError(IN_BATCH)
        self._generated = value

    def to_prefill(self) -> int:
        """Tokens still to cache before it decodes (a sequence outside the batch)."""
        return self.target - self._computed

    def prefilled(self, chunk: int) -> bool:
        """A chunk of its prompt is cached (outside the batch); True once all of it is."""
        self._computed += chunk
        return self._computed >= self.target

    @property
    def fault_in(self) -> int:
        """Decode steps before a planned fault is injected (negative: none planned)."""
        return self._fault_in if self._fault_in < 0 else self._fault_in - self._moved()

    @fault_in.setter
    def fault_in(self, value: int) -> None:
        self._fault_in = -1 if value < 0 else value + self._moved()

    @property
    def in_batch(self) -> bool:
        """Whether it is in the decode batch (its progress read from the step counter)."""
        return self._origin is not None

    def join(self, at: int, gains: np.ndarray | None = None) -> int:
        """Join the decode batch at step count `at`; `gains`: under speculation, the tokens its drawn chain gives
        after each step. Returns what it adds to the batch's context beyond one token a step (cached tokens less
        `at`), which `leave` takes back."""
        self._origin = at
        self._gains = gains
        return self._computed - at

    def leave(self) -> int:
        """Leave the batch: store the values as of now. Returns what `join` added to the batch's context."""
        assert self._origin is not None, "not in the batch"
        base = self._computed - self._origin
        moved, gained = self._moved(), self._gained()
        self._computed += gained
        self._remaining -= gained
        self._generated += gained
        if self._fault_in >= 0:
            self._fault_in -= moved
        self._origin = None
        self._gains = None
        return base
