"""Hostile input, round three (issue 37): text that leaves the program is escaped for where it goes.

A scenario named `"q\\ntouch pwned #"` put `touch pwned` on a line of its own in the launch scripts `plan --out`
writes (and the app offers as downloads); a hardware name did the same through `commands.sh`; the plan's YAML then
failed to load, and the calibrated engine file's header took keys from a `--scenario` path holding a newline. Here
every bundle is generated from hostile names (line breaks, `$()`, backticks, quotes, NUL, escapes) and each script
runs under stub engines that only log their arguments: nothing but the engines runs, and the YAML loads again with
the same names. Each test failed before the fix.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from simulator.config import loader, presets
from simulator.console import printable
from simulator.deploy.bundle import files

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = [
    "q\ntouch MARK_NEWLINE #",
    "$(touch MARK_DOLLAR)",
    "`touch MARK_TICK`",
    "x'; touch MARK_QUOTE; echo '",
    'y"; touch MARK_DQUOTE; echo "',
    "nul\x00 and \x1b[2J esc \\ back\rcr\u2028ls",
    "${IFS}$(touch MARK_BRACE)${HOME:=$(touch MARK_ASSIGN)}",
]
LAYOUTS = {  # every shape of launch script: disaggregated with a router, colocated, DP over nodes with MTP, FP4
    "fleet-disaggregated.yaml": [],
    "kimi-k2.6-decode.yaml": ["deployment.decode.instances=2"],
    "deepseek-v3-wide-ep.yaml": [],
    "b200-nvfp4.yaml": [],
}
ENGINES = ("python", "python3", "vllm", "sglang", "phaseplan")


def _stubs(folder: Path) -> Path:
    """Stub engines on a PATH of their own: each logs its name and exits 0."""
    bin_dir = folder / "stub"
    bin_dir.mkdir()
    for name in ENGINES:
        stub = bin_dir / name
        stub.write_text(f'#!/bin/sh\necho {name} >> "$STUB_LOG"\nexit 0\n')
        stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def _hostile_study(name: str, layout: str, sets: list[str]) -> tuple[dict, object]:
    """The layout's study with `name` as the scenario's, the GPU's and the model's name (inline presets)."""
    data, _ = loader.read_yaml(ROOT / "scenarios" / layout)
    data = loader.apply_overrides(data, dict(loader.parse_set(s) for s in sets))
    hardware = presets.hardware(data.get("hardware", "h200")) if isinstance(data.get("hardware", "h200"), str) else {}
    model = presets.model(data["model"])
    model = {**model, "name": name, "checkpoint": name}  # the checkpoint: a default MODEL_PATH in the scripts
    data = {**data, "name": name, "hardware": {**hardware, "name": name}, "model": model}
    return data, loader.validate(data, layout)


def _run_scripts(folder: Path, tmp_path: Path) -> list[str]:
    """Run every script of the bundle in an empty folder under the stubs; what they ran, by name."""
    bin_dir, work, log = _stubs(tmp_path), tmp_path / "work", tmp_path / "log"
    work.mkdir()
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "STUB_LOG": str(log),
        "MODEL_PATH": "/models/m",
        "DRAFT_MODEL_PATH": "/models/d",
        "HOME": str(work),
    }
    for script in sorted(folder.glob("*.sh")):
        for args in [["sglang"], ["vllm"]] if script.name == "bench.sh" else [[]]:  # bench.sh takes its engine
            run = ["bash", str(script), *args]
            subprocess.run(run, cwd=work, env=env, capture_output=True, timeout=30, check=False)
    assert sorted(os.listdir(work)) == [], f"a script made files: {os.listdir(work)}"
    marks = [str(p) for p in tmp_path.rglob("MARK*")]  # a script may cd to its own folder first (bench.sh)
    assert not marks, f"a script ran an injected command: {marks}"
    return log.read_text().split() if log.exists() else []


def _bundle(folder: Path, name: str, layout: str) -> None:
    data, sc = _hostile_study(name, layout, LAYOUTS[layout])
    folder.mkdir()
    asked = ["phaseplan", "plan", str(ROOT / "scenarios" / layout), "--set", f"name={name}"]
    header = [f"plan's winner for {name}"]
    for path, text in files(folder, "h", data, sc, ROOT / "scenarios", asked, header, "{}").items():
        path.write_text(text)


@pytest.mark.parametrize("name", HOSTILE)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_bundle_of_a_hostile_name_runs_only_the_engines(tmp_path: Path, name: str, layout: str) -> None:
    folder, plain = tmp_path / "answer", tmp_path / "plain"
    _bundle(folder, name, layout)
    _bundle(plain, "plain", layout)
    written = sorted(p.name for p in plain.iterdir())
    assert sorted(p.name for p in folder.iterdir()) == written
    for f in written:  # every comment stays one line (a quoted word may span lines: the runs below prove it inert)
        comments = [line for line in (folder / f).read_text().splitlines() if line.startswith("#")]
        plains = [line for line in (plain / f).read_text().splitlines() if line.startswith("#")]
        assert len(comments) == len(plains), f
        for hostile, benign in zip(comments, plains, strict=True):  # the name, escaped, inside its comment line
            assert "plain" not in benign.lower() or printable(name).lower() in hostile.lower(), (f, hostile)
    for manifest in folder.glob("k8s-*.yaml"):  # the manifests load, every document a mapping
        assert all(isinstance(d, dict) for d in yaml.safe_load_all(manifest.read_text()))
    ran = _run_scripts(folder, tmp_path)
    assert set(ran) <= set(ENGINES) and {"python", "vllm", "phaseplan"} <= set(ran), ran
    again = loader.load(folder / "h.yaml")[0]  # the written scenario loads, the names as they were
    assert (again.name, again.hardware.name, again.model.name) == (name, name, name)
    assert yaml.safe_load((folder / "h.yaml").read_text())["name"] == name


def test_plan_out_of_a_hostile_name_runs_nothing(tmp_path, monkeypatch, capsys) -> None:
    """The acceptance case end to end: `plan --out` of a scenario whose name breaks out of a comment."""
    from cli_helpers import invoke

    study = tmp_path / "evil.yaml"
    text = (ROOT / "scenarios" / "kimi-k2.6-kv-formats.yaml").read_text()
    study.write_text(text.replace("name: kimi-k2.6-kv-formats", 'name: "h\\ntouch MARK_A #\\n$(touch MARK_B)`x`"'))
    out = tmp_path / "plan"
    args = ("--rate", "0.5", "--search", "deployment.decode.instances=1", "--set", "traffic.requests=8")
    code, _, err = invoke(monkeypatch, capsys, "plan", str(study), *args, "--jobs", "1", "--out", str(out))
    assert code == 0, err
    _run_scripts(out, tmp_path)
    code, _, err = invoke(monkeypatch, capsys, "capacity", str(out / "evil-plan.yaml"))
    assert code == 0, err


def test_a_scenario_path_with_a_newline_writes_no_key_into_an_engine_file(tmp_path: Path) -> None:
    """`calibrate --scenario` named by a path holding a newline: the engine file's header stays one comment."""
    from phaseplan.calibrate import render

    doc = {"name": "e", "calibration": {"runs": 2, "deployment": "a\nhost_step_us: 99\n#"}}
    text = render(doc)
    assert text.splitlines()[0].startswith("# ") and yaml.safe_load(text) == doc


def test_the_apps_download_keeps_its_comment_to_one_line() -> None:
    from app import scenario_io

    study = scenario_io.from_path(ROOT / "scenarios" / "tiny-cpu.yaml")
    text = scenario_io.scenario_yaml(study, {"name": "x\nseed: 5\n#"})
    assert text.splitlines()[0].startswith("# ") and "seed: 5" not in text.splitlines()
    assert loader.parse_text(text, "download")[0]["seed"] == study.raw["seed"]  # no key given twice


def test_init_writes_a_hostile_name_through_the_emitter(tmp_path, monkeypatch, capsys) -> None:
    from cli_helpers import invoke

    name = 'n"\n😀\u2028\x00'
    out = tmp_path / "s.yaml"
    code, _, err = invoke(monkeypatch, capsys, "init", "--name", name, "--out", str(out))
    assert code == 0, err
    assert loader.load(out)[0].name == name
