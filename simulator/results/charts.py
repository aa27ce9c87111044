"""PNG charts of a run and of a sweep (matplotlib, no display), as bytes for `atomic.write_files`.

A run: the TTFT and TPOT distributions (CDFs, with the SLO limit marked), and the decode pool's KV occupancy
beside the requests waiting for a first token over simulated time — the picture of a queue that grows. A sweep:
one chart per headline metric over the swept values. Every chart says the numbers are modeled.
"""

from __future__ import annotations

import io
import re
from typing import Any

import numpy as np

from simulator.config.sweep import COLUMNS, lookup, scaled

CDF_POINTS = 2000  # a CDF of a million requests is drawn through this many quantiles
RUN_CHARTS = ("latency-cdf.png", "kv-and-queue.png")
SWEEP_METRICS = ("tok/s/GPU", "TTFT p95 ms", "TPOT p95 ms", "SLO %", "$/Mtok out")  # one chart each


def _t(text: str) -> str:
    """Text as drawn, never as mathtext (a `$` pair in a scenario's name would be parsed as math)."""
    return text.replace("$", r"\$")


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    _pyplot().close(fig)
    return buf.getvalue()


def _cdf(ax: Any, values: np.ndarray, limit: float, label: str) -> None:
    if values.size:
        qs = np.linspace(0.0, 1.0, min(values.size, CDF_POINTS))
        ax.plot(np.quantile(values, qs), qs, color="tab:blue")
        for p, style in ((0.5, ":"), (0.95, "--")):
            ax.axhline(p, color="0.6", linestyle=style, linewidth=0.8, label=f"p{p * 100:.0f}")
    else:
        ax.text(0.5, 0.5, "no completed request", ha="center", va="center", transform=ax.transAxes)
    ax.axvline(limit, color="tab:red", linestyle="--", linewidth=1, label=f"SLO limit {limit:,g} ms")
    ax.set_xlabel(label)
    ax.set_ylabel("share of requests")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")


def run_charts(result: dict[str, Any], ttft_ms: np.ndarray, tpot_ms: np.ndarray, waiting: np.ndarray) -> list[bytes]:
    """The two PNGs of RUN_CHARTS, in that order."""
    plt = _pyplot()
    name, slo = result["scenario"]["name"], result["scenario"]["slo"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    _cdf(a, ttft_ms, slo["ttft_p95_ms"], "TTFT (ms)")
    _cdf(b, tpot_ms, slo["tpot_p95_ms"], "TPOT (ms per output token)")
    fig.suptitle(_t(f"{name}: latency per request (modeled)"))
    latency = _png(fig)

    fig, (a, b) = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True)
    occ = np.asarray(result["metrics"]["kv_occupancy"]["series"], dtype=float).reshape(-1, 2)
    a.plot(occ[:, 0], occ[:, 1] * 100, color="tab:purple")
    a.set_ylabel("decode KV occupancy %")
    a.set_ylim(0, 100)
    b.plot(waiting[:, 0], waiting[:, 1], color="tab:orange", drawstyle="steps-post")
    b.set_ylabel("waiting for first token")
    b.set_xlabel("simulated time (s)")
    for ax in (a, b):
        ax.grid(alpha=0.3)
    fig.suptitle(_t(f"{name}: decode KV occupancy and queue over time (modeled)"))
    return [latency, _png(fig)]


def slug(header: str) -> str:
    """A file-name part for a metric's header: `TTFT p95 ms` -> `ttft-p95-ms`, `$/Mtok out` -> `usd-mtok-out`."""
    return re.sub(r"[^a-z0-9]+", "-", header.lower().replace("$", "usd").replace("%", "pct")).strip("-")


def sweep_chart_names(stem: str) -> list[str]:
    """The chart files a sweep writes beside its CSV (named before any point runs, so --out is checked first)."""
    return [f"{stem}-{slug(h)}.png" for h in SWEEP_METRICS]


def _axis(results: list[dict[str, Any]], paths: list[str]) -> str:
    """The swept path drawn along x: the last whose values are all numbers (concurrency, rate), else the last."""
    numeric = [p for p in paths if all(_is_num(r["point"][p]) for r in results)]
    return (numeric or paths)[-1]


def sweep_charts(title: str, paths: list[str], results: list[dict[str, Any]]) -> list[bytes]:
    """One PNG per SWEEP_METRICS entry: the metric over one swept path, a line per value of the others; failed
    points are left out (their reasons are in the CSV)."""
    plt = _pyplot()
    by_header = {h: (p, u) for h, p, u in COLUMNS}
    ran = [r for r in results if "error" not in r]
    x_path = _axis(results, paths)
    others = [p for p in paths if p != x_path]
    numeric_x = all(_is_num(r["point"][x_path]) for r in results)
    xs_all = list(dict.fromkeys(r["point"][x_path] for r in results))
    out = []
    for header in SWEEP_METRICS:
        path, unit = by_header[header]
        fig, ax = plt.subplots(figsize=(8, 4.5))
        lines: dict[tuple[Any, ...], list[tuple[Any, float]]] = {}
        for r in ran:
            v = scaled(lookup(r, path), unit)
            if _is_num(v):
                lines.setdefault(tuple(r["point"][p] for p in others), []).append((r["point"][x_path], v))
        for key, pts in lines.items():
            label = _t(", ".join(f"{p.split('.')[-1]}={v}" for p, v in zip(others, key, strict=True))) or None
            xs = [x if numeric_x else xs_all.index(x) for x, _ in pts]
            ax.plot(xs, [y for _, y in pts], "o-", label=label)
        if not numeric_x:
            ax.set_xticks(range(len(xs_all)), [_t(str(x)) for x in xs_all])
        if not lines:
            ax.text(0.5, 0.5, "no point ran", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel(_t(x_path))
        ax.set_ylabel(_t(header))
        ax.grid(alpha=0.3)
        if any(k for k in lines):
            ax.legend(fontsize=8)
        ax.set_title(_t(f"{title}: {header} (modeled)"))
        out.append(_png(fig))
    return out
