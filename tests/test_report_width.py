"""Reports that read at 80 columns: every bundled study's `run` report fits 80 columns with no number in exponent
notation, names each step once, says per what a per-GPU figure is; a sweep's table never shows a detail without
the column it details; `sweep` without `--out` writes nothing and says so."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_helpers import invoke
from rich.cells import cell_len

from simulator.planning.report import question_gpus as plan_gpus
from simulator.results.numbers import figure
from simulator.results.report import step_name
from simulator.results.sweep_table import PRIORITY, sweep_table

ROOT = Path(__file__).resolve().parents[1]
STUDIES = sorted((ROOT / "scenarios").glob("*.yaml"))
EXPONENT = re.compile(r"[0-9]\.?[0-9]*e[+-][0-9]+")
SHORT = "traffic.requests=12"  # a few requests: the report's shape, not its figures, is under test


def _check_80(text: str) -> None:
    wide = [line for line in text.splitlines() if cell_len(line) > 80]
    assert not wide, wide[:3]
    assert not EXPONENT.search(text), EXPONENT.findall(text)[:3]


@pytest.mark.parametrize("study", STUDIES, ids=[p.stem for p in STUDIES])
def test_every_studys_run_report_reads_at_80_columns(monkeypatch, capsys, study: Path) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = invoke(monkeypatch, capsys, "run", str(study), "--set", SHORT)
    assert code == 0, err
    _check_80(out)
    assert "prefill prefill" not in out and "decode decode" not in out  # each name said once
    assert "per GPU of the fleet" in out


def test_a_disaggregated_run_says_per_decode_gpu(monkeypatch, capsys) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = invoke(
        monkeypatch, capsys, "run", str(ROOT / "scenarios" / "fleet-disaggregated.yaml"), "--set", SHORT
    )
    assert code == 0, err
    fleet = re.search(r"per GPU of the fleet \((\d+)\)\s*│\s*([\d,.]+)", out)
    decode = re.search(r"per decode GPU \((\d+)\)\s*│\s*([\d,.]+)", out)
    assert fleet and decode and int(decode[1]) < int(fleet[1])
    assert float(decode[2].replace(",", "")) > float(fleet[2].replace(",", ""))


def test_headings_name_the_hardware_that_ran_not_the_file(monkeypatch, capsys) -> None:
    """A study named for one GPU run on another is headed by the GPU it ran on; a plan says what it searched."""
    monkeypatch.setenv("COLUMNS", "80")
    path = str(ROOT / "scenarios" / "kimi-k2.6-decode.yaml")
    code, out, err = invoke(monkeypatch, capsys, "run", path, "--set", SHORT, "--set", "hardware=b200")
    assert code == 0, err
    assert re.match(r"kimi-k2.6-decode: \d+ B200, ", out.splitlines()[0]), out.splitlines()[0]
    question = {"hardware": "h200", "space": [{"dims": {"deployment.decode.hardware": ["h200", "b200"]}}]}
    assert plan_gpus(question) == "H200 or B200" and plan_gpus({"hardware": "b200", "space": []}) == "B200"


def test_a_step_is_named_once() -> None:
    assert step_name("prefill", "prefill_chunk") == "prefill chunk"
    assert step_name("decode", "decode_step") == "decode step"
    assert step_name("decode", "prefill_chunk") == "decode pool: prefill chunk"  # colocated: the pool said


def test_a_sweep_table_drops_its_columns_in_order() -> None:
    """The columns shown are the first of PRIORITY that fit: a narrow detail column (prefill GEMM ms) never
    stands where its step's column did not fit."""
    metrics = {
        "output_tokens_per_s": 12_345.6,
        "output_tokens_per_s_per_gpu": 123.4,
        "input_tokens_per_s": 1.0,
        "ttft_ms": {"p95": 1234.5},
        "tpot_ms": {"p50": 30.1, "p95": 31.1},
        "max_running": 64,
        "preempted": 0,
        "kv_occupancy": {"max": 0.5},
        "slo_attainment": 0.99,
        "cost_per_mtok_usd": 1.23,
    }
    anatomy = {"summary": {"prefill_chunk_ms": 123_456.7, "prefill_chunk_gemm_ms": 88.8, "decode_step_ms": 31.1}}
    results = [{"point": {"a.b": 1}, "metrics": metrics, "step_anatomy": anatomy}]
    for width in (80, 140, 200):
        t, left = sweep_table("s", ["a.b"], results, width)
        shown = [c.header for c in t.columns][1:]
        assert shown == PRIORITY[: len(shown)] and left == PRIORITY[len(shown) :]
        assert ("prefill GEMM ms" in shown) <= ("prefill chunk ms" in shown)


def test_sweep_without_out_writes_nothing_and_says_so(tmp_path: Path, monkeypatch, capsys) -> None:
    s = tmp_path / "s.yaml"
    s.write_text(
        "name: s\nmodel: llama-3.1-70b\ntraffic: {concurrency: 1, requests: 2, prompt_tokens: 64, "
        "output_tokens: 4}\nsweep:\n  deployment.decode.kv_cache: [bf16, fp8_e4m3]\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = invoke(monkeypatch, capsys, "sweep", str(s))
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]
    assert "no files written: --out DIR writes" in out
    assert "tok/s/GPU: output tokens/s per GPU of the fleet" in out  # per what
    _check_80(out)
    code, _, err = invoke(monkeypatch, capsys, "sweep", str(s), "--pareto")
    assert (
        code == 2 and "--pareto" in err and "--out" in err and sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]
    )


@pytest.mark.parametrize(
    ("v", "text"), [(10_780.4, "10,780"), (1.078e4, "10,780"), (51.744, "51.74"), (0.00012346, "0.0001235")]
)
def test_one_formatter_never_writes_an_exponent(v: float, text: str) -> None:
    assert figure(v) == text
