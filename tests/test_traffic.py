"""Traffic: length sampling, trace readers, arrival processes, closed loops, sessions, shared prefixes."""

from __future__ import annotations

import heapq
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from simulator.config.scenario import Length, Traffic
from simulator.errors import InputError
from simulator.workload.lengths import sample
from simulator.workload.request import Request
from simulator.workload.traces import ROOT, chain, load_trace, mix64, stream_key
from simulator.workload.traffic import BLOCK_TOKENS, TrafficSource, arrival_times, diurnal_multiplier, make_source

REPO = Path(__file__).resolve().parents[1]


def drive(src: TrafficSource, seed: int = 123) -> tuple[list[Request], dict[int, float], int]:
    """A stand-in engine with unlimited servers and random service times: every request issued, when each
    finished, and the most requests ever outstanding at once."""
    rng = np.random.default_rng(seed)
    issued = list(src.initial())
    heap = [(r.arrival + rng.exponential(1.0), r.id, r) for r in issued]
    heapq.heapify(heap)
    done: dict[int, float] = {}
    most = len(heap)
    while heap:
        t, _, r = heapq.heappop(heap)
        done[r.id] = t
        for nxt in src.on_complete(r, t):
            assert nxt.arrival >= t
            issued.append(nxt)
            heapq.heappush(heap, (nxt.arrival + rng.exponential(1.0), nxt.id, nxt))
        most = max(most, len(heap))
    return issued, done, most


def cv(x: np.ndarray) -> float:
    return float(np.std(x) / np.mean(x))


# --- lengths ------------------------------------------------------------------------------------------------


def test_length_distributions() -> None:
    rng = np.random.default_rng(0)
    assert sample(Length.model_validate(300), rng, 5).tolist() == [300] * 5
    u = sample(Length(dist="uniform", low=10, high=12), rng, 3000)
    assert set(u.tolist()) == {10, 11, 12}
    ln = sample(Length(dist="lognormal", median=1000, sigma=0.5), rng, 20000)
    assert ln.dtype.kind == "i" and abs(np.median(ln) / 1000 - 1) < 0.03
    assert sample(Length(dist="lognormal", median=1000, sigma=2.0, max=1500), rng, 5000).max() == 1500
    assert sample(Length(dist="lognormal", median=1, sigma=3.0), rng, 5000).min() == 1


def test_empirical_lengths_beside_the_scenario(tmp_path: Path) -> None:
    (tmp_path / "lens.txt").write_text("100\n\n250\n4000\n")
    x = sample(Length(dist="empirical", file="lens.txt", max=3000), np.random.default_rng(0), 1000, tmp_path)
    assert set(x.tolist()) == {100, 250, 3000}
    (tmp_path / "bad.txt").write_text("100\nmany\n")
    with pytest.raises(InputError, match=r"bad\.txt: line 2"):
        sample(Length(dist="empirical", file="bad.txt"), np.random.default_rng(0), 1, tmp_path)
    with pytest.raises(InputError, match="missing.txt"):
        sample(Length(dist="empirical", file="missing.txt"), np.random.default_rng(0), 1, tmp_path)


# --- trace readers ------------------------------------------------------------------------------------------


