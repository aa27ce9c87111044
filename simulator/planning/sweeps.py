"""A sweep that behaves: every point runs, and a point that is invalid or does not fit is kept with its reason.

The points run on a `Backend` (in parallel where asked) and come back in sweep order, so the sweep's JSON
and CSV are byte-identical for every backend and worker count.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from simulator.config.scenario import Scenario
from simulator.config.sweep import points, scenario_at
from simulator.engine.run import simulate
from simulator.errors import InputError
from simulator.planning.backends import Backend


def sweep_point(job: tuple[Scenario, Path | None]) -> dict[str, Any]:
    """One point's Result, or `{"error": reason}` when its deployment does not fit."""
    sc, base_dir = job
    try:
        return simulate(sc, base_dir)[0]
    except InputError as e:
        return {"error": str(e)}


def run_sweep(
    sc: Scenario,
    raw: dict[str, Any],
    source: str,
    base_dir: Path | None,
    backend: Backend,
    on_done: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """`[{"point": …, **result}]` in sweep order; a failed point is `{"point": …, "error": reason}`."""
    pts = points(sc)
    results: list[dict[str, Any] | None] = [None] * len(pts)
    jobs: list[tuple[int, Scenario]] = []
    for i, p in enumerate(pts):
        try:
            jobs.append((i, scenario_at(raw, p, source)))
        except InputError as e:
            results[i] = {"point": p, "error": str(e)}
    docs = backend.map(sweep_point, [(s, base_dir) for _, s in jobs], on_done)
    for (i, _), doc in zip(jobs, docs, strict=True):
        results[i] = {"point": pts[i], **doc}
    return [r for r in results if r is not None]
