"""Compare: a pinned run beside the latest with deltas; curves of up to three configurations over load."""

from __future__ import annotations

from typing import Any

import streamlit as st

from app import compare, knobs, runs, scenario_io
from app.runs import MAX_REQUESTS, Run
from app.scenario_io import Study
from app.views import charts
from app.views.fmt import num, signed, source_tag
from app.views.whatif import run_cache
from simulator.config.scenario import SLO
from simulator.errors import InputError
from simulator.planning import pricings
from simulator.results.compare import deltas, reversals

CURVE_MAX_REQUESTS = 1000  # per point: a chart of several points still answers in seconds
VARY: dict[str, list[Any]] = {
    "deployment.decode.kv_cache": knobs.KV_FORMATS,
    "deployment.decode.weights": knobs.WEIGHT_FORMATS,
    "integrity.enabled": [True, False],
    "prefix_cache.enabled": [True, False],
    "routing.policy": knobs.ROUTING,
}


def describe(run: Run) -> str:
    changed = ", ".join(f"{k}={v}" for k, v in run.overrides.items())
    return f"{run.study} ({changed or 'as written'})"


def render(study: Study, overrides: dict[str, Any]) -> None:
    st.subheader("Pinned vs latest")
    pinned, latest = st.session_state.get("pinned"), st.session_state.get("latest")
    if pinned is None:
        st.info("Run a configuration in What-if and press **Pin for Compare**; then change knobs and run another.")
    elif latest is None or latest.key == pinned.key:
        st.info(f"Pinned A = {describe(pinned)}. Change a knob in What-if and run it to compare.")
    else:
        _side_by_side(pinned, latest)
        _other_pricing(study, pinned, latest)
    st.subheader("Curves")
    _curves(study, overrides)


def _side_by_side(a: Run, b: Run) -> None:
    st.markdown(f"**A (pinned):** {describe(a)}  \n**B (latest):** {describe(b)}")
    if not compare.same_traffic(a.result, b.result):
        st.warning("A and B did not serve the same traffic (traffic knobs or seed differ): deltas mix both effects.")
    rows = deltas(a.result, b.result)
    st.table(
        [
            {
                "figure": d.label,
                "A": num(d.a, d.unit),
                "B": num(d.b, d.unit),
                "B − A": signed(d.change, d.unit),
                "change": "–" if d.ratio is None else f"{d.ratio:+.1%}".replace("-", "−"),
                "": "" if d.better is None else ("better" if d.better else "worse"),
            }
            for d in rows
        ],
        hide_index=True,
    )
    st.caption(f"A: {source_tag(a.result)} · B: {source_tag(b.result)}")


def _pricing(study: Study, run: Run) -> tuple[str, str]:
    """What priced a run: its profile and its engine preset."""
    return run.overrides.get("profile", study.scenario.profile), run.overrides.get("engine", study.scenario.engine.name)


def _other_pricing(study: Study, a: Run, b: Run) -> None:
    """A and B priced by every other profile of the hardware and on every other engine, in the background; a
    notice where that reverses a headline figure of the comparison above, with both."""
    own = _pricing(study, a)
    if a.study != study.label or _pricing(study, b) != own:
        return  # A and B priced differently already, or from another study: no like-for-like re-pricing
    others = pricings.alternatives(study.scenario.hardware.name, *own, study.base_dir)
    pairs = [[{**r.overrides, **alt.override} for r in (a, b)] for alt in others]
    found = [[runs.lookup(study, o, run_cache())[1] for o in pair] for pair in pairs]
    todo = [o for pair, got in zip(pairs, found, strict=True) for o, r in zip(pair, got, strict=True) if r is None]
    job: runs.Batch | None = st.session_state.get("pricing-job")
    if todo and not (job and job.running):
        job = st.session_state["pricing-job"] = runs.Batch(study, todo, run_cache(), MAX_REQUESTS)
    if job is not None and job.running:
        _pricing_progress(job)
        return
    mine = deltas(a.result, b.result)
    for alt, (a2, b2) in zip(others, found, strict=True):
        if a2 is None or b2 is None:
            continue
        flips = reversals(mine, deltas(a2.result, b2.result))
        if flips:
            st.warning(
                f"**The pricing decides this comparison.** Priced by {alt.label} instead of {alt.instead_of}, B is "
                "the other way round on " + ", ".join(d.label for d, _ in flips) + ". Both:"
            )
            st.table(
                [
                    {
                        "figure": d.label,
                        "this pricing: A": num(d.a, d.unit),
                        "B": num(d.b, d.unit),
                        "": "better" if d.better else "worse",
                        f"{alt.column}: A": num(o.a, o.unit),
                        "B ": num(o.b, o.unit),
                        " ": "better" if o.better else "worse",
                    }
                    for d, o in flips
                ],
                hide_index=True,
            )


@st.fragment(run_every=1.0)
def _pricing_progress(job: runs.Batch) -> None:
    if job.running:
        text = "pricing A and B by the other profiles and engines (in the background)…"
        st.progress(job.done / job.total, text=text)
    else:
        st.rerun()


