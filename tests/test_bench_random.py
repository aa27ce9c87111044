"""`traffic.bench_random`: SGLang's benchmark client's random dataset, reproduced request by request. The draws are
checked against the totals the published runs printed (the validation cases' quotes), not against a restatement."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_helpers import run_cli
from test_traffic import drive

from simulator.config.scenario import BenchRandom, Traffic
from simulator.validation import case as cases
from simulator.workload import bench_random
from simulator.workload.traffic import make_source

ROOT = Path(__file__).resolve().parents[1]
QUOTED = sorted(
    p
    for p in (ROOT / "validation" / "cases").glob("*.yaml")
    if "bench_random" in p.read_text() and "Total input tokens" in p.read_text()
)


def test_every_bench_random_case_quoting_its_totals_is_one() -> None:
    assert len(QUOTED) >= 30  # the SGLang cookbook's TTFT cases print their runs' totals


@pytest.mark.parametrize("path", QUOTED, ids=lambda p: p.stem)
def test_the_draws_are_the_published_runs_lengths(path: Path) -> None:
    """The outputs drawn sum to the run's printed "Total generated tokens" (but for a drawn 0, served as 1), and the
    prompts to its "Total input tokens" (exactly under SGLang 0.5.6.x; later clients count the prompt as the server
    re-tokenizes it, which on MiniMax's pages is one token fewer a request): they are the run's lengths."""
    case = cases.load(path, ROOT)
    t = case.scenario.traffic
    assert t.bench_random is not None and t.requests is not None
    prompts, outputs = bench_random.lengths(t.bench_random, t.requests)
    printed_in = re.search(r"Total input tokens: ([\d,]+)", case.spec.quote)
    printed_out = re.search(r"Total generated tokens: ([\d,]+)", case.spec.quote)
    assert printed_in is not None
    gap = sum(prompts) - int(printed_in.group(1).replace(",", ""))
    assert gap == 0 if case.spec.engine_version.startswith("0.5.6") else gap in (0, t.requests)
    if printed_out is not None:
        served_as_one = outputs.count(1) if t.bench_random.zero_outputs else 0
        assert 0 <= sum(outputs) - int(printed_out.group(1).replace(",", "")) <= served_as_one


def test_the_closed_loop_sends_the_draws_in_order() -> None:
    b = BenchRandom(input_len=8000, output_len=1000)
    traffic = Traffic(concurrency=4, requests=40, bench_random=b)
    issued, done, most = drive(make_source(traffic, 9))
    prompts, outputs = bench_random.lengths(b, 40)
    assert [r.prompt_tokens for r in sorted(issued, key=lambda r: r.id)] == prompts
    assert [r.output_tokens for r in sorted(issued, key=lambda r: r.id)] == outputs
    assert len(done) == 40 and most <= 4
    again, _, _ = drive(make_source(traffic, 10))  # the scenario's seed does not move the client's draws
    assert [r.prompt_tokens for r in again] == [r.prompt_tokens for r in issued]


def test_the_lengths_it_sets_and_a_dumped_scenario_reloads() -> None:
    t = Traffic(concurrency=1, requests=10, bench_random={"input_len": 1000, "output_len": 8000, "range_ratio": 0.5})
    assert (t.prompt_tokens.low, t.prompt_tokens.high) == (500, 1000)
    assert (t.output_tokens.low, t.output_tokens.high) == (4000, 8000)
    assert Traffic(**t.model_dump()) == t
    assert "bench_random" not in Traffic(concurrency=1).model_dump()  # Results without it keep their bytes


@pytest.mark.parametrize(
    "sets, why",
    [
        (["traffic.bench_random={input_len: 100, output_len: 10}", "traffic.prompt_tokens=50"], "not both"),
        (["traffic.bench_random={input_len: 100, output_len: 10, seed: -1}"], "seed"),
        (["traffic.bench_random={input_len: 100, output_len: 10, range_ratio: 2}"], "range_ratio"),
        (["traffic.bench_random={input_len: 100, output_len: 10}", "traffic.sessions.turns=3"], "single requests"),
    ],
)
def test_bad_bench_random_is_one_line(monkeypatch, capsys, sets: list[str], why: str) -> None:
    args = ["run", str(ROOT / "scenarios" / "tiny-cpu.yaml"), "--set", "traffic.requests=4"]
    for s in sets:
        args += ["--set", s]
    code, text = run_cli(monkeypatch, capsys, *args)
    assert code == 2 and text.startswith("error: ") and len(text.strip().splitlines()) == 1, text
    assert why in text and "bench_random" in text
