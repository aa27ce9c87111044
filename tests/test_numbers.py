"""The one number formatter of reports and the app: grouped thousands, four significant digits, no exponent."""

from __future__ import annotations

import pytest

from simulator.results.numbers import figure


@pytest.mark.parametrize(
    "value, text",
    [
        (22282.4, "22,282"),
        (51.744, "51.74"),
        (9.16, "9.16"),
        (0.0012341, "0.001234"),
        (999.96, "1,000"),
        (0.0, "0"),
        (2.057e-22, "0"),  # a term fitted to its bound of 0
        (-3.5, "-3.5"),
    ],
)
def test_a_figure_reads_without_exponent(value: float, text: str) -> None:
    assert figure(value) == text
