"""phaseplan planner: capacity, what-if, compare and curves for a study, in one page.

    make app        (or `phaseplan app`: headless, usage statistics off)

The views live in `app/views/`; what they compute (knobs → overrides, runs, memory, deltas) lives in `app/`
without Streamlit, and is tested like the rest of the project.
"""

from __future__ import annotations

import streamlit as st

from app import knobs
from app.views import capacity, compare, sidebar, whatif

st.set_page_config(page_title="phaseplan planner", layout="wide")
st.title("phaseplan planner")

study = sidebar.pick_study()
base = knobs.study_values(study.scenario, study.raw)
deployment = sidebar.deployment_knobs(study, base)
st.caption(f"**{study.label}** · {study.scenario.name} · every simulated number is labelled with the profile that "
           "priced it (modeled or measured); capacity figures are memory arithmetic")

tab_capacity, tab_whatif, tab_compare = st.tabs(["Capacity", "What-if", "Compare & curves"])
with tab_capacity:
    capacity.render(study, knobs.overrides(base, deployment))
with tab_whatif:
    chosen = {**deployment, **whatif.traffic_knobs(study, base)}
    overrides = knobs.overrides(base, chosen)
    whatif.render(study, overrides)
with tab_compare:
    compare.render(study, overrides)
