"""A run's record → the Result document (JSON-ready, deterministic), whichever clock ran it."""

from __future__ import annotations

from typing import Any

from simulator.capacity import capacity_dict
from simulator.config.specs import EngineSpec
from simulator.results.anatomy import step_anatomy
from simulator.results.metrics import build_integrity, build_metrics
from simulator.results.record import RunRecord
from simulator.results.tiers import kv_tiers

SCHEMA = "phaseplan.result/1"


def engine_provenance(engine: EngineSpec) -> dict[str, str]:
    """The engine's name, and for one `phaseplan calibrate` fitted, what it was fitted to (absent otherwise, so a
    published preset's Result is what it always was)."""
    out = {"engine": engine.name}
    if engine.calibration is not None:
        c = engine.calibration
        files = ", ".join(f.path for f in c.files)
        out["engine_fitted"] = f"fitted to {c.runs} runs of {c.deployment} (files {files}) from {c.base}"
    return out


def build_result(run: RunRecord, clock: str = "modeled") -> dict[str, Any]:
    """The Result of a finished run; `clock` says which clock's step times it holds (the replay names its own)."""
    metrics = build_metrics(run)
    tiers = kv_tiers(run)  # KV tiers below HBM: hits and moves by tier, load-back time (absent without tiers)
    if tiers is not None:
        metrics["kv_tiers"] = tiers
    return {
        "schema": SCHEMA,
        "clock": clock,
        # The engine's values, not its per-term prose (`sources`: the preset or engine file keeps it), so a
        # sweep's Results stay a few KB a point.
        "scenario": run.scenario.model_dump(mode="json", exclude={"sweep": True, "focus": True, "engine": {"sources"}}),
        "provenance": {**run.profile.provenance(), **engine_provenance(run.scenario.engine)},
        "capacity": {name: capacity_dict(p.capacity) for name, p in run.pools.items()},
        "metrics": metrics,
        "integrity": build_integrity(run),
        "step_anatomy": step_anatomy(run),
    }
