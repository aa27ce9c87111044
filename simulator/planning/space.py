"""The search space of `plan`: dotted scenario paths and the values each may take; candidates are their product.

`--search PATH=V1,V2,…` lists values (each read as YAML: `8`, `fp8_e4m3`, `true`); `--search PATH=LO..HI`
is every integer from LO to HI. Without `--search` the space is the instance count of each pool (1 to
twice today's, at least 1..4) and both KV-cache formats of each pool: the questions "how many, and in which
format". TP, weight formats and batch limits are searched by naming them. A path is checked against the schema
first (`config.paths`): a typo is one line with the nearest field, and the short names plan prints
(`prefill.instances`) stand for their whole path.
"""

from __future__ import annotations

import itertools
from typing import Any

import yaml

from simulator.config.paths import check_path
from simulator.config.scenario import Scenario
from simulator.errors import InputError

MAX_CANDIDATES = 100_000
KV_FORMATS = ["bf16", "fp8_e4m3"]


def parse(items: tuple[str, ...] | list[str]) -> dict[str, list[Any]]:
    """`--search` items → {path: values}; one line naming the item on any mistake."""
    space: dict[str, list[Any]] = {}
    for item in items:
        path, sep, raw = item.partition("=")
        path = path.strip()
        if not sep or not path or not raw.strip():
            raise InputError(f"--search {item!r}: expected PATH=V1,V2,... or PATH=LO..HI")
        try:  # before any candidate runs; the short names plan prints are taken whole
            path = check_path(path)
        except InputError as e:
            raise InputError(f"--search {e}") from None
        if ".." in raw:
            lo, _, hi = raw.partition("..")
            try:
                a, b = int(lo), int(hi)
            except ValueError:
                raise InputError(f"--search {path}: LO..HI takes integers, got {raw!r}") from None
            if a > b:
                raise InputError(f"--search {path}: empty range {raw}")
            values: list[Any] = list(range(a, b + 1))
        else:
            values = []
            for v in raw.split(","):
                try:
                    values.append(yaml.safe_load(v) if v.strip() else v)
                except yaml.YAMLError:
                    values.append(v.strip())
        if path in space:
            raise InputError(f"--search {path}: given twice")
        space[path] = list(dict.fromkeys(values))
    return space


def default(sc: Scenario) -> dict[str, list[Any]]:
    """Instance counts and KV formats of every pool."""
    space: dict[str, list[Any]] = {}
    for name, pool in sc.deployment.pools().items():
        space[f"deployment.{name}.instances"] = list(range(1, max(4, 2 * pool.instances) + 1))
    for name in sc.deployment.pools():
        space[f"deployment.{name}.kv_cache"] = list(KV_FORMATS)
    return space


def candidates(space: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination, the first path varying slowest."""
    n = 1
    for path, values in space.items():
        if not values:
            raise InputError(f"--search {path}: needs at least one value")
        n *= len(values)
    if n > MAX_CANDIDATES:
        raise InputError(f"--search: {n:,} candidates, more than {MAX_CANDIDATES:,}; narrow the ranges")
    paths = list(space)
    return [dict(zip(paths, combo, strict=True)) for combo in itertools.product(*space.values())]


def label(overrides: dict[str, Any]) -> str:
    """A short name for a candidate: `decode.instances=2 decode.kv_cache=fp8_e4m3`."""
    return (
        " ".join(f"{k.removeprefix('deployment.').removeprefix('traffic.')}={v}" for k, v in overrides.items())
        or "as given"
    )
