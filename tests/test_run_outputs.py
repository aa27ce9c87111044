"""What `run --out` and `sweep --out` add beside the Result (per-request records, charts), and reports that fit the
width they are read at (the terminal, COLUMNS, or 80 when piped)."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import invoke
from rich.cells import cell_len
from rich.console import Console

from simulator.config.specs import EngineSpec
from simulator.folding import fold
from simulator.results.service import percentiles

ROOT = Path(__file__).resolve().parents[1]
FLEET = str(ROOT / "scenarios" / "fleet-disaggregated.yaml")
KIMI = str(ROOT / "scenarios" / "kimi-k2.6-decode.yaml")


@pytest.fixture(scope="module")
def fleet_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`run fleet-disaggregated --out` (disaggregated, sessions, prefix cache: every column has something)."""
    from phaseplan.cli import main

    out = tmp_path_factory.mktemp("run") / "o"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", ["phaseplan", "run", FLEET, "--out", str(out), "--json"])
        main()  # exits only on an error
    return out


def _rows(out: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO((out / "requests.csv").read_text())))


def test_requests_csv_has_one_row_per_request_and_the_results_percentiles(fleet_out: Path) -> None:
    result = json.loads((fleet_out / "result.json").read_text())
    m = result["metrics"]
    rows = _rows(fleet_out)
    assert len(rows) == m["requests"] and [int(r["id"]) for r in rows] == sorted(int(r["id"]) for r in rows)
    done = [r for r in rows if r["status"] == "completed"]
    assert len(done) == m["completed"]
    lo, hi = m["window_s"]
    inside = [r for r in done if lo <= float(r["arrival_s"]) <= hi]
    assert 0 < len(inside) < len(done)  # the window cut a warm-up off
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):  # the whole run's, and the window's: its arrivals
        values = np.array([float(r[key]) for r in done if r[key] != ""])
        assert percentiles(values) == m["full_run"][key], key
        values = np.array([float(r[key]) for r in inside if r[key] != ""])
        assert percentiles(values) == m[key], key
    assert sum(int(r["cached_tokens"]) for r in rows) == m["transfer_tokens_saved"]
    # every request went through a prefill and a decode instance of this 2 + 2 fleet, both pools used
    assert {r["prefill_instance"] for r in done} == {"0", "1"} and {r["decode_instance"] for r in done} == {"0", "1"}


