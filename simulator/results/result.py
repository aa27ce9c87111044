"""A run's record → the Result document (JSON-ready, deterministic), whichever clock ran it."""

from __future__ import annotations

from typing import Any

from simulator.capacity import capacity_dict
from simulator.results.anatomy import step_anatomy
from simulator.results.metrics import build_integrity, build_metrics
from simulator.results.record import RunRecord

SCHEMA = "phaseplan.result/1"


def build_result(run: RunRecord, clock: str = "modeled") -> dict[str, Any]:
    """The Result of a finished run; `clock` says which clock's step times it holds (the replay names its own)."""
    return {
        "schema": SCHEMA,
        "clock": clock,
        "scenario": run.scenario.model_dump(mode="json", exclude={"sweep", "focus"}),
        "provenance": {**run.profile.provenance(), "engine": run.scenario.engine.name},
        "capacity": {name: capacity_dict(p.capacity) for name, p in run.pools.items()},
        "metrics": build_metrics(run),
        "integrity": build_integrity(run),
        "step_anatomy": step_anatomy(run),
    }
