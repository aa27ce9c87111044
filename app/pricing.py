"""What prices the page's numbers: the study's hardware roofline or a bundled kernel profile of that hardware
(imported measured tables, a modeled table), and whether switching between them reverses a comparison.

A profile is offered for a study when its file is named for the study's hardware preset (`profiles/h200-*.json`
for an H200 study), so the choices never price one GPU with another's kernels.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from app.scenario_io import Study
from simulator.planning.pricings import ROOFLINE, bundled_profiles, profile_label, same_profile


@dataclass(frozen=True)
class Choice:
    """One way to price a study: the scenario's `profile` value (relative to where the study's files resolve)."""

    value: str
    label: str


def choices(study: Study) -> list[Choice]:
    """Roofline first, then the bundled profiles of the study's hardware, and the study's own if elsewhere."""
    out = [Choice(ROOFLINE, profile_label(ROOFLINE))]
    for path in bundled_profiles(study.scenario.hardware.name):
        # Named by file only: reading a measured table to describe it costs seconds (the SGLang one is
        # ~140,000 rows), and the sidebar draws before every view; the run's provenance line says the rest.
        value = Path(os.path.relpath(path, study.base_dir)).as_posix()
        out.append(Choice(value, profile_label(value)))
    own = study.scenario.profile
    if not any(same_profile(c.value, own, study.base_dir) for c in out):
        out.append(Choice(own, f"{Path(own).name}: the study's own profile"))
    return out


def study_choice(study: Study, options: list[Choice]) -> int:
    """The index of the study's own profile among `options`."""
    return next(i for i, c in enumerate(options) if same_profile(c.value, study.scenario.profile, study.base_dir))
