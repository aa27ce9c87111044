"""Traffic sources: the requests the engine is fed — a trace, or synthetic open- or closed-loop traffic.

The engine takes `initial()` up front and calls `on_complete` as each request finishes; that is all a
closed loop, a multi-turn conversation or an agent task needs, since its next requests are caused by the previous
one ending (an agent's next call after a tool's pause; its sub-agents all at once, and its next call once the last
of them has reported).
Everything is a function of the seed and the order requests are issued in, never of wall time or `hash()`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from simulator.config.scenario import Diurnal, Length, Traffic
from simulator.errors import InputError
from simulator.workload import bench_random
from simulator.workload.lengths import sample
from simulator.workload.request import Request
from simulator.workload.traces import UNIQUE_ROOT, chain_rows, load_trace, stream_blocks, stream_key

BLOCK_TOKENS = 64  # synthetic content granularity: fine enough for any page size a pool uses
SYSTEM_ROOT = 0xA4093822299F31D0  # chain start of the shared system prompt (more digits of π)
SUBAGENT_ROOT = 0x082EFA98EC4E6C89  # stream keys of sub-agents' own content (more digits of π)
MAX_SUBAGENTS = 1 << 16  # a task's sub-agents are numbered below this (their stream ids: task × this + j)
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

    def on_complete(self, req: Request, now: float) -> list[Request]:
        """The requests `req` finishing at `now` causes (none for a trace)."""
        return []


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


class _Listed:
    """Lengths given in issue order (a benchmark client's own draws, `bench_random`)."""

    def __init__(self, values: list[int]) -> None:
        self._values = values
        self._pos = 0

    def take(self, n: int) -> list[int]:
        self._pos += n
        return self._values[self._pos - n : self._pos]


class SyntheticSource(TrafficSource):
    """Generated traffic. A prompt is the shared system prompt (`shared_prefix_tokens`, added to the sampled
    `prompt_tokens`) and then content of its own stream: one per request, or one per conversation, whose
    turns each extend the previous turn's stream. Open-loop `rate` counts conversations when turns > 1."""

    def __init__(self, traffic: Traffic, seed: int, base_dir: Path | None) -> None:
        arrival_seq, prompt_seq, output_seq, tool_seq = np.random.SeedSequence(seed).spawn(4)
        self._traffic = traffic
        self._closed = traffic.concurrency is not None
        self._agentic = traffic.agentic
        self._turns = traffic.per_session  # requests of one session (turns, or an agent task's calls)
        if self._agentic is not None:
            self._tools = _Draws(self._agentic.tool_output_tokens, np.random.default_rng(tool_seq), base_dir)
            self._pauses = np.random.default_rng(tool_seq.spawn(1)[0])
            self._waiting: dict[int, list[int]] = {}  # task -> [sub-agents still running, report tokens so far]
        self._prompts: _Draws | _Listed
        self._outputs: _Draws | _Listed
        if traffic.bench_random is not None and traffic.requests is not None:
            prompts, outputs = bench_random.lengths(traffic.bench_random, traffic.requests)
            self._prompts, self._outputs = _Listed(prompts), _Listed(outputs)
        else:
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

    def on_complete(self, req: Request, now: float) -> list[Request]:
        """The conversation's next turn after the think time (an agent task's next calls: `_agent_next`); else, in a
        closed loop, the client's next."""
        if self._agentic is not None:
            nxt = self._agent_next(req, now)
            if nxt is not None:
                return [r for r in nxt if self._may_issue(r.arrival)]
        elif req.turn + 1 < self._turns:
            at = now + self._traffic.sessions.think_time_s
            return [self._next_turn(req, at, self._prompts.take(1)[0])] if self._may_issue(at) else []
        if self._closed and self._may_issue(now):
            return self._fresh([now], [req.client])
        return []

    def _agent_next(self, req: Request, now: float) -> list[Request] | None:
        """An agent task's calls after `req`: its sub-agents after the orchestrator's first call (all at once: its
        answer is their instructions), a call's successor after a tool's pause, the orchestrator's next call once
        its last sub-agent reports (its context grows by every report). None once the task is done."""
        a = self._agentic
        assert a is not None and req.session is not None
        if req.agent == 0 and req.turn == 0 and a.subagents:
            self._waiting[req.session] = [a.subagents, 0, req.prompt_tokens + req.output_tokens]
            return [self._subagent(req, j, now) for j in range(1, a.subagents + 1)]
        steps = a.steps if req.agent == 0 else a.subagent_steps
        if req.turn + 1 < steps:
            at = now + float(self._pauses.exponential(a.tool_time_s)) if a.tool_time_s else now
            return [self._next_turn(req, at, self._tools.take(1)[0])]
        if req.agent == 0:
            return None
        left = self._waiting[req.session]
        left[0] -= 1
        left[1] += req.output_tokens
        if left[0]:
            return []
        del self._waiting[req.session]
        if a.steps == 1:  # the task ends with its sub-agents' reports
            return None
        parent = Request(0, now, left[2], 0, session=req.session, client=req.client)  # its context at fan-out
        return [self._next_turn(parent, now, left[1], base=self._blocks(req.session, left[2]))]

    def _blocks(self, session: int, tokens: int) -> tuple[int, ...]:
        """The blocks of an orchestrator's first `tokens` tokens (the shared prefix, then its own stream)."""
        k = len(self._shared)
        return self._shared + stream_blocks(stream_key(self._root, session), k, tokens // BLOCK_TOKENS)

    def _subagent(self, req: Request, j: int, at: float) -> Request:
        """Sub-agent j's first call: the orchestrator's context and answer as its prefix, then its own task (a
        turn of its own stream, from the turn before its first)."""
        assert req.session is not None
        context = req.prompt_tokens + req.output_tokens
        start = Request(0, at, context, 0, session=req.session, client=req.client, turn=-1, agent=j)
        return self._next_turn(start, at, self._tools.take(1)[0], base=self._blocks(req.session, context))

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
        if self._turns > 1 or self._agentic is not None:
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

    def _next_turn(self, req: Request, at: float, added: int, base: tuple[int, ...] | None = None) -> Request:
        """The prompt grows by the last answer and `added` tokens (a user message, a tool's result); the earlier
        blocks (`base`, else the request's) stay its prefix, continuing its stream (a sub-agent's own)."""
        assert req.session is not None
        prompt = req.prompt_tokens + req.output_tokens + added
        blocks = req.blocks if base is None else base
        key = (
            stream_key(SUBAGENT_ROOT, req.session * MAX_SUBAGENTS + req.agent)
            if req.agent
            else stream_key(self._root, req.session)
        )
        more = stream_blocks(key, len(blocks), prompt // BLOCK_TOKENS)
        self._issued += 1
        return Request(
            id=self._issued - 1,
            arrival=at,
            prompt_tokens=prompt,
            output_tokens=self._outputs.take(1)[0],
            session=req.session,
            client=req.client,
            turn=req.turn + 1,
            agent=req.agent,
            blocks=blocks + more,
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

    def on_complete(self, req: Request, now: float) -> list[Request]:
        return [self._fit(r) for r in self._inner.on_complete(req, now)]

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
    elif traffic.sessions.turns > 1 or traffic.shared_prefix_tokens or traffic.agentic is not None:
        raise InputError("traffic.sessions, agentic and shared_prefix_tokens shape synthetic traffic, not a trace")
    else:
        reqs = load_trace(traffic, base_dir)
        source = TrafficSource(reqs, len(reqs))
    return source if context is None else ContextLimit(source, context, traffic)
