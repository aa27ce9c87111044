"""The Plan view under AppTest: its answers are `phaseplan max-rate` / `phaseplan plan` of the line it prints."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from cli_helpers import answer

from app import scenario_io
from app.views.fmt import num

testing = pytest.importorskip("streamlit.testing.v1", reason="the `app` extra (Streamlit) is not installed")

ROOT = Path(__file__).resolve().parents[1]
STUDY = "glm-5.2-weight-formats"  # 400 requests at 8 clients: a search answers in about a minute


def commands(at: testing.AppTest) -> list[str]:
    """The command lines the page prints (each in its own <pre>), as text."""
    found = (re.fullmatch(r'<pre class="phaseplan-command"[^>]*>(.*)</pre>', h.value, re.S) for h in at.html)
    return [html.unescape(m[1]) for m in found if m]


def test_plan_view_answers_as_the_cli_does() -> None:
    at = testing.AppTest.from_file(str(ROOT / "app" / "streamlit_app.py"), default_timeout=600)
    at.query_params["study"] = STUDY
    at.query_params["view"] = "Plan"
    at.run()
    assert not at.exception
    max_rate_line, plan_line = commands(at)
    at.button(key="plan:max-rate").click().run()
    assert not at.exception and not at.error
    want = answer(max_rate_line)
    shown = {m.label: m.value for m in at.metric}
    assert shown[f"max rate ({want['rate_unit']})"] == num(want["max_rate_rps"])
    assert shown[f"cost per M {want['cost_basis']}"] == num(want["cost_per_mtok_usd"], "$")
    assert any(c.value.startswith("max rate ") and "model error ±" in c.value for c in at.caption)  # its band
    beside = {m.label: m.proto.delta for m in at.metric}  # its band beside the number, in its box
    assert re.match(r"±\d+% (model )?error", beside[f"max rate ({want['rate_unit']})"])
    at.button(key="plan:plan").click().run()
    assert not at.exception and not at.error
    want = answer(plan_line)
    # The winner named as an operator says it (the CLI's one-line layout), its overrides underneath
    assert any(s.value == f"winner: {want['winner']['layout']}" for s in at.success)
    assert any(want["winner"]["label"] in c.value for c in at.caption)
    assert {m.label: m.value for m in at.metric}["GPUs"] == num(want["winner"]["gpus"])
    assert any(c.value.startswith("the winner's T") for c in at.caption)  # the band of the limit it binds on
    beside = {m.label: m.proto.delta for m in at.metric}  # the band beside each headline number, in its box
    assert all(re.match(r"±\d+% (model )?error", beside[k]) for k in ("output throughput", "TTFT p95", "TPOT p95"))
    shown = [row for t in at.table for row in t.value.to_dict("records") if "runner-up" in row]
    assert [r["runner-up"] for r in shown] == [r["layout"] for r in want["runners_up"]]


def plan_line(at: testing.AppTest) -> str:
    return next(c for c in commands(at) if c.startswith("phaseplan plan "))


def test_plan_inputs_follow_the_study_and_an_upload() -> None:
    at = testing.AppTest.from_file(str(ROOT / "app" / "streamlit_app.py"), default_timeout=120)
    at.query_params["study"] = "b200-nvfp4"
    at.query_params["view"] = "Plan"
    at.run()
    b200 = scenario_io.from_path(scenario_io.SCENARIOS / "b200-nvfp4.yaml").key
    assert at.number_input(key=f"knob:{b200}:plan.rate").value == 30.0
    at.number_input(key=f"knob:{b200}:plan.rate").set_value(12.0).run()
    assert "--rate 12 " in plan_line(at)
    at.selectbox(key="study").set_value("fleet-disaggregated").run()
    line = plan_line(at)
    assert line.startswith("phaseplan plan scenarios/fleet-disaggregated.yaml --rate 1.5 ")
    assert "ttft_p95_ms=2000," in line and at.query_params["study"] == "fleet-disaggregated"
    assert len([n for n in at.number_input if "SLO" in n.label]) == 2  # one TTFT and one TPOT input, the sidebar's
    mine = (scenario_io.SCENARIOS / "b200-nvfp4.yaml").read_text().replace("rate: 30.0", "rate: 7.5")
    at.sidebar.file_uploader[0].set_value(("mine.yaml", mine.encode(), "text/yaml")).run()
    assert not at.exception
    line = plan_line(at)
    assert line.startswith("phaseplan plan scenarios/mine.yaml --rate 7.5 ") and "ttft_p95_ms=3000," in line
