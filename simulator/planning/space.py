"""The search space of `plan`: what may vary, counted before anything is built, and checked against the schema.

A space is one or more branches (the default has one per deployment mode), each the product of its dimensions:
a dotted scenario path and its values, or a coupled dimension whose values set several paths together: a
pool's `parallel` layout (tp, ep, dp and nodes: DP attention is searched with wide EP, ep = tp; an instance
over nodes needs dp ≥ nodes), or `deployment.weights`, the one checkpoint format both pools of a disaggregated
deployment serve.

`--search PATH=V1,V2,…` lists values (each read as YAML: `8`, `fp8_e4m3`, `true`); `--search PATH=LO..HI` is
every integer from LO to HI, kept as a range (a search of 20 million candidates is refused by its count, not
built). Paths are checked against the scenario schema before anything runs; the short names `plan` prints
(`prefill.instances`, `rate`) name `deployment.prefill.instances` and `traffic.rate`.

Without `--search`, each pool searches what operators choose: instance count (1 to twice today's, at least 1..4),
parallel layout (TP from the smallest that holds the model's lightest weights, up to four times that; with an MoE
model also EP = TP, and DP attention, across nodes where TP exceeds one node) and KV-cache format; the weight
format (BF16 and the formats the model preset ships) is one for the deployment — colocated and disaggregated
both.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import yaml

from simulator.capacity import pool_capacity
from simulator.config import safe_yaml
from simulator.config.paths import check_path, check_value
from simulator.config.scenario import Pool, Scenario
from simulator.config.specs import FP4_FORMATS
from simulator.errors import InputError

MAX_CANDIDATES = 100_000
KV_FORMATS = ["bf16", "fp8_e4m3"]
PARALLEL = "parallel"  # a pool's coupled layout dimension: `deployment.decode.parallel`
PARALLEL_FIELDS = ("tp", "ep", "dp", "nodes")
SHORT_PREFIXES = ("deployment.", "traffic.")  # what `label` strips, so a printed name can be typed back
TP_SPAN = 4  # the default searches TP from the smallest that fits up to this many times it


@dataclass(frozen=True)
class Branch:
    """A product of dimensions, with overrides every candidate of the branch shares (`fixed`: the mode, say)."""

    fixed: dict[str, Any]
    dims: dict[str, Sequence[Any]]

    def count(self) -> int:
        return math.prod(len(v) for v in self.dims.values())

    def combos(self) -> Iterator[dict[str, Any]]:
        """Every candidate's overrides, the first dimension varying slowest; coupled values spread to paths."""
        paths = list(self.dims)
        for combo in itertools.product(*self.dims.values()):
            out = dict(self.fixed)
            for path, value in zip(paths, combo, strict=True):
                if isinstance(value, dict):  # a coupled dimension sets several paths
                    out.update(value)
                else:
                    out[path] = value
            yield out


@dataclass(frozen=True)
class Space:
    branches: tuple[Branch, ...]

    def count(self) -> int:
        return sum(b.count() for b in self.branches)

    def candidates(self) -> list[dict[str, Any]]:
        """Every candidate's overrides; refused by count before any is built."""
        n = self.count()
        if n > MAX_CANDIDATES:
            raise InputError(f"--search: {n:,} candidates, more than {MAX_CANDIDATES:,}; narrow the ranges")
        return [c for b in self.branches for c in b.combos()]

    def to_json(self) -> list[dict[str, Any]]:
        return [
            {"fixed": {k: v for k, v in b.fixed.items() if not isinstance(v, dict)}, "dims": _dims_json(b.dims)}
            for b in self.branches
        ]

    def describe(self) -> str:
        """The space in words, for a page or a report."""
        parts = []
        for b in self.branches:
            mode = b.fixed.get("deployment.mode")
            dims = "; ".join(f"{_short(k)} in {_values_text(v)}" for k, v in b.dims.items())
            parts.append(f"{mode}: {dims}" if mode else dims)
        return " | ".join(parts)

    def widen(self, branch: int, path: str, values: range) -> Space:
        b = self.branches[branch]
        branches = list(self.branches)
        branches[branch] = replace(b, dims={**b.dims, path: values})
        return Space(tuple(branches))


