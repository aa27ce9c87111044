"""Whether a profile was made on the scenario's hardware: a B200's kernel times priced onto an H200 scenario
give confident wrong answers, so a mismatch is an error unless the user says it is meant."""

from __future__ import annotations

import re
from pathlib import Path

from simulator.config.scenario import Scenario
from simulator.errors import InputError
from simulator.pricing.profile import Profile

# What a CPU-measured profile's `device` says: the platform's processor or machine name (kernels.profiler).
CPU_WORDS = {
    "cpu",
    "x86",
    "x86_64",
    "amd64",
    "i386",
    "i686",
    "aarch64",
    "arm",
    "arm64",
    "ppc64le",
    "s390x",
    "riscv64",
    "intel",
    "xeon",
    "epyc",
    "ryzen",
}


def same_device(profile_device: str, hardware_name: str) -> bool:
    """True when the hardware's name (e.g. `h200`) is a word of the profile's device ('NVIDIA H200',
    'h200 (roofline model)'), case and punctuation aside; the `cpu` hardware matches a CPU-measured profile."""
    words = re.findall(r"[a-z0-9_]+", profile_device.lower())
    name = re.sub(r"[^a-z0-9]", "", hardware_name.lower())
    if name == "cpu":
        return bool(CPU_WORDS & set(words))
    return name in words or name == "".join(words).replace("_", "")


def check_profile_device(sc: Scenario, base_dir: Path | None = None, allow_mismatch: bool = False) -> None:
    if sc.profile == "roofline" or allow_mismatch:
        return
    prof = Profile.for_scenario(sc, base_dir)
    if not same_device(prof.device, sc.hardware.name):
        raise InputError(
            f"profile: {sc.profile} was made on '{prof.device}', but the scenario's hardware is "
            f"'{sc.hardware.name}'; use a profile of that device, or pass --allow-profile-mismatch"
        )
