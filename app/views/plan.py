"""Plan: the planner's two questions on the page — the highest rate the configuration sustains within the SLO
(and its cost per million tokens there), and the fewest GPUs that meet the SLO at a rate. Both are the CLI's
`phaseplan max-rate` / `phaseplan plan` (the page prints the line), run in this process on the same trials: the
study's own traffic, read over its steady-state window and lengthened by the same stopping rule
(`simulator.planning.stopping`), so the page and the CLI give one answer.

Every input starts from the picked study (its rate, the sidebar's SLO, the CLI's default search space) and
starts again when the study changes: the widgets are keyed by the study. An answer stays on the page, marked
stale, after an input moves, until the next one lands.
"""

from __future__ import annotations

import json
from typing import Any

import streamlit as st

from app import plan_answer, runs
from app.scenario_io import Study
from app.views import command
from app.views.fmt import cli_line, num
from app.views.sidebar import knob
from simulator.config import loader
from simulator.config.scenario import Scenario
from simulator.errors import InputError
from simulator.planning import space as spaces
from simulator.planning.backends import Backend
from simulator.planning.maxrate import max_rate
from simulator.planning.openloop import current_rate, unit
from simulator.planning.search import plan
from simulator.planning.slo import SLO
from simulator.planning.stopping import describe
from simulator.results.report import provenance_line
from simulator.validation import bands


def _answer(name: str, study: Study, inputs: list[Any]) -> tuple[Any, bool]:
    """The answer kept for this study and whether its inputs have moved since (stale); (None, False) if none."""
    kept = st.session_state.get(name)
    if kept is None or kept[0] != study.key:
        return None, False
    return kept[2], kept[1] != json.dumps(inputs, default=str)


def _keep(name: str, study: Study, inputs: list[Any], answer: Any) -> None:
    st.session_state[name] = (study.key, json.dumps(inputs, default=str), answer)


def _stale_note(stale: bool) -> None:
    if stale:
        st.warning("Stale: an input moved since this answer. It stays here until you press the button again.")


def render(study: Study, overrides: dict[str, Any]) -> None:
    sets = dict(overrides)
    try:
        sc = runs.scenario_for(study, sets)
    except InputError as e:
        st.error(str(e))
        return
    slo = SLO(sc.slo.ttft_p95_ms, sc.slo.tpot_p95_ms)
    st.caption(f"SLO: {slo.describe()} (the sidebar's SLO inputs).")
    st.caption(
        "Each trial is the study's own traffic at the rate tried, read over its steady state and run longer (up "
        "to 4x) while a limit is inside its p95's interval, and the plan's contenders until their binding p95 is "
        "known to ±5%: the CLI's trials, so the page's answer is the command's."
    )
    raw = loader.one_point(study.raw, sets)
    _max_rate(study, sets, raw, sc, slo)
    _plan(study, sets, raw, sc, slo)


def _max_rate(study: Study, sets: dict[str, Any], raw: dict[str, Any], sc: Scenario, slo: SLO) -> None:
    st.subheader("Max sustainable rate")
    command.show(study, cli_line("max-rate", study.path, sets, f"--slo {slo.option()}"), "max-rate")
    inputs = [sets, slo.to_json()]
    if st.button("Find max rate", key="plan:max-rate"):
        box = st.status("bisecting the rate…")
        try:
            with Backend("local", 1) as b:
                found = max_rate(raw, sc, study.path, study.base_dir, slo, b, on_trial=lambda line: box.write(line))
            _keep("max-rate", study, inputs, found)
            box.update(label="done", state="complete")
        except InputError as e:
            box.update(label="no answer", state="error")
            st.error(str(e))
    res, stale = _answer("max-rate", study, inputs)
    if res is None:
        return
    _stale_note(stale)
    m = res["metrics"]
    a, b, c, d = st.columns(4)
    a.metric(f"max rate ({res['rate_unit']})", num(res["max_rate_rps"]))
    b.metric("TTFT p95 there", num(m["ttft_ms"]["p95"], "ms"))
    c.metric("TPOT p95 there", num(m["tpot_ms"]["p95"], "ms"))
    d.metric(f"cost per M {res['cost_basis']}", num(res["cost_per_mtok_usd"], "$"))
    st.caption(bands.max_rate_line(sc.model_dump(mode="json"), sc.engine, res))
    st.caption(describe(res))
    st.info(provenance_line(res))
    with st.expander(f"the {len(res['trials'])} rates tried"):
        st.table(
            [{"rate": num(t["rate"]), "meets the SLO": "yes" if t["meets"] else t["reason"]} for t in res["trials"]],
            hide_index=True,
        )


def _search_space(study: Study, sc: Scenario, raw: dict[str, Any]) -> tuple[spaces.Space, list[str]]:
    """The CLI's default space, or the dimensions typed in (`--search` items, parsed as the CLI parses them)."""
    dims = spaces.default(sc, raw)
    if not st.toggle("edit the searched dimensions", key=knob(study, "plan.edit-space")):
        st.caption("searched (the CLI's default search): " + dims.describe())
        return dims, []
    text = st.text_area(
        "searched dimensions, one `--search` item a line (PATH=V1,V2,… or PATH=LO..HI)",
        "\n".join(plan_answer.search_items(sc, raw)),
        key=knob(study, "plan.search"),
        help="starts at the default search's dimensions for the study's own mode that --search can express; "
        "the default also varies the parallel layout (and a disaggregated deployment's weight format)",
    )
    items = [line.strip() for line in text.splitlines() if line.strip()]
    edited = spaces.build(items, sc, raw)
    st.caption(f"searched: {edited.describe()} ({edited.count():,} candidates)")
    return edited, items


