"""`phaseplan compare`: the same scenario simulated (priced by a profile of the device) and replayed on the
device; every headline metric side by side with rel_error = sim / replay − 1, then the op families of the
sampled steps, the profile's price against the executor's measured time.

On the CPU the profile is measured here, in the same run (`--profile here`, the CPU's default): every op shape
the scenario's steps produce is timed between the replay's executed steps, a few at a time, on this machine and
under the load the replay runs under, so the verdict is about the model rather than about where and when it ran (a
profile measured on another machine read −41% / +72% on a loaded one). The simulation, and the op families of the
replay's sampled steps, are priced by it. The timing noise is reported beside it: the spread of each shape's own
samples, how far a re-timed fifth of the shapes moved by the end, and the spread of the replay's repeated steps;
and what the load cost the replay's steps beyond it (the preemptions during them, `_preemption`).

The executor also spends time no op of the op list prices — the glue between ops, the norms, ropes and routing it
runs as several torch ops each, the KV write into the real cache, the integrity check's glue — and its kernels run
slower inside a step than timed alone (operands evicted by the ops before; the preemptions a step of several ms
catches under load, and the refill after each). Probe steps of its own, run one at a time between the replay's
steps like the shapes (`overhead.Probes`), measure both, and the profile carries them as a term
(`simulator.pricing.step_overhead`) that the simulation adds at its step timer.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
import time
import zlib
from pathlib import Path
from typing import Any

from kernels.executor.clock import Families
from kernels.executor.device import prepare
from kernels.executor.overhead import Probes
from kernels.executor.replay import device_name, replay
from kernels.measure import time_op
from kernels.profiler import flat, unmeasurable
from kernels.scenario_profile import scenario_shapes
from simulator.config.scenario import Scenario
from simulator.engine.run import simulate
from simulator.pricing.costmodel import CostModel
from simulator.pricing.ops import COLLECTIVES
from simulator.pricing.profile import Profile
from simulator.pricing.step_overhead import StepOverhead

SKIP = frozenset({"requests", "gpus"})  # inputs, not outcomes
HERE = "here"  # --profile here: the scenario's op shapes timed on this device, in this run
PROBE_EVERY = 5  # after the replay, every 5th shape is timed again: how far the machine moved meanwhile
PER_STEP = 4  # shapes timed after each executed step of the replay


def flatten(metrics: dict[str, Any]) -> dict[str, float]:
    """Numeric metrics by name, percentiles and per-pool values flattened with a dot (`tpot_ms.p50`); the
    occupancy series is left out (its mean and max stay)."""
    out: dict[str, float] = {}
    for k, v in metrics.items():
        if k in SKIP:
            continue
        if isinstance(v, dict):
            for sub, x in v.items():
                if isinstance(x, int | float) and not isinstance(x, bool):
                    out[f"{k}.{sub}"] = float(x)
        elif isinstance(v, int | float) and not isinstance(v, bool):
            out[k] = float(v)
    return out


def _rel(sim: float | None, rep: float | None) -> float | None:
    if sim is None or rep is None or rep == 0:
        return None
    return round(sim / rep - 1.0, 4)


def _key(family: str, shape: dict[str, Any]) -> tuple[str, str]:
    return family, repr(sorted(shape.items()))


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 4) if xs else None


def _replay_spread(timer: Any) -> float | None:
    """Half the range of a bucket's repeated step times over their median, the median over buckets."""
    buckets = [b for b in timer.sampler.buckets.values() if len(b.samples) > 1]
    return _median([(max(b.samples) - min(b.samples)) / 2 / b.time() for b in buckets])


