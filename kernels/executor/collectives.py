"""What one device cannot run in a replay, priced: the TP all-reduce / all-gather of a step, by the cost model's
collective roofline (a step's collectives depend on its tokens and sampled rows only)."""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.config.scenario import Pool
from simulator.config.specs import HardwareSpec, ModelSpec
from simulator.pricing import roofline
from simulator.pricing.ops import COLLECTIVES, line_ops
from simulator.serving.scheduler import Plan


class Collectives:
    """Priced seconds of a step's TP collectives, remembered by (pool, tokens, sampled rows)."""

    def __init__(self, hw: HardwareSpec) -> None:
        self.hw = hw
        self._seconds: dict[tuple[str, int, int], float] = {}

    def seconds(self, pool_name: str, model: ModelSpec, pool: Pool, plan: Plan, draft: Any = None) -> float:
        """A step's collectives; a verify step's k+1 rows per sequence and its draft's k decode passes (`draft`:
        the draft model's or MTP module's rank model)."""
        spec = pool.speculative
        if pool.tp == 1:
            return 0.0
        q = spec.draft_tokens + 1 if spec is not None and plan.decode else 1
        tokens = q * len(plan.decode) + sum(c for _, c in plan.prefill)
        rows = q * len(plan.decode) + len(plan.prefill)
        key = (pool_name, tokens, rows)
        hit = self._seconds.get(key)
        if hit is None:
            us = self._us(model, pool, tokens, rows)
            if q > 1 and spec is not None:  # the draft model's or MTP module's k decode passes
                b = len(plan.decode)
                us += spec.draft_tokens * self._us(draft.model, draft.pool, b, b)
            hit = self._seconds[key] = us * 1e-6
        return hit

    def _us(self, model: ModelSpec, pool: Pool, tokens: int, rows: int) -> float:
        if pool.tp == 1:
            return 0.0
        us = 0.0
        for line, x in (("tokens", tokens), ("rows", rows)):
            for op in line_ops(model, pool, line, np.array([x])):
                if op.family in COLLECTIVES:
                    p = {k: (int(v[0]) if isinstance(v, np.ndarray) else v) for k, v in op.params.items()}
                    us += float(roofline.op_us(op.family, p, self.hw)) * op.count
        return us
