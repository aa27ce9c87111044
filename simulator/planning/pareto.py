"""Pareto frontiers of throughput per GPU against p95 TPOT and against p95 TTFT, as CSV and a PNG chart.

A configuration is on a frontier when no other one is at least as fast per GPU *and* at least as quick,
and better in one of the two. Throughput counts output tokens for a study whose requests generate, input +
output tokens for a prefill study (the cost basis of `results.cost`). Runs that were stopped early are left
out: their metrics cover part of a run.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from simulator.results.cost import ALL, OUTPUT, generating

LATENCIES = (("tpot_p95_ms", "p95 TPOT (ms)"), ("ttft_p95_ms", "p95 TTFT (ms)"))


def point(name: str, metrics: dict[str, Any], meets: bool | None = None) -> dict[str, Any]:
    """One configuration's coordinates."""
    gen = generating(metrics)
    per_s = metrics["output_tokens_per_s"] + (0.0 if gen else metrics["input_tokens_per_s"])
    return {
        "label": name,
        "tokens_per_s_per_gpu": round(per_s / metrics["gpus"], 3),
        "token_basis": OUTPUT if gen else ALL,
        "tpot_p95_ms": metrics["tpot_ms"]["p95"],
        "ttft_p95_ms": metrics["ttft_ms"]["p95"],
        "meets_slo": meets,
    }


def frontier(points: list[dict[str, Any]], latency: str) -> list[int]:
    """Indices of the points on the frontier of throughput per GPU (higher) against `latency` (lower)."""
    ok = [i for i, p in enumerate(points) if p[latency] is not None]
    front = []
    for i in ok:
        a = points[i]
        dominated = any(
            b["tokens_per_s_per_gpu"] >= a["tokens_per_s_per_gpu"]
            and b[latency] <= a[latency]
            and (b["tokens_per_s_per_gpu"] > a["tokens_per_s_per_gpu"] or b[latency] < a[latency])
            for j, b in ((j, points[j]) for j in ok)
            if j != i
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i][latency])


def to_csv(points: list[dict[str, Any]]) -> str:
    on = {lat: set(frontier(points, lat)) for lat, _ in LATENCIES}
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        [
            "label",
            "tokens_per_s_per_gpu",
            "token_basis",
            "tpot_p95_ms",
            "ttft_p95_ms",
            "meets_slo",
            "on_tpot_frontier",
            "on_ttft_frontier",
        ]
    )
    for i, p in enumerate(points):
        w.writerow(
            [
                p["label"],
                p["tokens_per_s_per_gpu"],
                p["token_basis"],
                p["tpot_p95_ms"],
                p["ttft_p95_ms"],
                "" if p["meets_slo"] is None else p["meets_slo"],
                i in on["tpot_p95_ms"],
                i in on["ttft_p95_ms"],
            ]
        )
    return buf.getvalue()


def chart(points: list[dict[str, Any]], title: str) -> bytes:
    """Two panels (vs TPOT, vs TTFT): every point grey, the frontier joined and labelled, as PNG bytes (written
    with the CSV, all or nothing)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5))
    basis = points[0]["token_basis"] if points else OUTPUT
    for ax, (lat, name) in zip(axes, LATENCIES, strict=True):
        xs = [p[lat] for p in points if p[lat] is not None]
        ys = [p["tokens_per_s_per_gpu"] for p in points if p[lat] is not None]
        ax.scatter(xs, ys, color="0.7", s=18, label="configuration")
        front = frontier(points, lat)
        fx = [points[i][lat] for i in front]
        fy = [points[i]["tokens_per_s_per_gpu"] for i in front]
        ax.plot(fx, fy, "o-", color="tab:blue", label="Pareto frontier")
        for i in front:
            ax.annotate(
                points[i]["label"].replace(" ", "\n"),
                (points[i][lat], points[i]["tokens_per_s_per_gpu"]),
                fontsize=6.5,
                xytext=(5, -4),
                textcoords="offset points",
                va="top",
            )
        ax.set_xlabel(name)
        ax.set_ylabel(f"{basis} per s per GPU")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
        ax.margins(x=0.25, y=0.15)
    fig.suptitle(f"{title} (modeled)")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def paths(stem: Path) -> tuple[Path, Path]:
    """`STEM-pareto.csv` and `STEM-pareto.png`: named before any work, so `--out` can be checked first."""
    return stem.with_name(stem.name + "-pareto.csv"), stem.with_name(stem.name + "-pareto.png")


def files(points: list[dict[str, Any]], title: str, stem: Path) -> dict[Path, str | bytes]:
    """The frontier's CSV and chart, for `write_files` (with a sweep's own files, all or nothing)."""
    csv_path, png_path = paths(stem)
    return {csv_path: to_csv(points), png_path: chart(points, title)}


def write(points: list[dict[str, Any]], title: str, stem: Path) -> tuple[Path, Path]:
    """Write `files` (both or neither)."""
    from simulator.atomic import write_files

    write_files(files(points, title, stem))
    return paths(stem)
