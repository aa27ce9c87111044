"""Hostile input, round three (issue 37): a preset is a name, a file is a path the user gave.

`model:`, `hardware:`, `engine:` (without `.yaml`) and `speculative.draft_model:` took `/abs/path` or `../../x` and
read that file with no bound: its values came back in error lines (`got 'TOPSECRET-VALUE'`), a YAML error or a NUL
was a traceback, a 2 GiB file a MemoryError; through the app's upload any `*.yaml` on the server. An engine file
(the one preset field the schema gives a path) is read by the one reader and its values never shown; its
calibration is consistent. Each test failed before the fix.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from cli_helpers import invoke

from app import scenario_io
from simulator.config import presets
from simulator.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
FLEET = str(ROOT / "scenarios" / "fleet-disaggregated.yaml")
GLM = str(ROOT / "scenarios" / "glm-5.2-weight-formats.yaml")  # 400 requests at 8 clients: seconds
CANARY = "CANARY-7731"
SPEC = "deployment.decode.speculative={method: draft, acceptance: 1.5, draft_model: %s}"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """Files a preset name must never open: with a value to leak, broken YAML, NUL and non-UTF-8, 2 GiB, a FIFO."""
    out = {
        "secret": tmp_path / "secret.yaml",
        "broken": tmp_path / "broken.yaml",
        "nul": tmp_path / "nul.yaml",
        "huge": tmp_path / "huge.yaml",
        "fifo": tmp_path / "fifo.yaml",
    }
    out["secret"].write_text(f'name: m\nlayers: "{CANARY}"\nhbm_gib: "{CANARY}"\n')
    out["broken"].write_text("layers: [unclosed\n")
    out["nul"].write_bytes(b"name: \x00\xff\n")
    with out["huge"].open("wb") as f:
        f.truncate(2 << 30)  # sparse: 2 GiB that take no disk
    os.mkfifo(out["fifo"])
    return out


def _one_line(code: int, out: str, err: str) -> str:
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert CANARY not in err + out
    return err


@pytest.mark.parametrize("kind", ["secret", "broken", "nul", "huge", "fifo"])
@pytest.mark.parametrize(
    "field", ["model=%s", "hardware=%s", "engine=%s", SPEC, "model=../../../..%s", "hardware=%s/../secret"]
)
def test_a_path_where_a_preset_name_belongs_is_an_unknown_preset(
    monkeypatch, capsys, files, kind: str, field: str
) -> None:
    path = str(files[kind].with_suffix(""))  # without .yaml: the name of a preset
    err = _one_line(*invoke(monkeypatch, capsys, "run", FLEET, "--set", field % path))
    assert "unknown" in err and "preset" in err


def test_a_preset_name_reads_only_the_bundled_files(files) -> None:
    for read in (presets.model, presets.hardware, presets.engine):
        with pytest.raises(InputError, match="unknown .* preset"):
            read(str(files["secret"].with_suffix("")))
        with pytest.raises(InputError, match="unknown .* preset"):
            read("../models/kimi-k2.6")  # a bundled file by a path is still a path


def test_init_and_profile_take_preset_names_only(tmp_path, monkeypatch, capsys, files) -> None:
    path = str(files["secret"].with_suffix(""))
    _one_line(*invoke(monkeypatch, capsys, "init", "--model", path))
    _one_line(*invoke(monkeypatch, capsys, "init", "--hardware", path))
    out = tmp_path / "p.json"
    _one_line(*invoke(monkeypatch, capsys, "profile", "--device", "roofline", "--hardware", path, "--out", str(out)))
    assert not out.exists()


@pytest.mark.parametrize("key", ["model", "hardware", "engine"])
def test_an_upload_names_no_file_as_a_preset(tmp_path: Path, files, key: str) -> None:
    text = (ROOT / "scenarios" / "tiny-cpu.yaml").read_text()
    body = "\n".join(line for line in text.splitlines() if not line.startswith(f"{key}:"))
    upload = f"{key}: {files['secret'].with_suffix('')}\n{body}\n".encode()
    with pytest.raises(InputError) as e:
        scenario_io.from_upload("s.yaml", upload)
    assert CANARY not in str(e.value) and "unknown" in str(e.value)


def _engine_file(tmp_path: Path, **edit: object) -> Path:
    doc = yaml.safe_load((ROOT / "engines" / "sglang-cookbook-dsr1-b200.yaml").read_text())
    for dotted, value in edit.items():
        node = doc
        *keys, last = dotted.split("__")
        for k in keys:
            node = node[k]
        node[last] = value
    path = tmp_path / "engine.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(
    "edit",
    [
        {"host_step_us": CANARY},  # a value of the engine file is never shown
        {"calibration__error__throughput__median": 0.9},  # median over max (0.1548): "±90% …, worst 15%"
        {"calibration__terms__no_such_term": {"before": 1.0, "after": 1.0, "informed": True}},
        {"calibration__terms__host_step_us__after": 1.0},  # the fit's value is not the engine's
        {"sources__host_stepp_us": "a misspelt term"},
    ],
)
def test_an_engine_file_is_checked_for_consistency(tmp_path, monkeypatch, capsys, edit) -> None:
    path = _engine_file(tmp_path, **edit)
    err = _one_line(*invoke(monkeypatch, capsys, "run", GLM, "--set", f"engine={path}"))
    assert str(path) in err


def test_a_non_utf8_or_special_engine_file_is_one_line(tmp_path, monkeypatch, capsys, files) -> None:
    for kind in ("nul", "broken", "fifo", "huge"):
        engine = files[kind].with_name(f"{kind}-engine.yaml")
        files[kind].rename(engine)
        err = _one_line(*invoke(monkeypatch, capsys, "run", GLM, "--set", f"engine={engine}"))
        assert str(engine) in err


def test_a_line_break_in_an_engines_calibration_prints_no_line_of_its_own(tmp_path, monkeypatch, capsys) -> None:
    path = _engine_file(tmp_path, calibration__deployment="x\nerror: fake")
    code, out, err = invoke(monkeypatch, capsys, "run", GLM, "--set", f"engine={path}")
    assert code == 0, err
    assert "x\\nerror: fake" in out
    assert not any(line.lstrip().startswith("error:") for line in (out + err).splitlines()), out


@pytest.mark.parametrize("named", ["../pyproject.toml", "../.git/config", "../simulator/config/presets/models"])
def test_an_upload_names_files_only_in_the_projects_data_folders(named: str) -> None:
    """Inside the project folder was not enough: its sources, its .venv and its git objects are no data."""
    text = (ROOT / "scenarios" / "tiny-cpu.yaml").read_text().replace("../profiles/cpu-tiny.json", named)
    with pytest.raises(InputError, match="may only name files inside the project's profiles/, traces/, scenarios/"):
        scenario_io.from_upload("s.yaml", text.encode())


@pytest.mark.parametrize(
    "edit",
    [
        "model: {path}",
        "model: tiny-mla-moe\nsweep: {{model: [kimi-k2.6, {path}]}}",
        "model: tiny-mla-moe\ndeployment: {{decode: {{speculative: {{method: draft, acceptance: 1.5, draft_model: "
        "{path}}}}}}}",
    ],
)
def test_an_upload_reads_no_model_config_outside_the_project(tmp_path: Path, edit: str) -> None:
    """A model may be a config.json by path (the schema says so); an upload may not name one outside the project."""
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "' + CANARY + '"}')
    keys = ("model:", "sweep:", "deployment:")
    text = (ROOT / "scenarios" / "tiny-cpu.yaml").read_text()
    body = "\n".join(line for line in text.splitlines() if not line.startswith(keys) and not line.startswith("  "))
    with pytest.raises(InputError, match="may only name model configs in the project's") as e:
        scenario_io.from_upload("s.yaml", f"{body}\n{edit.format(path=config)}\n".encode())
    assert CANARY not in str(e.value)
