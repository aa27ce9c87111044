"""The sidebar: which study (bundled, or an uploaded YAML) and the deployment knobs every view reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from app import knobs, scenario_io
from app.scenario_io import Study
from simulator.errors import InputError

DEFAULT_STUDY = "fleet-disaggregated"
TP_CHOICES = [1, 2, 4, 8, 16]


@st.cache_resource(show_spinner=False)
def _bundled(path: str) -> Study:
    return scenario_io.from_path(Path(path))


def pick_study() -> Study:
    """The bundled study picked, or a good upload instead; a bad upload shows its line and changes nothing."""
    paths = {p.stem: p for p in scenario_io.bundled()}
    names = list(paths)
    sb = st.sidebar
    sb.header("scenario")
    first = st.query_params.get("study", DEFAULT_STUDY)  # ?study=NAME links straight to a study
    name = sb.selectbox("study", names, index=names.index(first) if first in names else 0, key="study")
    study = _bundled(str(paths[name]))
    up = sb.file_uploader("…or upload a scenario YAML", type=["yaml", "yml"], key="upload", max_upload_size=1,
                          help=f"at most {scenario_io.MAX_UPLOAD_BYTES // 1024} KiB; relative file names resolve "
                               "from scenarios/, and only files inside the project may be named")
    if up is not None:
        try:
            study = scenario_io.from_upload(up.name, up.getvalue())
            sb.success(f"using {study.label}")
        except InputError as e:
            sb.error(str(e))
            sb.caption(f"still showing {study.label}")
    return study


def knob(study: Study, path: str) -> str:
    """A knob's widget key: new for each study, so every knob starts again at the new study's value (a browser
    keeps a widget's value for as long as its key lives)."""
    return f"knob:{study.key}:{path}"


def _select(where: Any, label: str, options: list[Any], study: Study, path: str, base: dict[str, Any]) -> Any:
    """A select knob at the study's value (added to the options when it is not one of them)."""
    own = base[path]
    opts = options if own in options else sorted({*options, own})
    return where.selectbox(label, opts, opts.index(own), key=knob(study, path))


def deployment_knobs(study: Study, base: dict[str, Any]) -> dict[str, Any]:
    """Model, hardware and each pool's size, sharding, formats and memory share, starting at the study's."""
    sb = st.sidebar
    sb.header("deployment")
    chosen: dict[str, Any] = {}
    for key in ("model", "hardware"):
        opts = knobs.preset_options(study.raw, key)
        chosen[key] = sb.selectbox(key, opts, index=opts.index(base[key]), key=knob(study, key))
    pools = study.scenario.deployment.pools()
    for name in pools:
        p = f"deployment.{name}."
        sb.subheader(f"{name} pool" if len(pools) > 1 else "pool (colocated: prefill and decode)")
        chosen[p + "instances"] = sb.number_input("instances", 1, 1024, base[p + "instances"], 1,
                                                  key=knob(study, p + "instances"))
        c1, c2 = sb.columns(2)
        chosen[p + "tp"] = _select(c1, "TP (GPUs per instance)", TP_CHOICES, study, p + "tp", base)
        chosen[p + "ep"] = _select(c2, "EP groups", [1, 2, 4, 8], study, p + "ep", base)
        c1, c2 = sb.columns(2)
        chosen[p + "weights"] = _select(c1, "weights", knobs.WEIGHT_FORMATS, study, p + "weights", base)
        chosen[p + "kv_cache"] = _select(c2, "KV cache", knobs.KV_FORMATS, study, p + "kv_cache", base)
        own = float(base[p + "mem_fraction"])
        chosen[p + "mem_fraction"] = sb.slider("mem_fraction (weights + KV share of HBM)", min(0.3, own), 1.0, own,
                                               0.01, key=knob(study, p + "mem_fraction"))
    return chosen
