"""A few physical parameters fitted to the whole suite, and each case's leave-one-out error.

`validation/fit.yaml` declares the parameters: a dotted scenario path (`deployment.decode.decode_graph_floor_us`)
set on every case of the engines it belongs to, its start value, bounds and finite-difference step, why it is
fitted and which cases inform it. Never a per-case factor: one value per parameter over all its cases.

The fit is least squares on r_i = log(predicted_i / published_i), **linearised**: each case is evaluated at the
current point and at one finite-difference step per parameter, the bounded linear problem
min Σ (r_i + J_i · Δp)² is solved (`scipy.optimize.least_squares`), and the point moves there, a few times
(Gauss-Newton), until it stops moving. The leave-one-out refits use the last linearisation: case i's
leave-one-out error is its linearised error at the parameters fitted without it — cheap (no new simulation per
case) and exact where the model is linear in log space near the fit. The final predictions at the fitted point
are evaluated exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field, ValidationError, model_validator
from scipy.optimize import least_squares

from simulator.config import loader, paths, safe_yaml
from simulator.config.scenario import Strict
from simulator.errors import InputError
from simulator.validation.case import Engine

ITERATIONS = 6  # Gauss-Newton steps at most; each evaluates every case 1 + len(parameters) times
TOLERANCE = 1e-9  # a step smaller than this share of a parameter's range ends the fit
BACKTRACKS = 4  # halvings of a step that raises the simulated error before the fit stops where it is
MAX_PARAMETERS = 16  # each one more evaluates every case once more per iteration


class Parameter(Strict):
    """One fitted parameter, as fit.yaml declares it."""

    path: str = Field(description="Dotted scenario path set on every case of `engines`.")
    engines: list[Engine] = Field(min_length=1)
    start: float
    low: float
    high: float
    step: float = Field(gt=0, description="Finite-difference step of the linearisation.")
    why: str = Field(min_length=1)
    informs: list[str] = Field(description="The cases whose figures move with it.")

    @model_validator(mode="after")
    def _bounds(self) -> Parameter:
        if not self.low <= self.start <= self.high or self.low == self.high:
            raise ValueError("start: must lie within low < high")
        return self


class FitFile(Strict):
    parameters: list[Parameter] = Field([], max_length=MAX_PARAMETERS)


def evaluations(parameters: int) -> int:
    """How many times `fit` evaluates a case at most: the start, each iteration's Jacobian and backtracked steps,
    the last Jacobian and the final prediction."""
    if not parameters:
        return 1
    return 1 + ITERATIONS * (parameters + BACKTRACKS) + parameters + 1


def load(path: Path) -> list[Parameter]:
    """The parameters of a fit file; a missing file fits nothing."""
    if not path.exists():
        return []
    data, lines = loader.parse_text(safe_yaml.read_text(path), str(path), "fit file")
    try:
        params = FitFile.model_validate(data).parameters
    except ValidationError as e:
        err = e.errors()[0]
        loc = tuple(str(x) for x in err["loc"])
        line = next((lines[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in lines), None)
        msg = err["msg"].removeprefix("Value error, ")
        raise InputError(f"{path}:{f' line {line}:' if line else ''} {'.'.join(loc)}: {msg}") from None
    for p in params:
        try:
            loader.check_depth(p.path)
            paths.check_path(p.path, short_names=False)
        except InputError as e:
            raise InputError(f"{path}: parameters: {str(e).removeprefix('--set ')}") from None
    return params


@dataclass(frozen=True)
class Fitted:
    """The fit: parameter values, each case's prediction at them, and its leave-one-out prediction."""

    values: dict[str, float]
    predicted: list[float]
    loo_predicted: list[float]


# A case to fit: its engine, its published figure, and a function from overrides to the model's figure.
Target = tuple[str, float, Callable[[dict[str, Any]], float]]


