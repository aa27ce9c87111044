"""`phaseplan replay`: a scenario on the real clock — the modeled engine run one step at a time, each step's plan
executed on a device by `ReplayClock` — written as the same Result document as `run`, with what was executed
where and what was priced under `provenance.replay`."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

from kernels.executor.clock import ReplayClock
from kernels.executor.device import prepare
from simulator.config.scenario import Scenario
from simulator.modeled.engine import Simulation
from simulator.results.result import simulate


def device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return torch.cuda.get_device_name()
    return f"{platform.processor() or platform.machine()} CPU ({torch.get_num_threads()} thread)"


def replay(sc: Scenario, base_dir: Path | None, device: str, clock: str = "measured", budget_s: float = 120.0,
           shared: dict[Any, Any] | None = None) -> tuple[dict[str, Any], Simulation]:
    """The Result, and the finished simulation (its `timer` is the `ReplayClock`)."""
    dev = prepare(device)
    timer = ReplayClock(sc, dev, clock, budget_s, shared=shared)
    result, sim = simulate(sc, base_dir, step_mode=True, timer=timer)
    result["clock"] = clock
    result["provenance"]["replay"] = timer.provenance(device_name(device))
    return result, sim
