"""`phaseplan init`: a commented scenario from a few answers that validates, runs, and does not overload."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cli_helpers import invoke

from simulator.config import loader


def _init(monkeypatch, capsys, tmp_path: Path, *args: str) -> tuple[int, Path, str]:
    out = tmp_path / "new.yaml"
    code, _, err = invoke(monkeypatch, capsys, "init", *args, "--out", str(out))
    return code, out, err


def test_default_init_runs_and_keeps_up(tmp_path: Path, monkeypatch, capsys) -> None:
    code, out, err = _init(monkeypatch, capsys, tmp_path, "--model", "kimi-k2.6", "--hardware", "h200")
    assert code == 0 and err.startswith("wrote "), err
    text = out.read_text()
    assert text.startswith("# Written by `phaseplan init --model kimi-k2.6 --hardware h200`")
    sc, _ = loader.load(out)
    assert sc.deployment.mode == "disaggregated" and sc.deployment.decode.tp == 8
    assert sc.deployment.decode.weights == "int4"  # the released checkpoint's format, the first that fits
    code, stdout, err = invoke(monkeypatch, capsys, "run", str(out), "--json")
    m = json.loads(stdout)["metrics"]
    assert code == 0 and err == "" and m["completed"] == m["requests"] > 0  # no warning: it keeps up


def test_init_sizes_the_pools_to_the_rate(tmp_path: Path, monkeypatch, capsys) -> None:
    args = ("--rate", "5", "--prompt-tokens", "8192", "--output-tokens", "1024", "--duration-s", "20")
    code, out, err = _init(monkeypatch, capsys, tmp_path, *args)
    assert code == 0, err
    sc, _ = loader.load(out)
    assert sc.deployment.prefill.instances > 1 and sc.deployment.decode.instances > 1
    comments = " ".join(line.strip().lstrip("#").strip() for line in out.read_text().splitlines())
    assert "keeping the offered load under 70% of each pool's analytic throughput bound" in comments
    code, _, err = invoke(monkeypatch, capsys, "run", str(out), "--json")
    assert code == 0 and "overloaded" not in err


def test_init_to_stdout_is_the_same_file(tmp_path: Path, monkeypatch, capsys) -> None:
    code, out, _ = _init(
        monkeypatch, capsys, tmp_path, "--concurrency", "8", "--slo", "ttft_p95_ms=1500,tpot_p95_ms=40"
    )
    assert code == 0
    code, stdout, _ = invoke(
        monkeypatch, capsys, "init", "--concurrency", "8", "--slo", "ttft_p95_ms=1500,tpot_p95_ms=40"
    )
    assert code == 0 and stdout == out.read_text()
    data = yaml.safe_load(stdout)
    assert data["traffic"]["concurrency"] == 8 and data["slo"] == {"ttft_p95_ms": 1500, "tpot_p95_ms": 40}


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (("--rate", "2", "--concurrency", "4"), "--rate and --concurrency: give one"),
        (("--model", "no-such"), "--model 'no-such': no such preset (known: "),
        (("--model", "../presets/models/kimi-k2.6"), "no such preset"),
        (("--model", "kimi-k2.6", "--hardware", "h100"), "no instance on one node holds its weights"),
        (("--rate", "100000"), "per run (lower --rate, --duration-s or --concurrency)"),
        (("--rate", "10000", "--duration-s", "1"), "--rate 10000: the prefill pool would need"),
        (("--slo", "attainment=0.9"), "--slo attainment"),
        (("--prompt-tokens", "0"), "--prompt-tokens"),
    ],
)
def test_bad_answers_are_one_line(tmp_path: Path, monkeypatch, capsys, args: tuple[str, ...], expect: str) -> None:
    code, out, err = _init(monkeypatch, capsys, tmp_path, *args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and expect in err, err
    assert not out.exists()


def test_init_does_not_overwrite_without_force(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "new.yaml").write_text("mine")
    code, out, err = _init(monkeypatch, capsys, tmp_path)
    assert code == 2 and "exists; pass --force" in err and out.read_text() == "mine"
    code, out, _ = _init(monkeypatch, capsys, tmp_path, "--force")
    assert code == 0 and out.read_text().startswith("# Written by")
