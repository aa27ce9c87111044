"""The planner page's logic without Streamlit: knobs are `--set` overrides, runs are the CLI's, uploads fail in
one line, the capacity view's memory adds up, and deltas compare like with like."""

from __future__ import annotations

import csv
import json

import pytest
import yaml

from app import compare, gpu_memory, knobs, pricing, runs, scenario_io
from simulator.capacity import capacity_report
from simulator.config import loader, presets
from simulator.engine.run import simulate
from simulator.errors import InputError
from simulator.results.compare import deltas

SC = scenario_io.SCENARIOS


def study(name: str) -> scenario_io.Study:
    return scenario_io.from_path(SC / f"{name}.yaml")


def cli_result(name: str, sets: dict[str, object]) -> dict:
    """What `phaseplan run scenarios/NAME.yaml --set ...` computes, through the CLI's own loader."""
    path = SC / f"{name}.yaml"
    sc, _ = loader.load(path, [f"{k}={v}" for k, v in sets.items()])
    return simulate(sc, path.parent)[0]


def test_every_study_starts_from_its_own_values() -> None:
    for path in scenario_io.bundled():
        s = scenario_io.from_path(path)
        base = knobs.study_values(s.scenario, s.raw)
        assert knobs.overrides(base, dict(base)) == {}
        t = s.scenario.traffic
        if t.trace is None:  # the study's real length distributions, not a stand-in
            assert knobs.length_value(base["traffic.prompt_tokens"]) == knobs.length_value(t.prompt_tokens)
        else:
            assert "traffic.prompt_tokens" not in base and base["traffic.trace_speedup"] == t.trace_speedup
    prefill = knobs.study_values(study("glm-5.2-prefill").scenario, study("glm-5.2-prefill").raw)
    assert prefill["traffic.prompt_tokens"] == {"dist": "fixed", "value": 8192}
    assert prefill["traffic.output_tokens"] == {"dist": "fixed", "value": 1}


def test_moved_knobs_are_exactly_the_cli_overrides() -> None:
    s = study("fleet-disaggregated")
    base = knobs.study_values(s.scenario, s.raw)
    chosen = {
        **base,
        "deployment.decode.kv_cache": "bf16",
        "traffic.rate": 0.5,
        "traffic.prompt_tokens": {"dist": "lognormal", "median": 2500.0, "sigma": 0.8, "max": 32768},
    }
    over = knobs.overrides(base, chosen)
    assert over == {"deployment.decode.kv_cache": "bf16", "traffic.rate": 0.5}
    sc = runs.scenario_for(s, over)
    assert sc.deployment.decode.kv_cache == "bf16" and sc.traffic.rate == 0.5
    assert sc.deployment.prefill == s.scenario.deployment.prefill


def test_cap_only_where_a_study_could_run_past_it() -> None:
    assert runs.capped_sets(study("mooncake-conversation"), {}) == {"traffic.requests": runs.MAX_REQUESTS}
    assert runs.capped_sets(study("integrity-overhead"), {}) == {}  # 400 requests of its own


