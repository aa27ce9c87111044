"""The profile's measured spread as a source of error bars: each op's time drawn within its p10–p90.

A measured profile records, per kernel shape, the median and the 10th and 90th percentile of its timings.
One draw replaces every median by a time drawn uniformly between that shape's p10 and p90 (the same draw
for the whole run: the uncertainty of a profile is systematic, not step-to-step noise). The roofline has
no spread (median = p10 = p90), so its draws equal the median.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simulator.config.scenario import Scenario
from simulator.pricing.profile import Profile, read_file

SPREAD_STREAM = 0x5350  # the draw's own random stream, apart from traffic and faults


def profile_path(sc: Scenario, base_dir: Path | None) -> Path | None:
    """The profile file a scenario names (as `Profile.for_scenario` finds it), or None for the roofline."""
    if sc.profile == "roofline":
        return None
    path = Path(sc.profile)
    if not path.is_absolute() and base_dir is not None and (base_dir / path).is_file():
        path = base_dir / path
    return path


def has_spread(sc: Scenario, base_dir: Path | None) -> bool:
    """True when the scenario's profile records a p10 below or a p90 above some median."""
    path = profile_path(sc, base_dir)
    if path is None:
        return False
    f = read_file(path)  # validates, with the usual one-line errors
    return any(e.p10_us != e.median_us or e.p90_us != e.median_us for es in f.kernels.values() for e in es)


def drawn_profile(sc: Scenario, base_dir: Path | None, draw: int) -> Profile | None:
    """The scenario's profile with every time drawn in its p10–p90 (draw `draw`); None for the roofline."""
    path = profile_path(sc, base_dir)
    if path is None:
        return None
    f = read_file(path)
    rng = np.random.default_rng([sc.seed, SPREAD_STREAM, draw])
    kernels = {}
    for family, entries in f.kernels.items():
        lo = np.array([e.p10_us for e in entries], dtype=float)
        hi = np.array([e.p90_us for e in entries], dtype=float)
        us = lo + (np.maximum(hi, lo) - lo) * rng.random(len(entries))
        kernels[family] = [(e.shape, float(u)) for e, u in zip(entries, us, strict=True)]
    return Profile(f.device, f.source, kernels, str(path), f.date, f.measured_by, f.interpolate_gemm)
