"""One run of a scenario on the engine: simulate, then hand the record to `results/` for the Result."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from simulator.config.scenario import Scenario
from simulator.engine.simulation import Simulation, StepTimer
from simulator.pricing.profile import Profile
from simulator.results.record import RunRecord
from simulator.results.result import build_result


def simulate(
    sc: Scenario,
    base_dir: Path | None = None,
    *,
    step_mode: bool = False,
    on_progress: Callable[[int], None] | None = None,
    timer: StepTimer | None = None,
    profile: Profile | None = None,
) -> tuple[dict[str, Any], RunRecord]:
    """The Result and the run's record. `timer`: a step timer that takes over step times (the replay executor;
    step mode only); `profile`: tables to price by in place of the scenario's (`compare` measures its own)."""
    sim = Simulation(sc, step_mode=step_mode, base_dir=base_dir, on_progress=on_progress, timer=timer, profile=profile)
    sim.run()
    run = sim.record()
    return build_result(run), run
