"""The sidebar: which study (bundled, or an uploaded YAML) and the deployment knobs every view reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st
from pydantic import ValidationError

from app import knobs, pricing, runs, scenario_io
from app.scenario_io import Study
from app.views import url
from simulator.errors import InputError

DEFAULT_STUDY = "fleet-disaggregated"
Options = dict[str, list[Any]]


@st.cache_resource(show_spinner=False)
def _bundled(path: str) -> Study:
    return scenario_io.from_path(Path(path))


def opened_study() -> str:
    """The study the page opened: ?study=NAME links straight to one."""
    return url.opened_with("study") or DEFAULT_STUDY


def pick_study() -> Study:
    """The bundled study picked, or a good upload instead; a bad upload shows its line and changes nothing."""
    paths = {p.stem: p for p in scenario_io.bundled()}
    names = list(paths)
    sb = st.sidebar
    sb.header("scenario")
    first = opened_study()
    name = sb.selectbox("study", names, index=names.index(first) if first in names else 0, key="study")
    st.query_params["study"] = name  # the URL follows the pick, so a reload or a shared link opens it again
    study = _bundled(str(paths[name]))
    limit = f"{scenario_io.MAX_UPLOAD_BYTES // 1024} KiB"
    # The browser-side limit (a whole MB) is hidden: the page's own limit, smaller, is the one that applies.
    st.html("<style>[data-testid=stFileUploaderDropzoneInstructions] {display: none}</style>")
    up = sb.file_uploader(
        f"…or upload a scenario YAML (at most {limit})",
        type=["yaml", "yml"],
        key="upload",
        max_upload_size=1,
        help=f"at most {limit}; relative file names resolve "
        "from scenarios/, and only files inside the project may be named",
    )
    if up is not None:
        try:
            uploaded = scenario_io.from_upload(up.name, up.getvalue())
            runs.check_work(uploaded, {})  # its run as the page caps it must pass the CLI's work limits
            study = uploaded
            sb.success(f"using {study.label}")
            sb.caption("an upload is not in the URL: a reload opens the bundled study above")
        except InputError as e:
            sb.error(str(e))
            sb.caption(f"still showing {study.label}")
    return study


def knob(study: Study, path: str) -> str:
    """A knob's widget key: new for each study, so every knob starts again at the new study's value (a browser
    keeps a widget's value for as long as its key lives)."""
    return f"knob:{study.key}:{path}"


def _select(where: Any, label: str, study: Study, path: str, start: dict[str, Any], options: Options) -> Any:
    """A select knob at its start, among `options[path]` (knobs.select_options: the study's own value included)."""
    opts = options[path]
    return where.selectbox(label, opts, opts.index(start[path]), key=knob(study, path))


def deployment_knobs(study: Study, start: dict[str, Any], options: Options) -> dict[str, Any]:
    """Model, hardware and each pool's size, sharding, formats and memory share, from `start` (the study's, or
    the URL's)."""
    sb = st.sidebar
    sb.header("deployment")
    chosen: dict[str, Any] = {}
    for key in ("model", "hardware"):
        chosen[key] = _select(sb, key, study, key, start, options)
    pools = study.scenario.deployment.pools()
    for name in pools:
        p = f"deployment.{name}."
        sb.subheader(f"{name} pool" if len(pools) > 1 else "pool (colocated: prefill and decode)")
        low, high = knobs.RANGES["instances"]
        chosen[p + "instances"] = sb.number_input(
            "instances", low, high, start[p + "instances"], 1, key=knob(study, p + "instances")
        )
        c1, c2 = sb.columns(2)
        chosen[p + "tp"] = _select(c1, "TP (GPUs per instance)", study, p + "tp", start, options)
        chosen[p + "ep"] = _select(c2, "EP groups", study, p + "ep", start, options)
        c1, c2 = sb.columns(2)
        chosen[p + "weights"] = _select(c1, "weights", study, p + "weights", start, options)
        chosen[p + "kv_cache"] = _select(c2, "KV cache", study, p + "kv_cache", start, options)
        own = float(start[p + "mem_fraction"])
        # The range as the study has it (a URL's value, checked against that range, never moves it).
        low, high = knobs.mem_fraction_range(min(own, pools[name].mem_fraction))
        chosen[p + "mem_fraction"] = sb.slider(
            "mem_fraction (weights + KV share of HBM)", low, high, own, 0.01, key=knob(study, p + "mem_fraction")
        )
        c1, c2 = sb.columns(2)
        gpus = options[p + "hardware"]
        chosen[p + "hardware"] = c1.selectbox(
            "GPU of this pool",
            gpus,
            gpus.index(start[p + "hardware"]),
            format_func=lambda g: "the scenario's" if g is knobs.SCENARIO_GPU else g,
            key=knob(study, p + "hardware"),
            help="Prefill and decode may run on different GPUs: each pool is priced, sized and costed as its own.",
        )
        chosen[p + "host_tier_gib"] = c2.number_input(
            "host KV tier (GiB per instance)",
            *knobs.RANGES["host_tier_gib"],
            float(start[p + "host_tier_gib"]),
            64.0,
            key=knob(study, p + "host_tier_gib"),
            help="Host DRAM keeping the KV pages HBM evicts; a prefix found there loads back instead of being "
            "recomputed (0: HBM only).",
        )
        chosen |= _parallel_knobs(study, p, start, options)
    chosen[knobs.SPECULATIVE] = _speculation(study, start)
    return chosen


def _parallel_knobs(study: Study, p: str, start: dict[str, Any], options: Options) -> dict[str, Any]:
    """DP attention, the nodes an instance spans and two-batch overlap: how a large MoE instance splits."""
    sb = st.sidebar
    c1, c2 = sb.columns(2)
    chosen = {
        p + "dp": _select(c1, "DP attention ranks", study, p + "dp", start, options),
        p + "nodes": c2.number_input(
            "nodes per instance",
            *map(int, knobs.RANGES["nodes"]),
            start[p + "nodes"],
            1,
            key=knob(study, p + "nodes"),
            help="Nodes one instance's TP GPUs span (tp over nodes × the GPU's gpus_per_node); over 1 node, DP "
            "attention keeps attention TP inside a node.",
        ),
    }
    chosen[p + "two_batch_overlap"] = sb.checkbox(
        "two-batch overlap (hides the MoE all-to-alls; needs DP attention and EP)",
        start[p + "two_batch_overlap"],
        key=knob(study, p + "two_batch_overlap"),
    )
    return chosen


def _speculation(study: Study, start: dict[str, Any]) -> dict[str, Any] | None:
    """Speculative decoding on the decode pool: off, MTP (the model's own MTP layers) with its draft tokens and
    mean accepted length, or the study's own setting where it is another (a draft model)."""
    sb = st.sidebar
    own = start[knobs.SPECULATIVE]
    choices = ["off", "MTP"] + (["as the study (draft model)"] if own and own["method"] != "mtp" else [])
    first = "off" if own is None else "MTP" if own["method"] == "mtp" else choices[-1]
    picked = sb.selectbox(
        "speculative decoding (decode pool)",
        choices,
        choices.index(first),
        key=knob(study, knobs.SPECULATIVE),
        help="MTP drafts with the model's own multi-token-prediction layers (DeepSeek-V3, Kimi K2.x, GLM); a "
        "model without them is refused with its reason.",
    )
    if picked == "off":
        return None
    if picked != "MTP":
        return own
    mine = own if own and own["method"] == "mtp" else knobs.mtp(1, knobs.MTP_TAU[1])
    c1, c2 = sb.columns(2)
    k = c1.selectbox(
        "draft tokens", list(knobs.MTP_TAU), list(knobs.MTP_TAU).index(mine["draft_tokens"]), key=knob(study, "spec.k")
    )
    tau = mine["acceptance"] if isinstance(mine["acceptance"], float) and k == mine["draft_tokens"] else None
    accepted = c2.number_input(
        "accepted per step (τ)",
        1.0,
        k + 1.0,
        float(tau or knobs.MTP_TAU[k]),
        0.05,
        key=knob(study, f"spec.tau.{k}"),
        help="Mean tokens a sequence gains per verify step, the bonus token included (1 ≤ τ ≤ k + 1); DeepSeek-V3 "
        "reports 85-90% acceptance of the second token with one MTP module: τ 1.85-1.9 at k = 1.",
    )
    return knobs.mtp(k, accepted)


def _length_knob(col: Any, study: Study, label: str, path: str, start: dict[str, Any]) -> dict[str, Any]:
    own = start[path]
    if own["dist"] not in knobs.LENGTH_DISTS:
        col.caption(f"{label}: {own['dist']} from {own.get('file')} (not editable here)")
        return own
    dist = col.selectbox(
        f"{label} distribution",
        knobs.LENGTH_DISTS,
        knobs.LENGTH_DISTS.index(own["dist"]),
        key=knob(study, path + ".dist"),
    )
    centre = int(own.get("value") or own.get("median") or (own["low"] + own["high"]) // 2)
    k = knob(study, path + ".")
    if dist == "fixed":
        out: dict[str, Any] = {
            "dist": "fixed",
            "value": col.number_input(f"{label} tokens", *knobs.TOKENS, int(own.get("value", centre)), key=k + "value"),
        }
    elif dist == "uniform":
        a, b = col.columns(2)
        out = {
            "dist": "uniform",
            "low": a.number_input(f"{label} low", *knobs.TOKENS, int(own.get("low", centre // 2)), key=k + "low"),
            "high": b.number_input(
                f"{label} high", *knobs.TOKENS, int(own.get("high", centre * 3 // 2)), key=k + "high"
            ),
        }
    else:
        a, b = col.columns(2)
        out = {
            "dist": "lognormal",
            "median": a.number_input(
                f"{label} median",
                *map(float, knobs.TOKENS),
                float(own.get("median", centre)),
                1.0,
                format="%.0f",
                key=k + "median",
            ),
            "sigma": b.number_input(
                f"{label} sigma", *knobs.SIGMA, float(own.get("sigma", 0.5)), 0.05, key=k + "sigma"
            ),
        }
    if "max" in own:
        out["max"] = own["max"]
    try:
        return knobs.length_value(out)
    except ValidationError as e:  # e.g. uniform low > high: the schema's own message
        col.error(f"{path}: {e.errors()[0]['msg'].removeprefix('Value error, ')}")
        return own


def pricing_knobs(study: Study, start: dict[str, Any], options: Options) -> dict[str, Any]:
    """What prices every simulated number: the profile (roofline, or a bundled profile of the hardware) and the
    engine preset (its step loop's CPU work, graph floors, overlap), either of which can turn a comparison."""
    sb = st.sidebar
    sb.header("pricing")
    profiles = pricing.choices(study)
    labels = {c.value: c.label for c in profiles}
    values = list(labels)
    own = values.index(start["profile"]) if start["profile"] in labels else pricing.study_choice(study, profiles)
    picked = sb.selectbox(
        "profile",
        values,
        own,
        format_func=labels.__getitem__,
        key=knob(study, "profile"),
        help="roofline: step times from the hardware preset's peak rates; a profile file: kernel times measured "
        "(or modeled) on that GPU. The same comparison can come out differently: Compare says when it does.",
    )
    engine = sb.selectbox(
        "engine",
        options["engine"],
        options["engine"].index(start["engine"]),
        key=knob(study, "engine"),
        help="The serving engine's preset (phaseplan presets): what it does around the kernels. Each has its own "
        "validated error band, shown under What-if's headline.",
    )
    low, high = knobs.RANGES[knobs.GPU_PRICE]
    price = sb.number_input(
        "GPU price ($ per GPU-hour)",
        low,
        high,
        float(start[knobs.GPU_PRICE]),
        0.25,
        "%.2f",
        key=knob(study, knobs.GPU_PRICE),
        help="What one GPU-hour costs, for every pool (cost.gpu_hour_usd); it starts at the study's price (its "
        "hardware preset's where it names none; the presets' prices are illustrative).",
    )
    return {"profile": picked, "engine": engine, knobs.GPU_PRICE: price}


def traffic_knobs(study: Study, start: dict[str, Any], options: Options) -> dict[str, Any]:
    """Load, lengths, prefix sharing, routing, integrity and the SLO, starting at the study's values."""
    chosen: dict[str, Any] = {}
    sb = st.sidebar
    sb.header("traffic")
    sc = study.scenario
    load = knobs.load_path(sc)
    label, _ = knobs.LOAD_LABELS[load]
    low, high = knobs.RANGES[load]
    if load == "traffic.concurrency":
        chosen[load] = sb.number_input(label, low, high, start[load], 1, key=knob(study, load))
    else:
        chosen[load] = sb.number_input(label, low, high, float(start[load]), 0.1, key=knob(study, load))
    if sc.traffic.trace is None:
        chosen["traffic.prompt_tokens"] = _length_knob(sb, study, "prompt", "traffic.prompt_tokens", start)
        chosen["traffic.output_tokens"] = _length_knob(sb, study, "output", "traffic.output_tokens", start)
    else:
        sb.caption(f"prompt and output lengths come from the trace {sc.traffic.trace}")
    sb.header("serving")
    if "traffic.shared_prefix_tokens" in start:
        chosen["traffic.shared_prefix_tokens"] = sb.number_input(
            "shared system prompt (tokens)",
            *knobs.RANGES["traffic.shared_prefix_tokens"],
            start["traffic.shared_prefix_tokens"],
            64,
            key=knob(study, "traffic.shared_prefix_tokens"),
        )
    chosen["routing.policy"] = _select(sb, "routing", study, "routing.policy", start, options)
    c1, c2 = sb.columns(2)
    chosen["prefix_cache.enabled"] = c1.checkbox(
        "prefix cache", start["prefix_cache.enabled"], key=knob(study, "prefix_cache.enabled")
    )
    chosen["integrity.enabled"] = c2.checkbox(
        "integrity check", start["integrity.enabled"], key=knob(study, "integrity.enabled")
    )
    c3, c4 = sb.columns(2)
    for col, (path, label, step, fmt) in zip(
        (c3, c4),
        (("slo.ttft_p95_ms", "SLO: TTFT (ms)", 100.0, "%.0f"), ("slo.tpot_p95_ms", "SLO: TPOT (ms)", 1.0, "%.1f")),
        strict=True,
    ):
        chosen[path] = col.number_input(
            label, *knobs.RANGES[path], float(start[path]), step, fmt, key=knob(study, path)
        )
    return chosen
