"""An engine named by its file (`engine: engines/NAME.yaml`, what `phaseplan calibrate` writes) runs exactly as the
same terms named by a preset; a bad file is one line naming it; the page offers the project's `engines/` and an
upload may name no engine file outside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cli_helpers import invoke

from app import knobs, scenario_io
from simulator.config import loader, presets
from simulator.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "scenarios/glm-5.2-weight-formats.yaml"  # 400 requests at 8 clients: seconds


def _copy(tmp_path: Path, name: str = "my-copy", **edit: object) -> Path:
    """The default engine's preset (a later release's: its terms merged from its base) saved under another name."""
    doc = {**presets.engine(loader.PRESET_DEFAULTS["engine"]), "name": name, **edit}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_an_engine_file_runs_as_its_terms_named_by_a_preset(tmp_path: Path, monkeypatch, capsys) -> None:
    code, by_name, err = invoke(monkeypatch, capsys, "run", str(STUDY), "--json")
    assert code == 0, err
    code, by_file, err = invoke(monkeypatch, capsys, "run", str(STUDY), "--set", f"engine={_copy(tmp_path)}", "--json")
    assert code == 0, err
    a, b = json.loads(by_name), json.loads(by_file)
    assert a["metrics"] == b["metrics"] and a["capacity"] == b["capacity"]
    assert (a["provenance"]["engine"], b["provenance"]["engine"]) == ("sglang-0.5.10", "my-copy")
    # a published preset's Result has no calibration key and no fitted line: its bytes are what they were
    assert "calibration" not in a["scenario"]["engine"] and "engine_fitted" not in a["provenance"]


def test_relative_names_resolve_from_the_working_directory(tmp_path: Path, monkeypatch) -> None:
    _copy(tmp_path)
    monkeypatch.chdir(tmp_path)
    sc, _ = loader.load(STUDY, ["engine=my-copy.yaml"])
    assert sc.engine.name == "my-copy"


@pytest.mark.parametrize(
    ("edit", "expect"),
    [
        ({"host_step_us": -3}, "engine.host_step_us: Input should be greater than or equal to 0"),
        ({"no_such_term": 1}, "no_such_term"),
    ],
)
def test_a_bad_engine_file_is_one_line_naming_it(tmp_path: Path, monkeypatch, capsys, edit, expect) -> None:
    path = _copy(tmp_path, **edit)
    code, out, err = invoke(monkeypatch, capsys, "run", str(STUDY), "--set", f"engine={path}")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and expect in err and str(path) in err and "Traceback" not in err


def test_a_missing_or_broken_engine_file(tmp_path: Path, monkeypatch, capsys) -> None:
    code, _, err = invoke(monkeypatch, capsys, "run", str(STUDY), "--set", "engine=nowhere.yaml")
    assert code == 2 and "engine file 'nowhere.yaml' not found" in err and err.count("\n") == 1
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [\n")
    code, _, err = invoke(monkeypatch, capsys, "run", str(STUDY), "--set", f"engine={broken}")
    assert code == 2 and f"engine file {broken} line" in err and err.count("\n") == 1
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n")
    code, _, err = invoke(monkeypatch, capsys, "run", str(STUDY), "--set", f"engine={listed}")
    assert code == 2 and "an engine must be a YAML mapping" in err


def test_the_page_offers_the_projects_fitted_engines() -> None:
    study = scenario_io.from_path(STUDY)
    options = knobs.preset_options(study.raw, "engine")
    n = len(presets.names("engines"))
    assert options[:n] == presets.names("engines")
    assert options[n:] == presets.fitted_files() and all(o.startswith("engines/") for o in options[n:])


def test_an_upload_names_no_engine_file_outside_the_project(tmp_path: Path) -> None:
    outside = _copy(tmp_path)
    text = STUDY.read_text() + f"\nengine: {outside}\n"
    with pytest.raises(InputError, match="only name engine files in the project's engines/ folder"):
        scenario_io.from_upload("x.yaml", text.encode())
    swept = STUDY.read_text().replace("sweep:", f"sweep:\n  engine: [{outside}]", 1)
    with pytest.raises(InputError, match=r"sweep\.engine: an uploaded scenario may only name engine files"):
        scenario_io.from_upload("x.yaml", swept.encode())
