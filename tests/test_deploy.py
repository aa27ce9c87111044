"""A deployable answer: `plan --out` / `max-rate --out` write a scenario that `phaseplan run` reproduces exactly,
the commands that asked, and launch commands; the layout reads as one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import invoke

from simulator.config import loader
from simulator.deploy.bundle import absolute_files
from simulator.deploy.layout import one_line

ROOT = Path(__file__).resolve().parents[1]
KIMI = ROOT / "scenarios" / "kimi-k2.6-kv-formats.yaml"
FIGURES = ("ttft_ms", "tpot_ms", "e2e_ms", "output_tokens_per_s", "input_tokens_per_s", "gpus", "completed")


def test_one_line_layouts() -> None:
    sc, _ = loader.load(ROOT / "scenarios" / "fleet-disaggregated.yaml", ["deployment.prefill.kv_cache=bf16"])
    assert one_line(sc) == "2 × TP8 prefill (INT4, BF16 KV) + 2 × TP8 decode (INT4, FP8 KV) = 32 H200"
    sc, _ = loader.load(ROOT / "scenarios" / "kimi-k2.6-decode.yaml", ["deployment.decode.instances=3"])
    assert one_line(sc) == "3 × TP8 colocated (INT4, FP8 KV) = 24 H200"
    sc, _ = loader.load(ROOT / "scenarios" / "deepseek-v3-wide-ep.yaml")
    assert one_line(sc).endswith("× TP32 DP32 EP32 over 4 nodes decode (FP8, FP8 KV, MTP 1 draft token) = 64 H200")


def _run_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], path: Path) -> dict:
    code, out, err = invoke(monkeypatch, capsys, "run", str(path), "--json")
    assert code == 0, err
    return json.loads(out)


def test_plan_out_writes_a_scenario_that_reproduces_the_winner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "answer"
    args = ("--rate", "0.5", "--search", "deployment.decode.instances=1,2", "--runners-up", "0")
    code, out, err = invoke(
        monkeypatch,
        capsys,
        "plan",
        str(KIMI),
        *args,
        "--set",
        "traffic.requests=24",
        "--jobs",
        "1",
        "--json",
        "--out",
        str(folder),
    )
    assert code == 0, err
    plan = json.loads(out)
    w = plan["winner"]
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted(
        [
            "kimi-k2.6-kv-formats-plan.yaml",
            "commands.sh",
            "launch-sglang.sh",
            "launch-sglang-router.sh",
            "launch-vllm.sh",
            "bench.sh",
            "answer.json",
        ]
    )
    assert json.loads((folder / "answer.json").read_text()) == plan
    monkeypatch.chdir(tmp_path)  # the scenario runs from anywhere
    run = _run_json(monkeypatch, capsys, folder / "kimi-k2.6-kv-formats-plan.yaml")
    for key in FIGURES:
        assert json.dumps(run["metrics"][key], sort_keys=True) == json.dumps(w["metrics"][key], sort_keys=True), key
    text = (folder / "kimi-k2.6-kv-formats-plan.yaml").read_text()
    assert text.startswith(f"# {w['layout']}\n") and "sweep" not in text
    commands = (folder / "commands.sh").read_text()
    assert f"phaseplan plan {KIMI}" in commands and "--search deployment.decode.instances=1,2" in commands
    assert "--set traffic.requests=24" in commands and "phaseplan run kimi-k2.6-kv-formats-plan.yaml" in commands
    sglang = (folder / "launch-sglang.sh").read_text()
    assert sglang.count("python -m sglang.launch_server") == w["gpus"] // 8
    assert "--disaggregation-mode prefill" in sglang and "--disaggregation-mode decode" in sglang
    assert "--pd-disaggregation" in (folder / "launch-sglang-router.sh").read_text()
    assert "vllm serve" in (folder / "launch-vllm.sh").read_text()


def test_max_rate_out_writes_the_scenario_at_its_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = invoke(
        monkeypatch,
        capsys,
        "max-rate",
        str(KIMI),
        "--slo",
        "ttft_p95_ms=3000,tpot_p95_ms=25",
        "--start",
        "1",
        "--set",
        "traffic.requests=32",
        "--jobs",
        "1",
        "--json",
        "--out",
        str(tmp_path),
    )
    assert code == 0, err
    res = json.loads(out)
    path = tmp_path / "kimi-k2.6-kv-formats-max-rate.yaml"
    sc, _ = loader.load(path)
    assert sc.traffic.rate == res["max_rate_rps"] and sc.slo.tpot_p95_ms == 25
    run = _run_json(monkeypatch, capsys, path)
    for key in FIGURES:
        assert run["metrics"][key] == res["metrics"][key], key


def test_an_unwritable_out_is_refused_before_any_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, out, err = invoke(monkeypatch, capsys, "plan", str(KIMI), "--rate", "1", "--out", str(blocker / "sub"))
    assert code == 2 and out == "" and err.count("\n") == 1 and "--out" in err


def test_files_a_scenario_names_are_made_absolute(tmp_path: Path) -> None:
    path = ROOT / "scenarios" / "tiny-cpu.yaml"
    _, raw = loader.load(path)
    out = absolute_files(raw, path.parent)
    assert Path(out["profile"]).is_absolute() and Path(out["profile"]).is_file()
    assert raw["profile"] != out["profile"]  # the study itself is left as it was
