"""Traffic sources: the requests the engine is fed — a trace, or synthetic open- or closed-loop traffic.

The engine takes `initial()` up front and calls `on_complete` as each request finishes; that is all a
closed loop or a multi-turn conversation needs, since its next request is caused by the previous one ending.
Everything is a function of the seed and the order requests are issued in, never of wall time or `hash()`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from simulator.config.scenario import Diurnal, Length, Traffic
from simulator.errors import InputError
from simulator.workload.lengths import sample
from simulator.workload.request import Request
from simulator.workload.traces import UNIQUE_ROOT, chain_rows, load_trace, stream_blocks, stream_key

BLOCK_TOKENS = 64  # synthetic content granularity: fine enough for any page size a pool uses
SYSTEM_ROOT = 0xA4093822299F31D0  # chain start of the shared system prompt (more digits of π)
CHUNK = 4096  # lengths drawn per refill
MAX_CHUNK = 1 << 22  # arrival candidates drawn per pass, to bound memory


class TrafficSource:
    """Requests known up front, with no follow-ups: what a trace is. Synthetic traffic extends it."""

    def __init__(self, requests: list[Request], total_expected: int | None) -> None:
        self._initial = requests
        self.total_expected = total_expected

    def initial(self) -> list[Request]:
        """The requests known up front, sorted by arrival."""
        return self._initial

    def on_complete(self, req: Request, now: float) -> Request | None:
        """The request `req` finishing at `now` causes, if any."""
        return None


def diurnal_multiplier(d: Diurnal, t: np.ndarray) -> np.ndarray:
    """The rate multiplier at times t: linear between points spread evenly over a period, wrapping around."""
    m = list(d.multipliers)
    xs = np.linspace(0.0, d.period_s, len(m) + 1)
    return np.interp(np.mod(t, d.period_s), xs, [*m, m[0]])


def arrival_times(traffic: Traffic, rng: np.random.Generator, limit: int | None) -> np.ndarray:
    """Open-loop arrival times, sorted, at most `limit` of them and all before `duration_s`.

    Poisson: exponential gaps. Bursty: gamma gaps with mean 1/rate and CV `burst_cv`. Diurnal: Poisson at the
    peak rate thinned by multiplier/peak, which yields exactly the non-homogeneous rate rate × multiplier(t).
    """
    assert traffic.rate is not None
    rate, end = traffic.rate, traffic.duration_s
    peak, accepted = 1.0, 1.0
    if traffic.arrival == "diurnal":
        peak, accepted = max(traffic.diurnal.multipliers), float(np.mean(traffic.diurnal.multipliers))
        if peak == 0:
            if end is None:
                raise InputError("traffic.diurnal.multipliers are all zero: no request would ever arrive")
            return np.empty(0)
        accepted /= peak
    expected = limit / accepted if limit is not None else rate * peak * end  # type: ignore[operator]
    chunk = min(MAX_CHUNK, int(expected * 1.02 + 5 * math.sqrt(expected)) + 16)
    parts, t0, count = [], 0.0, 0
    while (limit is None or count < limit) and (end is None or t0 < end):
        if traffic.arrival == "bursty":
            shape = traffic.burst_cv**-2
            gaps = rng.gamma(shape, 1.0 / (rate * shape), chunk)
        else:
            gaps = rng.exponential(1.0 / (rate * peak), chunk)
        t = t0 + np.cumsum(gaps)
        t0 = float(t[-1])
        if traffic.arrival == "diurnal":
            t = t[rng.random(chunk) * peak < diurnal_multiplier(traffic.diurnal, t)]
        parts.append(t)
        count += len(t)
    times = np.concatenate(parts) if parts else np.empty(0)
    if end is not None:
        times = times[times < end]
    return times[:limit]


class _Draws:
    """Lengths handed out in issue order, drawn CHUNK at a time: vectorised even when asked for one."""

    def __init__(self, length: Length, rng: np.random.Generator, base_dir: Path | None) -> None:
        self._length, self._rng, self._base_dir = length, rng, base_dir
        self._buf = np.empty(0, dtype=np.int64)
        self._pos = 0

    def take(self, n: int) -> list[int]:
        if self._pos + n > len(self._buf):
            fresh = sample(self._length, self._rng, max(CHUNK, n), self._base_dir)
            self._buf, self._pos = np.concatenate([self._buf[self._pos :], fresh]), 0
        self._pos += n
        return self._buf[self._pos - n : self._pos].tolist()


class SyntheticSource(TrafficSource):
    """Generated traffic. A prompt is the shared system prompt (`shared_prefix_tokens`, added to the sampled
    `prompt_tokens`) and then content of its own stream: one per request, or one per conversation, whose
    turns each extend the previous turn's stream. Open-loop `rate` counts conversations when turns > 1."""

    def __init__(self, traffic: Traffic, seed: int, base_dir: Path | None) -> None:
        arrival_seq, prompt_seq, output_seq = np.random.SeedSequence(seed).spawn(3)
        self._traffic = traffic
        self._closed = traffic.concurrency is not None
        self._turns = traffic.sessions.turns
        self._prompts = _Draws(traffic.prompt_tokens, np.random.default_rng(prompt_seq), base_dir)
        self._outputs = _Draws(traffic.output_tokens, np.random.default_rng(output_seq), base_dir)
        self._shared = chain_rows([range(traffic.shared_prefix_tokens // BLOCK_TOKENS)], SYSTEM_ROOT)[0]
        self._root = self._shared[-1] if self._shared else UNIQUE_ROOT
        self._issued = 0
        self._sessions = 0

        limit = traffic.requests
        if self._closed:
            assert traffic.concurrency is not None
            n = min(traffic.concurrency, limit or traffic.concurrency)
            initial = self._fresh([0.0] * n, list(range(n)))
        else:
            if limit is not None and self._turns > 1:
                limit = math.ceil(limit / self._turns)  # conversations; their later turns bring the rest
            arrivals = arrival_times(traffic, np.random.default_rng(arrival_seq), limit)
            initial = self._fresh(arrivals.tolist(), [None] * len(arrivals))
        if not self._closed and self._turns == 1:
            total: int | None = len(initial)
        else:
            total = traffic.requests if traffic.duration_s is None else None
        super().__init__(initial, total)

    def on_complete(self, req: Request, now: float) -> Request | None:
        """The conversation's next turn after the think time; else, in a closed loop, the client's next."""
        if req.turn + 1 < self._turns:
            at = now + self._traffic.sessions.think_time_s
            return self._next_turn(req, at) if self._may_issue(at) else None
        if self._closed and self._may_issue(now):
            return self._fresh([now], [req.client])[0]
        return None

    def _may_issue(self, at: float) -> bool:
        t = self._traffic
        under_count = t.requests is None or self._issued < t.requests
        return under_count and (t.duration_s is None or at < t.duration_s)

    def _fresh(self, arrivals: list[float], clients: list[int | None]) -> list[Request]:
        """Requests that each start new content: a single request, or a conversation's first turn."""
        n = len(arrivals)
        ids = range(self._issued, self._issued + n)
        self._issued += n
        streams: range = ids
        sessions: Sequence[int | None] = [None] * n
        if self._turns > 1:
            streams = sessions = range(self._sessions, self._sessions + n)
            self._sessions += n
        shared, k = self._shared, len(self._shared)
        users, outputs = self._prompts.take(n), self._outputs.take(n)
        keys = stream_key(np.uint64(self._root), np.arange(streams.start, streams.stop, dtype=np.uint64)).tolist()
        base = self._traffic.shared_prefix_tokens
        rows = zip(ids, arrivals, users, outputs, keys, sessions, clients, strict=True)
        return [
            Request(
                id=i,
                arrival=a,
                prompt_tokens=base + u,
                output_tokens=o,
                session=se,
                client=c,
                blocks=shared + stream_blocks(key, k, (base + u) // BLOCK_TOKENS),
                block_tokens=BLOCK_TOKENS,
            )
            for i, a, u, o, key, se, c in rows
        ]

    def _next_turn(self, req: Request, at: float) -> Request:
        """The prompt grows by the last answer and a new user message; the earlier blocks stay its prefix."""
        assert req.session is not None
        prompt = req.prompt_tokens + req.output_tokens + self._prompts.take(1)[0]
        more = stream_blocks(stream_key(self._root, req.session), len(req.blocks), prompt // BLOCK_TOKENS)
        self._issued += 1
        return Request(
            id=self._issued - 1,
            arrival=at,
            prompt_tokens=prompt,
            output_tokens=self._outputs.take(1)[0],
            session=req.session,
            client=req.client,
            turn=req.turn + 1,
            blocks=req.blocks + more,
            block_tokens=BLOCK_TOKENS,
        )


class ContextLimit(TrafficSource):
    """Requests whose prompt and answer together exceed the model's context, refused (one InputError naming the
    request) or, with `traffic.truncate_to_context`, cut to fit as they are issued: the answer to context − 1 at
    most, then the prompt to what is left (a client trims its input to leave room for the tokens it asks for). A
    lognormal tail, an empirical length file or a trace row can exceed the context where no bound was known
    before drawing."""

    def __init__(self, inner: TrafficSource, context: int, traffic: Traffic) -> None:
        self._inner, self._context, self._truncate = inner, context, traffic.truncate_to_context
        self._where = f"traffic.trace ({traffic.trace})" if traffic.trace is not None else "traffic.prompt_tokens"
        super().__init__([self._fit(r) for r in inner.initial()], inner.total_expected)

    def on_complete(self, req: Request, now: float) -> Request | None:
        nxt = self._inner.on_complete(req, now)
        return None if nxt is None else self._fit(nxt)

    def _fit(self, req: Request) -> Request:
        if req.prompt_tokens + req.output_tokens <= self._context:
            return req
        if not self._truncate:
            what = (
                "prompt"
                if req.prompt_tokens > self._context
                else f"prompt and a {req.output_tokens:,}-token answer ({req.prompt_tokens + req.output_tokens:,})"
            )
            raise InputError(
                f"{self._where}: request {req.id} (arriving at {req.arrival:g} s) has a "
                f"{req.prompt_tokens:,}-token {what}, over the model's context of {self._context:,}; "
                "set traffic.truncate_to_context: true to cut such requests"
            )
        req.output_tokens = min(req.output_tokens, self._context - 1)
        req.prompt_tokens = min(req.prompt_tokens, self._context - req.output_tokens)
        req.blocks = req.blocks[: req.prompt_tokens // req.block_tokens]
        return req


def make_source(traffic: Traffic, seed: int, base_dir: Path | None = None, context: int | None = None) -> TrafficSource:
    """The scenario's traffic; `base_dir` (the scenario's folder) anchors relative trace and length files;
    `context`, the model's, bounds every prompt (None: unknown, unchecked)."""
    if traffic.trace is None:
        source: TrafficSource = SyntheticSource(traffic, seed, base_dir)
    elif traffic.sessions.turns > 1 or traffic.shared_prefix_tokens:
        raise InputError("traffic.sessions and shared_prefix_tokens shape synthetic traffic, not a trace")
    else:
        reqs = load_trace(traffic, base_dir)
        source = TrafficSource(reqs, len(reqs))
    return source if context is None else ContextLimit(source, context, traffic)
