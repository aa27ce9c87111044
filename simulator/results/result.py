"""One run of a scenario on the modeled clock → the Result document (JSON-ready, deterministic)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from simulator.capacity import capacity_dict
from simulator.config.scenario import Scenario
from simulator.modeled.engine import Simulation, StepTimer
from simulator.results.anatomy import step_anatomy
from simulator.results.metrics import build_integrity, build_metrics

SCHEMA = "phaseplan.result/1"


def simulate(
    sc: Scenario,
    base_dir: Path | None = None,
    *,
    step_mode: bool = False,
    on_progress: Callable[[int], None] | None = None,
    timer: StepTimer | None = None,
) -> tuple[dict[str, Any], Simulation]:
    """`timer`: a step timer that takes over step times (the replay executor; step mode only)."""
    sim = Simulation(sc, step_mode=step_mode, base_dir=base_dir, on_progress=on_progress, timer=timer)
    sim.run()
    result = {
        "schema": SCHEMA,
        "clock": "modeled",
        "scenario": sc.model_dump(mode="json", exclude={"sweep"}),
        "provenance": sim.profile.provenance(),
        "capacity": {name: capacity_dict(cap) for name, cap in sim.capacity.items()},
        "metrics": build_metrics(sim),
        "integrity": build_integrity(sim),
        "step_anatomy": step_anatomy(sim),
    }
    return result, sim