def test_a_run_is_the_cli_run_and_says_when_the_cap_cut_it() -> None:
    s = study("integrity-overhead")
    cache = runs.RunCache()
    r = runs.run(s, {"traffic.concurrency": 2}, cache)
    assert r.result == cli_result("integrity-overhead", {"traffic.concurrency": 2})
    assert not r.capped
    assert runs.run(s, {"traffic.concurrency": 2}, cache) is r  # same scenario hash: answered from the cache
    assert runs.lookup(s, {"traffic.concurrency": 3}, cache)[1] is None
    m = r.result["metrics"]
    assert r.ttft_ms.size == m["completed"]
    assert round(float(sorted(r.ttft_ms)[len(r.ttft_ms) // 2]), 1) > 0
    capped = runs.run(study("fleet-disaggregated"), {"traffic.rate": 12.0}, cap=400)
    assert capped.capped and capped.result["metrics"]["requests"] == 400
    whole = runs.run(study("fleet-disaggregated"), {"traffic.rate": 0.2}, cap=400)
    assert not whole.capped and whole.result["metrics"]["requests"] < 400  # its 300 s ended first


def test_waiting_series_counts_requests_before_their_first_token() -> None:
    r = runs.run(study("integrity-overhead"), {})
    t, n = r.waiting[:, 0], r.waiting[:, 1]
    assert t[0] == 0 and t[-1] == pytest.approx(r.result["metrics"]["kv_occupancy"]["series"][-1][0], abs=1e-3)
    assert n.max() <= r.result["scenario"]["traffic"]["concurrency"] and n.min() >= 0


def test_capacity_view_memory_adds_up_and_matches_the_cli() -> None:
    s = study("kimi-k2.6-decode")
    sc = s.scenario
    pool = sc.deployment.decode
    g = gpu_memory.gpu_memory(sc.model, sc.hardware, pool, "decode")
    rep = capacity_report(sc)["pools"]["decode"]
    assert g.kv_tokens == rep["kv_tokens"] == 1_353_134 and g.pages == rep["pages"]
    assert sum(g.segments().values()) == pytest.approx(sc.hardware.hbm_gib)
    assert g.headroom_gib == pytest.approx(sc.hardware.hbm_gib * (1 - pool.mem_fraction))
    assert g.concurrency(16384 + 1024) == g.pages // -(-(16384 + 1024) // 64)
    by = {(v.weights, v.kv_cache): v for v in gpu_memory.variants(sc.model, sc.hardware, pool)}
    assert by["int4", "bf16"].kv_tokens == 676_567  # the README's figure; FP8 holds twice the tokens
    assert by["int4", "fp8_e4m3"].kv_tokens == 1_353_134
    assert by["int4", "bf16"].weights_gib < by["fp8", "bf16"].weights_gib


def test_a_deployment_that_does_not_fit_says_why() -> None:
    s = study("kimi-k2.6-decode")
    sc = runs.scenario_for(s, {"hardware": "h100", "deployment.decode.weights": "bf16"})
    g = gpu_memory.gpu_memory(sc.model, sc.hardware, sc.deployment.decode, "decode")
    assert not g.fits and g.reason.startswith("does not fit: weights") and g.kv_gib == 0 and g.concurrency(100) == 0


def test_deltas_and_curve_points() -> None:
    a = cli_result("integrity-overhead", {"traffic.concurrency": 1})
    b = cli_result("integrity-overhead", {"traffic.concurrency": 1, "integrity.enabled": False})
    rows = {d.label: d for d in deltas(a, b)}
    out = rows["output throughput"]
    assert out.change == pytest.approx(out.b - out.a)
    assert out.a == a["metrics"]["output_tokens_per_s"] and out.b == b["metrics"]["output_tokens_per_s"]
    assert rows["GPUs"].better is None  # the same fleet
    assert compare.same_traffic(a, b)
    c = cli_result("integrity-overhead", {"traffic.concurrency": 2})
    assert not compare.same_traffic(a, c)
    pts = compare.curve_points("deployment.decode.kv_cache", ["bf16", "fp8_e4m3"], "traffic.concurrency", [1, 8])
    assert pts[1] == {"deployment.decode.kv_cache": "bf16", "traffic.concurrency": 8} and len(pts) == 4
    with pytest.raises(InputError, match="one to three"):
        compare.curve_points("integrity.enabled", [], "traffic.concurrency", [1])


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        (b"name: x\nmodel: [unclosed\n", r"^upload bad\.yaml: line 3: YAML syntax error"),
        (
            b"name: x\nmodel: kimi-k2.6\nextra_field: 1\n",
            r"^upload bad\.yaml: line 3: extra_field: unknown key \(valid keys at",
        ),
        (b"- a list\n", r"^upload bad\.yaml: a scenario must be a YAML mapping"),
        (b"\xff\xfe", r"^upload bad\.yaml: not UTF-8 text"),
        (b"#" * (scenario_io.MAX_UPLOAD_BYTES + 1), r"^upload bad\.yaml: 256 KiB is over the 256 KiB"),
        (
            b"name: x\nmodel: kimi-k2.6\ntraffic: {trace: /etc/hosts}\n",
            r"^upload bad\.yaml: traffic\.trace: an uploaded scenario may only name files inside the project.s",
        ),
        (b"name: x\nmodel: !!python/object/apply:os.system [echo hi]\n", r"^upload bad\.yaml: .*line 2"),
        (b"a: &a [1, 1]\nb: &b [*a, *a]\nc: [*b, *b]\n", r"^upload bad\.yaml: line 1: YAML anchors and aliases"),
        (b"x: " + b"[" * 40 + b"]" * 40 + b"\n", r"^upload bad\.yaml: line 1: nested deeper than 32 levels"),
    ],
)
def test_bad_upload_is_one_line(content: bytes, expect: str) -> None:
    with pytest.raises(InputError, match=expect) as e:
        scenario_io.from_upload("bad.yaml", content)
    assert "\n" not in str(e.value)


def test_good_upload_reads_like_a_bundled_study() -> None:
    path = SC / "mooncake-conversation.yaml"
    up = scenario_io.from_upload("../../evil name.yaml", path.read_bytes())
    assert up.label == "upload evil_name.yaml" and up.scenario == study("mooncake-conversation").scenario


def test_downloads_reproduce_the_run() -> None:
    s = study("glm-5.2-prefill")
    over = {"deployment.prefill.weights": "int4"}
    text = scenario_io.scenario_yaml(s, over)
    assert text.startswith(
        "# from scenarios/glm-5.2-prefill.yaml, edited in the phaseplan app; changed: deployment.prefill.weights=int4\n"
    )
    again = loader.validate(yaml.safe_load(text), "download")
    assert again == runs.scenario_for(s, over).model_copy(update={"sweep": again.sweep})
    r = runs.run(s, over)
    assert json.loads(scenario_io.result_json(r.result)) == cli_result("glm-5.2-prefill", over)
    head, row = csv.reader(scenario_io.results_csv([(over, r.result)]).splitlines())
    assert head[0] == "deployment.prefill.weights" and row[0] == "int4"  # the sweep CSV, the knobs first
    assert row[head.index("in tok/s")] == str(r.result["metrics"]["input_tokens_per_s"])


def test_the_app_verb_serves_headless_without_usage_statistics() -> None:
    from phaseplan.app import PAGE, command

    cmd = command(8600)
    assert cmd[cmd.index("run") + 1] == str(PAGE) and PAGE.is_file()
    flags = dict(zip(cmd[cmd.index("run") + 2 :: 2], cmd[cmd.index("run") + 3 :: 2], strict=True))
    assert flags["--server.headless"] == "true" and flags["--browser.gatherUsageStats"] == "false"
    assert flags["--server.address"] == "localhost" and flags["--server.port"] == "8600"
    assert flags["--client.toolbarMode"] == "minimal"  # no Deploy button in a planner


def test_the_command_the_page_prints_loads_the_same_scenario() -> None:
    import shlex

    from app.views.fmt import cli_line

    s = study("fleet-disaggregated")
    over = {
        "traffic.prompt_tokens": {"dist": "uniform", "low": 100, "high": 900},
        "deployment.decode.tp": 4,
        "integrity.enabled": False,
    }
    sets = runs.capped_sets(s, over)
    argv = shlex.split(cli_line("run", s.label, sets, "--json"))
    assert argv[:3] == ["phaseplan", "run", "scenarios/fleet-disaggregated.yaml"]
    given = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    assert loader.load(scenario_io.ROOT / argv[2], given)[0] == runs.scenario_for(s, sets)


def test_moved_knobs_round_trip_through_the_url_and_hostile_items_are_refused() -> None:
    s = study("fleet-disaggregated")
    start = knobs.start_values(s.scenario, s.raw)
    options = knobs.select_options(s.scenario, s.raw, start, [c.value for c in pricing.choices(s)])
    moved = {
        **start,
        "deployment.decode.kv_cache": "bf16" if start["deployment.decode.kv_cache"] != "bf16" else "fp8_e4m3",
        "deployment.prefill.instances": start["deployment.prefill.instances"] + 1,
        # as the sidebar's length knob gives it: the study's own max kept
        "traffic.prompt_tokens": {
            "dist": "uniform",
            "low": 100,
            "high": 900,
            "max": start["traffic.prompt_tokens"]["max"],
        },
        "slo.tpot_p95_ms": 42.5,
        "integrity.enabled": not start["integrity.enabled"],
    }
    items = knobs.url_items(start, moved)
    assert len(items) == 5
    assert knobs.from_url(items, start, options) == ({k: v for k, v in moved.items() if v != start[k]}, [])
    values, errors = knobs.from_url(
        [
            "deployment.decode.tp=3",  # no TP choice
            "deployment.decode.instances=0",
            "prefix_cache.enabled=1",  # a number is not a switch
            "slo.ttft_p95_ms=.inf",
            "traffic.prompt_tokens={dist: empirical, file: /etc/passwd}",
            "no.such.knob=1",
            "x" * 500,
        ],
        start,
        options,
    )
    assert values == {} and len(errors) == 7
    assert knobs.from_url(["a=1"] * 65, start, options)[0] == {}


def test_the_engine_is_a_knob_like_the_profile() -> None:
    """The study's own engine is no override; another is `--set engine=NAME`, in the run, the command and the URL."""
    from app.views.fmt import cli_line

    s = study("kimi-k2.6-kv-formats")
    base = knobs.study_values(s.scenario, s.raw)
    assert base["engine"] == s.scenario.engine.name == "sglang-0.5.10"  # the study names none: the default
    options = knobs.select_options(s.scenario, s.raw, base, [c.value for c in pricing.choices(s)])
    assert options["engine"] == [*presets.names("engines"), *presets.fitted_files()]
    assert options["engine"][:4] == [
        "sglang-0.5",
        "sglang-0.5.10",
        "vllm-0.x",
        "engines/sglang-cookbook-dsr1-b200.yaml",
    ]
    over = knobs.overrides(base, {**base, "engine": "vllm-0.x"})
    assert over == {"engine": "vllm-0.x"}
    assert runs.scenario_for(s, over).engine.name == "vllm-0.x"
    assert "--set engine=vllm-0.x" in cli_line("run", s.label, runs.capped_sets(s, over), "--json")
    items = knobs.url_items(base, {**base, "engine": "vllm-0.x"})
    assert items == ["engine=vllm-0.x"] and knobs.from_url(items, base, options) == ({"engine": "vllm-0.x"}, [])
    assert knobs.from_url(["engine=trt-llm"], base, options)[1]  # no such preset: refused, in one line


def test_parallel_speculation_and_price_knobs_are_cli_overrides_and_round_trip_the_url() -> None:
    """DP attention, nodes, two-batch overlap, MTP speculation and the GPU price: each a `--set` the run takes,
    carried by the URL; a speculation the knob cannot show is refused with its reason."""
    s = study("deepseek-v3-wide-ep")
    start = knobs.start_values(s.scenario, s.raw)
    assert start["deployment.decode.speculative"]["method"] == "mtp" and start["deployment.decode.dp"] > 1
    options = knobs.select_options(s.scenario, s.raw, start, [c.value for c in pricing.choices(s)])
    moved = {
        **start,
        "deployment.decode.speculative": knobs.mtp(2, 2.4),
        "deployment.decode.two_batch_overlap": not start["deployment.decode.two_batch_overlap"],
        "cost.gpu_hour_usd": 2.25,
    }
    over = knobs.overrides(knobs.study_values(s.scenario, s.raw), moved)
    sc = runs.scenario_for(s, over)
    spec = sc.deployment.decode.speculative
    assert (spec.method, spec.draft_tokens, spec.acceptance) == ("mtp", 2, 2.4) and sc.cost.gpu_hour_usd == 2.25
    assert sc.deployment.decode.two_batch_overlap == moved["deployment.decode.two_batch_overlap"]
    items = knobs.url_items(start, moved)
    assert knobs.from_url(items, start, options) == ({k: v for k, v in moved.items() if v != start[k]}, [])
    off = knobs.overrides(knobs.study_values(s.scenario, s.raw), {**start, "deployment.decode.speculative": None})
    assert runs.scenario_for(s, off).deployment.decode.speculative is None
    _, errors = knobs.from_url(
        [
            'deployment.decode.speculative={"method": "draft", "draft_tokens": 1, "acceptance": 1.5}',
            'deployment.decode.speculative={"method": "mtp", "draft_tokens": 9, "acceptance": 1.5}',
            'deployment.decode.speculative={"method": "mtp", "draft_tokens": 1, "acceptance": 5}',
            "deployment.decode.dp=3",
            "deployment.decode.nodes=0",
            "cost.gpu_hour_usd=-1",
        ],
        start,
        options,
    )
    assert len(errors) == 6, errors
    tp8 = study("kimi-k2.6-kv-formats")
    with pytest.raises(InputError, match="dp"):  # a DP the pool cannot split into: one line naming the field
        runs.scenario_for(tp8, {"deployment.decode.dp": 16})


def test_the_charts_draw_the_slo_and_mark_what_does_not_fit() -> None:
    """The TTFT/TPOT histograms carry the SLO as a dashed, labelled line inside their axis; a configuration that
    does not fit is named so under its memory bar and drawn faded."""
    import numpy as np

    from app.views import charts

    spec = charts.histogram(np.array([10.0, 20.0, 400.0]), "TTFT (ms)", 2000.0).to_dict()
    bars, slo = spec["layer"]
    assert bars["encoding"]["x"]["scale"]["domain"][1] >= 2000.0  # the line is inside the axis, not cut off
    rule, text = slo["layer"]
    assert rule["mark"]["type"] == "rule" and rule["mark"]["strokeDash"] and text["mark"]["type"] == "text"
    data = spec["datasets"][slo["data"]["name"]]
    assert data == [{"limit": 2000.0, "label": "SLO 2,000 ms"}]
    s = study("kimi-k2.6-decode")
    sc = runs.scenario_for(s, {"hardware": "h100", "deployment.decode.weights": "bf16"})
    own = s.scenario
    ok = gpu_memory.gpu_memory(own.model, own.hardware, own.deployment.decode, "a")
    no = gpu_memory.gpu_memory(sc.model, sc.hardware, sc.deployment.decode, "b")
    spec = charts.memory_bars([ok, no]).to_dict()
    rows = next(iter(spec["datasets"].values()))
    assert {r["GPU"] for r in rows} == {"a", f"b {charts.NO_FIT}"}
    assert {r["fits"] for r in rows if r["GPU"] == "a"} == {"fits"} and spec["encoding"]["opacity"]["condition"]
