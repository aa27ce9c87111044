"""`phaseplan compare`: the same scenario simulated (priced by a profile of the device) and replayed on the
device; every headline metric side by side with rel_error = sim / replay − 1, then the op families of the
sampled steps, the profile's price against the executor's measured time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernels.executor.replay import replay
from simulator.config.scenario import Scenario
from simulator.engine.run import simulate

SKIP = frozenset({"requests", "gpus"})  # inputs, not outcomes


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


def compare(
    sc: Scenario,
    base_dir: Path | None,
    device: str,
    profile: str | None = None,
    budget_s: float = 120.0,
    shared: dict[Any, Any] | None = None,
) -> dict[str, Any]:
    """`shared`: rank models kept across calls (see `ReplayClock`)."""
    if profile is not None:
        sc = sc.model_copy(update={"profile": profile})
    sim, _ = simulate(sc, base_dir)
    replayed = replay(sc, base_dir, device, "measured", budget_s, shared)
    rep, timer = replayed.result, replayed.timer
    timer.close()
    a, b = flatten(sim["metrics"]), flatten(rep["metrics"])
    metrics = {k: {"sim": a[k], "replay": b.get(k), "rel_error": _rel(a[k], b.get(k))} for k in a}
    f = timer.families
    families = {}
    for fam in sorted(set(f.measured) | set(f.priced), key=lambda x: -f.measured.get(x, 0.0)):
        priced = f.priced.get(fam, 0.0) * 1e3 / max(1, f.steps)
        measured = f.measured.get(fam, 0.0) * 1e3 / max(1, f.steps)
        families[fam] = {
            "priced_ms": round(priced, 4),
            "measured_ms": round(measured, 4),
            "rel_error": _rel(priced, measured),
        }
    return {
        "metrics": metrics,
        "families": families,
        "sampled_steps": f.steps,
        "profile": sim["provenance"],
        "replay": rep["provenance"]["replay"],
    }