def _short(path: str) -> str:
    for p in SHORT_PREFIXES:
        path = path.removeprefix(p)
    return path


def _values_text(values: Sequence[Any]) -> str:
    if isinstance(values, range):
        return f"{values.start}..{values.stop - 1}"
    return "[" + ", ".join(_value_text(v) for v in values) + "]"


def _value_text(v: Any) -> str:
    """A value as a person reads it; a value of several fields at once (both pools' weights) names each field
    once: `weights=int4` where every pool takes the same, `prefill.weights=int4 decode.weights=fp8` where not."""
    if not isinstance(v, dict):
        return str(v)
    by_name: dict[str, list[tuple[str, Any]]] = {}
    for k, x in v.items():
        by_name.setdefault(k.rsplit(".", 1)[-1], []).append((k, x))
    return " ".join(
        f"{name}={items[0][1]}"
        if len({str(x) for _, x in items}) == 1
        else " ".join(f"{_short(k)}={x}" for k, x in items)
        for name, items in by_name.items()
    )


def _dims_json(dims: dict[str, Sequence[Any]]) -> dict[str, Any]:
    return {k: f"{v.start}..{v.stop - 1}" if isinstance(v, range) else list(v) for k, v in dims.items()}


# ---- --search: parsing and the schema check ----


def parse(items: tuple[str, ...] | list[str]) -> Space:
    """`--search` items → a one-branch space; one line naming the item on any mistake, before any work."""
    dims: dict[str, Sequence[Any]] = {}
    for item in items:
        given, sep, raw = item.partition("=")
        given = given.strip()
        if not sep or not given or not raw.strip():
            raise InputError(f"--search {item!r}: expected PATH=V1,V2,... or PATH=LO..HI")
        try:  # before any candidate runs; the short names plan prints are taken whole (`config.paths`)
            path = check_path(given)
        except InputError as e:
            raise InputError(f"--search {e}") from None
        if path.split(".")[0] == "sweep":
            raise InputError(f"--search {given}: 'sweep' cannot be searched (a search is a sweep of its own)")
        if ".." in raw:
            lo, _, hi = raw.partition("..")
            a, b = (_value(path, end) for end in (lo, hi))
            if not isinstance(a, int) or not isinstance(b, int) or isinstance(a, bool) or isinstance(b, bool):
                raise InputError(f"--search {given}: LO..HI takes integers, got {_short_text(raw)}")
            if a > b:
                raise InputError(f"--search {given}: empty range {raw}")
            values: Sequence[Any] = range(a, b + 1)
        else:
            values = list(dict.fromkeys(_value(path, v) for v in raw.split(",")))
        if path in dims:
            raise InputError(f"--search {given}: given twice")
        dims[path] = values
    space = Space((Branch({}, dims),))
    n = space.count()
    if n > MAX_CANDIDATES:
        raise InputError(f"--search: {n:,} candidates, more than {MAX_CANDIDATES:,}; narrow the ranges")
    return space


def _value(path: str, text: str) -> Any:
    """One value as YAML reads it (`8`, `fp8_e4m3`, `true`; text that is no YAML stays text), checked alone
    against its field's type and range before any candidate is built (`config.paths.check_value`): a mapping, a
    list or a number of thousands of digits is refused here, not simulated as an invalid candidate (an empty value
    reads as null, which few fields take)."""
    try:
        value = safe_yaml.parse(text)[0]
    except safe_yaml.LimitError as e:
        raise InputError(f"--search {path}: {_short_text(text)}: YAML over a limit: {e.problem}") from None
    except yaml.YAMLError:
        value = text.strip()
    try:
        check_value(path, value)
    except InputError as e:
        raise InputError(f"--search {e}") from None
    return value


