"""`phaseplan profile`: which kernel shapes to profile, and writing a profile of them (docs/ops.md).

The shapes are the op lists of the bundled scenarios — every (model, pool) pair they and their sweeps
deploy — plus the interpolation grid `ops.profile_shapes` puts around them, thinned to a budget a GPU
measures in a few minutes: each table (family and non-axis keys) keeps evenly spaced values of its sorted
axis values, end points always, so it still spans every operating point and only reads between coarser
points. `--device roofline` writes the modeled profile; `cuda`/`cpu` time each shape with `kernels.measure`
(torch is imported only then) and skip what it cannot time as the op list means it, leaving those ops to the
cost model's roofline, where `CostModel.usage` counts them. The modeled profile is not thinned.
"""

from __future__ import annotations

import datetime as dt
import json
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import MofNCompleteColumn, Progress

from simulator.atomic import write_atomic
from simulator.calibration.modeled_profile import git_commit, write_modeled_profile
from simulator.config import loader, presets
from simulator.config.specs import FP4_FORMATS, HardwareSpec, ModelSpec
from simulator.config.sweep import points, scenario_at
from simulator.pricing import ops
from simulator.pricing.profile import AXES, categorical

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
BUDGET = 1500  # shapes of a full run: ~150 ms each on a GPU (do_bench's 10 + 50 ms plus set-up) is ~4 min
QUICK_BUDGET = 200  # ~30 s on a GPU; the wide-EP study adds tables (two points each at least)
Shapes = dict[str, list[dict[str, Any]]]


def scenario_pairs(folder: Path = SCENARIOS) -> list[tuple[ModelSpec, Any]]:
    """Every distinct (model, pool) the bundled scenarios deploy, at every point of their sweeps. The CPU loop's
    scenario (hardware `cpu`) is left out: `make profile-cpu` profiles its shapes, on the CPU."""
    pairs: dict[str, tuple[ModelSpec, Any]] = {}
    for path in sorted(folder.glob("*.yaml")):
        sc, raw = loader.load(path)
        if sc.hardware.name == "cpu":
            continue
        for point in points(sc):
            at = scenario_at(raw, point, str(path)) if point else sc
            for pool in at.deployment.pools().values():
                if pool.weights in FP4_FORMATS:  # FP4 GEMMs need FP4 tensor cores, which an H200 lacks
                    continue
                # Instances, memory and scheduling limits do not change a kernel's shape. A speculative pool's
                # verify and draft shapes are left to the roofline: its plain steps are profiled.
                pool = pool.model_copy(update={"speculative": None})
                shape_keys = pool.model_dump(
                    include={
                        "tp",
                        "ep",
                        "weights",
                        "int4_group_size",
                        "kv_cache",
                        "kv_layout",
                        "page_size",
                        "dp",
                        "nodes",
                        "redundant_experts",
                        "expert_imbalance",
                    }
                )
                pairs.setdefault(json.dumps([at.model.name, shape_keys], sort_keys=True), (at.model, pool))
    return list(pairs.values())


def collect_shapes(quick: bool = False, budget: int | None = BUDGET, folder: Path = SCENARIOS) -> Shapes:
    """The shapes to profile: the bundled scenarios' op lists and grid, thinned to `budget` (None: all of
    them) or, `quick`, to the quick budget."""
    shapes = ops.profile_shapes(scenario_pairs(folder))
    if quick:
        budget = QUICK_BUDGET
    return shapes if budget is None else thin(shapes, budget)


def thin(shapes: Mapping[str, list[dict[str, Any]]], budget: int) -> Shapes:
    """The most axis values per table (evenly spaced, end points kept) whose shapes fit in `budget`: `keep`
    outer values × `keep` inner values in each kept column of a two-axis table, 2 × `keep` − 2 values of a
    one-axis one (its points are all its interpolation has; at the quick budget, its two end points)."""
    tables: dict[tuple[str, tuple], list[dict[str, Any]]] = {}
    for family, family_shapes in shapes.items():
        for s in family_shapes:
            tables.setdefault((family, categorical(family, s)), []).append(s)
    columns = {key: _columns(key[0], t) for key, t in tables.items()}
    keep = 2
    while (
        keep < max(map(len, tables.values())) and sum(len(_thin_table(c, keep + 1)) for c in columns.values()) <= budget
    ):
        keep += 1
    out: Shapes = {}
    for (family, _), c in columns.items():
        out.setdefault(family, []).extend(_thin_table(c, keep))
    return out


def _columns(family: str, shapes: list[dict[str, Any]]) -> dict[float | None, dict[float, dict[str, Any]]]:
    """Shapes by outer value (None for one-axis tables), then by inner value."""
    ax = AXES[family]
    columns: dict[float | None, dict[float, dict[str, Any]]] = {}
    for s in shapes:
        columns.setdefault(float(s[ax.outer]) if ax.outer else None, {})[float(ax.inner(s))] = s
    return columns


