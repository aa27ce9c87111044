"""An instance's front end: the API server process every request crosses before its scheduler sees it.

Both engines take requests in on one CPU: vLLM's OpenAI server renders a request's chat template on its event loop
and tokenizes on a single worker thread (`ThreadPoolExecutor(max_workers=1)` in serving_engine.py, quoted in
vllm-project/vllm#25301: "requests are forced to wait in a serialized queue for preprocessing"); SGLang's
TokenizerManager tokenizes each request on its own event loop. So a front end serves one request at a time, in
the order they reach it, and a burst of requests reaches the scheduler spread over the time the front end needs
for all of them — the queue a fixed per-request latency (`request_latency_us`) cannot make.

A request takes two visits: it is accepted on arrival (the HTTP request parsed, its chat template rendered:
`frontend_accept_us`), then prepared (tokenized, handed to the scheduler: `frontend_prepare_us`), the second
visit queued behind every request that arrived while the first ran. On an event loop the synchronous part of each
arrived request runs before any request's continuation, so a burst's first request reaches the scheduler only
after the whole burst was accepted; with acceptance free, the front end is a plain FIFO queue.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import simpy

from simulator.config.scenario import Pool

Handoff = Callable[[float], None]


class FrontEnd:
    """One instance's API server: one CPU serving visits in the order they queue, on exact times (a visit ends at
    the previous end or its own arrival, whichever is later, plus its seconds; env.now only orders events)."""

    def __init__(self, env: simpy.Environment, accept_s: float, prepare_s: float) -> None:
        self.env = env
        self.free = 0.0  # when the visit in service ends (exact)
        self._visits = (accept_s, prepare_s) if accept_s else (prepare_s,)
        self._queue: deque[tuple[float, int, Handoff]] = deque()  # (ready at, which visit, hand-off)
        self._idle: simpy.Event | None = None
        env.process(self._serve())

    @classmethod
    def of(cls, env: simpy.Environment, pool: Pool) -> FrontEnd | None:
        """The entry pool's front end; None where it takes no time (requests go straight to the scheduler)."""
        if not pool.frontend_accept_us and not pool.frontend_prepare_us:
            return None
        return cls(env, pool.frontend_accept_us * 1e-6, pool.frontend_prepare_us * 1e-6)

    def take(self, t: float, handoff: Handoff) -> None:
        """A request reached the front end at time t; `handoff(ready)` runs once it is prepared, at `ready`."""
        self._queue.append((t, 0, handoff))
        if self._idle is not None and not self._idle.triggered:
            self._idle.succeed()

    def _serve(self) -> Iterator[Any]:
        """The server's story: take the next visit in line, spend its seconds, then queue the request's next visit
        behind everyone already waiting, or hand it to its scheduler."""
        while True:
            if not self._queue:
                self._idle = self.env.event()
                yield self._idle
                continue
            ready, visit, handoff = self._queue.popleft()
            self.free = max(self.free, ready) + self._visits[visit]
            if self.free > self.env.now:
                yield self.env.timeout(self.free - self.env.now)
            if visit + 1 < len(self._visits):
                self._queue.append((self.free, visit + 1, handoff))
            else:
                handoff(self.free)
