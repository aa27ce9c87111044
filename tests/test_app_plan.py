"""The Plan view under AppTest: its answers are `phaseplan max-rate` / `phaseplan plan` of the line it prints."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from app.views.fmt import num

testing = pytest.importorskip("streamlit.testing.v1", reason="the `app` extra (Streamlit) is not installed")

ROOT = Path(__file__).resolve().parents[1]
STUDY = "glm-5.2-weight-formats"  # 32 requests a trial: a search answers in seconds


def cli(line: str) -> dict:
    argv = shlex.split(line)
    assert argv[0] == "phaseplan"
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "phaseplan"), *argv[1:], "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode in (0, 1), proc.stderr  # plan exits 1 when nothing meets the SLO
    return json.loads(proc.stdout)


def test_plan_view_answers_as_the_cli_does() -> None:
    at = testing.AppTest.from_file(str(ROOT / "app" / "streamlit_app.py"), default_timeout=600)
    at.query_params["study"] = STUDY
    at.query_params["view"] = "Plan"
    at.run()
    assert not at.exception
    max_rate_line, plan_line = (c.value for c in at.code)
    at.button(key="plan:max-rate").click().run()
    assert not at.exception and not at.error
    want = cli(max_rate_line)
    shown = {m.label: m.value for m in at.metric}
    assert shown[f"max rate ({want['rate_unit']})"] == num(want["max_rate_rps"])
    assert shown[f"cost per M {want['cost_basis']}"] == num(want["cost_per_mtok_usd"], "$/M tok")
    at.button(key="plan:plan").click().run()
    assert not at.exception and not at.error
    want = cli(plan_line)
    assert any(s.value == f"winner: {want['winner']['label']}" for s in at.success)
    assert {m.label: m.value for m in at.metric}["GPUs"] == num(want["winner"]["gpus"])
