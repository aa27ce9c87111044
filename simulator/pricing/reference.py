"""The plain pricing of a list of ops, top to bottom: the reference every faster pricer is tested equal to.

Each op is priced from the profile's table where one covers its shape, else by the roofline of the hardware
(for a collective: the collective model); its time is multiplied by how many such ops the step runs. Nothing is
cached or vectorised here — `costmodel.CostModel` and the pricers it is built from (`decode_pricing`, `lines`)
do the same arithmetic faster, and `tests/test_pricing_reference.py` holds them to it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from simulator.config.specs import HardwareSpec
from simulator.pricing import roofline
from simulator.pricing.ops import COLLECTIVES, Op, Spec
from simulator.pricing.profile import Profile
from simulator.pricing.usage import SOURCES


def price_op(family: str, params: Mapping[str, Any], profile: Profile, hw: HardwareSpec) -> tuple[float, str]:
    """Microseconds of one op and where the number came from: "table", "fallback" (the roofline), or
    "collective" (the collective model, for a collective no table measured)."""
    t = profile.lookup(family, params)
    if t is not None:
        return t, "table"
    return float(roofline.op_us(family, params, hw)), "collective" if family in COLLECTIVES else "fallback"


@dataclass
class Priced:
    """A list of ops priced: microseconds in all, by source and by family, and the fallback pricings by family."""

    us: float = 0.0
    by_source: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0.0))
    by_family: dict[str, float] = field(default_factory=dict)
    fallbacks: Counter[str] = field(default_factory=Counter)


def price(
    ops: Iterable[Op | Spec],
    profile: Profile,
    hw: HardwareSpec,
    price_one: Callable[[Op], tuple[float, str]] | None = None,
) -> Priced:
    """Every op of the list at the shape it names, summed in list order; `price_one`: `price_op` remembered by
    shape (the cost model's), where the caller has one."""
    out = Priced()
    for op in ops:
        us, source = price_op(op.family, op.params, profile, hw) if price_one is None else price_one(op)
        us *= op.count
        out.us += us
        out.by_source[source] += us
        out.by_family[op.family] = out.by_family.get(op.family, 0.0) + us
        if source == "fallback":
            out.fallbacks[op.family] += op.count
    return out