def write_lines(path: Path, rows: list[object]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_phaseplan_trace(tmp_path: Path) -> None:
    f = write_lines(
        tmp_path / "t.jsonl",
        [
            {"arrival": 2.0, "prompt_tokens": 1100, "output_tokens": 0, "blocks": [7, 8], "session": 3},
            {"arrival": 0.5, "prompt_tokens": 300, "output_tokens": 9, "blocks": [1, 2], "block_tokens": 128},
            {"arrival": 1.0, "prompt_tokens": 1100, "output_tokens": 4},
        ],
    )
    reqs = load_trace(Traffic(trace=str(f)))
    assert [r.id for r in reqs] == [0, 1, 2] and [r.arrival for r in reqs] == [0.5, 1.0, 2.0]
    assert reqs[0].blocks == (1, 2) and reqs[0].block_tokens == 128
    assert len(reqs[1].blocks) == 2 and reqs[1].block_tokens == 512  # no blocks given: unique content
    assert reqs[2].blocks == (7, 8) and reqs[2].session == 3 and reqs[2].output_tokens == 1


@pytest.mark.parametrize(
    ("row", "why"),
    [
        ('{"arrival": 1, "prompt_tokens": 5', "not valid JSON"),
        ({"arrival": 1, "prompt_tokens": 5, "output_tokens": 1, "prompt": 3}, "unknown key"),
        ({"arrival": 1, "prompt_tokens": 0, "output_tokens": 1}, "prompt_tokens"),
        ({"arrival": -1, "prompt_tokens": 5, "output_tokens": 1}, "arrival"),
        ({"arrival": 1, "prompt_tokens": 600, "output_tokens": 1, "blocks": [1, 2]}, "exceed"),
    ],
)
def test_phaseplan_bad_rows(tmp_path: Path, row: object, why: str) -> None:
    f = write_lines(tmp_path / "t.jsonl", [{"arrival": 0, "prompt_tokens": 5, "output_tokens": 1}, row])
    with pytest.raises(InputError, match=rf"t\.jsonl: line 2: .*{why}"):
        load_trace(Traffic(trace=str(f), trace_format="phaseplan"))


AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens\r
2023-11-16 18:15:46.6805900,374,44\r
2023-11-16 18:15:50.9951690,396,0\r
2023-11-17 00:00:00.0000001,2000,10"""


def test_azure_trace(tmp_path: Path) -> None:
    f = tmp_path / "a.csv"
    f.write_text(AZURE)
    reqs = load_trace(Traffic(trace=str(f)))
    assert [r.arrival for r in reqs][:2] == [0.0, pytest.approx(4.314579, abs=1e-9)]
    assert reqs[2].arrival == pytest.approx((24 * 3600 - (18 * 3600 + 15 * 60 + 46.68059)) + 1e-7, abs=1e-9)
    assert [(r.prompt_tokens, r.output_tokens) for r in reqs] == [(374, 44), (396, 1), (2000, 10)]
    assert [len(r.blocks) for r in reqs] == [0, 0, 3] and reqs[2].block_tokens == 512
    fast = load_trace(Traffic(trace=str(f), trace_speedup=2.0, duration_s=3.0, requests=5))
    assert [r.arrival for r in fast] == [0.0, pytest.approx(2.1572895)]


@pytest.mark.parametrize(
    "line", ["2023-11-16 18:15:5x.1,396,10", "2023-11-16 18:15:50.1,396", "2023-11-16 18:15:50.1,0,10"]
)
def test_azure_bad_rows(tmp_path: Path, line: str) -> None:
    f = tmp_path / "a.csv"
    f.write_text(AZURE.splitlines()[0] + "\n" + AZURE.splitlines()[1] + "\n" + line + "\n")
    with pytest.raises(InputError, match=r"a\.csv: line 3"):
        load_trace(Traffic(trace=str(f)))
    f.write_text("time,in,out\n1,2,3\n")
    with pytest.raises(InputError, match=r"a\.csv: line 1: expected a header"):
        load_trace(Traffic(trace=str(f)))


def test_mooncake_trace_chains_blocks(tmp_path: Path) -> None:
    f = write_lines(
        tmp_path / "m.jsonl",
        [
            {"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]},
            {"timestamp": 1500, "input_length": 1024, "output_length": 0, "hash_ids": [0, 3]},
            {"timestamp": 500, "input_length": 1030, "output_length": 7, "hash_ids": [5, 1, 9]},
        ],
    )
    a, c, b = load_trace(Traffic(trace=str(f)))
    assert [r.id for r in (a, c, b)] == [0, 1, 2] and [a.arrival, c.arrival, b.arrival] == [0.0, 0.5, 1.5]
    b0 = chain(ROOT, 0)
    assert a.blocks == (b0, chain(b0, 1))  # the partial third block is dropped
    assert b.blocks == (b0, chain(b0, 3)) and b.output_tokens == 1
    assert c.blocks[1] != a.blocks[1]  # same hash id after a different prefix: different content
    assert a.block_tokens == 512


def test_mooncake_bad_rows(tmp_path: Path) -> None:
    good = {"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [0]}
    for bad in ({**good, "hash_ids": [0, -1]}, {**good, "input_length": "many"}, {**good, "timestamp": None}):
        f = write_lines(tmp_path / "m.jsonl", [good, "", bad])
        with pytest.raises(InputError, match=r"m\.jsonl: line 3"):
            load_trace(Traffic(trace=str(f)))


def test_missing_and_unknown_trace(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="nope.jsonl"):
        load_trace(Traffic(trace="nope.jsonl"), tmp_path)
    f = write_lines(tmp_path / "x.jsonl", [{"t": 1}])
    with pytest.raises(InputError, match="cannot tell the format"):
        load_trace(Traffic(trace="x.jsonl"), tmp_path)  # relative to the scenario's folder
    with pytest.raises(InputError, match="not a trace"):
        make_source(Traffic(trace=str(f), shared_prefix_tokens=100), 0)


@pytest.mark.parametrize(
    ("name", "rows", "mean_input"),
    [
        ("mooncake-conversation.jsonl", 12031, 12035),
        ("azure-llm-2023-conv.csv", 19366, 1155),
        ("azure-llm-2023-code.csv", 8819, 2048),
    ],
)
def test_bundled_traces(name: str, rows: int, mean_input: int) -> None:
    src = make_source(Traffic(trace=f"traces/{name}"), 0, REPO / "scenarios")
    reqs = src.initial()
    assert len(reqs) == rows == src.total_expected
    assert round(np.mean([r.prompt_tokens for r in reqs])) == mean_input
    assert 3400 < reqs[-1].arrival < 3600  # each is about an hour
    if name.startswith("mooncake"):
        shared = defaultdict(int)
        for r in reqs:
            for b in r.blocks:
                shared[b] += 1
        assert sum(n > 1 for n in shared.values()) > 1000  # the trace's prefix reuse survives the chaining


# --- open loop ----------------------------------------------------------------------------------------------


def test_poisson_rate_and_cv() -> None:
    t = arrival_times(Traffic(rate=50, requests=50000), np.random.default_rng(1), 50000)
    gaps = np.diff(t, prepend=0.0)
    assert len(t) == 50000 and np.all(gaps > 0)
    assert abs(len(t) / t[-1] / 50 - 1) < 0.02
    assert abs(cv(gaps) - 1) < 0.03


def test_poisson_duration_bound() -> None:
    src = make_source(Traffic(rate=20, duration_s=500), 3)
    reqs = src.initial()
    assert src.total_expected == len(reqs) and abs(len(reqs) / 10000 - 1) < 0.05
    assert all(r.arrival < 500 for r in reqs) and [r.id for r in reqs] == list(range(len(reqs)))
    assert all(a.arrival <= b.arrival for a, b in zip(reqs, reqs[1:], strict=False))
    assert all(src.on_complete(r, 600.0) == [] for r in reqs[:10])


@pytest.mark.parametrize("burst_cv", [0.5, 2.0, 4.0])
def test_bursty_cv(burst_cv: float) -> None:
    traffic = Traffic(rate=10, requests=100000, arrival="bursty", burst_cv=burst_cv)
    gaps = np.diff(arrival_times(traffic, np.random.default_rng(2), 100000), prepend=0.0)
    assert abs(np.mean(gaps) * 10 - 1) < 0.05
    assert abs(cv(gaps) / burst_cv - 1) < 0.06


def test_diurnal_follows_multipliers() -> None:
    traffic = Traffic(
        rate=40,
        duration_s=5000,
        arrival="diurnal",
        diurnal={"period_s": 100, "multipliers": [0.5, 1, 2, 0.2]},
    )
    t = arrival_times(traffic, np.random.default_rng(4), None)
    edges = np.linspace(0, 100, 9)
    counts = np.histogram(np.mod(t, 100), edges)[0]
    for lo, hi, n in zip(edges, edges[1:], counts, strict=False):
        grid = np.linspace(lo, hi, 1001)
        expected = 40 * 50 * np.trapezoid(diurnal_multiplier(traffic.diurnal, grid), grid)
        assert abs(n - expected) < 5 * np.sqrt(expected)
    points = diurnal_multiplier(traffic.diurnal, np.array([0, 25, 50, 87.5, 100]))
    assert points.tolist() == [0.5, 1, 2, 0.35, 0.5]  # linear between points, wrapping back to the first


def test_diurnal_all_zero() -> None:
    quiet = {"multipliers": [0.0]}
    assert make_source(Traffic(rate=5, duration_s=100, arrival="diurnal", diurnal=quiet), 0).initial() == []
    with pytest.raises(InputError, match="all zero"):
        make_source(Traffic(rate=5, requests=100, arrival="diurnal", diurnal=quiet), 0)


def test_72k_open_loop_requests() -> None:
    src = make_source(Traffic(rate=20, requests=72000, prompt_tokens={"dist": "lognormal", "median": 2048}), 0)
    reqs = src.initial()
    assert len(reqs) == 72000 and reqs[-1].id == 71999
    assert all(len(r.blocks) == r.prompt_tokens // BLOCK_TOKENS for r in reqs[:1000])


# --- closed loop --------------------------------------------------------------------------------------------


def test_closed_loop_issues_exactly_requests() -> None:
    src = make_source(Traffic(concurrency=8, requests=203), 5)
    assert [r.arrival for r in src.initial()] == [0.0] * 8 and src.total_expected == 203
    issued, done, most = drive(src)
    assert [r.id for r in issued] == list(range(203)) and len(done) == 203
    assert most <= 8
    by_client = defaultdict(list)
    for r in issued:
        by_client[r.client].append(r)
    assert set(by_client) == set(range(8))
    for reqs in by_client.values():  # a client's next request is sent the moment the previous one ends
        assert all(b.arrival == done[a.id] for a, b in zip(reqs, reqs[1:], strict=False))


def test_closed_loop_duration_and_small_counts() -> None:
    issued, done, _ = drive(make_source(Traffic(concurrency=4, duration_s=20), 0))
    assert all(r.arrival < 20 for r in issued) and max(done.values()) > 20
    assert len(make_source(Traffic(concurrency=16, requests=3), 0).initial()) == 3
    assert make_source(Traffic(concurrency=16), 0).total_expected == 400  # default: a steady state's length


# --- content: sessions, shared prefix, uniqueness ----------------------------------------------------------


def sessions_of(issued: list[Request]) -> dict[int, list[Request]]:
    out: dict[int, list[Request]] = defaultdict(list)
    for r in issued:
        assert r.session is not None
        out[r.session].append(r)
    return out


@pytest.mark.parametrize("loop", [{"rate": 2.0}, {"concurrency": 4}])
def test_sessions_extend_their_prefix(loop: dict[str, float]) -> None:
    traffic = Traffic(**loop, requests=200, sessions={"turns": 4, "think_time_s": 3.0}, shared_prefix_tokens=200)
    issued, done, most = drive(make_source(traffic, 7))
    assert len(issued) == 200 and [r.id for r in issued] == list(range(200))
    for turns in sessions_of(issued).values():
        assert [r.turn for r in turns] == list(range(len(turns)))
        for a, b in zip(turns, turns[1:], strict=False):
            assert b.arrival == pytest.approx(done[a.id] + 3.0)
            assert b.prompt_tokens > a.prompt_tokens + a.output_tokens
            assert b.blocks[: len(a.blocks)] == a.blocks and len(b.blocks) == b.prompt_tokens // BLOCK_TOKENS
            assert b.client == a.client
    if "concurrency" in loop:
        assert most <= 4
        by_client = defaultdict(list)
        for r in issued:
            by_client[r.client].append(r)
        for reqs in by_client.values():  # one conversation at a time, each to its end
            assert [r.turn for r in reqs] == [i % 4 for i in range(len(reqs))]


def test_sessions_do_not_share_beyond_the_system_prompt() -> None:
    issued, _, _ = drive(make_source(Traffic(rate=1.0, requests=120, sessions={"turns": 3}), 0))
    owner: dict[int, int] = {}
    for r in issued:
        for b in r.blocks:
            assert owner.setdefault(b, r.session) == r.session


def test_shared_prefix_blocks() -> None:
    reqs = make_source(Traffic(rate=5, requests=300, shared_prefix_tokens=1000), 0).initial()
    k = 1000 // BLOCK_TOKENS
    assert len({r.blocks[:k] for r in reqs}) == 1 and all(r.prompt_tokens == 1000 + 2048 for r in reqs)
    rest = [b for r in reqs for b in r.blocks[k:]]
    assert len(rest) == len(set(rest)) and not set(rest) & set(reqs[0].blocks[:k])


def test_unique_content_without_reuse() -> None:
    reqs = make_source(Traffic(rate=5, requests=500, prompt_tokens={"dist": "uniform", "low": 1, "high": 900}), 0)
    blocks = [b for r in reqs.initial() for b in r.blocks]
    assert len(blocks) == len(set(blocks)) > 0
    assert all(0 <= b < 2**63 for b in blocks)


# --- determinism --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "traffic",
    [
        Traffic(rate=3, requests=150, arrival="bursty", sessions={"turns": 3}, shared_prefix_tokens=300),
        Traffic(concurrency=6, requests=150, prompt_tokens={"dist": "lognormal", "median": 500}),
        Traffic(rate=3, duration_s=60, arrival="diurnal", diurnal={"period_s": 30}),
    ],
)
def test_determinism(traffic: Traffic) -> None:
    first = drive(make_source(traffic, 11))
    assert drive(make_source(traffic, 11)) == first
    assert drive(make_source(traffic, 12))[0] != first[0]


def test_hashes_are_stable_values() -> None:
    """Pinned: block values must not depend on the process (no salted hash()), nor on int vs array."""
    assert chain(ROOT, 0) == 116533529432162501
    assert stream_key(ROOT, 7) == stream_key(np.uint64(ROOT), np.array([7], dtype=np.uint64)).tolist()[0]
    x = np.array([0, 1, 2**63, 2**64 - 1], dtype=np.uint64)
    assert mix64(x).tolist() == [mix64(int(v)) for v in x]


AGENTS = {"steps": 4, "tool_time_s": 2.0, "tool_output_tokens": 300, "subagents": 3, "subagent_steps": 2}


def test_agent_tasks_grow_fan_out_and_join() -> None:
    """Each task: the orchestrator's first call, 3 sub-agents at once whose prompts start with its context, each
    sub-agent's calls growing by an answer and a tool result after a pause, the orchestrator's next call once the
    last sub-agent reported (its context grown by every report), then its remaining calls."""
    t = Traffic(rate=0.5, requests=60, prompt_tokens=1000, output_tokens=100, shared_prefix_tokens=256, agentic=AGENTS)
    src = make_source(t, 5)
    issued, done, _ = drive(src, seed=9)
    tasks: dict[int, list[Request]] = defaultdict(list)
    for r in issued:
        tasks[r.session].append(r)  # type: ignore[index]
    whole = [calls for calls in tasks.values() if len(calls) == t.agentic.calls]  # type: ignore[union-attr]
    assert whole, "some task issued all of its 4 + 3 × 2 calls"
    for calls in whole:
        first = next(r for r in calls if r.agent == 0 and r.turn == 0)
        context = first.prompt_tokens + first.output_tokens
        subs = [r for r in calls if r.agent > 0]
        for r in (r for r in subs if r.turn == 0):  # a sub-agent starts from the orchestrator's context
            assert r.arrival == done[first.id] and r.prompt_tokens == context + 300
            assert r.blocks[: len(first.blocks)] == first.blocks
        by_agent = {j: sorted((r for r in subs if r.agent == j), key=lambda r: r.turn) for j in (1, 2, 3)}
        for a, b in by_agent.values():
            assert b.prompt_tokens == a.prompt_tokens + a.output_tokens + 300 and b.arrival >= done[a.id]
            assert b.blocks[: len(a.blocks)] == a.blocks  # its own calls extend its own stream
        own = {rs[0].blocks[context // BLOCK_TOKENS + 1] for rs in by_agent.values()}
        assert len(own) == 3, "each sub-agent's own content is its own"
        nxt = next(r for r in calls if r.agent == 0 and r.turn == 1)
        reports = sum(rs[-1].output_tokens for rs in by_agent.values())
        assert nxt.prompt_tokens == context + reports  # it waits for the last report and reads them all
        assert nxt.arrival == max(done[rs[-1].id] for rs in by_agent.values())
        assert nxt.blocks[: len(first.blocks)] == first.blocks
    again, _, _ = drive(make_source(t, 5), seed=9)
    assert [(r.id, r.arrival, r.prompt_tokens, r.blocks) for r in again] == [
        (r.id, r.arrival, r.prompt_tokens, r.blocks) for r in issued
    ]


def test_agent_tasks_refuse_a_trace_and_sessions() -> None:
    with pytest.raises(ValueError, match="agentic"):
        Traffic(rate=1, requests=10, sessions={"turns": 2}, agentic=AGENTS)
    with pytest.raises(InputError, match="agentic"):
        make_source(Traffic(trace=str(REPO / "traces" / "mooncake-conversation.jsonl"), agentic=AGENTS), 0)
