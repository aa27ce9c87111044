"""Capacity: what each GPU holds and how many requests fit, instantly, from memory accounting alone."""

from __future__ import annotations

from typing import Any

import streamlit as st

from app import gpu_memory
from app.runs import scenario_for
from app.scenario_io import Study
from app.views import charts
from app.views.fmt import num
from app.views.sidebar import knob
from simulator.config.scenario import Length, Scenario
from simulator.errors import InputError

FALLBACK_CONTEXT = 8192  # a trace's or file's lengths have no single typical value


def typical_tokens(length: Length) -> int | None:
    """The length a distribution centres on; None for an empirical file."""
    if length.dist == "fixed":
        return length.value
    if length.dist == "uniform":
        return (length.low + length.high) // 2  # type: ignore[operator]
    if length.dist == "lognormal":
        return round(length.median)  # type: ignore[arg-type]
    return None


def typical_context(sc: Scenario) -> int:
    """Prompt + output tokens of a typical request of the study (shared prefix included)."""
    t = sc.traffic
    if t.trace is not None:
        return FALLBACK_CONTEXT
    p, o = typical_tokens(t.prompt_tokens), typical_tokens(t.output_tokens)
    return FALLBACK_CONTEXT if p is None or o is None else t.shared_prefix_tokens + p + o


def render(study: Study, overrides: dict[str, Any]) -> None:
    st.caption(
        "Memory accounting only — arithmetic over the model and hardware presets, nothing simulated. "
        "Per GPU: HBM × mem_fraction − weights − reserve = KV pool; the rest is headroom for activations, "
        "CUDA graphs and communication buffers."
    )
    try:
        sc = scenario_for(study, overrides)
    except InputError as e:
        st.error(str(e))
        return
    model, hw = sc.model, sc.hardware
    ctx = st.number_input(
        "context per request (prompt + output tokens)",
        1,
        2_000_000,
        typical_context(sc),
        256,
        key=knob(study, "capacity.context"),
        help="starts at the study's typical request; concurrency = pages ÷ pages per request",
    )
    st.markdown(
        f"**{model.name}** on **{hw.name}** ({num(hw.hbm_gib, 'GiB')} HBM per GPU) — "
        "capacity: arithmetic from the presets (no profile involved)"
    )
    pools = sc.deployment.pools()
    gpus = {
        name: gpu_memory.gpu_memory(
            model, sc.hardware_of(pool), pool, f"{name}: {pool.weights} weights, {pool.kv_cache} KV"
        )
        for name, pool in pools.items()
    }
    cols = st.columns(len(gpus))
    for col, (name, g) in zip(cols, gpus.items(), strict=True):
        pool = pools[name]
        with col:
            gpu = f" on {sc.hardware_of(pool).name}" if sc.mixed_hardware else ""
            st.subheader(f"{name} pool · {pool.instances} × TP{pool.tp}{gpu}")
            if not g.fits:
                st.error(f"✗ {name}: {g.reason}")
            a, b = st.columns(2)
            a.metric("weights per GPU", num(g.weights_gib, "GiB"))
            b.metric("KV pool per GPU", num(g.kv_gib, "GiB"))
            a.metric("KV tokens per instance", num(g.kv_tokens))
            b.metric(f"KV pages per instance (× {g.page_size})", num(g.pages))
            fit = g.concurrency(ctx)
            a.metric(
                f"requests of {ctx:,} tokens per instance",
                num(fit),
                help="requests whose KV fits at once in one instance's pages; the scheduler also caps an "
                f"instance at max_running = {pool.max_running}",
            )
            b.metric(f"same, whole pool ({pool.instances} instances)", num(fit * pool.instances))
            b.metric("KV bytes per token per GPU", num(g.kv_bytes_per_token, "B"))
    st.altair_chart(charts.memory_bars(list(gpus.values())))

    focus = "decode"
    pool = pools[focus]
    st.subheader(
        f"Formats side by side · {focus} pool ({pool.instances} × TP{pool.tp}, mem_fraction {pool.mem_fraction:.2f})"
    )
    st.caption("BF16 vs FP8 KV cache and FP8 vs INT4 weights for the same deployment; everything else as above.")
    vs = gpu_memory.variants(model, sc.hardware_of(pool), pool)
    st.table(
        [
            {
                "weights": v.weights,
                "KV cache": v.kv_cache,
                "weights GiB/GPU": num(v.weights_gib),
                "KV pool GiB/GPU": num(v.kv_gib),
                "KV tokens/instance": num(v.kv_tokens),
                "pages": num(v.pages),
                f"requests of {ctx:,} tokens/instance": num(v.concurrency(ctx)),
                "fits": "yes" if v.fits else f"✗ {v.reason}",
            }
            for v in vs
        ],
        hide_index=True,
    )
    st.altair_chart(charts.memory_bars(vs))
