"""Judging candidates before any is simulated, one pool at a time: a wide search shares few pool settings.

A candidate is its shared part (mode, traffic, anything outside the pools) and one part per pool. Each pool part
is judged once per shared part — valid (the schema's per-pool rules), fits in memory, passes the analytic bounds
(`bounds`) — and its verdict holds for every candidate that has it; so a search of 14,000 candidates over
60 pool settings judges 60 pools. A candidate whose pools all pass is then validated whole (rules across pools
and fields), which is what it is simulated from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from simulator.config import bounds as ranges
from simulator.config import loader
from simulator.config.consistency import check_pool_fits_node
from simulator.config.scenario import Pool, Scenario, check_pool_fits_model
from simulator.errors import InputError
from simulator.planning.bounds import Bounds

ROLES = ("prefill", "decode")
PROBE_POOL = {"tp": 1}  # a pool any model accepts: the shared part is validated with it


@dataclass(frozen=True)
class Verdict:
    reason: str | None  # None: the bounds cannot rule it out
    pool: Pool | None = None
    fewest: int | None = None  # the fewest instances of this layout the bounds let through (None: none do)


def split(overrides: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(the shared part, each pool's part by pool name)."""
    shared: dict[str, Any] = {}
    pools: dict[str, dict[str, Any]] = {r: {} for r in ROLES}
    for k, v in overrides.items():
        role = next((r for r in ROLES if k.startswith(f"deployment.{r}.")), None)
        if role is None:
            shared[k] = v
        else:
            pools[role][k] = v
    return shared, pools


def key(part: dict[str, Any]) -> str:
    return json.dumps(part, sort_keys=True, default=str)


class Judge:
    """Verdicts on shared parts and pool parts, cached across the rounds of a widening search."""

    def __init__(self, raw: dict[str, Any], fixed: dict[str, Any], source: str, base_dir: Path | None, bounds: Bounds):
        self.raw, self.fixed, self.source, self.base_dir, self.bounds = raw, fixed, source, base_dir, bounds
        self._shared: dict[str, tuple[Scenario | None, dict[str, Any], str | None]] = {}
        self._pools: dict[tuple[str, str, str], Verdict] = {}
        self._fewest: dict[tuple[str, str, str], int | None] = {}

    def shared(self, part: dict[str, Any]) -> tuple[Scenario | None, dict[str, Any], str | None]:
        """(the shared part's scenario with a probe pool, its raw mapping, why it is invalid)."""
        k = key(part)
        if k not in self._shared:
            data = loader.one_point(self.raw, {**self.fixed, **part})
            probe = {**data, "deployment": {"mode": "colocated", "decode": PROBE_POOL}}
            try:
                self._shared[k] = (loader.validate(probe, self.source), data, None)
            except InputError as e:
                self._shared[k] = (None, data, f"invalid: {e}")
        return self._shared[k]

    def mode(self, part: dict[str, Any]) -> str:
        return str((self.shared(part)[1].get("deployment") or {}).get("mode", "colocated"))

    def pool(self, shared: dict[str, Any], role: str, part: dict[str, Any]) -> Verdict:
        k = (key(shared), role, key(part))
        if k not in self._pools:
            self._pools[k] = self._judge(shared, role, part)
        return self._pools[k]

    def prefill_capacity(self, shared: dict[str, Any], part: dict[str, Any]) -> float:
        """The analytic prompt tokens per second of a prefill pool part that passed its verdict."""
        v = self.pool(shared, "prefill", part)
        sc = self.shared(shared)[0]
        assert v.pool is not None and sc is not None
        return self.bounds.prefill_capacity(sc, self.base_dir, v.pool)

    def _judge(self, shared: dict[str, Any], role: str, part: dict[str, Any]) -> Verdict:
        sc, data, why = self.shared(shared)
        if sc is None:
            return Verdict(why)
        base = dict((data.get("deployment") or {}).get(role) or {})
        pool_data = loader.apply_overrides({"deployment": {role: base}}, part)["deployment"][role]
        where = f"deployment.{role}"
        try:
            pool = Pool.model_validate(pool_data)
            ranges.check(pool, ("deployment", role))
            check_pool_fits_model(sc.model, sc.hardware_of(pool), role, pool)
            check_pool_fits_node(sc.hardware_of(pool), role, pool)
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(x) for x in err["loc"])
            return Verdict(f"invalid: {where}{'.' + loc if loc else ''}: {err['msg'].removeprefix('Value error, ')}")
        except ValueError as e:
            return Verdict(f"invalid: {e}")
        colocated = self.mode(shared) == "colocated"
        reason = self.bounds.pool_reason(sc, self.base_dir, role, pool, colocated)
        if reason is None:
            return Verdict(None, pool)
        layout = (key(shared), role, pool.model_copy(update={"instances": 1}).model_dump_json())
        if layout not in self._fewest:
            self._fewest[layout] = self.bounds.fewest_instances(sc, self.base_dir, role, pool, colocated)
        return Verdict(reason, pool, self._fewest[layout])
