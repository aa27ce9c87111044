"""A profile file written from the roofline: the same format as a measured one, labelled `modeled`.

It lets every path that reads profiles (interpolation, reports, `phaseplan compare`) run before a GPU has
measured anything, and says so in every number it produces: source `modeled`, device "<hw> (roofline
model)", and no spread (median = p10 = p90).
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from simulator.atomic import write_atomic
from simulator.config.specs import HardwareSpec
from simulator.pricing import roofline
from simulator.pricing.ops import COLLECTIVES


def git_commit() -> str:
    """The repository's HEAD, or 'unknown' outside a git checkout (or before the first commit)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def modeled_profile(hw: HardwareSpec, shapes: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """The profile document: the roofline time of every shape (collectives are left to the cost model)."""
    kernels = {}
    for family, family_shapes in shapes.items():
        if family in COLLECTIVES:
            continue
        entries = []
        for shape in family_shapes:
            us = float(roofline.op_us(family, shape, hw))
            entries.append({"shape": dict(shape), "median_us": us, "p10_us": us, "p90_us": us})
        kernels[family] = entries
    return {
        "device": f"{hw.name} (roofline model)",
        "source": "modeled",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": git_commit(),
        "versions": {"model": "simulator.roofline"},
        "ceilings": {"copy_gbs": hw.copy_gbs, "bf16_tflops": hw.bf16_tflops, "fp8_tflops": hw.fp8_tflops},
        "kernels": kernels,
    }


def write_modeled_profile(
    hw: HardwareSpec, shapes: Mapping[str, Sequence[Mapping[str, Any]]], out_path: str | Path
) -> Path:
    """Write the modeled profile JSON to `out_path` (folders created, written whole or not at all)."""
    path = Path(out_path)
    write_atomic(path, json.dumps(modeled_profile(hw, shapes), indent=1) + "\n")
    return path