def test_run_charts_are_pngs(fleet_out: Path) -> None:
    for name in ("latency-cdf.png", "kv-and-queue.png"):
        assert (fleet_out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_colocated_requests_name_their_one_instance(tmp_path: Path, monkeypatch, capsys) -> None:
    code, _, err = invoke(monkeypatch, capsys, "run", KIMI, "--set", "traffic.requests=3", "--out", str(tmp_path))
    assert code == 0, err
    rows = _rows(tmp_path)
    assert len(rows) == 3 and all(r["prefill_instance"] == "" and r["decode_instance"] == "0" for r in rows)


def test_a_rejected_request_has_no_times(tmp_path: Path, monkeypatch, capsys) -> None:
    small = tmp_path / "s.yaml"
    small.write_text("name: small\nmodel: llama-3.1-70b\ntraffic: {concurrency: 1, requests: 3, output_tokens: 4}\n")
    sets = ["deployment.decode.mem_fraction=0.13", "traffic.prompt_tokens=100000"]  # ~21K tokens of KV: too small
    code, _, err = invoke(
        monkeypatch, capsys, "run", str(small), *[a for s in sets for a in ("--set", s)], "--out", str(tmp_path / "o")
    )
    assert code == 0, err
    rows = _rows(tmp_path / "o")
    assert [r["status"] for r in rows] == ["rejected"] * 3
    assert all(r["ttft_ms"] == r["tpot_ms"] == r["e2e_ms"] == "" for r in rows)
    assert all(r["reason"] == "prompt_over_prefill_kv" for r in rows)


def _widths(text: str) -> list[int]:
    return [cell_len(line) for line in text.splitlines()]


@pytest.mark.parametrize("columns", [None, "80", "120"])
def test_run_report_follows_columns_and_is_80_piped(monkeypatch, capsys, columns: str | None) -> None:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    code, out, _ = invoke(monkeypatch, capsys, "run", FLEET)
    width = int(columns or 80)
    assert code == 0 and max(_widths(out)) <= width
    assert max(_widths(out)) > width - 10  # the table uses the room it has
    assert all(line == line.rstrip() for line in out.splitlines())


def test_a_hostile_columns_is_read_within_bounds(monkeypatch, capsys) -> None:
    monkeypatch.setenv("COLUMNS", "100000000")
    code, out, _ = invoke(monkeypatch, capsys, "presets")
    assert code == 0 and max(_widths(out)) <= 1000


def test_planner_lines_fold_at_phrases_not_mid_phrase() -> None:
    line = "fleet at 3 conversations/s (3 turns each): fewest GPUs within p95 TTFT <= 2,000 ms, p95 TPOT <= 50 ms"
    lines = [t.plain for t in fold(line, 80)]
    assert lines == [
        "fleet at 3 conversations/s (3 turns each):",
        "  fewest GPUs within p95 TTFT <= 2,000 ms, p95 TPOT <= 50 ms",
    ]
    long_item = "  a.b=1 c.d=2 (8 GPUs, simulated): misses TTFT: p95 4,000 ms > 2,000 ms " + "word " * 20
    folded = fold(long_item, 60)
    assert all(cell_len(t.plain) <= 60 for t in folded) and all(t.plain.startswith("    ") for t in folded[1:])


def test_max_rate_report_at_80_columns() -> None:
    """The report of a max-rate answer (built around a real run's metrics and provenance) fits 80 columns and
    keeps its phrases whole."""
    from simulator.config import loader
    from simulator.engine.run import simulate
    from simulator.planning.report import print_max_rate

    result, _ = simulate(loader.load(KIMI, ["traffic.requests=2"])[0])
    reason = (
        "cannot sustain the rate: median TTFT grows from 324 ms (first quarter of arrivals) to 4,723 ms (last "
        "quarter): the queue builds up"
    )
    doc = {
        "rate_unit": "requests/s",
        "requests_per_s": 1.0,
        "max_rate_rps": 1.25,
        "layout": "2 × TP8 prefill (INT4, FP8 KV) + 1 × TP8 decode (INT4, FP8 KV) = 24 H200",
        "slo": {"ttft_p95_ms": 2000.0, "tpot_p95_ms": 50.0, "attainment": None},
        "cost_per_mtok_usd": result["metrics"]["cost_per_mtok_usd"],
        "cost_basis": "output tokens",
        "gpu_hour_usd": 3.5,
        "metrics": result["metrics"],
        "above": {"1.38": reason},
        "trials": [{"stopped_early": False}],
        "provenance": result["provenance"],
    }
    buf = io.StringIO()
    print_max_rate(Console(file=buf, width=80, highlight=False), doc, "a study")
    text = buf.getvalue()
    assert max(_widths(text)) <= 80
    lines = text.splitlines()
    assert any(line.endswith("within p95 TTFT <= 2,000 ms, p95 TPOT <= 50 ms") for line in lines)
    assert any("(first quarter of arrivals)" in line for line in lines)  # a parenthesis is never cut in two


def test_sweep_writes_one_chart_per_headline_metric(tmp_path: Path, monkeypatch, capsys) -> None:
    s = tmp_path / "s.yaml"
    s.write_text(
        "name: 's $x$ [b]'\nmodel: llama-3.1-70b\ntraffic: {concurrency: 1, requests: 2, prompt_tokens: 64, "
        "output_tokens: 4}\nsweep:\n  deployment.decode.kv_cache: [bf16, fp8_e4m3]\n  traffic.concurrency: [1, 2]\n"
    )
    code, _, err = invoke(monkeypatch, capsys, "sweep", str(s), "--out", str(tmp_path / "o"))
    assert code == 0, err
    pngs = sorted(p.name for p in (tmp_path / "o").glob("*.png"))
    assert pngs == sorted(
        f"s-sweep-{m}.png" for m in ("tok-s-gpu", "ttft-p95-ms", "tpot-p95-ms", "slo-pct", "usd-mtok-out")
    )


def test_capacity_table_keeps_its_numbers_whole_at_80(monkeypatch, capsys) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    code, out, _ = invoke(monkeypatch, capsys, "capacity", str(ROOT / "scenarios" / "deepseek-v3-wide-ep.yaml"))
    assert code == 0 and max(_widths(out)) <= 80
    assert "69,180,480" in out and "1,080,928" in out and "…" not in out


def test_a_results_scenario_carries_the_engines_values_not_its_prose(monkeypatch, capsys) -> None:
    """A Result echoes the engine's terms and names it, but not the preset's per-term `sources` (the preset file
    keeps them): a sweep's JSON stays small enough to hand to another tool whole — the format-directions check
    passes each sweep as one argument, which Linux caps at 128 KiB (MAX_ARG_STRLEN)."""
    code, out, _ = invoke(
        monkeypatch, capsys, "sweep", str(ROOT / "scenarios" / "glm-5.2-weight-formats.yaml"), "--json"
    )
    assert code == 0
    points = json.loads(out)
    engine = points[0]["scenario"]["engine"]
    assert engine["name"] == "sglang-0.5.10" and "sources" not in engine
    assert set(EngineSpec.TERMS) - EngineSpec.TIER_TERMS <= set(engine)  # (KV-tier terms only with a tier)
    assert len(out.encode()) < 128 * 1024
