"""The corpus: every case of `validation/cases/` run, fitted parameters applied, errors and their summary.

A case's error is predicted / published − 1 at the fitted parameters; its leave-one-out error is the same with
the parameters fitted without it (linearised, `fit`), and its leave-one-source-out error (`loso_error`) with every
case of its source left out of the fit (the refit linearised, the case's figure simulated at it: `fit.left_out`).
With no parameter declared nothing is fitted and the three agree. The fit runs over the cases selected, so a
`--case` subset is fitted on itself. Each case is filed by kind and cell (`cells`), and the summary says how the
bands printed beside answers hold on it (`bands.band_coverage`).
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simulator.errors import InputError
from simulator.validation import bands, case, cells, fit, measure

SUITE = case.REPO / "validation"
MAX_CASES = 1_000  # case files of a suite
# Requests over every simulation of a suite: the bundled suite's 427 served cases take at most 22.5 million (170,540
# requests a pass, 132 passes of the fit's 15 parameters); a hostile one of a few million-request cases takes billions.
MAX_REQUESTS = 40_000_000
# The log error at which a case's pull on the fit peaks and past which it fades (`fit.fit`'s bounded loss): about
# ±20%, the band's edge, so the cases off by a factor (a run's unstated cache format or queueing, a host slower than
# its GPU) do not set the terms the others share. A soft-L1 loss of this scale (each case pulling linearly past it)
# left 88 of the 351 cases then in the corpus outside ±25% with their source held out; the bounded one, refitted to
# its fixed point, 83 (docs/validation.md).
ROBUST = 0.2
COLUMNS = (
    "id",
    "source_id",
    "engine",
    "engine_version",
    "hardware",
    "weights",
    "model_class",
    "regime",
    "how",
    "metric",
    "kind",
    "unit",
    "published",
    "predicted",
    "error",
    "loo_error",
    "loso_error",
)


def load_cases(suite: Path = SUITE, ids: tuple[str, ...] = ()) -> list[case.Case]:
    """The suite's cases in id order (only `ids` when given; an unknown id is an error)."""
    folder = suite / "cases"
    if not folder.is_dir():
        raise InputError(f"{folder}: no cases folder")
    root = suite.resolve().parent
    files = sorted(folder.glob("*.yaml"))
    if ids:  # an id names a case of the folder, never a path
        known = {p.stem: p for p in files}
        missing = [i for i in ids if i not in known]
        if missing:
            raise InputError(f"--case {missing[0]}: no such case in {folder} (cases: {', '.join(known)})")
        files = [known[i] for i in dict.fromkeys(ids)]
    if not files:
        raise InputError(f"{folder}: no case files (*.yaml)")
    if len(files) > MAX_CASES:
        raise InputError(f"{folder}: {len(files):,} case files, more than the {MAX_CASES:,} a suite may hold")
    return [case.load(f, root) for f in files]


def check_work(cases: list[case.Case], params: list[fit.Parameter]) -> None:
    """The requests every simulation of the suite makes together, bounded before the first runs: each served case's
    requests times the evaluations the fit makes of it (at most; each case is within a run's limits already)."""
    each = fit.evaluations(len(params)) + bool(params)  # and at the fit with its source left out (`fit.left_out`)
    total = sum(c.requests for c in cases) * each
    limit = MAX_REQUESTS
    if total > limit:
        served = sum(1 for c in cases if c.requests)
        raise InputError(
            f"validate: about {total:,.0f} requests over the suite's simulations ({served:,} served cases, each run "
            f"up to {each} times by the fit of {len(params)} parameters), over the limit of {limit:,.0f}"
        )


