"""Plan: the planner's two questions on the page — the highest rate the configuration sustains within the SLO
(and its cost per million tokens there), and the fewest GPUs that meet the SLO at a rate. Both are the CLI's
`phaseplan max-rate` / `phaseplan plan` (the page prints the line), run in this process on shortened traffic."""

from __future__ import annotations

import json
from typing import Any

import streamlit as st

from app import runs
from app.scenario_io import Study
from app.views.fmt import cli_line, num
from simulator.config import loader
from simulator.config.scenario import Scenario
from simulator.errors import InputError
from simulator.planning import space as spaces
from simulator.planning.backends import Backend
from simulator.planning.maxrate import max_rate
from simulator.planning.openloop import current_rate, unit
from simulator.planning.search import plan
from simulator.planning.slo import SLO
from simulator.results.report import provenance_line

PLAN_MAX_REQUESTS = 1000  # per trial: a search runs tens of them


def trial_sets(study: Study, overrides: dict[str, Any]) -> dict[str, Any]:
    """The knobs and, for a study that could run longer, trials of its first PLAN_MAX_REQUESTS requests at the
    rate tried (no arrival window: a window would cut a fast trial short of its count)."""
    sets = runs.capped_sets(study, overrides, PLAN_MAX_REQUESTS)
    if "traffic.requests" in sets and "traffic.requests" not in overrides:
        sets["traffic.duration_s"] = None
    return sets


def _answer(name: str, inputs: list[Any]) -> Any:
    """An answer kept in the session for exactly these inputs (a knob moved since: no answer shown)."""
    kept = st.session_state.get(name)
    return kept[1] if kept is not None and kept[0] == json.dumps(inputs, default=str) else None


def _keep(name: str, inputs: list[Any], answer: Any) -> None:
    st.session_state[name] = (json.dumps(inputs, default=str), answer)


def render(study: Study, overrides: dict[str, Any]) -> None:
    sets = trial_sets(study, overrides)
    try:
        sc = runs.scenario_for(study, sets)
    except InputError as e:
        st.error(str(e))
        return
    c1, c2 = st.columns(2)
    slo = SLO(
        c1.number_input("SLO: p95 TTFT (ms)", 1.0, 1e7, float(sc.slo.ttft_p95_ms), 100.0, "%.0f", key="plan:ttft"),
        c2.number_input("SLO: p95 TPOT (ms)", 0.1, 1e5, float(sc.slo.tpot_p95_ms), 1.0, "%.1f", key="plan:tpot"),
    )
    if "traffic.duration_s" in sets:
        st.caption(
            f"Each trial is the study's first {PLAN_MAX_REQUESTS:,} requests at the rate tried, so that an "
            "answer takes a minute or so; without these --set the CLI runs the study's own traffic."
        )
    raw = loader.apply_overrides({k: v for k, v in study.raw.items() if k != "sweep"}, sets)
    _max_rate(study, sets, raw, sc, slo)
    _plan(study, sets, raw, sc, slo)


def _max_rate(study: Study, sets: dict[str, Any], raw: dict[str, Any], sc: Scenario, slo: SLO) -> None:
    st.subheader("Max sustainable rate")
    st.code(
        cli_line("max-rate", study.label, sets, f"--slo {slo.option()}"),
        language="bash",
    )
    inputs = [study.key, sets, slo.to_json()]
    if st.button("Find max rate", key="plan:max-rate"):
        box = st.status("bisecting the rate…")
        try:
            with Backend("local", 1) as b:
                _keep(
                    "max-rate",
                    inputs,
                    max_rate(raw, sc, study.label, study.base_dir, slo, b, on_trial=lambda line: box.write(line)),
                )
            box.update(label="done", state="complete")
        except InputError as e:
            box.update(label="no answer", state="error")
            st.error(str(e))
    res = _answer("max-rate", inputs)
    if res is None:
        return
    m = res["metrics"]
    a, b, c, d = st.columns(4)
    a.metric(f"max rate ({res['rate_unit']})", num(res["max_rate_rps"]))
    b.metric("TTFT p95 there", num(m["ttft_ms"]["p95"], "ms"))
    c.metric("TPOT p95 there", num(m["tpot_ms"]["p95"], "ms"))
    d.metric(f"cost per M {res['cost_basis']}", num(res["cost_per_mtok_usd"], "$/M tok"))
    st.info(provenance_line(res))
    st.table(
        [{"rate": num(t["rate"]), "meets the SLO": "yes" if t["meets"] else t["reason"]} for t in res["trials"]],
        hide_index=True,
    )


def _plan(study: Study, sets: dict[str, Any], raw: dict[str, Any], sc: Scenario, slo: SLO) -> None:
    st.subheader("Fewest GPUs for a rate")
    c1, c2 = st.columns(2)
    own = current_rate(sc, study.base_dir) or 1.0
    rate = c1.number_input(f"rate to plan for ({unit(sc)})", 0.001, 1e5, float(f"{own:.3g}"), 0.1, key="plan:rate")
    objective = c2.radio("objective", ["gpus", "cost"], horizontal=True, key="plan:objective")
    dims = spaces.default(sc, raw)
    st.code(
        cli_line(
            "plan",
            study.label,
            sets,
            f"--rate {rate:g} --objective {objective} --slo {slo.option()}",
        ),
        language="bash",
    )
    st.caption("searched: " + dims.describe())
    inputs = [study.key, sets, slo.to_json(), rate, objective]
    if st.button("Plan", key="plan:plan"):
        total = dims.count()
        bar = st.progress(0.0, text=f"0 of {total} candidates")
        done = [0]

        def tick(_: int) -> None:
            done[0] += 1
            bar.progress(min(1.0, done[0] / total), text=f"{done[0]} of at most {total} candidates simulated")

        try:
            with Backend("local", 1) as b:
                _keep(
                    "plan",
                    inputs,
                    plan(
                        raw,
                        sc,
                        study.label,
                        study.base_dir,
                        rate=rate,
                        slo=slo,
                        space=dims,
                        objective=objective,
                        runners_up=3,
                        backend=b,
                        on_done=tick,
                    ),
                )
        except InputError as e:
            st.error(str(e))
        bar.empty()
    res = _answer("plan", inputs)
    if res is None:
        return
    w = res["winner"]
    if w is None:
        st.warning("No candidate meets the SLO at this rate.")
    else:
        st.success(f"winner: {w['label']}")
        st.info(provenance_line(res))
        a, b, c = st.columns(3)
        a.metric("GPUs", num(w["gpus"]))
        b.metric(f"cost per M {w['cost_basis']}", num(w["cost_per_mtok_usd"], "$/M tok"))
        c.metric("TPOT p95", num(w["metrics"]["tpot_ms"]["p95"], "ms"))
    st.table(
        [
            {"runner-up": r["label"], "GPUs": r["gpus"], "cost": num(r["cost_per_mtok_usd"], "$/M tok")}
            for r in res["runners_up"]
        ],
        hide_index=True,
    )
    st.table(
        [{"rejected": r["label"], "GPUs": r["gpus"], "why": r["reason"]} for r in res["rejected"]], hide_index=True
    )
