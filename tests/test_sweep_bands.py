"""A sweep states each point's validated error band: in its JSON (`bands`, the margins `run` and the app print
beside the same figures) and under its table, one line a headline figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import invoke

from simulator.validation import bands

SCENARIO = (
    "name: s\nmodel: llama-3.1-70b\ntraffic: {concurrency: 1, requests: 2, prompt_tokens: 64, "
    "output_tokens: 4}\nsweep:\n  deployment.decode.kv_cache: [bf16, fp8_e4m3]\n"
)


def _point(kv: str, clients: int, tput: str, tpot: str = "±10% model error", ttft: str = "no error band") -> dict:
    return {
        "point": {"deployment.decode.kv_cache": kv, "traffic.concurrency": clients},
        "metrics": {},
        "bands": {"output_tok_s": tput, "tpot_ms": tpot, "ttft_ms": ttft},
    }


def test_a_band_every_point_shares_is_said_once() -> None:
    rows = [_point("bf16", 1, "±20% model error"), _point("fp8_e4m3", 1, "±20% model error")]
    assert bands.sweep_lines(rows) == [
        "throughput: ±20% model error at every point",
        "TPOT p95: ±10% model error at every point",
        "TTFT p95: no error band at every point",
    ]


def test_points_of_one_band_join_their_last_swept_values() -> None:
    """Points alike but for the last swept value share one label; a failed point (no metrics) has no band."""
    rows = [
        _point("bf16", 1, "±36% error (extrapolated)"),
        _point("bf16", 8, "±25% error (extrapolated)"),
        _point("bf16", 64, "±25% error (extrapolated)"),
        _point("fp8_e4m3", 8, "±25% error (extrapolated)"),
        {"point": {"deployment.decode.kv_cache": "fp8_e4m3", "traffic.concurrency": 64}, "error": "no fit"},
    ]
    assert bands.sweep_lines(rows)[0] == (
        "throughput: ±36% error (extrapolated) at kv_cache=bf16, concurrency=1; ±25% error (extrapolated) at "
        "kv_cache=bf16, concurrency=8/64 and kv_cache=fp8_e4m3, concurrency=8"
    )
    assert bands.sweep_lines(rows[-1:]) == []


def test_a_sweep_prints_and_writes_each_points_band(tmp_path: Path, monkeypatch, capsys) -> None:
    """The JSON's `bands` are the margins of each point's own Result (`bands.headline_margins`), and the lines
    under the table are `sweep_lines` of them."""
    s = tmp_path / "s.yaml"
    s.write_text(SCENARIO)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "1000")
    code, out, err = invoke(monkeypatch, capsys, "sweep", str(s), "--json")
    assert code == 0, err
    points = json.loads(out)
    assert len(points) == 2
    for p in points:
        margins = p.pop("bands")
        assert margins == bands.headline_margins(p)
        assert all(m == "no error band" or m.startswith("±") for m in margins.values())
    code, out, err = invoke(monkeypatch, capsys, "sweep", str(s))
    assert code == 0, err
    lines = out.splitlines()
    head = lines.index("validated model error of each point's figures (docs/validation.md):")
    assert lines[head + 1 : head + 4] == [
        f"  {line}" for line in bands.sweep_lines(json.loads(_json(monkeypatch, capsys, s)))
    ]


def _json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], s: Path) -> str:
    code, out, err = invoke(monkeypatch, capsys, "sweep", str(s), "--json")
    assert code == 0, err
    return out