def _plan(study: Study, sets: dict[str, Any], raw: dict[str, Any], sc: Scenario, slo: SLO) -> None:
    st.subheader("Fewest GPUs for a rate")
    c1, c2 = st.columns(2)
    own = current_rate(sc, study.base_dir) or 1.0
    rate = c1.number_input(
        f"rate to plan for ({unit(sc)})", 0.001, 1e5, float(f"{own:.3g}"), 0.1, key=knob(study, "plan.rate")
    )
    objective = c2.radio("objective", ["gpus", "cost"], horizontal=True, key=knob(study, "plan.objective"))
    try:
        dims, items = _search_space(study, sc, raw)
    except InputError as e:
        st.error(str(e))
        return
    search = "".join(f" --search {item}" for item in items)
    line = cli_line("plan", study.path, sets, f"--rate {rate:g} --objective {objective} --slo {slo.option()}{search}")
    command.show(study, line, "plan")
    inputs = [sets, slo.to_json(), rate, objective, items]
    if st.button("Plan", key="plan:plan"):
        total = dims.count()
        bar = st.progress(0.0, text=f"0 of {total} candidates")
        done = [0]

        def tick(_: int) -> None:
            done[0] += 1
            bar.progress(min(1.0, done[0] / total), text=f"{done[0]} of at most {total} candidates simulated")

        try:
            with Backend("local", 1) as b:
                found = plan(
                    raw,
                    sc,
                    study.path,
                    study.base_dir,
                    rate=rate,
                    slo=slo,
                    space=dims,
                    objective=objective,
                    runners_up=3,
                    backend=b,
                    on_done=tick,
                )
            _keep("plan", study, inputs, (found, line, raw))
        except InputError as e:
            st.error(str(e))
        bar.empty()
    kept, stale = _answer("plan", study, inputs)
    if kept is not None:
        _stale_note(stale)
        _plan_answer(study, *kept)


def _plan_answer(study: Study, res: dict[str, Any], line: str, raw: dict[str, Any]) -> None:
    """The winner and what bounds it, the runners-up with their latencies, the rejected by reason (collapsed),
    and the files `plan --out` writes."""
    w = res["winner"]
    if w is None:
        st.warning("No candidate meets the SLO at this rate.")
        for hint in res["hints"]:
            st.caption(hint)
    else:
        st.success(f"winner: {w['label']}")
        st.caption(f"{w['layout']} · binding limit: {w['binding'] or '–'}")
        m = w["metrics"]
        # Three a row: five in one row cut the cost off at a 1400 px window.
        cells = [
            ("GPUs", num(w["gpus"])),
            (f"cost per M {w['cost_basis']}", num(w["cost_per_mtok_usd"], "$")),
            ("output throughput", num(m["output_tokens_per_s"], "tok/s")),
            ("TTFT p95", num(m["ttft_ms"]["p95"], "ms")),
            ("TPOT p95", num(m["tpot_ms"]["p95"], "ms")),
        ]
        cols = st.columns(3)
        for i, (label, value) in enumerate(cells):
            cols[i % 3].metric(label, value)
        band = bands.plan_line(raw, res)
        if band:
            st.caption(band)
        st.caption(describe(w))
        st.info(provenance_line(res))
    if res["runners_up"]:
        st.markdown("**Runners-up**")
        st.table([_row(r) for r in res["runners_up"]], hide_index=True)
    groups = plan_answer.rejected_by_reason(res)
    listed = sum(len(g) for g in groups.values())
    shown = f"{listed} of {res['rejected_entries']} listed" if listed < res["rejected_entries"] else f"{listed}"
    st.markdown(f"**Rejected** ({shown}, nearest the winner first)")
    for reason, entries in groups.items():
        with st.expander(f"{reason} · {len(entries)}"):
            st.table(
                [{"candidate": e["label"], "GPUs": num(e["gpus"]), "why": e["reason"]} for e in entries],
                hide_index=True,
            )
    if w is not None:
        _downloads(study, raw, res, line)


def _row(r: dict[str, Any]) -> dict[str, str]:
    m = r["metrics"]
    return {
        "runner-up": r["label"],
        "GPUs": num(r["gpus"]),
        "TTFT p95": num(m["ttft_ms"]["p95"], "ms"),
        "TPOT p95": num(m["tpot_ms"]["p95"], "ms"),
        "output tok/s": num(m["output_tokens_per_s"]),
        "cost": num(r["cost_per_mtok_usd"], "$/M tok"),
        "binding": r["binding"] or "–",
    }


MIME = {".yaml": "application/x-yaml", ".sh": "text/x-shellscript", ".json": "application/json"}


def _downloads(study: Study, raw: dict[str, Any], res: dict[str, Any], line: str) -> None:
    """The answer's files, made from the inputs it was asked with (not the ones moved since)."""
    st.markdown("**Deploy it** — the files `phaseplan plan … --out DIR` writes for this answer")
    out = plan_answer.deploy_files(study, raw, res, line)
    for col, (name, text) in zip(st.columns(len(out)), out.items(), strict=True):
        mime = MIME[name[name.rfind(".") :]]
        col.download_button(name, text, file_name=name, mime=mime, key=f"dl:{name}")
