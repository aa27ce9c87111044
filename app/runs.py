"""Runs from the page: the study plus its overrides, capped for an interactive answer, cached by scenario hash.

A run keeps, beside the Result document, the per-request times the charts need (the Result carries only
percentiles) and whether the cap cut the study short, so the page can say so next to the numbers.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.scenario_io import Study
from simulator import budget
from simulator.config import loader
from simulator.config.scenario import Scenario
from simulator.engine.run import simulate
from simulator.errors import InputError
from simulator.results import requests

MAX_REQUESTS = 3000  # an interactive what-if answers in seconds; `phaseplan run` runs the whole study


@dataclass(frozen=True)
class Run:
    """One simulated scenario as the page shows it."""

    key: str  # hash of the resolved scenario (and where its files resolve)
    study: str
    overrides: dict[str, Any]  # the knobs moved, without the cap
    sets: dict[str, Any]  # everything `--set` would need to reproduce it, the cap included
    result: dict[str, Any]
    capped: bool  # the cap stopped the run before the study's own end
    ttft_ms: np.ndarray  # completed requests
    tpot_ms: np.ndarray  # completed requests with more than one output token
    waiting: np.ndarray  # (t seconds, requests waiting for their first token) over simulated time


def capped_sets(study: Study, overrides: dict[str, Any], cap: int = MAX_REQUESTS) -> dict[str, Any]:
    """The overrides plus `traffic.requests=cap` where the study could run past the cap."""
    own = study.scenario.traffic.requests
    sets = dict(overrides)
    if "traffic.requests" not in sets and (own is None or own > cap):
        sets["traffic.requests"] = cap
    return sets


def scenario_for(study: Study, sets: dict[str, Any]) -> Scenario:
    """The study with `sets` applied, validated like `--set` (a bad value is one InputError line)."""
    data = loader.one_point(study.raw, sets)
    return loader.validate(data, study.label, overridden=frozenset(sets))


def check_work(study: Study, overrides: dict[str, Any], cap: int = MAX_REQUESTS) -> None:
    """Refuse knobs (or an upload) whose capped run the CLI's work limits refuse: 4,096 instances of page size 1
    hold gigabytes however few requests run."""
    budget.check(scenario_for(study, capped_sets(study, overrides, cap)), study.base_dir)


def scenario_hash(sc: Scenario, study: Study) -> str:
    doc = {"scenario": sc.model_dump(mode="json"), "base_dir": str(study.base_dir)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


class RunCache:
    """The last `size` runs by scenario hash: moving a knob back shows its answer at once. Shared by the page's
    sessions and its background batches, hence the lock."""

    def __init__(self, size: int = 64) -> None:
        self._runs: OrderedDict[str, Run] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, key: str) -> Run | None:
        with self._lock:
            run = self._runs.get(key)
            if run is not None:
                self._runs.move_to_end(key)
            return run

    def put(self, run: Run) -> None:
        with self._lock:
            self._runs[run.key] = run
            self._runs.move_to_end(run.key)
            while len(self._runs) > self._size:
                self._runs.popitem(last=False)


SERVER = RunCache()  # the page server's: every session's runs, and the bundled studies' opening runs (app.serve)


class Batch:
    """Runs simulated one after another in a worker thread, into `cache`; the page polls `done` and redraws.

    The page stays usable while a curve's points run; a bad point stops the batch with its one-line error.
    """

    def __init__(self, study: Study, points: list[dict[str, Any]], cache: RunCache, cap: int) -> None:
        self.total, self.done, self.error = len(points), 0, None
        self._args = (study, points, cache, cap)
        self._thread = threading.Thread(target=self._work, name="phaseplan-batch", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        study, points, cache, cap = self._args
        try:
            for p in points:
                run(study, p, cache, cap)
                self.done += 1
        except InputError as e:
            self.error = str(e)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def wait(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)


def lookup(study: Study, overrides: dict[str, Any], cache: RunCache, cap: int = MAX_REQUESTS) -> tuple[str, Run | None]:
    """The scenario hash for these knobs and its cached run, if any (validation errors raise InputError)."""
    key = scenario_hash(scenario_for(study, capped_sets(study, overrides, cap)), study)
    return key, cache.get(key)


def run(
    study: Study,
    overrides: dict[str, Any],
    cache: RunCache | None = None,
    cap: int = MAX_REQUESTS,
    on_progress: Callable[[int, int], None] | None = None,
) -> Run:
    """Simulate the study with `overrides` (or return the cached run); `on_progress(done, cap)` as it goes."""
    sets = capped_sets(study, overrides, cap)
    sc = scenario_for(study, sets)
    key = scenario_hash(sc, study)
    if cache is not None and (hit := cache.get(key)) is not None:
        return hit
    budget.check(sc, study.base_dir)  # the work limits `phaseplan run` applies, before the run starts
    total = sc.traffic.requests or 0
    tick = (lambda done: on_progress(done, total)) if on_progress is not None else None
    result, ran = simulate(sc, study.base_dir, on_progress=tick)
    recs = ran.requests
    out = Run(
        key=key,
        study=study.label,
        overrides=dict(overrides),
        sets=sets,
        result=result,
        capped="traffic.requests" in sets
        and "traffic.requests" not in overrides
        and result["metrics"]["requests"] >= sets["traffic.requests"],
        ttft_ms=requests.ttft_ms(recs),
        tpot_ms=requests.tpot_ms(recs),
        waiting=requests.waiting(recs, result["metrics"]["duration_s"]),
    )
    if cache is not None:
        cache.put(out)
    return out
