"""phaseplan what-if planner: pick a study, move the traffic and format knobs, see capacity and latency.

    pip install -e '.[app]' && streamlit run app/streamlit_app.py
"""

from __future__ import annotations

from typing import get_args

import streamlit as st

from app.planner import MAX_REQUESTS, WhatIf, headline, load, run, studies
from simulator.config.specs import WeightFormat
from simulator.errors import InputError
from simulator.results.report import provenance_line

st.set_page_config(page_title="phaseplan what-if", layout="wide")
st.title("phaseplan — what if?")

paths = studies()
path = st.sidebar.selectbox("study", paths, format_func=lambda p: p.stem)
base = load(path)
decode = base.deployment.decode
prefill = base.deployment.prefill

st.sidebar.header("traffic")
rate = concurrency = None
if base.traffic.rate is not None:
    rate = st.sidebar.slider("requests (or conversations) per second", 0.1, 60.0, float(base.traffic.rate), 0.1)
if base.traffic.concurrency is not None:
    concurrency = st.sidebar.slider("concurrent clients", 1, 256, base.traffic.concurrency)
synthetic = base.traffic.trace is None
prompt = st.sidebar.number_input("median prompt tokens", 16, 200_000, 2000, 16) if synthetic else None
output = st.sidebar.number_input("median output tokens", 1, 32_000, 500, 1) if synthetic else None

st.sidebar.header("fleet")
prefill_n = st.sidebar.slider("prefill instances", 1, 32, prefill.instances) if prefill else None
decode_n = st.sidebar.slider("decode instances", 1, 64, decode.instances)
formats = list(get_args(WeightFormat))  # FP4 formats on hardware without FP4 tensor cores: the run says so
weights = st.sidebar.selectbox("decode weights", formats, formats.index(decode.weights))
kv = st.sidebar.selectbox("KV cache", ["bf16", "fp8_e4m3"], ["bf16", "fp8_e4m3"].index(decode.kv_cache))
mem = st.sidebar.slider("mem_fraction", 0.5, 0.95, float(decode.mem_fraction), 0.01)
integrity = st.sidebar.checkbox("page-integrity check", base.integrity.enabled)

what_if = WhatIf(rate=rate, concurrency=concurrency, prompt_median=prompt, output_median=output,
                 prefill_instances=prefill_n, decode_instances=decode_n, weights=weights, kv_cache=kv,
                 mem_fraction=mem, integrity=integrity)
st.caption(f"runs at most {MAX_REQUESTS:,} requests for an interactive answer; `phaseplan run` runs the full study")

if st.button("simulate", type="primary"):
    try:
        with st.spinner("simulating…"):
            sc, capacity, result = run(path, what_if)
    except InputError as e:
        st.error(str(e))
        st.stop()
    st.info(provenance_line(result))
    cols = st.columns(4)
    for i, (k, v) in enumerate(headline(result).items()):
        cols[i % 4].metric(k, "-" if v is None else f"{v:,.4g}")
    st.subheader("capacity per pool")
    st.table([{"pool": name, **{k: v for k, v in pool.items() if k != "reason"}}
              for name, pool in capacity["pools"].items()])
    st.subheader("decode-pool KV occupancy over time")
    series = result["metrics"]["kv_occupancy"]["series"]
    st.line_chart({"occupancy": [v for _, v in series]})
    st.subheader("where a step's time goes (ms)")
    for pool, entry in result["step_anatomy"].items():
        if pool == "summary":
            continue
        for kind in ("prefill_chunk", "decode_step"):
            if kind in entry:
                st.write(f"**{pool} · {kind.replace('_', ' ')}** — {entry[kind]['ms']:,.1f} ms")
                st.bar_chart(entry[kind]["by_family"])
    with st.expander("full result (JSON)"):
        st.json(result)