def _preemption(timer: Any) -> dict[str, float | None]:
    """What load cost the replay's executed steps beyond the time away (which thread CPU time leaves out): how
    often the OS took the core mid-step, and the CPU time each took back — the slope of a step's time on its
    preemptions within buckets (whose samples are the same step), pooled, with its standard error — as a share of
    a mean step. The op shapes are timed as medians of short runs, which mostly escape it; a step of several ms
    rarely does. An estimate from a few samples a bucket: read its error beside it."""
    buckets = [b for b in timer.sampler.buckets.values() if b.samples]
    steps = [t for b in buckets for t in b.samples]
    away = [p for b in buckets for p in b.preempted]
    centred = []  # (preemptions, seconds) about their bucket's means
    for b in buckets:
        mt, mp = statistics.fmean(b.samples), statistics.fmean(b.preempted)
        centred += [(p - mp, t - mt) for p, t in zip(b.preempted, b.samples, strict=True)]
    sxx = sum(p * p for p, _ in centred)
    dof = len(steps) - len(buckets) - 1
    if not sxx or dof < 1:
        return {
            "per_step": statistics.fmean(away) if away else None,
            "ms_each": None,
            "ms_each_se": None,
            "share": None,
        }
    each = sum(p * t for p, t in centred) / sxx
    se = math.sqrt(sum((t - each * p) ** 2 for p, t in centred) / dof / sxx)
    per_step = statistics.fmean(away)
    return {
        "per_step": round(per_step, 3),
        "ms_each": round(each * 1e3, 4),
        "ms_each_se": round(se * 1e3, 4),
        "share": round(per_step * each / statistics.fmean(steps), 4),
    }


class ShapeTimer:
    """The scenario's op shapes timed on the device a few at a time between the replay's executed steps, in an
    order that mixes the families, so every family's table is timed over the replay's whole run and load; what the
    replay leaves is timed after it, and then every PROBE_EVERY-th shape once more (the drift)."""

    def __init__(self, sc: Scenario, base_dir: Path | None, device: str) -> None:
        prepare(device)  # one CPU thread, as the replay runs
        self.device = device
        self.shapes = sorted(flat(scenario_shapes(sc, base_dir)), key=_spread_key)
        self.probes = Probes(sc)  # the executor's work beyond its kernels, one probe step at a time
        self.timed: dict[tuple[str, str], dict[str, Any]] = {}
        self.next = 0
        self.seconds = 0.0

    def _time(self, shapes: list[Any]) -> dict[tuple[str, str], dict[str, Any]]:
        """Each measurable shape's median and spread (a shape that cannot be timed is left to the roofline)."""
        t0 = time.monotonic()
        out = {}
        for family, s in shapes:
            if unmeasurable(family, s) is None:
                out[_key(family, s)] = {"family": family, "shape": s, **time_op(family, dict(s), self.device)}
        self.seconds += time.monotonic() - t0
        return out

    def between(self, clock: Any) -> None:
        """After an executed step of the replay (`clock`, its `ReplayClock`): the next few shapes, then one probe
        step's execution."""
        if self.next < len(self.shapes):
            self.timed.update(self._time(self.shapes[self.next : self.next + PER_STEP]))
            self.next += PER_STEP
        t0 = time.monotonic()
        self.probes.next(clock)
        self.seconds += time.monotonic() - t0

    def finish(self, clock: Any) -> tuple[Profile, dict[str, Any]]:
        """Time what the replay left, then the drift probe: the profile to price by (with the executor's work
        beyond its kernels, from the probe steps), and the noise."""
        if self.next < len(self.shapes):
            self.timed.update(self._time(self.shapes[self.next :]))
            self.next = len(self.shapes)
        after = self._time(self.shapes[::PROBE_EVERY])
        first = self.timed
        drift = [abs(e["median_us"] / first[k]["median_us"] - 1) for k, e in after.items() if k in first]
        spread = [(e["p90_us"] - e["p10_us"]) / 2 / e["median_us"] for e in first.values() if e["median_us"] > 0]
        kernels: dict[str, list[tuple[Any, float]]] = {}
        for e in first.values():
            kernels.setdefault(e["family"], []).append((e["shape"], e["median_us"]))
        profile = Profile(device_name(self.device), "measured", kernels, None, dt.datetime.now(dt.UTC).isoformat())
        t0 = time.monotonic()
        profile.step_overhead[self.probes.sc.model.name] = self.probes.finish(clock, profile)
        self.seconds += time.monotonic() - t0
        return profile, {"shape_spread": _median(spread), "drift": _median(drift)}


def _spread_key(fs: tuple[str, dict[str, Any]]) -> int:
    """A fixed pseudo-random order of the shapes (families mixed), the same on every run."""
    return zlib.crc32(repr(_key(*fs)).encode())


