"""The what-if planner's logic (no UI): overrides are the CLI's, runs are capped, bad knobs are one line."""

from __future__ import annotations

import pytest

from app.planner import MAX_REQUESTS, SCENARIOS, WhatIf, headline, load, run, studies
from simulator.errors import InputError


def test_every_bundled_study_loads_for_the_page() -> None:
    names = {p.stem for p in studies()}
    assert {"fleet-disaggregated", "kimi-k2.6-kv-formats", "mooncake-conversation"} <= names
    for p in studies():
        sc = load(p)
        assert sc.traffic.requests is not None and sc.traffic.requests <= MAX_REQUESTS


def test_what_if_changes_only_what_it_names() -> None:
    path = SCENARIOS / "fleet-disaggregated.yaml"
    base = load(path)
    sc = load(path, WhatIf(rate=0.5, decode_instances=3, kv_cache="bf16", integrity=False, concurrency=9))
    assert sc.traffic.rate == 0.5 and sc.traffic.concurrency is None  # open-loop study: no clients to set
    assert sc.deployment.decode.instances == 3 and sc.deployment.decode.kv_cache == "bf16"
    assert not sc.integrity.enabled
    assert sc.deployment.prefill == base.deployment.prefill and sc.model == base.model


def test_run_gives_headline_numbers() -> None:
    path = SCENARIOS / "integrity-overhead.yaml"
    sc, capacity, result = run(path, WhatIf(concurrency=2))
    h = headline(result)
    assert sc.traffic.concurrency == 2
    assert h["output tok/s"] > 0 and h["max running"] >= 1
    assert capacity["pools"]["decode"]["fits"]


def test_bad_knob_is_an_input_error() -> None:
    with pytest.raises(InputError, match="deployment.decode.mem_fraction"):
        load(SCENARIOS / "fleet-disaggregated.yaml", WhatIf(mem_fraction=1.5))


def test_page_renders_and_simulates() -> None:
    """The Streamlit page itself, driven headless (skipped where the `app` extra is not installed)."""
    testing = pytest.importorskip("streamlit.testing.v1")
    at = testing.AppTest.from_file(str(SCENARIOS.parent / "app" / "streamlit_app.py"), default_timeout=120)
    at.run()
    assert not at.exception
    at.selectbox[0].set_value(SCENARIOS / "integrity-overhead.yaml").run()
    at.button[0].click().run()
    assert not at.exception
    assert any("MODELED" in i.value for i in at.info)
    metrics = {m.label: m.value for m in at.metric}
    assert set(metrics) == {"output tok/s", "tok/s per GPU", "TTFT p95 ms", "TPOT p95 ms", "max running", "preempted",
                            "SLO", "$ per M tok"}
    assert float(metrics["output tok/s"].replace(",", "")) > 0