def _thin_table(columns: dict[float | None, dict[float, dict[str, Any]]], keep: int) -> list[dict[str, Any]]:
    if None in columns:
        col = columns[None]
        return [col[x] for x in _spread(sorted(col), 2 * keep - 2)]
    out = []
    for outer in _spread(sorted(columns), keep):  # type: ignore[type-var]
        col = columns[outer]
        out += [col[x] for x in _spread(sorted(col), keep)]
    return out


def _spread(values: list[Any], keep: int) -> list[Any]:
    idx = np.unique(np.round(np.linspace(0, len(values) - 1, min(keep, len(values)))).astype(int))
    return [values[i] for i in idx]


def count(shapes: Mapping[str, list[Any]]) -> int:
    return sum(len(v) for v in shapes.values())


# -- measuring ------------------------------------------------------------------------------------------------


def unmeasurable(family: str, shape: Mapping[str, Any]) -> str | None:
    """Why `kernels.measure` cannot time this op as the op list means it (None: it can)."""
    if family in ("decode_indexer", "prefill_indexer"):
        return "no indexer kernel in kernels.measure"
    if family in ("decode_attention_triton", "prefill_attention_triton"):
        return "SGLang's Triton attention kernels are not in kernels.measure (AIConfigurator's tables measure them)"
    if family == "prefill_attention" and shape["topk"]:
        return "SDPA runs dense causal attention, not top-k sparse"
    return None


def measured_profile(
    device: str,
    shapes: Iterable[tuple[str, dict[str, Any]]],
    deadline: float | None = None,
    say: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Time every measurable (family, shape), in order, on `device` ('cuda' or 'cpu') into a profile document
    (docs/ops.md).

    Shapes it cannot time are listed under `skipped` (by family, with why), shapes that raised under
    `failed`, and the number left when `deadline` (time.monotonic()) passed under `unmeasured`.
    """
    import torch

    from kernels.measure import ceilings, time_op

    todo: list[tuple[str, dict[str, Any]]] = []
    skipped: dict[str, dict[str, Any]] = {}
    for family, s in shapes:
        why = unmeasurable(family, s)
        if why is None:
            todo.append((family, s))
        else:
            entry = skipped.setdefault(family, {"shapes": 0, "why": set()})
            entry["shapes"] += 1
            entry["why"].add(why)
    ceil = ceilings(device)
    kernels: dict[str, list[dict[str, Any]]] = {}
    failed, left = [], 0
    with Progress(
        *Progress.get_default_columns(), MofNCompleteColumn(), console=Console(stderr=True), disable=say is not None
    ) as bar:
        task = bar.add_task("profiling", total=len(todo))
        for i, (family, s) in enumerate(todo, 1):
            if deadline is not None and time.monotonic() > deadline:
                left = len(todo) - i + 1
                break
            try:
                kernels.setdefault(family, []).append({"shape": s, **time_op(family, dict(s), device)})
            except Exception as exc:  # noqa: BLE001 - one failing shape must not lose the others' numbers
                failed.append({"family": family, "shape": s, "error": repr(exc)[:200]})
            if device == "cuda" and i % 50 == 0:
                torch.cuda.empty_cache()
            bar.update(task, advance=1, description=family)
            if say is not None:
                say(f"{i}/{len(todo)} {family}")
    return {
        "device": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or platform.machine(),
        "source": "measured",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": git_commit(),
        "versions": _versions(torch),
        "ceilings": ceil,
        "kernels": {f: e for f, e in kernels.items() if e},
        "skipped": {f: {"shapes": e["shapes"], "why": sorted(e["why"])} for f, e in skipped.items()},
        "failed": failed,
        "unmeasured": left,
    }


def _versions(torch: Any) -> dict[str, str]:
    out = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "none",
        "driver": "none",
        "python": platform.python_version(),
    }
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = "none"
    if shutil.which("nvidia-smi"):
        res = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        out["driver"] = res.stdout.strip().splitlines()[0] if res.returncode == 0 and res.stdout.strip() else "none"
    return out


def write_profile(
    device: str, hardware: str, out: Path, quick: bool = False, shapes: Mapping[str, list[dict[str, Any]]] | None = None
) -> Path:
    """Profile the bundled scenarios' shapes (or `shapes`) on `device` into `out`, written whole or not at all.

    The modeled profile holds every shape, unthinned (a modeled point costs nothing), so at the studies'
    operating points it gives the roofline's own times; a measured one holds the thinned set.
    """
    modeled = device == "roofline"
    todo = collect_shapes(quick, None if modeled else BUDGET) if shapes is None else shapes
    if modeled:
        write_modeled_profile(HardwareSpec(**presets.hardware(hardware)), todo, out)
    else:
        write_atomic(Path(out), json.dumps(measured_profile(device, flat(todo)), indent=1) + "\n")
    print(f"{count(todo)} shapes", file=sys.stderr)  # after the write: a failure is one line
    return Path(out)


def flat(shapes: Mapping[str, Iterable[dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """(family, shape) pairs, for callers that walk one list."""
    return [(family, s) for family, family_shapes in shapes.items() for s in family_shapes]
