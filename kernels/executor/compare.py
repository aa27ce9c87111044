"""`phaseplan compare`: the same scenario simulated (priced by a profile of the device) and replayed on the
device; every headline metric side by side with rel_error = sim / replay − 1, then the op families of the
sampled steps, the profile's price against the executor's measured time.

On the CPU the profile is measured here, in the same run (`--profile here`, the CPU's default): every op shape
the scenario's steps produce is timed just before the replay, on this machine and under its present load, so the
verdict is about the model rather than about where and when it ran (a profile measured on another machine, or on
this one an hour earlier, read −41% / +72% on a loaded machine). The timing noise is reported beside it: the
spread of each shape's own samples, how far a re-timed sample of the shapes moved by the end of the replay, and
the spread of the replay's repeated steps.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from kernels.executor.device import prepare
from kernels.executor.replay import replay
from kernels.profiler import flat, measured_profile
from kernels.scenario_profile import scenario_shapes
from simulator.config.scenario import Scenario
from simulator.engine.run import simulate
from simulator.pricing.profile import Profile

SKIP = frozenset({"requests", "gpus"})  # inputs, not outcomes
HERE = "here"  # --profile here: the scenario's op shapes timed on this device, in this run
PROBE_EVERY = 5  # after the replay, every 5th shape is timed again: how far the machine moved meanwhile


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


def _entries(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, float]]:
    """A measured profile document's timings by (family, shape)."""
    return {(f, repr(sorted(e["shape"].items()))): e for f, es in doc["kernels"].items() for e in es}


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 4) if xs else None


def _replay_spread(timer: Any) -> float | None:
    """Half the range of a bucket's repeated step times over their median, the median over buckets."""
    buckets = [b for b in timer.sampler.buckets.values() if len(b.samples) > 1]
    return _median([(max(b.samples) - min(b.samples)) / 2 / b.time() for b in buckets])


def measure_here(sc: Scenario, base_dir: Path | None, device: str) -> tuple[Profile, dict[str, Any], list[Any]]:
    """The scenario's op shapes timed on `device` now, set up as the replay runs (one CPU thread): the profile to
    price by, its document, and the shapes."""
    prepare(device)
    shapes = flat(scenario_shapes(sc, base_dir))
    doc = measured_profile(device, shapes, say=lambda _: None)
    kernels = {f: [(e["shape"], e["median_us"]) for e in es] for f, es in doc["kernels"].items()}
    return Profile(doc["device"], "measured", kernels, None, doc["date"]), doc, shapes


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
    measured: Profile | None = None
    noise: dict[str, Any] | None = None
    if here:
        t0 = time.monotonic()
        measured, before, shapes = measure_here(sc, base_dir, device)
        took = time.monotonic() - t0
    elif profile is not None:
        sc = sc.model_copy(update={"profile": profile})
    replayed = replay(sc, base_dir, device, "measured", budget_s, shared, measured)
    rep, timer = replayed.result, replayed.timer
    timer.close()
    if here:
        after = _entries(measured_profile(device, shapes[::PROBE_EVERY], say=lambda _: None))
        first = _entries(before)
        drift = [abs(e["median_us"] / first[k]["median_us"] - 1) for k, e in after.items() if k in first]
        spread = [(e["p90_us"] - e["p10_us"]) / 2 / e["median_us"] for e in first.values() if e["median_us"] > 0]
        noise = {
            "shape_spread": _median(spread),  # half the p10-p90 range of a shape's samples over its median
            "drift": _median(drift),  # |re-timed after the replay / timed before − 1|, median over the probe
            "replay_spread": _replay_spread(timer),
        }
        noise["timing_noise"] = max((v for v in noise.values() if v is not None), default=None)
    sim, _ = simulate(sc, base_dir, profile=measured)
    a, b = flatten(sim["metrics"]), flatten(rep["metrics"])
    metrics = {k: {"sim": a[k], "replay": b.get(k), "rel_error": _rel(a[k], b.get(k))} for k in a}
    f = timer.families
    families = {}
    for fam in sorted(set(f.measured) | set(f.priced), key=lambda x: -f.measured.get(x, 0.0)):
        priced = f.priced.get(fam, 0.0) * 1e3 / max(1, f.steps)
        measured_ms = f.measured.get(fam, 0.0) * 1e3 / max(1, f.steps)
        families[fam] = {
            "priced_ms": round(priced, 4),
            "measured_ms": round(measured_ms, 4),
            "rel_error": _rel(priced, measured_ms),
        }
    out = {
        "metrics": metrics,
        "families": families,
        "sampled_steps": f.steps,
        "profile": sim["provenance"],
        "replay": rep["provenance"]["replay"],
    }
    if here:
        out["measured_here"] = {"shapes": len(shapes), "seconds": round(took, 1), "noise": noise}
    return out
