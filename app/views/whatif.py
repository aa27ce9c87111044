"""What-if: the study's traffic and serving knobs at its own values, a run (cached by scenario hash) with a
progress bar, and its numbers and charts with their units and provenance."""

from __future__ import annotations

from typing import Any

import streamlit as st
from pydantic import ValidationError

from app import knobs, runs, scenario_io
from app.runs import MAX_REQUESTS, Run, RunCache
from app.scenario_io import Study
from app.views import charts
from app.views.fmt import num, source_tag
from app.views.sidebar import knob
from simulator.errors import InputError
from simulator.results.report import provenance_line

LOAD_LABELS = {
    "traffic.concurrency": ("closed-loop clients", "clients"),
    "traffic.rate": ("arrival rate (new requests or conversations per s)", "req/s"),
    "traffic.trace_speedup": ("trace speed-up (× the recorded arrival rate)", "×"),
}


@st.cache_resource(show_spinner=False)
def run_cache() -> RunCache:
    """One cache for the server process: a scenario already run by anyone answers at once."""
    return RunCache()


def _length_knob(col: Any, study: Study, label: str, path: str, base: dict[str, Any]) -> dict[str, Any]:
    own = base[path]
    if own["dist"] not in knobs.LENGTH_DISTS:
        col.caption(f"{label}: {own['dist']} from {own.get('file')} (not editable here)")
        return own
    dist = col.selectbox(f"{label} distribution", knobs.LENGTH_DISTS, knobs.LENGTH_DISTS.index(own["dist"]),
                         key=knob(study, path + ".dist"))
    centre = int(own.get("value") or own.get("median") or (own["low"] + own["high"]) // 2)
    k = knob(study, path + ".")
    if dist == "fixed":
        out: dict[str, Any] = {"dist": "fixed", "value": col.number_input(
            f"{label} tokens", 1, 2_000_000, int(own.get("value", centre)), key=k + "value")}
    elif dist == "uniform":
        a, b = col.columns(2)
        out = {"dist": "uniform",
               "low": a.number_input(f"{label} low", 1, 2_000_000, int(own.get("low", centre // 2)), key=k + "low"),
               "high": b.number_input(f"{label} high", 1, 2_000_000, int(own.get("high", centre * 3 // 2)),
                                      key=k + "high")}
    else:
        a, b = col.columns(2)
        out = {"dist": "lognormal",
               "median": a.number_input(f"{label} median", 1.0, 2e6, float(own.get("median", centre)), 1.0,
                                        format="%.0f", key=k + "median"),
               "sigma": b.number_input(f"{label} sigma", 0.0, 3.0, float(own.get("sigma", 0.5)), 0.05,
                                       key=k + "sigma")}
    if "max" in own:
        out["max"] = own["max"]
    try:
        return knobs.length_value(out)
    except ValidationError as e:  # e.g. uniform low > high: the schema's own message
        col.error(f"{path}: {e.errors()[0]['msg'].removeprefix('Value error, ')}")
        return own


def traffic_knobs(study: Study, base: dict[str, Any]) -> dict[str, Any]:
    """Load, lengths, prefix sharing, routing, integrity and SLOs, starting at the study's values."""
    chosen: dict[str, Any] = {}
    sc = study.scenario
    load = knobs.load_path(sc)
    label, _ = LOAD_LABELS[load]
    c1, c2, c3 = st.columns(3)
    if load == "traffic.concurrency":
        chosen[load] = c1.number_input(label, 1, 4096, base[load], 1, key=knob(study, load))
    else:
        chosen[load] = c1.number_input(label, 0.01, 10_000.0, float(base[load]), 0.1, key=knob(study, load))
    if sc.traffic.trace is None:
        chosen["traffic.prompt_tokens"] = _length_knob(c2, study, "prompt", "traffic.prompt_tokens", base)
        chosen["traffic.output_tokens"] = _length_knob(c3, study, "output", "traffic.output_tokens", base)
    else:
        c2.caption(f"prompt and output lengths come from the trace {sc.traffic.trace}")
    c1, c2, c3, c4 = st.columns(4)
    if "traffic.shared_prefix_tokens" in base:
        chosen["traffic.shared_prefix_tokens"] = c1.number_input(
            "shared system prompt (tokens)", 0, 1_000_000, base["traffic.shared_prefix_tokens"], 64,
            key=knob(study, "traffic.shared_prefix_tokens"))
    chosen["prefix_cache.enabled"] = c1.checkbox("prefix cache", base["prefix_cache.enabled"],
                                                 key=knob(study, "prefix_cache.enabled"))
    chosen["routing.policy"] = c2.selectbox("routing", knobs.ROUTING, knobs.ROUTING.index(base["routing.policy"]),
                                            key=knob(study, "routing.policy"))
    chosen["integrity.enabled"] = c2.checkbox("page-integrity check", base["integrity.enabled"],
                                              key=knob(study, "integrity.enabled"))
    chosen["slo.ttft_ms"] = c3.number_input("SLO: TTFT (ms)", 1.0, 1e7, float(base["slo.ttft_ms"]), 100.0, "%.0f",
                                            key=knob(study, "slo.ttft_ms"))
    chosen["slo.tpot_ms"] = c4.number_input("SLO: TPOT (ms)", 0.1, 1e5, float(base["slo.tpot_ms"]), 1.0, "%.1f",
                                            key=knob(study, "slo.tpot_ms"))
    return chosen


def command(study: Study, sets: dict[str, Any]) -> str:
    """The CLI line that gives the same Result."""
    parts = [f"phaseplan run {study.label}"]
    parts += [f"--set '{k}={v}'" if isinstance(v, dict) else f"--set {k}={v}" for k, v in sets.items()]
    return " ".join(parts) + " --json"


def execute(study: Study, overrides: dict[str, Any], cap: int = MAX_REQUESTS) -> Run:
    """Run with a progress bar (or answer from the cache)."""
    bar = st.progress(0.0, text="simulating…")

    def tick(done: int, total: int) -> None:
        if done % 100 == 0:
            bar.progress(min(1.0, done / max(total, 1)), text=f"simulating… {done:,} requests finished")

    try:
        return runs.run(study, overrides, run_cache(), cap, tick)
    finally:
        bar.empty()


def render(study: Study, overrides: dict[str, Any]) -> Run | None:
    """The run for the current knobs: cached, or run now (at once for the study's own values), else None."""
    sets = runs.capped_sets(study, overrides)
    st.code(command(study, sets), language="bash")
    try:
        _, run = runs.lookup(study, overrides, run_cache())
    except InputError as e:
        st.error(str(e))
        return None
    pressed = st.button("Run simulation", type="primary", key="run")
    if run is None and (pressed or not overrides):
        try:
            run = execute(study, overrides)
        except InputError as e:
            st.error(str(e))
            return None
    if run is None:
        st.info("Knobs changed: press **Run simulation** for their numbers.")
        return None
    st.session_state["latest"] = run
    show(study, run)
    return run


def show(study: Study, run: Run) -> None:
    """A run's headline numbers, notices, charts and downloads."""
    r = run.result
    m = r["metrics"]
    st.info(provenance_line(r))
    if run.capped:
        st.warning(f"Interactive cap: this run stopped at {run.sets['traffic.requests']:,} requests, before the "
                   f"study's own end; `phaseplan run {run.study}` runs all of it.")
    tag = source_tag(r)
    cells = [
        ("output throughput", num(m["output_tokens_per_s"], "tok/s")),
        ("per GPU", num(m["output_tokens_per_s_per_gpu"], "tok/s")),
        ("TTFT p95", num(m["ttft_ms"]["p95"], "ms")),
        ("TPOT p95", num(m["tpot_ms"]["p95"], "ms")),
        ("SLO attainment", num(m["slo_attainment"], "%")),
        ("cost", num(m["cost_per_mtok_usd"], "$/M tok")),
        ("KV occupancy max", num(m["kv_occupancy"]["max"], "%")),
        ("max running (decode instance)", num(m["max_running"], "requests")),
    ]
    cols = st.columns(4)
    for i, (label, value) in enumerate(cells):
        cols[i % 4].metric(label, value, help=tag)
    st.caption(f"{m['completed']:,} of {m['requests']:,} requests completed ({m['rejected']:,} rejected, "
               f"{m['aborted']:,} aborted, {m['preempted']:,} preemptions) over {num(m['duration_s'], 's')} of "
               f"simulated time on {m['gpus']:,} GPUs · {tag}")
    a, b = st.columns(2)
    if run.ttft_ms.size:
        a.altair_chart(charts.histogram(run.ttft_ms, "TTFT (ms)"))
    if run.tpot_ms.size:
        b.altair_chart(charts.histogram(run.tpot_ms, "TPOT (ms per output token)"))
    a.altair_chart(charts.over_time(m["kv_occupancy"]["series"], "decode KV pages in use", percent=True))
    b.altair_chart(charts.over_time(run.waiting, "requests waiting for their first token"))
    st.markdown(f"**Where a step's time goes** ({tag})")
    cols = st.columns(2)
    i = 0
    for pool, entry in r["step_anatomy"].items():
        for kind, size in (("prefill_chunk", "tokens"), ("decode_step", "batch")):
            if pool != "summary" and kind in entry:
                step = entry[kind]
                cols[i % 2].caption(f"{pool} · {kind.replace('_', ' ')} ({size} {step[size]:,}): "
                                    f"{num(step['ms'], 'ms')}")
                cols[i % 2].altair_chart(charts.step_time(step["by_family"]))
                i += 1
    c1, c2, c3, c4 = st.columns(4)
    if c1.button("Pin for Compare", key="pin"):
        st.session_state["pinned"] = run
        st.toast("pinned: change knobs, run, and open Compare")
    c2.download_button("scenario (YAML)", scenario_io.scenario_yaml(study, run.overrides),
                       file_name="scenario.yaml", mime="application/x-yaml", key="dl-yaml")
    c3.download_button("result (JSON)", scenario_io.result_json(r), file_name="result.json",
                       mime="application/json", key="dl-json")
    c4.download_button("result (CSV)", scenario_io.results_csv([(run.overrides, r)]), file_name="result.csv",
                       mime="text/csv", key="dl-csv")
