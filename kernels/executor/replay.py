"""`phaseplan replay`: a scenario on the real clock — the modeled engine run one step at a time, each step's plan
executed on a device by `ReplayClock` — written as the same Result document as `run`, with what was executed
where and what was priced under `provenance.replay`."""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernels.executor.clock import ReplayClock
from kernels.executor.device import prepare
from simulator.config.scenario import Scenario
from simulator.engine.run import simulate
from simulator.pricing.profile import Profile
from simulator.results.record import RunRecord


def device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return torch.cuda.get_device_name()
    name = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        models = [ln.split(":", 1)[1].strip() for ln in cpuinfo.read_text().splitlines() if ln.startswith("model name")]
        name = f"{models[0]} ({len(models)} cores)" if models else name
    n = torch.get_num_threads()
    return f"{name}, torch on {n} thread{'s' if n > 1 else ''}"


@dataclass(frozen=True)
class Replayed:
    """A replay's Result, its run record, and the device timer that timed it (sampled families, trackers)."""

    result: dict[str, Any]
    run: RunRecord
    timer: ReplayClock


def replay(
    sc: Scenario,
    base_dir: Path | None,
    device: str,
    clock: str = "measured",
    budget_s: float = 120.0,
    shared: dict[Any, Any] | None = None,
    profile: Profile | None = None,
    between: Callable[[ReplayClock], None] | None = None,
) -> Replayed:
    """The engine in step mode with the device timer in place of the cost model. `profile`: what prices the steps
    the device does not run (and the op families' price beside their measured time), else the scenario's;
    `between`: run after each executed step, handed the device timer."""
    dev = prepare(device)
    timer = ReplayClock(sc, dev, clock, budget_s, shared=shared, between=between)
    result, run = simulate(sc, base_dir, step_mode=True, timer=timer, profile=profile)
    result["clock"] = clock
    result["provenance"]["replay"] = timer.provenance(device_name(device))
    return Replayed(result, run, timer)
