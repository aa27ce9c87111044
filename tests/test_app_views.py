"""The page itself, driven headless by Streamlit's AppTest: every view shows numbers the simulator computes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app import runs, scenario_io
from app.views.fmt import num
from simulator.capacity import capacity_report
from simulator.config import loader
from simulator.engine.run import simulate

testing = pytest.importorskip("streamlit.testing.v1", reason="the `app` extra (Streamlit) is not installed")

ROOT = Path(__file__).resolve().parents[1]
PAGE = str(ROOT / "app" / "streamlit_app.py")


def page(study: str, view: str | None = None) -> testing.AppTest:
    at = testing.AppTest.from_file(PAGE, default_timeout=180)
    at.query_params["study"] = study
    if view is not None:
        at.query_params["view"] = view
    at.run()
    assert not at.exception, at.exception
    return at


def open_view(at: testing.AppTest, view: str) -> None:
    """What clicking a tab does: only the open view runs."""
    at.session_state["view"] = view
    at.run()
    assert not at.exception, at.exception


def key(study: str, path: str) -> str:
    return f"knob:{scenario_io.from_path(scenario_io.SCENARIOS / f'{study}.yaml').key}:{path}"


def metrics(at: testing.AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def cli(name: str, *sets: str) -> dict:
    path = scenario_io.SCENARIOS / f"{name}.yaml"
    return simulate(loader.load(path, sets)[0], path.parent)[0]


def test_default_run_of_a_capped_study_is_phaseplan_run_under_the_same_cap() -> None:
    at = page("mooncake-conversation", "What-if")
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "phaseplan"),
            "run",
            "scenarios/mooncake-conversation.yaml",
            "--json",
            "--set",
            f"traffic.requests={runs.MAX_REQUESTS}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    latest = at.session_state["latest"]
    assert scenario_io.result_json(latest.result) == proc.stdout  # the JSON download, byte for byte
    m = json.loads(proc.stdout)["metrics"]
    shown = metrics(at)
    assert shown["output throughput"] == num(m["output_tokens_per_s"], "tok/s")
    assert shown["TTFT p95"] == num(m["ttft_ms"]["p95"], "ms")
    assert shown["cost per M output tokens"] == num(m["cost_per_mtok_usd"], "$")
    assert any(f"stopped at {runs.MAX_REQUESTS:,} requests" in w.value for w in at.warning)
    assert any("MODELED" in i.value for i in at.info)
    assert all("modeled" in m.help for m in at.metric if m.label == "output throughput")


def test_knobs_start_at_the_study_and_reset_when_it_changes() -> None:
    at = page("kimi-k2.6-kv-formats", "What-if")
    kv = key("kimi-k2.6-kv-formats", "deployment.decode.kv_cache")
    assert at.selectbox(key=kv).value == "bf16"
    at.selectbox(key=kv).set_value("fp8_e4m3").run()
    (stale,) = [w.value for w in at.warning if w.value.startswith("**Stale:**")]  # the BF16 run stays, marked
    assert "deployment.decode.kv_cache=fp8_e4m3" in stale and "Press **Run simulation**" in stale
    bf16 = cli("kimi-k2.6-kv-formats", "traffic.concurrency=64")["metrics"]  # opened at its focus, 64 clients
    assert metrics(at)["output throughput"] == num(bf16["output_tokens_per_s"], "tok/s")
    at.selectbox(key="study").set_value("glm-5.2-prefill").run()
    glm = "glm-5.2-prefill"
    assert at.number_input(key=key(glm, "traffic.prompt_tokens.value")).value == 8192
    assert at.number_input(key=key(glm, "traffic.output_tokens.value")).value == 1
    m = cli(glm)["metrics"]  # a prefill study: one output token a request, so its throughput is input
    assert metrics(at)["input throughput"] == num(m["input_tokens_per_s"], "tok/s")
    assert "cost per M input+output tokens" in metrics(at)
    at.selectbox(key="study").set_value("kimi-k2.6-kv-formats").run()
    assert at.selectbox(key=kv).value == "bf16"  # back at the study's own value, not the one left behind


def test_capacity_view_shows_the_memory_accounting() -> None:
    at = page("kimi-k2.6-decode")
    rep = capacity_report(scenario_io.from_path(scenario_io.SCENARIOS / "kimi-k2.6-decode.yaml").scenario)
    shown = metrics(at)
    assert shown["KV tokens per instance"] == num(rep["pools"]["decode"]["kv_tokens"]) == "1,353,134"
    assert shown["weights per GPU"] == num(rep["pools"]["decode"]["weights_gib_per_gpu"], "GiB")
    table = at.table[0].value
    tokens = {
        (w, kv): t for w, kv, t in zip(table["weights"], table["KV cache"], table["KV tokens/instance"], strict=True)
    }
    assert tokens["int4", "bf16"] == "676,567" and tokens["int4", "fp8_e4m3"] == "1,353,134"
    at.selectbox(key=key("kimi-k2.6-decode", "hardware")).set_value("h100").run()
    at.selectbox(key=key("kimi-k2.6-decode", "deployment.decode.weights")).set_value("bf16").run()
    assert any("does not fit: weights" in e.value for e in at.error)
    assert not at.exception


def test_compare_bf16_and_fp8_side_by_side() -> None:
    name = "kimi-k2.6-kv-formats"
    at = page(name, "What-if")
    at.button(key="pin").click().run()
    at.selectbox(key=key(name, "deployment.decode.kv_cache")).set_value("fp8_e4m3").run()
    at.button(key="run").click().run()
    assert not at.exception
    open_view(at, "Compare & curves")
    at64 = "traffic.concurrency=64"  # the study's focus: where only FP8 holds every client
    bf16, fp8 = cli(name, at64)["metrics"], cli(name, at64, "deployment.decode.kv_cache=fp8_e4m3")["metrics"]
    table = at.table[-1].value
    row = table[table["figure"] == "output throughput"].iloc[0]
    assert row["A"] == num(bf16["output_tokens_per_s"], "tok/s")
    assert row["B"] == num(fp8["output_tokens_per_s"], "tok/s")
    occ = table[table["figure"] == "KV occupancy max"].iloc[0]
    assert occ["A"] == num(bf16["kv_occupancy"]["max"], "%") and occ["B"] == num(fp8["kv_occupancy"]["max"], "%")
    assert not at.warning  # the same traffic on both sides


def test_curves_run_every_point_in_the_background() -> None:
    name = "integrity-overhead"
    at = page(name, "Compare & curves")
    at.selectbox(key="curve:vary").set_value("integrity.enabled").run()
    at.text_input(key=f"curve:xs:{scenario_io.from_path(scenario_io.SCENARIOS / f'{name}.yaml').key}").set_value(
        "1, 2"
    ).run()
    assert any("4 of 4 points not run yet" in i.value for i in at.info)
    at.button(key="curves").click().run()
    job = at.session_state["curve-job"]
    job.wait(300)  # the points run in a background thread; the page polls it
    assert (job.done, job.total, job.error) == (4, 4, None)
    at.run()
    assert not at.exception and not any("not run yet" in i.value for i in at.info)
    assert any("modeled" in c.value for c in at.caption)


def test_bad_upload_shows_its_line_and_the_next_good_one_works() -> None:
    at = page("integrity-overhead", "What-if")
    before = metrics(at)["output throughput"]
    at.sidebar.file_uploader[0].set_value(
        ("broken.yaml", b"name: x\nmodel: kimi-k2.6\nextra_field: 1\n", "text/yaml")
    ).run()
    (err,) = [e.value for e in at.sidebar.error]
    assert err.startswith("upload broken.yaml: line 3: extra_field: unknown key (valid keys at the top level: name, ")
    assert metrics(at)["output throughput"] == before and not at.exception  # still the bundled study
    good = (scenario_io.SCENARIOS / "kimi-k2.6-decode.yaml").read_bytes()
    at.sidebar.file_uploader[0].set_value(("mine.yaml", good, "text/yaml")).run()
    assert not at.sidebar.error and any("using upload mine.yaml" in s.value for s in at.sidebar.success)
    assert metrics(at)["output throughput"] == num(cli("kimi-k2.6-decode")["metrics"]["output_tokens_per_s"], "tok/s")
    open_view(at, "Capacity")
    assert metrics(at)["KV tokens per instance"] == "1,353,134"


def test_the_engine_choice_reaches_the_run_the_command_and_the_band() -> None:
    name = "kimi-k2.6-kv-formats"
    at = page(name, "What-if")
    engine = at.selectbox(key=key(name, "engine"))
    assert engine.value == "sglang-0.5.10" and engine.options == [
        "sglang-0.5",
        "sglang-0.5.10",
        "vllm-0.x",
        "engines/sglang-cookbook-dsr1-b200.yaml",
    ]
    assert not any("--set engine=" in h.proto.body for h in at.get("html"))  # the study's own: no override
    engine.set_value("vllm-0.x").run()
    assert any("--set engine=vllm-0.x" in h.proto.body for h in at.get("html"))
    at.button(key="run").click().run()
    assert not at.exception
    latest = at.session_state["latest"]
    assert latest.overrides["engine"] == "vllm-0.x" and latest.result["provenance"]["engine"] == "vllm-0.x"
    m = cli(name, "traffic.concurrency=64", "engine=vllm-0.x")["metrics"]
    assert metrics(at)["output throughput"] == num(m["output_tokens_per_s"], "tok/s")
    band = next(c.value for c in at.caption if c.value.startswith("output throughput"))
    assert "model error ±" in band and "on vllm-0.x" in band
    assert any(c.value.startswith("TPOT p95") and "on vllm-0.x" in c.value for c in at.caption)


def test_the_parallel_speculation_and_price_knobs_reach_the_command() -> None:
    name = "deepseek-v3-wide-ep"  # DP attention, wide EP over 4 nodes, MTP
    at = page(name, "What-if")
    labels = {w.label for kind in ("selectbox", "number_input", "checkbox") for w in at.sidebar.get(kind)}
    assert {
        "DP attention ranks",
        "nodes per instance",
        "two-batch overlap (hides the MoE all-to-alls; needs DP attention and EP)",
        "speculative decoding (decode pool)",
        "GPU price ($ per GPU-hour)",
    } <= labels
    assert at.selectbox(key=key(name, "deployment.decode.speculative")).value == "MTP"

    def command() -> str:
        return next(h.proto.body for h in at.get("html") if "phaseplan run " in h.proto.body)

    at.number_input(key=key(name, "cost.gpu_hour_usd")).set_value(2.0).run()
    at.selectbox(key=key(name, "deployment.decode.speculative")).set_value("off").run()
    assert not at.exception
    line = command()
    assert "--set cost.gpu_hour_usd=2.0" in line and "--set deployment.decode.speculative=null" in line
    at.button(key="run").click().run()
    assert not at.exception and not at.error
    latest = at.session_state["latest"].result
    assert latest["scenario"]["deployment"]["decode"].get("speculative") is None
    assert latest["scenario"]["cost"]["gpu_hour_usd"] == 2.0 and "speculative" not in latest["step_anatomy"]["decode"]

    kimi = page("kimi-k2.6-kv-formats", "What-if")  # a model without MTP layers: one line says so
    kimi.selectbox(key=key("kimi-k2.6-kv-formats", "deployment.decode.speculative")).set_value("MTP").run()
    assert [e.value for e in kimi.error] == [
        "--set deployment.decode.speculative.method: 'mtp' needs a model with MTP layers (kimi-k2.6 has none; use "
        "method draft)"
    ]