def _parse_xs(text: str, integer: bool) -> list[Any]:
    try:
        xs = [int(v) if integer else float(v) for v in text.replace(",", " ").split()]
    except ValueError:
        raise InputError(f"curves: load values must be {'whole' if integer else ''} numbers, got {text!r}") from None
    if not xs or any(x <= 0 for x in xs) or len(xs) > 8:
        raise InputError(f"curves: give 1 to 8 positive load values, got {text!r}")
    return xs


def _default_xs(study: Study, load: str, own: float) -> str:
    """The study's own sweep of the load, else around its load."""
    swept = study.scenario.sweep.get(load)
    if swept:
        return ", ".join(f"{x:g}" for x in swept[:8])
    if load == "traffic.concurrency":
        return ", ".join(str(x) for x in sorted({1, 8, 32, 64, int(own)}))
    return ", ".join(f"{own * f:g}" for f in (0.5, 1, 2))


def _curves(study: Study, overrides: dict[str, Any]) -> None:
    load = knobs.load_path(study.scenario)
    x_title = knobs.LOAD_LABELS[load][0]
    own = overrides.get(load, getattr(study.scenario.traffic, load.split(".")[1]))
    c1, c2, c3 = st.columns(3)
    swept = [p for p in VARY if p in study.scenario.sweep]  # the study's own comparison first
    vary = c1.selectbox("configurations differ in", swept + [p for p in VARY if p not in swept], key="curve:vary")
    options = VARY[vary]
    default = [v for v in study.scenario.sweep.get(vary, []) if v in options][:3] or options[:2]
    values = c2.multiselect(
        "configurations (up to 3)", options, default=default, max_selections=3, key=f"curve:values:{vary}"
    )
    text = c3.text_input(f"{x_title}: values", _default_xs(study, load, own), key=f"curve:xs:{study.key}")
    st.caption(
        f"Each point is the What-if configuration with the two fields set, capped at {CURVE_MAX_REQUESTS:,} requests."
    )
    try:
        xs = _parse_xs(text, load == "traffic.concurrency")
        points = compare.curve_points(vary, values, load, xs)
        found = [runs.lookup(study, {**overrides, **p}, run_cache(), CURVE_MAX_REQUESTS)[1] for p in points]
    except InputError as e:
        st.error(str(e))
        return
    job: runs.Batch | None = st.session_state.get("curve-job")
    todo = [{**overrides, **p} for p, r in zip(points, found, strict=True) if r is None]
    if st.button("Run curves", key="curves") and todo and not (job and job.running):
        job = st.session_state["curve-job"] = runs.Batch(study, todo, run_cache(), CURVE_MAX_REQUESTS)
    if job is not None and job.running:
        _progress(job)
        return
    if job is not None and job.error:
        st.error(job.error)
    done = [r for r in found if r is not None]
    if len(done) < len(points):
        st.info(f"{len(points) - len(done)} of {len(points)} points not run yet: press **Run curves**.")
        return
    _draw_curves(points, done, vary, load, runs.scenario_for(study, overrides).slo)


@st.fragment(run_every=1.0)
def _progress(job: runs.Batch) -> None:
    """While the batch runs in the background: its progress, polled each second; the whole page when done."""
    if job.running:
        st.progress(
            job.done / job.total,
            text=f"curves: {job.done} of {job.total} points simulated (in the background: the page stays usable)",
        )
    else:
        st.rerun()


def _draw_curves(points: list[dict[str, Any]], done: list[Run], vary: str, load: str, slo: SLO) -> None:
    x_title, unit = knobs.LOAD_LABELS[load]
    rows = [
        {
            "configuration": f"{vary.split('.')[-1]}={p[vary]}",
            "x": p[load],
            "output tok/s": r.result["metrics"]["output_tokens_per_s"],
            "TPOT p95 ms": r.result["metrics"]["tpot_ms"]["p95"],
            "TTFT p95 ms": r.result["metrics"]["ttft_ms"]["p95"],
        }
        for p, r in zip(points, done, strict=True)
    ]
    x_axis = f"{x_title} ({unit})"
    a, b, c = st.columns(3)
    a.altair_chart(charts.curves(rows, x_axis, "output tok/s", "output throughput (tok/s)"))
    b.altair_chart(charts.curves(rows, x_axis, "TPOT p95 ms", "TPOT p95 (ms)", slo.tpot_p95_ms))
    c.altair_chart(charts.curves(rows, x_axis, "TTFT p95 ms", "TTFT p95 (ms)", slo.ttft_p95_ms))
    capped = sum(r.capped for r in done)
    cut = f" · {capped} point(s) stopped at the {CURVE_MAX_REQUESTS:,}-request cap" if capped else ""
    st.caption(source_tag(done[0].result) + cut)
    st.download_button(
        "curve points (CSV)",
        scenario_io.results_csv([(p, r.result) for p, r in zip(points, done, strict=True)]),
        file_name="curves.csv",
        mime="text/csv",
        key="dl-curves",
    )
