"""`phaseplan profile --scenario S`: measure exactly the op shapes one scenario's steps produce (`make profile-cpu`).

The scenario is run once on the modeled clock (roofline, one step at a time), every step's op list
(`ops.step_ops`) is collected, and each profile table (family and categorical keys) keeps its outer axis
values as run (decode batch, chunk tokens, touched experts; thinned to `OUTER` evenly spaced values where more)
— plus every decode batch up to the pool's `max_running`, since a replay on the device may reach other batches
than the model did — and `INNER` values of its inner axis spread from the smallest to the largest run (log
spaced), so interpolation covers everything between. Minutes on a CPU, not hours.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from kernels.profiler import flat, measured_profile
from simulator.atomic import write_atomic
from simulator.config import loader
from simulator.config.scenario import Scenario
from simulator.config.sweep import points, scenario_at
from simulator.engine.run import simulate
from simulator.engine.timer import CostTimer, Stepping, Timed
from simulator.pricing.ops import COLLECTIVES, DECODE_CONTEXT_FAMILIES, Op, step_ops
from simulator.pricing.profile import AXES, categorical
from simulator.serving.scheduler import Plan

OUTER = 24
INNER = 10


class _Recorder(CostTimer):
    """The cost model as the step timer, recording each step's shape as it times it (one step at a time)."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: set[tuple[Any, ...]] = set()

    def attach(self, sim: Any) -> None:
        self.integrity = sim.sc.integrity.enabled

    def time_run(self, inst: Stepping, plans: list[Plan], n: int) -> Timed:
        for plan in plans:
            d = plan.decode
            ctx = round(sum(s.computed + 1 for s in d) / len(d)) if d else 0
            pages = sum(s.table.n for s in d) if self.integrity else 0
            chunks = tuple((c, s.computed) for s, c in plan.prefill)
            self.steps.add((inst.pool_name, len(d), ctx, chunks, pages))
        return super().time_run(inst, plans, n)


def _spread(values: list[float], keep: int, log: bool) -> list[float]:
    """About `keep` of the sorted `values`, the ends included, evenly spaced (in log where `log`; a 0 is kept
    apart)."""
    if len(values) <= keep:
        return values
    pos = [v for v in values if v > 0]
    lo, hi = (pos[0], pos[-1]) if log and pos else (values[0], values[-1])
    grid = np.geomspace(lo, hi, keep) if log and pos else np.linspace(lo, hi, keep)
    pool = pos if log and pos else values
    return sorted({min(pool, key=lambda v: abs(v - g)) for g in grid} | {values[0], values[-1]})


def scenario_shapes(sc: Scenario, base_dir: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    rec = _Recorder()
    simulate(sc.model_copy(update={"profile": "roofline"}), base_dir, step_mode=True, timer=rec)
    pools = sc.deployment.pools()
    tables: dict[tuple[str, tuple], dict[float, dict[float, dict[str, Any]]]] = {}
    max_batch: dict[tuple[str, tuple], int] = {}
    for name, batch, ctx, chunks, pages in rec.steps:
        pool = pools[name]
        for op in step_ops(sc.model, pool, batch, ctx, chunks, pages):
            if op.family in COLLECTIVES:
                continue
            s, ax = op.params, AXES[op.family]
            key = (op.family, categorical(op.family, s))
            outer = float(s[ax.outer]) if ax.outer else 0.0
            tables.setdefault(key, {}).setdefault(outer, {})[float(ax.inner(s))] = s
            if op.family in DECODE_CONTEXT_FAMILIES:
                max_batch[key] = pool.max_running
    out: dict[str, list[dict[str, Any]]] = {}
    for (family, _), columns in sorted(tables.items(), key=lambda kv: repr(kv[0])):
        ax = AXES[family]
        inner_all = sorted({x for col in columns.values() for x in col})
        inner = _spread(inner_all, INNER, log=True)
        outers = _spread(sorted(columns), OUTER, log=False)
        if (family, _) in max_batch:
            outers = sorted(set(outers) | {float(b) for b in range(1, max_batch[(family, _)] + 1)})
        template = next(iter(next(iter(columns.values())).values()))
        for o in outers:
            for x in inner:
                s = dict(template)
                if ax.outer:
                    s[ax.outer] = int(o)
                s.update(_inner(family, s, x))
                out.setdefault(family, []).append(Op.of(family, **s).params)
    return out


def _inner(family: str, s: dict[str, Any], x: float) -> dict[str, Any]:
    """The shape keys that put the inner axis at x (prefill reads the context before the chunk, MoE the tokens
    per touched expert)."""
    if family in ("prefill_attention", "prefill_indexer"):
        return {"context": int(s["tokens"] + x)}
    if family == "moe_gemm":
        return {"tokens": max(1, round(x * s["experts"]))}
    return {AXES[family].inner_keys[0]: int(round(x))}


def write_scenario_profile(path: Path, device: str, out: Path) -> Path:
    """Profile the op shapes of the scenario at `path`, at every point of its sweep, on `device` into `out`."""
    from kernels.executor.device import CPU_THREADS, prepare

    prepare(device)
    sc, raw = loader.load(path)
    shapes: dict[str, list[dict[str, Any]]] = {}
    for point in points(sc):
        at = scenario_at(raw, point, str(path)) if point else sc
        for family, found in scenario_shapes(at, path.parent).items():
            shapes.setdefault(family, []).extend(s for s in found if s not in shapes.get(family, []))
    doc = measured_profile(device, flat(shapes))
    how = f"torch reference ops, {CPU_THREADS} thread" if device == "cpu" else "Triton kernels"
    doc["how"] = (
        f"the op shapes of {path.name} only, every sweep point (kernels.scenario_profile), timed by "
        f"kernels.measure: {how}"
    )
    write_atomic(Path(out), json.dumps(doc, indent=1) + "\n")
    return Path(out)
