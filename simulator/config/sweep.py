"""Sweeps: the cartesian product of a scenario's `sweep` block, one Result per point."""

from __future__ import annotations

import csv
import io
import itertools
from typing import Any

from simulator.config import loader
from simulator.config.scenario import Scenario
from simulator.errors import InputError

# Columns of the sweep table and CSV: (header with its unit, dotted path into the Result, unit). A "%" column
# holds a share, shown and written as a percentage, as `run` shows it.
COLUMNS = [
    ("out tok/s", "metrics.output_tokens_per_s", "tok/s"),
    ("in tok/s", "metrics.input_tokens_per_s", "tok/s"),
    ("tok/s/GPU", "metrics.output_tokens_per_s_per_gpu", "tok/s"),
    ("TTFT p95 ms", "metrics.ttft_ms.p95", "ms"),
    ("TPOT p50 ms", "metrics.tpot_ms.p50", "ms"),
    ("TPOT p95 ms", "metrics.tpot_ms.p95", "ms"),
    ("max running", "metrics.max_running", ""),
    ("preempted", "metrics.preempted", ""),
    ("KV occ max %", "metrics.kv_occupancy.max", "%"),
    ("SLO %", "metrics.slo_attainment", "%"),
    ("$/Mtok out", "metrics.cost_per_mtok_usd", "$"),
    ("prefill chunk ms", "step_anatomy.summary.prefill_chunk_ms", "ms"),
    ("prefill GEMM ms", "step_anatomy.summary.prefill_chunk_gemm_ms", "ms"),
    ("decode step ms", "step_anatomy.summary.decode_step_ms", "ms"),
]


def scaled(v: Any, unit: str) -> Any:
    """A value in its column's unit: shares as percentages."""
    return round(v * 100, 4) if unit == "%" and isinstance(v, int | float) else v


def points(sc: Scenario) -> list[dict[str, Any]]:
    """Every combination of the sweep's values, first path varying slowest."""
    if not sc.sweep:
        return [{}]
    paths = list(sc.sweep)
    for p in paths:
        if not sc.sweep[p]:
            raise InputError(f"sweep.{p}: needs at least one value")
    return [dict(zip(paths, combo, strict=True)) for combo in itertools.product(*sc.sweep.values())]


def scenario_at(raw: dict[str, Any], point: dict[str, Any], source: str) -> Scenario:
    data = loader.one_point(raw, point)
    try:
        return loader.validate(data, source)
    except InputError as e:
        where = ", ".join(f"{k}={v}" for k, v in point.items())
        raise InputError(f"sweep point {where}: {e}") from None


def lookup(doc: dict[str, Any], dotted: str) -> Any:
    node: Any = doc
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def to_csv(results: list[dict[str, Any]]) -> str:
    """Every column of every point; a point that failed has its reason in `error` and no figures."""
    paths = list(results[0]["point"]) if results else []
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(paths + [h for h, _, _ in COLUMNS] + ["integrity detected", "profile source", "error"])
    for r in results:
        if "error" in r:
            w.writerow([r["point"][p] for p in paths] + [""] * (len(COLUMNS) + 2) + [r["error"]])
            continue
        w.writerow(
            [r["point"][p] for p in paths]
            + [scaled(lookup(r, p), u) for _, p, u in COLUMNS]
            + [lookup(r, "integrity.detected"), lookup(r, "provenance.profile_source"), ""]
        )
    return buf.getvalue()


def paired_deltas(results: list[dict[str, Any]], axis: str) -> list[dict[str, Any]]:
    """For a two-valued axis (e.g. integrity.enabled: [true, false]): the change from the second value to the
    first at every other point of the sweep — what turning the feature on costs."""
    values = list(dict.fromkeys(r["point"][axis] for r in results))
    if len(values) != 2:
        return []
    on, off = values
    by_rest: dict[tuple, dict[Any, dict[str, Any]]] = {}
    for r in (r for r in results if "error" not in r):
        rest = tuple((k, v) for k, v in r["point"].items() if k != axis)
        by_rest.setdefault(rest, {})[r["point"][axis]] = r
    rows = []
    for rest, pair in by_rest.items():
        if on not in pair or off not in pair:
            continue
        a, b = pair[on]["metrics"], pair[off]["metrics"]
        tput = (a["output_tokens_per_s"] / b["output_tokens_per_s"] - 1) if b["output_tokens_per_s"] else None
        tpot_a, tpot_b = a["tpot_ms"]["p95"], b["tpot_ms"]["p95"]
        rows.append(
            {
                "point": dict(rest),
                "throughput_change": tput,
                "tpot_p95_ms": (tpot_a, tpot_b),
                "tpot_p95_change": (tpot_a / tpot_b - 1) if tpot_a is not None and tpot_b else None,
            }
        )
    return rows
