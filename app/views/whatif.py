"""What-if: the study's traffic and serving knobs at its own values, a run (cached by scenario hash) with a
progress bar, and its numbers and charts with their units and provenance."""

from __future__ import annotations

from typing import Any

import numpy as np
import streamlit as st

from app import runs, scenario_io
from app.runs import MAX_REQUESTS, Run, RunCache
from app.scenario_io import Study
from app.views import charts, command
from app.views.fmt import cli_line, metric, num, source_tag
from simulator.errors import InputError
from simulator.results.cost import generating, per_mtok, result_gpu_hour_usd
from simulator.results.report import decode_gpus, provenance_line, step_name, window_lines
from simulator.validation import bands


def run_cache() -> RunCache:
    """One cache for the server process: a scenario already run by anyone (or by `app.serve` before the server
    listened) answers at once."""
    return runs.SERVER


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


def render(study: Study, overrides: dict[str, Any], opening: dict[str, Any]) -> None:
    """The run for the current knobs: from the cache, or run now (at once for the knobs as the study opens,
    `opening`). Until a moved knob's run lands, the last run stays on the page, marked stale."""
    sets = runs.capped_sets(study, overrides)
    command.show(study, cli_line("run", study.path, sets, "--json"), "run")
    try:
        _, run = runs.lookup(study, overrides, run_cache())
    except InputError as e:
        st.error(str(e))
        return
    pressed = st.button("Run simulation", type="primary", key="run")
    st.html(f"<style>[class*=st-key-{STALE}] {{opacity: 0.4; filter: grayscale(1)}}</style>")  # stale numbers greyed
    last: Run | None = st.session_state.get("latest")
    if last is not None and last.study != study.label:
        last = None
    if run is None and (pressed or overrides == opening):
        slot = st.empty()
        if last is not None:  # while the new run computes: the old numbers, greyed and labelled, not as current
            with slot.container():
                st.warning(f"**Running** ({_moved(overrides, last)})… the greyed numbers are the last run's: stale.")
                with st.container(key=STALE + "-running"):
                    _headline(last.result, None)
        try:
            run = execute(study, overrides)
        except InputError as e:
            st.error(str(e))
            return
        finally:
            slot.empty()
    if run is not None:
        st.session_state["latest"] = run
        show(study, run)
        return
    if last is None:
        st.info("Knobs changed: press **Run simulation** for their numbers.")
        return
    st.warning(
        f"**Stale:** these are the last run's numbers; knobs moved since ({_moved(overrides, last)}). Press **Run "
        "simulation** for theirs."
    )
    with st.container(key=STALE):
        show(study, last, stale=True)


STALE = "stale-run"  # a run shown after its knobs moved, or while theirs computes: drawn greyed


def _moved(overrides: dict[str, Any], last: Run) -> str:
    """The knobs moved since `last` ran, as PATH=VALUE."""
    moved = {k: v for k, v in overrides.items() if last.overrides.get(k) != v}
    moved |= {k: "as written" for k in last.overrides if k not in overrides}
    return ", ".join(f"{k}={v}" for k, v in moved.items())


def show(study: Study, run: Run, stale: bool = False) -> None:
    """A run's headline numbers, notices and downloads (a stale run's labelled as the last run's), and its charts
    on demand."""
    r = run.result
    m = r["metrics"]
    st.info(provenance_line(r))
    cap = st.empty()  # a slot whether or not the run was capped: the elements below keep their place, so an
    # expander the user opened stays open when the next run (another engine, say) is capped and this one was not
    if run.capped:
        cap.warning(
            f"Interactive cap: this run stopped at {run.sets['traffic.requests']:,} requests, before the "
            f"study's own end; `phaseplan run {run.study}` runs all of it."
        )
    tag = source_tag(r)
    what, tok_s = _headline(r, tag)
    with st.expander("how sure: the error bands in full (docs/validation.md)"):
        for line in bands.headline(r, what, tok_s):
            st.caption(line)
    for line in window_lines(m):  # the steady-state window the figures are read over, and the whole run's
        st.caption(line)
    if "kv_tiers" in m:
        _tiers(m["kv_tiers"], tag)
    if "cost_by_pool" in m:
        st.caption(
            "cost by pool: "
            + "; ".join(
                f"{name} {p['gpus']:,} × {p['hardware'].upper()} at ${p['gpu_hour_usd']:g}/GPU-hour "
                f"({num(p['share'], '%')} of the fleet's)"
                for name, p in m["cost_by_pool"].items()
            )
        )
    st.caption(
        f"{m['completed']:,} of {m['requests']:,} requests completed ({m['rejected']:,} rejected, "
        f"{m['aborted']:,} aborted, {m['preempted']:,} preemptions) over {num(m['duration_s'], 's')} of "
        f"simulated time on {m['gpus']:,} GPUs · {tag}"
    )
    c1, c2, c3, c4 = st.columns(4)
    if c1.button("Pin for Compare", key="pin"):
        st.session_state["pinned"] = run
        st.toast("pinned: change knobs, run, and open Compare")
    # A stale run's files are that run's, not the moved knobs': their names say so.
    whose = "last run's " if stale else ""
    c2.download_button(
        f"{whose}scenario (YAML)",
        scenario_io.scenario_yaml(study, run.overrides),
        file_name="last-run-scenario.yaml" if stale else "scenario.yaml",
        mime="application/x-yaml",
        key="dl-yaml",
    )
    c3.download_button(
        f"{whose}result (JSON)",
        scenario_io.result_json(r),
        file_name="last-run-result.json" if stale else "result.json",
        mime="application/json",
        key="dl-json",
    )
    c4.download_button(
        f"{whose}result (CSV)",
        scenario_io.results_csv([(run.overrides, r)]),
        file_name="last-run-result.csv" if stale else "result.csv",
        mime="text/csv",
        key="dl-csv",
    )
    # Charts cost the browser seconds to draw: each group only when asked for (a toggle, not an expander or
    # tabs, whose contents Streamlit sends and draws whether shown or not).
    if st.toggle("charts: TTFT and TPOT distributions, KV occupancy and queue over time", key="charts:series"):
        _series(run)
    if st.toggle(f"charts: where a step's time goes ({tag})", key="charts:anatomy"):
        _anatomy(r)


