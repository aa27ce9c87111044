"""A few physical parameters fitted to the whole corpus, and each case's error with its source left out.

`validation/fit.yaml` declares the parameters: a dotted scenario path (`deployment.decode.decode_graph_floor_us`)
set on every case of the engines it belongs to, its start value, bounds and finite-difference step, the value it
has with no case to fit it (`unfitted`), why it is fitted and which cases inform it. Never a per-case factor: one
value per parameter over all its cases.

The fit is least squares on r_i = log(predicted_i / published_i), **linearised**: each case is evaluated at the
current point and at one finite-difference step per parameter that can move it (`Target.moved_by`: a DP sync
term cannot move a case without DP attention, so its step is not simulated there; its derivative is exactly 0;
and a case is never simulated twice at one point of the parameters that can move it, `_Memo`), the bounded
linear problem min Σ (r_i + J_i · Δp)² is solved (`scipy.optimize.least_squares`), and the point
moves there, a few times (Gauss-Newton), until it stops moving.

Held-out errors are refits from the last linearisation (`_refit`): with a case, or a whole group of cases (its
source), left out, the parameters move by the change leaving them out makes to the linearised step at the fit
(zero for a group no parameter moves with), and a parameter no kept case moves takes its `unfitted` value — so
a term one source alone informs does not carry that source's value into that source's own error. Why
linearised: an exact refit per source is a whole Gauss-Newton fit (iterations × (1 + parameters) simulations of
every case) per source, hours for a corpus of hundreds; the linearised refit is one small least-squares solve
per source, and exact where the model is linear in log space between the fit and the refit. `fit`'s
leave-one-out (`loo_predicted`) reads the held-out figure off the linearisation too; `left_out` evaluates it
exactly at the refitted values (one simulation per held-out case whose parameters moved), so a term the figure
depends on non-linearly (CPU time hidden under the GPU step until it is longer) is priced as the model prices it.
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
from simulator.config.specs import EngineSpec
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
    unfitted: float | None = Field(
        None,
        description="Its value with no case to fit it (a held-out refit whose kept cases cannot move it); "
        "fit.yaml: default the engine schema's default of the term the path ends in; None here: `start`.",
    )

    @model_validator(mode="after")
    def _bounds(self) -> Parameter:
        if not self.low <= self.start <= self.high or self.low == self.high:
            raise ValueError("start: must lie within low < high")
        return self


class FitFile(Strict):
    parameters: list[Parameter] = Field([], max_length=MAX_PARAMETERS)


def keys(params: Sequence[Parameter]) -> list[str]:
    """Each parameter's name in a fit's values: its path, or where engines fit the same path each its own value
    (a term of each engine's), the path and its engines (`path@engine+engine`)."""
    seen = [p.path for p in params]
    return [p.path if seen.count(p.path) == 1 else f"{p.path}@{'+'.join(p.engines)}" for p in params]


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
    for i, p in enumerate(params):
        try:
            loader.check_depth(p.path)
            paths.check_path(p.path, short_names=False)
        except InputError as e:
            raise InputError(f"{path}: parameters: {str(e).removeprefix('--set ')}") from None
        if p.unfitted is None:
            params[i] = p.model_copy(update={"unfitted": _schema_default(path, lines, i, p)})
    return params


def _schema_default(path: Path, lines: dict[tuple[str, ...], int], i: int, p: Parameter) -> float:
    """An engine term's default in the engine schema: what an engine that says nothing about it runs with."""
    term = p.path.rsplit(".", 1)[1]
    field = EngineSpec.model_fields.get(term)
    default = None if field is None else field.default
    if not isinstance(default, int | float) or isinstance(default, bool):
        line = lines.get(("parameters", str(i)), lines.get(("parameters",), 1))
        raise InputError(
            f"{path}: line {line}: parameters.{i}.unfitted: give the value {p.path} has with no case to fit it "
            f"(the engine schema's default of {term} is {default!r}, not a number)"
        )
    return float(default)


@dataclass(frozen=True)
class Target:
    """A case to fit: its engine, its published figure, the model's figure as a function of the overrides, and
    which parameter paths can move it at all (default: every one)."""

    engine: str
    published: float
    predict: Callable[[dict[str, Any]], float]
    moved_by: Callable[[str], bool] = lambda path: True


@dataclass(frozen=True)
class Fitted:
    """The fit: parameter values, each case's prediction at them, its leave-one-out prediction (linearised), and
    the linearisation held-out refits start from (`left_out`)."""

    values: dict[str, float]
    predicted: list[float]
    loo_predicted: list[float]
    at: _Linearisation | None = None  # None: nothing fitted


def fit(
    targets: Sequence[Target],
    params: Sequence[Parameter],
    prior: float = 0.0,
    groups: Sequence[int] | None = None,
    robust: float | None = None,
) -> Fitted:
    """Fit `params` to the targets (linearised Gauss-Newton, bounded); leave-one-out on the last linearisation.

    `prior` > 0 regularises toward the start values: each parameter adds the residual
    prior · (value − start) / (high − low), so a parameter moves only as far as the targets' log errors pay for
    (a whole range costs as much as one target `prior` off in log). `groups`: targets with the same number are
    left out together (one benchmark run's figures); default: each alone. `robust`: the log error at which a
    target's pull peaks, fading beyond it (a bounded loss of that scale, scipy's "arctan" on the squared error): a
    corpus's cases the model misses by a factor for reasons no parameter holds (a run's unstated cache format, a
    host slower than its GPU) then stop setting the parameters the others share, as the ±25% band that judges the
    model counts them; None: plain least squares."""
    if not params:
        predicted = [t.predict({}) for t in targets]
        return Fitted({}, predicted, predicted)
    published = np.array([t.published for t in targets])
    start = np.array([p.start for p in params])
    unfitted = np.array([p.start if p.unfitted is None else p.unfitted for p in params])
    low, high = np.array([p.low for p in params]), np.array([p.high for p in params])
    box = _Box(low, high, start, prior, unfitted, robust)
    memo = _Memo(targets, params)
    x = start.copy()
    figures = memo.figures(x)
    r = np.log(figures / published)
    jac = None
    for _ in range(ITERATIONS):
        jac = _jacobian(memo, x, published, r)
        dx = _solve(r, jac, x, box, np.ones(len(r), dtype=bool))
        now = _cost(r, x, box)
        for _ in range(BACKTRACKS):  # the linearised step, kept only where the simulated error falls
            trial = np.clip(x + dx, box.low, box.high)
            f_trial = memo.figures(trial)
            r_trial = np.log(f_trial / published)
            if _cost(r_trial, trial, box) <= now:
                break
            dx = dx / 2
        else:
            break  # no step along this direction lowers the error: x is the fit (and jac is its linearisation)
        x, r, figures, jac = trial, r_trial, f_trial, None
        if np.all(np.abs(dx) <= TOLERANCE * (box.high - box.low)):
            break
    if jac is None:
        jac = _jacobian(memo, x, published, r)
    at = _Linearisation(x, r, jac, box, _solve(r, jac, x, box, np.ones(len(r), dtype=bool)))
    group = np.array(range(len(targets)) if groups is None else groups)
    loo = []
    for i in range(len(targets)):
        moved = _refit(at, group != group[i]) - x
        loo.append(float(published[i] * math.exp(r[i] + jac[i] @ moved)))
    values = {k: float(v) for k, v in zip(keys(params), x, strict=True)}
    return Fitted(values, figures.tolist(), loo, at)


def left_out(
    targets: Sequence[Target], params: Sequence[Parameter], fitted: Fitted, groups: Sequence[int]
) -> list[float]:
    """Each target's figure at the parameters refitted with its whole group left out (`_refit`), evaluated
    exactly: one simulation per target whose group moves any parameter of its engine; the others' refit is the
    fit, and their figure its prediction."""
    out = list(fitted.predicted)
    at = fitted.at
    if at is None:
        return out
    group = np.array(groups)
    for g in dict.fromkeys(groups):
        held = group == g
        x = _refit(at, ~held)
        for i in np.flatnonzero(held):
            t = targets[i]
            mine = _overrides(t.engine, params, x)
            if mine != _overrides(t.engine, params, at.x):
                out[i] = t.predict(mine)
    return out


@dataclass(frozen=True)
class _Linearisation:
    """The fit's point, its log errors and Jacobian there, its bounds, and the linearised step from it with every
    target kept (near zero where the fit converged)."""

    x: np.ndarray
    r: np.ndarray
    jac: np.ndarray
    box: _Box
    step: np.ndarray


def _refit(at: _Linearisation, kept: np.ndarray) -> np.ndarray:
    """The parameters fitted to the `kept` targets, linearised at the fit: moved by the change leaving the others
    out makes to the linearised step (none where the kept targets' rows are all of them, or the left-out rows move
    no parameter); a parameter no kept target moves is set to its unfitted value."""
    if kept.all() or not np.any(at.jac[~kept] != 0):
        return at.x
    step = _solve(at.r, at.jac, at.x, at.box, kept)
    x = np.clip(at.x + step - at.step, at.box.low, at.box.high)
    unmoved = ~np.any(at.jac[kept] != 0, axis=0)
    return np.where(unmoved, at.box.unfitted, x)


@dataclass(frozen=True)
class _Box:
    """The parameters' bounds, their start values and the prior's weight toward them."""

    low: np.ndarray
    high: np.ndarray
    start: np.ndarray
    prior: float
    unfitted: np.ndarray
    robust: float | None = None  # the bounded loss's scale of the log errors (`fit`); None: squares


def _overrides(engine: str, params: Sequence[Parameter], x: np.ndarray) -> dict[str, Any]:
    return {p.path: float(v) for p, v in zip(params, x, strict=True) if engine in p.engines}


class _Memo:
    """Each target's figure per point of the parameters that can move it (`Target.moved_by`): the figure is a
    function of those values alone and the simulation deterministic, so a point met again — a target the last
    step did not move, a case no parameter can move — is not simulated again."""

    def __init__(self, targets: Sequence[Target], params: Sequence[Parameter]) -> None:
        self.targets, self.params = targets, params
        self.movable = np.array([[t.engine in p.engines and t.moved_by(p.path) for p in params] for t in targets])
        self.seen: dict[tuple[int, tuple[float, ...]], float] = {}

    def figure(self, i: int, x: np.ndarray) -> float:
        key = (i, tuple(x[self.movable[i]].tolist()))
        if key not in self.seen:
            t = self.targets[i]
            self.seen[key] = t.predict(_overrides(t.engine, self.params, x))
        return self.seen[key]

    def figures(self, x: np.ndarray) -> np.ndarray:
        return np.array([self.figure(i, x) for i in range(len(self.targets))])


def _cost(r: np.ndarray, x: np.ndarray, box: _Box) -> float:
    """What the fit minimises: the squared log errors (bounded by arctan at scale `box.robust`, as `_solve`'s
    loss, in squared-error units: a row at error e costs robust² · arctan((e / robust)²), at most π/2 · robust²)
    and the prior's pull toward the start."""
    pull = box.prior * (x - box.start) / (box.high - box.low)
    if box.robust is None:
        return float(r @ r + pull @ pull)
    rows = np.concatenate([r, pull]) / box.robust
    return float(np.sum(np.arctan(rows * rows)) * box.robust**2)


def _jacobian(memo: _Memo, x: np.ndarray, published: np.ndarray, r: np.ndarray) -> np.ndarray:
    """The finite-difference Jacobian of the log errors `r` at x (a step towards the inside of the bounds); a
    target a parameter cannot move has 0 there without a simulation."""
    jac = np.zeros((len(memo.targets), len(memo.params)))
    for j, p in enumerate(memo.params):
        h = p.step if x[j] + p.step <= p.high else -p.step
        xj = x.copy()
        xj[j] += h
        for i in np.flatnonzero(memo.movable[:, j]):
            jac[i, j] = (math.log(memo.figure(i, xj) / published[i]) - r[i]) / h
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
        loss="linear" if box.robust is None else "arctan",
        f_scale=1.0 if box.robust is None else box.robust,
        xtol=1e-15,
        ftol=1e-15,
        gtol=1e-15,
    )
    dx[used] = sol.x
    return dx
