"""phaseplan planner: capacity, what-if, compare and curves, and plan for a study, in one page.

    make app        (or `phaseplan app`: headless, usage statistics off)

The views live in `app/views/`; what they compute (knobs → overrides, runs, memory, deltas) lives in `app/`
without Streamlit, and is tested like the rest of the project.
"""

from __future__ import annotations

import streamlit as st

from app import knobs, pricing
from app.views import capacity, compare, plan, sidebar, url, whatif

st.set_page_config(page_title="phaseplan planner", layout="wide")
st.title("phaseplan planner")

study = sidebar.pick_study()
base = knobs.study_values(study.scenario, study.raw)  # what a knob left alone means: no --set
start = knobs.start_values(study.scenario, study.raw)  # where the study opens: its focus
options = knobs.select_options(study.scenario, study.raw, start, [c.value for c in pricing.choices(study)])
first = url.knob_start(study, start, options, sidebar.opened_study())  # ?set=PATH=VALUE moves a knob
deployment = sidebar.deployment_knobs(study, first, options)
chosen = {**deployment, **sidebar.pricing_knobs(study, first, options), **sidebar.traffic_knobs(study, first, options)}
url.follow_knobs(study, start, chosen)  # the moved knobs into the URL: a reload opens them again
fixed = knobs.focus_overrides(study.scenario, base)
overrides = {**knobs.overrides(base, chosen), **fixed}
opening = {**knobs.overrides(base, first), **fixed}  # the knobs as the page opens: run without asking
focus = ", ".join(f"{k}={v}" for k, v in study.scenario.focus.items())
st.caption(
    f"**{study.label}** · {study.scenario.name}"
    + (f" · opens at {focus}, the point its question turns on" if focus else "")
    + " · every simulated number is labelled with the profile that priced it (modeled or measured); capacity "
    "figures are memory arithmetic"
)

# Only the open view runs (switching views reruns the page): a view's charts cost the browser seconds to draw.
views = ["Capacity", "What-if", "Compare & curves", "Plan"]
view = url.opened_with("view")  # ?view=What-if links straight to a view
tabs = st.tabs(views, key="view", on_change="rerun", default=view if view in views else None)
st.query_params["view"] = next((v for v, t in zip(views, tabs, strict=True) if t.open), views[0])
with tabs[0]:
    if tabs[0].open:
        capacity.render(study, knobs.overrides(base, deployment))
with tabs[1]:
    if tabs[1].open:
        whatif.render(study, overrides, opening)
with tabs[2]:
    if tabs[2].open:
        compare.render(study, overrides)
with tabs[3]:
    if tabs[3].open:
        plan.render(study, overrides)