def _short_text(text: str) -> str:
    return repr(text) if len(text) <= 40 else f"{text[:20]!r}… ({len(text):,} characters)"


# ---- the default space ----


HARDWARE_PATHS = ("hardware", "deployment.prefill.hardware", "deployment.decode.hardware")


def build(items: tuple[str, ...] | list[str], sc: Scenario, raw: dict[str, Any]) -> Space:
    """The space `plan` searches: the default, or the `--search` dimensions given. GPUs are what a plan compares
    fleets across, not a layout choice: a search of hardware paths only (`deployment.decode.hardware=h200,b200`)
    multiplies the default space by them, so each GPU gets its own instance counts and layouts."""
    if not items:
        return default(sc, raw)
    given = parse(items)
    gpus = given.branches[0].dims
    if not all(path in HARDWARE_PATHS for path in gpus):
        return given
    branches = []
    for b in default(sc, raw, gpus).branches:
        colocated = b.fixed.get("deployment.mode") == "colocated"
        extra = {k: v for k, v in gpus.items() if not (colocated and k.startswith("deployment.prefill."))}
        branches.append(replace(b, dims={**extra, **b.dims}))
    space = Space(tuple(branches))
    space.candidates()  # refused by count before any is built
    return space


def default(sc: Scenario, raw: dict[str, Any], gpus: dict[str, Sequence[Any]] | None = None) -> Space:
    """What operators choose, per pool and mode (see the module doc); `gpus`: hardware paths a search compares,
    whose GPUs the layouts and weight formats are chosen for too."""
    pools = sc.deployment.pools()
    decode = sc.deployment.decode
    prefill = sc.deployment.prefill or decode
    disagg_fixed: dict[str, Any] = {"deployment.mode": "disaggregated"}
    if sc.deployment.prefill is None:  # a colocated study: its prefill pool starts as its decode pool
        seed = dict((raw.get("deployment") or {}).get("decode") or {})
        seed.pop("speculative", None)
        disagg_fixed["deployment.prefill"] = seed
    own = {name: p.instances for name, p in pools.items()}
    on = {name: _on_gpus(name, pool, gpus or {}) for name, pool in (("prefill", prefill), ("decode", decode))}
    weights = list(dict.fromkeys(_weight_formats(sc, on["prefill"]) + _weight_formats(sc, on["decode"])))
    # Both pools of a disaggregated deployment serve one checkpoint: one weight format for the two.
    both = [{"deployment.prefill.weights": w, "deployment.decode.weights": w} for w in weights]
    disagg = Branch(
        disagg_fixed,
        {
            "deployment.weights": both,
            **_pool_dims(sc, "prefill", on["prefill"], own.get("prefill", prefill.instances), weights),
            **_pool_dims(sc, "decode", on["decode"], decode.instances, weights),
        },
    )
    colocated = Branch(
        {"deployment.mode": "colocated", "deployment.prefill": None},
        {
            "deployment.decode.weights": _weight_formats(sc, on["decode"]),
            **_pool_dims(sc, "decode", on["decode"], decode.instances, _weight_formats(sc, on["decode"])),
        },
    )
    return Space((disagg, colocated))


def _on_gpus(name: str, pool: Pool, gpus: dict[str, Sequence[Any]]) -> list[Pool]:
    """The pool on each GPU a search compares for it (its own path, else the scenario's `hardware`), or as it is.
    A value that names no preset is left to the candidate's validation to refuse."""
    values = gpus.get(f"deployment.{name}.hardware") or ([] if pool.hardware is not None else gpus.get("hardware"))
    out = []
    for v in values or []:
        try:
            out.append(pool.model_copy(update={"hardware": Pool.model_validate({"hardware": v}).hardware}))
        except ValueError:
            continue
    return out or [pool]


