"""Bad input of every kind: one line on stderr naming where, exit code 2, no traceback, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]
KIMI = str(ROOT / "scenarios" / "kimi-k2.6-decode.yaml")


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("name: x\nmodel: [unclosed\n", "YAML syntax error"),
        ("name: x\nmodel: kimi-k2.6\nbogus_key: 1\n", "line 3: bogus_key: unknown key"),
        (
            "name: x\nmodel: kimi-k2.6\nhardware: h200\ndeployment:\n  decode:\n    tp: two\n",
            "line 6: deployment.decode.tp: Input should be a valid integer",
        ),
        ("name: x\nmodel: kimi-k2.6\ndeployment:\n  decode:\n    instances: 0\n", "deployment.decode.instances"),
        ("name: x\nmodel: kimi-k2.6\ndeployment:\n  decode:\n    mem_fraction: -0.5\n", "mem_fraction"),
        ("name: x\nmodel: no-such-model\n", "line 2: model: unknown model preset 'no-such-model'"),
        ("name: x\nmodel: kimi-k2.6\nhardware: tpu9\n", "unknown hardware preset 'tpu9'"),
        ("- just\n- a list\n", "must be a YAML mapping"),
        ("name: x\nmodel: kimi-k2.6\ntraffic:\n  rate: 3\n", "needs duration_s or requests"),
        ("name: x\nmodel: kimi-k2.6\ndeployment:\n  mode: disaggregated\n", "needs a 'prefill' pool"),
        (
            "name: x\nmodel: llama-3.1-70b\ndeployment:\n  decode:\n    kv_layout: tiled\n",
            "line 5: deployment.decode.kv_layout: 'tiled' is an MLA cache layout",
        ),
    ],
)
def test_bad_file_one_line_exit_2(tmp_path: Path, monkeypatch, capsys, text: str, expect: str) -> None:
    code, out = run_cli(monkeypatch, capsys, "capacity", write(tmp_path, text))
    assert code == 2
    assert "Traceback" not in out
    assert len(out.strip().splitlines()) == 1, out
    assert expect in out


@pytest.mark.parametrize(
    ("override", "expect"),
    [
        ("deployment.decode.tp=-1", "--set deployment.decode.tp: Input should be greater than 0"),
        ("deployment.decode.kv_cache=fp3", "--set deployment.decode.kv_cache"),
        ("deployment.nosuch=1", "--set deployment.nosuch: unknown key"),
        ("model.layers=0", "--set model.layers"),
        ("noequals", "expected PATH=VALUE"),
        ("name.sub=1", "'name' is not a mapping"),
        ("deployment.decode.tp=3", "--set deployment.decode.tp: 3 does not divide the model's 64 attention heads"),
        ("deployment.decode.ep=3", "--set deployment.decode.ep: 3 must divide tp 8"),
    ],
)
def test_bad_set_one_line_exit_2(monkeypatch, capsys, override: str, expect: str) -> None:
    code, out = run_cli(monkeypatch, capsys, "capacity", KIMI, "--set", override)
    assert code == 2 and len(out.strip().splitlines()) == 1 and expect in out, out


def test_missing_file_and_unknown_option(monkeypatch, capsys) -> None:
    code, out = run_cli(monkeypatch, capsys, "capacity", "/nonexistent/x.yaml")
    assert code == 2 and "cannot read scenario file" in out and len(out.strip().splitlines()) == 1
    code, out = run_cli(monkeypatch, capsys, "capacity", KIMI, "--frobnicate")
    assert code == 2 and len(out.strip().splitlines()) == 1


def test_failed_run_writes_nothing(tmp_path: Path, monkeypatch, capsys) -> None:
    out_dir = tmp_path / "out"
    code, _ = run_cli(monkeypatch, capsys, "run", KIMI, "--out", str(out_dir), "--set", "traffic.rate=-1")
    assert code == 2 and not out_dir.exists()


def test_every_verb_has_help(monkeypatch, capsys) -> None:
    for verb in ("capacity", "run", "sweep", "profile", "bench-sim", "presets"):
        code, out = run_cli(monkeypatch, capsys, verb, "--help")
        assert code == 0 and "Usage" in out