def fit(
    targets: Sequence[Target],
    params: Sequence[Parameter],
    prior: float = 0.0,
    groups: Sequence[int] | None = None,
) -> Fitted:
    """Fit `params` to the targets (linearised Gauss-Newton, bounded); leave-one-out on the last linearisation.

    `prior` > 0 regularises toward the start values: each parameter adds the residual
    prior · (value − start) / (high − low), so a parameter moves only as far as the targets' log errors pay for
    (a whole range costs as much as one target `prior` off in log). `groups`: targets with the same number are
    left out together (one benchmark run's figures); default: each alone."""
    if not params:
        predicted = [f({}) for _, _, f in targets]
        return Fitted({}, predicted, predicted)
    published = np.array([pub for _, pub, _ in targets])
    start = np.array([p.start for p in params])
    box = _Box(np.array([p.low for p in params]), np.array([p.high for p in params]), start, prior)
    x = start.copy()
    r = _residuals(targets, params, x, published)
    for _ in range(ITERATIONS):
        jac = _jacobian(targets, params, x, published, r)
        dx = _solve(r, jac, x, box, np.ones(len(r), dtype=bool))
        now = _cost(r, x, box)
        for _ in range(BACKTRACKS):  # the linearised step, kept only where the simulated error falls
            trial = np.clip(x + dx, box.low, box.high)
            r_trial = _residuals(targets, params, trial, published)
            if _cost(r_trial, trial, box) <= now:
                break
            dx = dx / 2
        else:
            break  # no step along this direction lowers the error: x is the fit
        x, r = trial, r_trial
        if np.all(np.abs(dx) <= TOLERANCE * (box.high - box.low)):
            break
    jac = _jacobian(targets, params, x, published, r)
    predicted = [f(_overrides(engine, params, x)) for engine, _, f in targets]
    group = np.array(range(len(targets)) if groups is None else groups)
    loo = []
    for i in range(len(targets)):
        dx = _solve(r, jac, x, box, group != group[i])
        loo.append(float(published[i] * math.exp(r[i] + jac[i] @ dx)))
    return Fitted({p.path: float(v) for p, v in zip(params, x, strict=True)}, predicted, loo)


@dataclass(frozen=True)
class _Box:
    """The parameters' bounds, their start values and the prior's weight toward them."""

    low: np.ndarray
    high: np.ndarray
    start: np.ndarray
    prior: float


def _overrides(engine: str, params: Sequence[Parameter], x: np.ndarray) -> dict[str, Any]:
    return {p.path: float(v) for p, v in zip(params, x, strict=True) if engine in p.engines}


def _residuals(
    targets: Sequence[Target], params: Sequence[Parameter], x: np.ndarray, published: np.ndarray
) -> np.ndarray:
    return np.array([math.log(f(_overrides(e, params, x)) / pub) for e, pub, f in targets])


def _cost(r: np.ndarray, x: np.ndarray, box: _Box) -> float:
    """What the fit minimises: the squared log errors and the prior's pull toward the start."""
    pull = box.prior * (x - box.start) / (box.high - box.low)
    return float(r @ r + pull @ pull)


def _jacobian(
    targets: Sequence[Target], params: Sequence[Parameter], x: np.ndarray, published: np.ndarray, r: np.ndarray
) -> np.ndarray:
    """The finite-difference Jacobian of the log errors `r` at x (a step towards the inside of the bounds)."""
    jac = np.zeros((len(targets), len(params)))
    for j, p in enumerate(params):
        h = p.step if x[j] + p.step <= p.high else -p.step
        xj = x.copy()
        xj[j] += h
        for i, (e, pub, f) in enumerate(targets):
            if e in p.engines:
                jac[i, j] = (math.log(f(_overrides(e, params, xj)) / pub) - r[i]) / h
    return jac


def _solve(r: np.ndarray, jac: np.ndarray, x: np.ndarray, box: _Box, rows: np.ndarray) -> np.ndarray:
    """The bounded step Δp minimising Σ over `rows` of (r + J Δp)² (plus the prior's rows); a parameter no kept
    row moves stays put."""
    j, res = jac[rows], r[rows]
    used = np.any(j != 0, axis=0)
    dx = np.zeros(len(x))
    if not used.any():
        return dx
    if box.prior > 0:  # rows prior · (x + Δp − start) / range, one per moving parameter
        scale = box.prior / (box.high[used] - box.low[used])
        j = np.vstack([j, np.zeros((int(used.sum()), len(x)))])
        j[len(res) :, np.flatnonzero(used)] = np.diag(scale)
        res = np.concatenate([res, scale * (x[used] - box.start[used])])
    sol = least_squares(
        lambda d: res + j[:, used] @ d,
        np.zeros(int(used.sum())),
        jac=lambda d: j[:, used],
        bounds=(box.low[used] - x[used], box.high[used] - x[used]),
        method="trf",
        xtol=1e-15,
        ftol=1e-15,
        gtol=1e-15,
    )
    dx[used] = sol.x
    return dx
