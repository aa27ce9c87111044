"""A figure as a report prints it: four significant digits, thousands grouped, never in exponent notation."""

from __future__ import annotations

import math

DIGITS = 4
TINY = 1e-9  # below it a figure is a fit's or a sum's rounding of zero (a term fitted to its bound: 2e-22), said 0


def figure(v: float) -> str:
    """E.g. 22,282 (not 2.228e+04), 51.74, 9.16, 0.001234 (trailing zeros dropped, as `g` drops them); a
    non-finite value as Python spells it."""
    if not math.isfinite(v):
        return str(v)
    if abs(v) < TINY:
        return "0"
    if abs(v) >= 10 ** (DIGITS - 1):
        return f"{v:,.0f}"
    decimals = DIGITS - 1 - math.floor(math.log10(abs(v)))
    text = f"{v:.{decimals}f}"
    if abs(float(text)) >= 10 ** (DIGITS - 1):  # 999.96 rounds up to 1000.0
        return f"{v:,.0f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
