"""The validated error band beside an answer: how far the model was from published measurements of its kind.

Per engine and kind of figure (a throughput or a latency), the median and worst |leave-one-out error| of the
suite's cases of that kind: the error a case had when the fitted parameters had not seen it, so the band is the
one a new deployment can expect, not the fit's own residual. Within a kind the cases are also filed by GPU and by
batch regime, because the model's error is not the same on every GPU (each has its own fitted or judged roofline)
nor at a few sequences a step (launch floors and the engine's CPU time dominate) as in a filled batch: an answer
reads the narrowest band with at least `MIN_CASES` cases behind it (`_pick`: its GPU and regime, else its regime on
all GPUs, else its GPU, else the kind's), and the band says when its GPU had too few. `phaseplan validate
--write-bands` writes them to `validation/bands.json` (a test checks the file is the suite's current answer);
`run`, `max-rate` and `plan` read it for the metric they bind on.
"""

from __future__ import annotations

import json
import statistics
from functools import cache
from typing import Any, Literal

from simulator.config.specs import EngineSpec
from simulator.validation.suite import SUITE

BANDS = SUITE / "bands.json"
Kind = Literal["throughput", "latency"]
Regime = Literal["few", "batched"]
FEW = 4  # at most this many sequences a decode instance: the "few" regime
MIN_CASES = 3  # a regime's band stands in for its kind's only with this many cases behind it
REGIME_TEXT = {"few": f"at <= {FEW} sequences a decode instance", "batched": f"at > {FEW} sequences a decode instance"}


def kind(metric: str) -> Kind:
    """A case's metric as the kind of figure it is (a ratio of throughputs is a throughput)."""
    return "latency" if metric.endswith("_ms") or metric == "duration_s" else "throughput"


def regime(sequences: int) -> Regime:
    """The batch regime of a measurement or an answer whose decode instances ran at most `sequences` at once."""
    return "few" if sequences <= FEW else "batched"


def _band(errs: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(errs), 4), "max": round(max(errs), 4), "cases": len(errs)}


def _filed(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The band of `rows` and, under `regimes`, the band of each batch regime they have."""
    by = {g: [abs(r["loo_error"]) for r in rows if regime(r["sequences"]) == g] for g in ("few", "batched")}
    return {**_band([abs(r["loo_error"]) for r in rows]), "regimes": {g: _band(e) for g, e in by.items() if e}}


def from_rows(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Engine → kind → {median, max, cases} of |leave-one-out error| over the suite's rows, the same per batch
    regime under `regimes`, and per GPU (each with its own regimes) under `hardware`."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for engine in sorted({r["engine"] for r in rows}):
        for k in ("throughput", "latency"):
            mine = [r for r in rows if r["engine"] == engine and kind(r["metric"]) == k]
            if not mine:
                continue
            gpus = sorted({r["hardware"] for r in mine})
            out.setdefault(engine, {})[k] = {
                **_filed(mine),
                "hardware": {hw: _filed([r for r in mine if r["hardware"] == hw]) for hw in gpus},
            }
    return out


@cache
def _committed() -> dict[str, Any]:
    return json.loads(BANDS.read_text()) if BANDS.is_file() else {}


def line(
    engine: EngineSpec,
    k: Kind,
    what: str,
    value: float,
    unit: str,
    sequences: int | None = None,
    hardware: str | None = None,
) -> str | None:
    """E.g. "max rate 1.73 conv/s: validated model error ±9% on sglang-0.5 (…): 1.58–1.89"; None where the
    suite has no case of this engine and kind. `hardware`: the answer's GPU, whose own band it reads where the
    suite has enough cases on it; `sequences`: the most the answer's decode instances ran at once, which picks
    its regime's band. An engine fitted by `phaseplan calibrate` carries its own band: its fit's error on the
    operator's runs (leave-one-out by run where it had enough runs)."""
    if engine.calibration is not None:
        c = engine.calibration
        e = c.error.get(k)
        if e is None:
            return None
        m = e.median
        how = "leave-one-out median" if e.leave_one_out else "fit's own residual (under 4 runs, no leave-one-out)"
        why = f"fitted to {c.runs} runs of {c.deployment}: their {how} over {e.cases} figures, worst {e.max:.0%}"
    else:
        every = _committed().get(engine.name, {}).get(k)
        if every is None:
            return None
        b, scope = _pick(every, hardware, sequences)
        m = b["median"]
        why = (
            f"{k} cases{scope}: leave-one-out median over {b['cases']} published measurements, worst "
            f"{b['max']:.0%}, docs/validation.md"
        )
    return (
        f"{what} {value:,.4g} {unit}: validated model error ±{m:.0%} on {engine.name} ({why}): "
        f"{value * (1 - m):,.4g}–{value * (1 + m):,.4g}"
    )


def headline(result: dict[str, Any], what: str, tok_s: float) -> list[str]:
    """The bands of a Result's headline throughput (`tok_s`, named `what`) and its TPOT p95, on the run's engine,
    GPU and batch regime: what `phaseplan run` prints under its report and the app's What-if beside its numbers."""
    engine, m = EngineSpec.model_validate(result["scenario"]["engine"]), result["metrics"]
    seqs, gpu, tpot = m["max_running"], result["scenario"]["hardware"]["name"], m["tpot_ms"]["p95"]
    found = [
        line(engine, "throughput", what, tok_s, "tok/s", seqs, gpu),
        line(engine, "latency", "TPOT p95", tpot, "ms", seqs, gpu) if tpot else None,
    ]
    return [b for b in found if b]


def _pick(every: dict[str, Any], hardware: str | None, sequences: int | None) -> tuple[dict[str, Any], str]:
    """The narrowest band with `MIN_CASES` cases behind it, and the words that say which: the answer's GPU and
    regime; else its regime on all GPUs (the few-sequence error is the model's, whatever the GPU); else its GPU;
    else the kind's."""
    g = regime(sequences) if sequences is not None else None
    mine = every["hardware"].get(hardware) if hardware is not None else None
    own = mine and g and mine["regimes"].get(g)
    on, at = f" on {hardware}", f" {REGIME_TEXT[g]}" if g else ""

    def others(too_few: dict[str, Any] | None) -> str:  # all GPUs' band, with the count its GPU had
        return f" of all GPUs ({too_few['cases'] if too_few else 0} on {hardware})" if hardware is not None else ""

    for band, words in (
        (own, on + at),
        (g and every["regimes"].get(g), others(own) + at),
        (mine, on),
    ):
        if band and band["cases"] >= MIN_CASES:
            return band, words
    return every, others(mine)