def _pool_dims(
    sc: Scenario, name: str, pools: list[Pool], instances: int, weights: list[str]
) -> dict[str, Sequence[Any]]:
    """A pool's dimensions: its instance counts, the layouts that fit on any of its GPUs, the KV formats."""
    where = f"deployment.{name}."
    options = (o for pool in pools for o in parallel_layouts(sc, pool, weights, name == "decode"))
    layouts = {json.dumps(o, sort_keys=True): o for o in options}
    return {
        where + "instances": range(1, max(4, 2 * instances) + 1),
        where + PARALLEL: [{where + k: v for k, v in o.items()} for o in layouts.values()],
        where + "kv_cache": list(KV_FORMATS),
    }


def _weight_formats(sc: Scenario, pools: list[Pool]) -> list[str]:
    """BF16, the formats the model preset describes (its checkpoints), and the pool's own; FP4 only with FP4
    tensor cores (on one of the pool's GPUs). A preset that describes none gets FP8 (what engines quantize to
    online)."""
    listed = list(sc.model.formats) or ["fp8"]
    out = list(dict.fromkeys(["bf16", *listed, pools[0].weights]))
    fp4 = any(sc.hardware_of(p).fp4_tflops is not None for p in pools)
    return [w for w in out if w not in FP4_FORMATS or fp4]


def parallel_layouts(sc: Scenario, pool: Pool, weights: list[str], dp_attention: bool = True) -> list[dict[str, Any]]:
    """TP from the smallest power of two whose instance holds the lightest weights up to TP_SPAN times it (and
    the pool's own); with an MoE model EP = TP and DP attention too, DP attention over nodes past one node."""
    hw = sc.hardware_of(pool)
    node = hw.gpus_per_node
    heads = sc.model.attention.heads
    moe = sc.model.moe is not None
    fits = [
        2**k
        for w in weights
        for k in range(11)
        if pool_capacity(sc.model, hw, pool.model_copy(update=_layout(2**k, w))).fits
    ]
    smallest = min(fits, default=pool.tp)
    out: list[dict[str, Any]] = []
    tp = smallest
    while tp <= TP_SPAN * smallest:
        if tp <= node:
            options = [(1, 1)] + ([(tp, 1)] + [(tp, tp)] * dp_attention if moe and tp > 1 else [])
            out += [_option(pool, tp, ep, dp, 1) for ep, dp in options if heads % (tp // dp) == 0]
        elif moe and dp_attention and tp % node == 0:
            out.append(_option(pool, tp, tp, tp, tp // node))
        tp *= 2
    own = _option(pool, pool.tp, pool.ep, pool.dp, pool.nodes)
    if all({k: o[k] for k in PARALLEL_FIELDS} != {k: own[k] for k in PARALLEL_FIELDS} for o in out):
        out.append(own)
    return out  # pool fields (`tp`, ...): `_pool_dims` makes them paths


def _layout(tp: int, weights: str) -> dict[str, Any]:
    """A plain TP layout in a format: what the memory fit of the weights depends on."""
    return {"tp": tp, "ep": 1, "dp": 1, "nodes": 1, "weights": weights}


def _option(pool: Pool, tp: int, ep: int, dp: int, nodes: int) -> dict[str, Any]:
    """A layout, with the pool's features that need another layout turned off where this one lacks it."""
    out: dict[str, Any] = {"tp": tp, "ep": ep, "dp": dp, "nodes": nodes}
    if pool.two_batch_overlap and dp == 1:
        out["two_batch_overlap"] = False
    if pool.redundant_experts and ep == 1:
        out["redundant_experts"] = 0
    return out


def label(overrides: dict[str, Any]) -> str:
    """A short name for a candidate: `decode.instances=2 decode.kv_cache=fp8_e4m3` (whole-pool values left out)."""
    return (
        " ".join(f"{_short(k)}={v}" for k, v in overrides.items() if not isinstance(v, dict) and v is not None)
        or "as given"
    )