def compare(
    sc: Scenario,
    base_dir: Path | None,
    device: str,
    profile: str | None = None,
    budget_s: float = 120.0,
    shared: dict[Any, Any] | None = None,
) -> dict[str, Any]:
    """`profile`: a profile file the simulation prices by, `here` (the CPU's default) to time the scenario's op
    shapes on the device in this run, or None for the scenario's own. `shared`: rank models kept across calls
    (see `ReplayClock`)."""
    here = profile == HERE or (profile is None and device == "cpu")
    timer_here = ShapeTimer(sc, base_dir, device) if here else None
    if profile is not None and not here:
        sc = sc.model_copy(update={"profile": profile})
    between = timer_here.between if timer_here is not None else None
    replayed = replay(sc, base_dir, device, "measured", budget_s, shared, between=between)
    rep, timer = replayed.result, replayed.timer
    measured: Profile | None = None
    f = timer.families
    priced = dict(f.priced)
    if timer_here is not None:
        measured, noise = timer_here.finish(timer)  # before the replay's caches go: the probes write there
        overhead = measured.step_overhead[sc.model.name]
        noise["replay_spread"] = _replay_spread(timer)
        noise["timing_noise"] = max((v for v in noise.values() if v is not None), default=None)
        noise["preemption"] = _preemption(timer)
        priced = _priced_by(measured, sc, f.sampled)
    timer.close()
    sim, _ = simulate(sc, base_dir, profile=measured)
    a, b = flatten(sim["metrics"]), flatten(rep["metrics"])
    metrics = {k: {"sim": a[k], "replay": b.get(k), "rel_error": _rel(a[k], b.get(k))} for k in a}
    families = {}
    for fam in sorted(set(f.measured) | set(priced), key=lambda x: -f.measured.get(x, 0.0)):
        price = priced.get(fam, 0.0) * 1e3 / max(1, f.steps)
        took = f.measured.get(fam, 0.0) * 1e3 / max(1, f.steps)
        families[fam] = {"priced_ms": round(price, 4), "measured_ms": round(took, 4), "rel_error": _rel(price, took)}
    out = {
        "metrics": metrics,
        "families": families,
        "sampled_steps": f.steps,
        "profile": sim["provenance"],
        "replay": rep["provenance"]["replay"],
    }
    if timer_here is not None:
        out["measured_here"] = {
            "shapes": len(timer_here.shapes),
            "seconds": round(timer_here.seconds, 1),
            "noise": noise,
            "step_overhead": {**overhead.as_doc(), **_overhead_on(overhead, f, priced, sc.integrity.enabled)},
        }
    return out


def _overhead_on(
    overhead: StepOverhead, f: Families, priced: dict[str, float], checked: bool
) -> dict[str, float | None]:
    """The term on the replay's sampled steps (ms a step) beside what it stands for there: all the time the steps
    took beyond the op list's price (the time no op took, and every family's time beyond its price)."""
    n = max(1, f.steps)
    glue = sum(
        overhead.seconds(batch, len(chunks), batch + sum(c for c, _ in chunks), ctx, checked)
        for _, batch, ctx, _, chunks in f.sampled
    )
    term = glue + overhead.in_step(sum(priced.values()))
    beyond = sum(f.measured.values()) - sum(priced.values())
    return {
        "priced_ms": round(term * 1e3 / n, 4),
        "measured_ms": round(beyond * 1e3 / n, 4),
        "rel_error": _rel(term, beyond),
    }


def _priced_by(profile: Profile, sc: Scenario, sampled: list[Any]) -> dict[str, float]:
    """The replay's sampled steps priced by `profile`, in seconds per op family (collectives left out)."""
    pools = sc.deployment.pools()
    costs = {
        name: CostModel(sc.model, sc.hardware, pool, profile, sc.integrity.enabled) for name, pool in pools.items()
    }
    out: dict[str, float] = {}
    for name, batch, ctx, pages, chunks in sampled:
        for fam, sec in costs[name].breakdown(batch, ctx, pages, chunks).items():
            if fam not in COLLECTIVES:
                out[fam] = out.get(fam, 0.0) + sec
    return out