def run(suite: Path = SUITE, ids: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every selected case predicted (at the fitted parameters) with its error, leave-one-out and
    leave-one-source-out errors, kind and cell; the summary; the coverage matrix."""
    cases = load_cases(suite, ids)
    params = fit.load(suite / "fit.yaml")
    check_work(cases, params)
    targets = [fit.Target(c.engine, c.spec.published, _predictor(c), _moved_by(c)) for c in cases]
    fitted = fit.fit(targets, params, robust=ROBUST)
    sources = list(dict.fromkeys(c.source_id for c in cases))
    loso = fit.left_out(targets, params, fitted, [sources.index(c.source_id) for c in cases])
    rows = []
    for c, pred, loo, held in zip(cases, fitted.predicted, fitted.loo_predicted, loso, strict=True):
        s = c.spec
        if not (math.isfinite(pred) and pred > 0 and math.isfinite(held) and held > 0):
            raise InputError(f"{c.path}: the model predicts no {s.metric} ({pred}): nothing completed?")
        sequences = measure.sequences(c)
        where = measure.cell(c, sequences)
        rows.append(
            {
                "id": s.id,
                "engine": c.engine,
                "engine_version": s.engine_version,
                "how": s.how.kind,
                "metric": s.metric,
                "kind": cells.kind(s.metric),
                "unit": s.unit,
                "published": s.published,
                "predicted": pred,
                "error": pred / s.published - 1,
                "loo_error": loo / s.published - 1,
                "loso_error": held / s.published - 1,
                "sequences": sequences,
                **cells.fields_of(where),
                "source": s.source.url,
                "source_id": c.source_id,
                "source_repo": s.source.repo,
            }
        )
    return {
        "cases": rows,
        **summary(rows),
        "coverage": cells.coverage(rows, bands.MIN_SOURCES),
        "by_source": cells.by_source(rows),
        "fitted": fitted.values,
    }


def _predictor(c: case.Case) -> Callable[[dict[str, Any]], float]:
    """The case's figure as a function of the fitted parameters' overrides."""
    return lambda overrides: measure.predict(c, overrides)


def _moved_by(c: case.Case) -> Callable[[str], bool]:
    return lambda path: measure.moved_by(c, path)


def summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Median and max |error|, |leave-one-out error| and |leave-one-source-out error| over the rows, the number of
    sources, and the share of held-out errors inside the band printed for them."""
    errs = [abs(r["error"]) for r in rows]
    loo = [abs(r["loo_error"]) for r in rows]
    loso = [abs(r["loso_error"]) for r in rows]
    return {
        "median_abs_error": statistics.median(errs),
        "max_abs_error": max(errs),
        "median_abs_loo_error": statistics.median(loo),
        "max_abs_loo_error": max(loo),
        "median_abs_loso_error": statistics.median(loso),
        "max_abs_loso_error": max(loso),
        "sources": len({r["source_id"] for r in rows}),
        "band_coverage": bands.band_coverage(rows),
    }


def to_csv(rows: list[dict[str, Any]]) -> str:
    """One row per case: the table's columns and the source."""
    out = io.StringIO()
    w = csv.DictWriter(out, [*COLUMNS, "source", "source_repo"], lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: r[k] for k in w.fieldnames})
    return out.getvalue()


def chart(rows: list[dict[str, Any]]) -> bytes:
    """Predicted against published, log-log, one point per case (ratios apart: they are not on the same scale),
    with the ±25% band: PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 6.5))
    ax = fig.add_subplot(1, 1, 1)
    for engine, marker in zip(sorted({r["engine"] for r in rows}), "osD^v", strict=False):
        pts = [r for r in rows if r["engine"] == engine]
        ax.scatter([r["published"] for r in pts], [r["predicted"] for r in pts], marker=marker, label=engine)
    lo = min(min(r["published"], r["predicted"]) for r in rows) / 2
    hi = max(max(r["published"], r["predicted"]) for r in rows) * 2
    ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8)
    for f in (0.75, 1.25):
        ax.plot([lo, hi], [lo * f, hi * f], color="grey", linewidth=0.6, linestyle="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("published (each case's own unit)")
    ax.set_ylabel("predicted")
    ax.set_title("phaseplan validate: predicted vs published (dashed: ±25%)")
    ax.legend()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    return buf.getvalue()
