"""Checks a run must pass before it starts that need the scenario as loaded, worded against the file or the
--set that caused them (the loader's rule: an error names where its value came from)."""

from __future__ import annotations

from pathlib import Path

from simulator import budget
from simulator.budget import Limits
from simulator.capacity import pool_capacity
from simulator.config import loader
from simulator.config.scenario import Scenario
from simulator.errors import InputError


def check_fits(sc: Scenario, scenario: Path, sets: tuple[str, ...] | list[str]) -> None:
    """Every pool's weights and at least one KV page fit its GPUs (`mem_fraction` too small, weights too large):
    refused naming the file's pool or the --set that shrank it, not only the pool."""
    for name, pool in sc.deployment.pools().items():
        cap = pool_capacity(sc.model, sc.hardware_of(pool), pool)
        if not cap.fits:
            raise InputError(loader.locate(scenario, sets, f"deployment.{name}", cap.reason))


def check_trace(sc: Scenario, scenario: Path, limits: Limits) -> None:
    """A trace's rows and blocks checked against the work limits before a search reads its rate from it (every
    trial holds the whole trace, at whatever speed-up)."""
    if sc.traffic.trace is not None:
        budget.check(sc, scenario.parent, limits)