def _headline(r: dict[str, Any], tag: str | None) -> tuple[str, float]:
    """A run's headline numbers, its throughput and latencies each with its error band beside it; what its
    throughput is (output, or a prefill study's input) and its tokens/s."""
    m = r["metrics"]
    cost = per_mtok(m, result_gpu_hour_usd(r["scenario"]))
    if generating(m):
        what, tok_s, per_gpu = "output throughput", m["output_tokens_per_s"], m["output_tokens_per_s_per_gpu"]
    else:  # a prefill study: its requests answer one token, so what it serves is input
        what, tok_s, per_gpu = "input throughput", m["input_tokens_per_s"], m["input_tokens_per_s"] / m["gpus"]
    band = bands.headline_margins(r)  # each headline number's validated error band, beside it
    cells = [
        (what, num(tok_s, "tok/s"), band["output_tok_s"]),
        (f"per GPU of the fleet ({m['gpus']:,})", num(per_gpu, "tok/s"), per_decode_gpu(r, tok_s)),
        ("TTFT p95", num(m["ttft_ms"]["p95"], "ms"), band["ttft_ms"]),
        ("TPOT p95", num(m["tpot_ms"]["p95"], "ms"), band["tpot_ms"]),
        ("SLO attainment", num(m["slo_attainment"], "%"), None),
        (f"cost per M {cost['cost_basis']}", num(cost["cost_per_mtok_usd"], "$"), None),
        ("KV occupancy max", num(m["kv_occupancy"]["max"], "%"), None),
        ("max running (decode instance)", num(m["max_running"], "requests"), None),
    ]
    cols = st.columns(4)
    for i, (label, value, note) in enumerate(cells):
        metric(cols[i % 4], label, value, note, tag)
    return what, tok_s


def per_decode_gpu(result: dict[str, Any], tok_s: float) -> str | None:
    """`123 tok/s per decode GPU (16)` where the fleet has GPUs that do not decode (disaggregated); else None."""
    decode = decode_gpus(result["scenario"])
    if not decode or decode == result["metrics"]["gpus"]:
        return None
    return f"{num(tok_s / decode, 'tok/s')} per decode GPU ({decode:,})"


def _tiers(t: dict[str, Any], tag: str) -> None:
    """KV tiers below HBM: prefix hits by tier, what moved, and the load-back time inside TTFT."""
    cols = st.columns(4)
    i = 0
    for pool, p in t["pools"].items():
        hits = " / ".join(f"{tier} {num(rate, '%')}" for tier, rate in p["hit_rate"].items())
        cols[i % 4].metric(f"{pool} prefix hits by tier", hits, help=tag)
        loaded = " / ".join(f"{tier} {num(g, 'GiB')}" for tier, g in p["gib_loaded"].items())
        cols[(i + 1) % 4].metric(f"{pool} loaded back", loaded, help=tag)
        i += 2
    lb = t["load_back_ms"]
    cols[i % 4].metric("load-back p50 / p95 (in TTFT)", f"{num(lb['p50'], 'ms')} / {num(lb['p95'], 'ms')}", help=tag)
    cols[(i + 1) % 4].metric("load-back share of TTFT", num(t["load_back_share_of_ttft"], "%"), help=tag)
    st.caption(
        f"{t['requests_loading']:,} requests loaded part of their prefix back from below HBM; written down: "
        + "; ".join(
            f"{pool} " + ", ".join(f"{tier} {num(g, 'GiB')}" for tier, g in p["gib_written"].items())
            for pool, p in t["pools"].items()
        )
    )


def _series(run: Run) -> None:
    m, slo = run.result["metrics"], run.result["scenario"]["slo"]
    a, b = st.columns(2)
    for col, values, title, limit, key in (
        (a, run.ttft_ms, "TTFT (ms)", slo["ttft_p95_ms"], "ttft_ms"),
        (b, run.tpot_ms, "TPOT (ms per output token)", slo["tpot_p95_ms"], "tpot_ms"),
    ):
        if values.size:
            col.altair_chart(charts.histogram(values, title, limit))
            within = float(np.mean(values <= limit))
            col.caption(
                f"dashed line: the SLO, {title.split()[0]} p95 ≤ {limit:,g} ms; {num(within, '%')} of requests "
                f"within it, p95 {num(m[key]['p95'], 'ms')}"
            )
    a.altair_chart(charts.over_time(m["kv_occupancy"]["series"], "decode KV pages in use", percent=True))
    b.altair_chart(charts.over_time(run.waiting, "requests waiting for their first token"))


def _anatomy(r: dict[str, Any]) -> None:
    cols = st.columns(2)
    i = 0
    for pool, entry in r["step_anatomy"].items():
        for kind, size in (("prefill_chunk", "tokens"), ("decode_step", "batch")):
            if pool != "summary" and kind in entry:
                step = entry[kind]
                cols[i % 2].caption(f"{step_name(pool, kind)} ({size} {step[size]:,}): {num(step['ms'], 'ms')}")
                cols[i % 2].altair_chart(charts.step_time(step["by_family"]))
                i += 1
