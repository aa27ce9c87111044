"""`run` reads its own result: a warning when the offered load exceeds a pool's bound, none when the run kept up."""

from __future__ import annotations

from pathlib import Path

from cli_helpers import invoke

from simulator.config import loader
from simulator.planning.bounds import Bounds, offered
from simulator.planning.slo import SLO

ROOT = Path(__file__).resolve().parents[1]
FLEET = str(ROOT / "scenarios" / "fleet-disaggregated.yaml")
KIMI_1P1D = """\
name: kimi-1p1d
model: kimi-k2.6
hardware: h200
deployment:
  mode: disaggregated
  prefill: {instances: 1, tp: 8, weights: int4, kv_cache: fp8_e4m3}
  decode: {instances: 1, tp: 8, weights: int4, kv_cache: fp8_e4m3}
traffic: {rate: 5, requests: 300, prompt_tokens: 8192, output_tokens: 1024}
slo: {ttft_p95_ms: 2000, tpot_p95_ms: 50}
"""


def test_overloaded_run_warns_naming_the_pool_and_its_bound(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # the SLO row on one line
    f = tmp_path / "over.yaml"
    f.write_text(KIMI_1P1D)
    code, out, err = invoke(monkeypatch, capsys, "run", str(f))
    lines = err.strip().splitlines()
    assert code == 0 and lines and all(line.startswith("warning: overloaded: the ") for line in lines), err
    prefill = next(line for line in lines if "prefill pool" in line)
    assert "the prefill pool (1 instance) computes at most" in prefill and "prompt tok/s" in prefill
    assert "analytic bound" in prefill and "the queue grew from" in prefill and "prefill instances needed" in prefill
    assert "SLO attainment (TTFT ≤ 2,000 ms, TPOT ≤ 50 ms per request)" in out


def test_overloaded_colocated_run_warns(monkeypatch, capsys) -> None:
    kimi = str(ROOT / "scenarios" / "kimi-k2.6-decode.yaml")
    sets = ["traffic.concurrency=null", "traffic.rate=4", "traffic.requests=100", "traffic.prompt_tokens=8192"]
    code, _, err = invoke(monkeypatch, capsys, "run", kimi, *[a for s in sets for a in ("--set", s)])
    assert code == 0 and err.startswith(
        "warning: overloaded: the decode pool (1 instance, prefill and decode colocated)"
    )


def test_a_run_that_keeps_up_does_not_warn(monkeypatch, capsys) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = invoke(monkeypatch, capsys, "run", FLEET)
    assert code == 0 and err == "" and "SLO attainment (TTFT ≤ 2,000 ms, TPOT ≤ 50 ms per request)" in out


def test_closed_loop_never_warns(monkeypatch, capsys) -> None:
    kimi = str(ROOT / "scenarios" / "kimi-k2.6-decode.yaml")
    code, _, err = invoke(monkeypatch, capsys, "run", kimi, "--set", "traffic.concurrency=64")
    assert code == 0 and err == ""


def test_dp_prefill_bound_counts_every_rank() -> None:
    """The wide-EP study keeps up (TTFT p50 under 1 s over its minute, docs/large-moe.md): each of its 32 DP ranks
    takes its own 2,048 prompt tokens a step, and the bound must count all of them, or it prunes what would pass."""
    sc, _ = loader.load(ROOT / "scenarios" / "deepseek-v3-wide-ep.yaml")
    load = offered(sc, ROOT / "scenarios")
    assert load is not None
    prefill = next(b for b in Bounds(SLO.parse(None, sc)).throughput(sc, load, ROOT) if b.pool == "prefill")
    assert prefill.served > prefill.offered
