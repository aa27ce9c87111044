"""The page's charts (Altair, which Streamlit ships): every axis titled with its unit."""

from __future__ import annotations

from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from app.gpu_memory import GpuMemory

PARTS = ["weights", "KV pool", "reserve", "headroom"]
# Okabe & Ito's colour-blind-safe palette: the curves' configurations never read as two shades of one blue.
SAFE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7"]


NO_FIT = "✗ does not fit"


def memory_bars(gpus: list[GpuMemory]) -> alt.Chart:
    """One stacked bar per GPU configuration: weights / KV pool / reserve / headroom, in GiB; a configuration that
    does not fit is named so under its bar and drawn faded."""
    rows = [
        {
            "GPU": g.label if g.fits else f"{g.label} {NO_FIT}",
            "part": part,
            "GiB": round(v, 2),
            "order": PARTS.index(part),
            "fits": "fits" if g.fits else g.reason,
        }
        for g in gpus
        for part, v in g.segments().items()
    ]
    return (
        alt.Chart(pd.DataFrame(rows))
        .mark_bar()
        .encode(
            x=alt.X("GPU:N", title=None, sort=None, axis=alt.Axis(labelAngle=0, labelLimit=260)),
            y=alt.Y("GiB:Q", title="GiB per GPU", stack="zero"),
            color=alt.Color("part:N", sort=PARTS, title=None),
            order=alt.Order("order:Q"),
            opacity=alt.condition(alt.datum.fits == "fits", alt.value(1.0), alt.value(0.3)),
            tooltip=["GPU", "part", alt.Tooltip("GiB:Q", format=",.2f"), "fits"],
        )
    )


def histogram(values: np.ndarray, title: str, limit: float | None = None, bins: int = 40) -> Any:
    """A distribution over requests, `title` naming the quantity and its unit: binned here, so the browser gets
    `bins` bars rather than every request's value; `limit` (the SLO) as a dashed vertical line, the axis widened
    to show it."""
    counts, edges = np.histogram(values, bins=bins)
    df = pd.DataFrame({"lo": edges[:-1], "hi": edges[1:], "requests": counts, "zero": 0})
    bars = _bars(df, title, edges if limit is None else [*edges, limit])
    if limit is None:
        return bars
    return bars + slo_rule(limit, "x")


def slo_rule(limit: float, axis: str) -> alt.Chart:
    """An SLO limit as a dashed line across the chart (along `axis`: "x" vertical, "y" horizontal), labelled."""
    df = pd.DataFrame({"limit": [limit], "label": [f"SLO {limit:,g} ms"]})
    rule = alt.Chart(df).mark_rule(strokeDash=[6, 4], color="#D55E00", size=2)
    vertical = axis == "x"
    text = alt.Chart(df).mark_text(
        align="left", dx=4, dy=2 if vertical else -4, color="#D55E00", baseline="top" if vertical else "bottom"
    )
    return rule.encode(**{axis: "limit:Q"}, tooltip=["label"]) + text.encode(
        **{axis: "limit:Q"}, text="label:N", **({"y": alt.value(0)} if vertical else {"x": alt.value(4)})
    )


def _bars(df: pd.DataFrame, title: str, extent: Any) -> alt.Chart:
    domain = [min(0.0, float(np.min(extent))), float(np.max(extent)) * 1.05]
    return (
        alt.Chart(df)
        .mark_rect()  # each bin a rectangle from zero to its count (a bar mark with x2 drew only its top)
        .encode(
            x=alt.X("lo:Q", title=title, scale=alt.Scale(domain=domain)),
            x2="hi:Q",
            y=alt.Y("requests:Q", title="requests"),
            y2="zero:Q",
            tooltip=[
                alt.Tooltip("lo:Q", title="from", format=",.1f"),
                alt.Tooltip("hi:Q", title="to", format=",.1f"),
                "requests:Q",
            ],
        )
    )


def over_time(points: list[list[float]] | np.ndarray, title: str, percent: bool = False) -> alt.Chart:
    """A series over simulated time, seconds on the x axis."""
    df = pd.DataFrame(np.asarray(points, dtype=float).reshape(-1, 2), columns=["t", "v"])
    y = alt.Y("v:Q", title=title, axis=alt.Axis(format="%") if percent else alt.Axis())
    return (
        alt.Chart(df)
        .mark_line(interpolate="step-after")
        .encode(x=alt.X("t:Q", title="simulated time (s)"), y=y, tooltip=[alt.Tooltip("t:Q", title="s"), "v:Q"])
    )


def step_time(by_family: dict[str, float]) -> alt.Chart:
    """Where one step's time goes: milliseconds by op family."""
    df = pd.DataFrame({"family": list(by_family), "ms": list(by_family.values())})
    return (
        alt.Chart(df)
        .mark_bar()
        .encode(
            y=alt.Y("family:N", sort="-x", title=None),
            x=alt.X("ms:Q", title="ms per step"),
            tooltip=["family", alt.Tooltip("ms:Q", format=",.2f")],
        )
    )


def curves(rows: list[dict[str, Any]], x_title: str, y: str, y_title: str, limit: float | None = None) -> Any:
    """One line per configuration over the load axis, values on hover; `limit` (an SLO) as a dashed line."""
    lines = (
        alt.Chart(pd.DataFrame(rows))
        .mark_line(point=alt.OverlayMarkDef(size=60))
        .encode(
            x=alt.X("x:Q", title=x_title),
            y=alt.Y(f"{y}:Q", title=y_title),
            color=alt.Color(
                "configuration:N",
                title=None,
                scale=alt.Scale(range=SAFE),
                legend=alt.Legend(orient="bottom", columns=1),
            ),
            tooltip=["configuration", alt.Tooltip("x:Q", title=x_title), alt.Tooltip(f"{y}:Q", format=",.1f")],
        )
    )
    return lines if limit is None else lines + slo_rule(limit, "y")
