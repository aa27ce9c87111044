"""How many distinct experts a step's tokens touch: what a MoE layer streams of its expert weights.

At decode sizes a routed-expert GEMM is bound by the weights of the experts it touches, so the routing
distribution sets its time. Two distributions, a pool's `moe_routing`:

* `uniform`: each token picks top_k of E experts uniformly at random; E·(1 − (1 − k/E)^T) are touched.
* `power_law`: per-expert loads follow a bounded power law, as AIConfigurator's MoE collectors draw them for
  the tables it measured (`sample_power_law` / `power_law_logits_v3`; its DeepSeek-family estimates read
  `power_law_1.01`): each expert's load is drawn from p(x) ∝ x^−alpha on [1, 0.8·T] when T·k > E, else on
  [0.01, 2]; the loads are scaled to sum T·k, rounded, and the rounding remainder is added one token at a
  time to the largest loads (or taken from the smallest non-zero ones). Here the E draws are replaced by
  the distribution's E evenly spaced quantiles ((i + ½) / E), so the answer is one deterministic number,
  not a sample; the experts left at zero load are the ones not touched. Skewed routing touches fewer
  experts than uniform (DeepSeek-V3 at T = 64: 180 of 256 against 222), so fewer weight bytes move.

With expert parallelism a step waits for its busiest EP rank. Under `uniform` that rank gets the pool's
`expert_imbalance` × the mean pairs and an even share of the touched experts. Under `power_law` the
distribution itself sets it: AIConfigurator draws the loads in random expert order, splits the experts
into `ep` contiguous blocks and times the block with the most pairs (its collectors swap that rank to rank
0). Taken here as the rank that holds the most loaded expert, with the rest of its E/ep − 1 experts at the
mean of the others: pairs = L_max + (E/ep − 1)·(T·k − L_max)/(E − 1), touched experts = 1 + (E/ep − 1)·(D −
1)/(E − 1) for D touched in all (one rank, ep = 1: all T·k pairs and all D experts). A heavy-tailed load
puts the busiest rank above the mean (DeepSeek-V3, 8,192 tokens over 8 ranks: 1.22× the mean
pairs), which is what the measured tables with EP > 1 show.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

Routing = tuple[str, float]  # (uniform | power_law, alpha)
UNIFORM: Routing = ("uniform", 0.0)


def uniform_experts(experts: int, top_k: int, tokens: Any) -> Any:
    """Distinct experts `tokens` touch when each picks top_k of `experts` uniformly at random."""
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def _quantiles(n: int, alpha: float, lo: float, hi: float) -> np.ndarray:
    """The n evenly spaced quantiles of p(x) ∝ x^−alpha on [lo, hi] (the inverse CDF AIConfigurator samples)."""
    u = (np.arange(n) + 0.5) / n
    if hi <= lo:
        return np.full(n, lo)
    if alpha == 1.0:
        return lo * (hi / lo) ** u
    a = 1.0 - alpha
    return ((hi**a - lo**a) * u + lo**a) ** (1.0 / a)


def power_law_loads(experts: int, top_k: int, tokens: int, alpha: float) -> tuple[int, ...]:
    """Token-expert pairs per expert, largest first, under the power law above (they sum to tokens · top_k)."""
    target = tokens * top_k
    lo, hi = (1.0, 0.8 * tokens) if target > experts else (0.01, 2.0)
    x = _quantiles(experts, alpha, lo, hi)[::-1]  # largest first
    loads = np.rint(x / x.sum() * target).astype(np.int64)  # rint: half to even, as torch.round
    delta = target - int(loads.sum())
    for i in range(abs(delta)):
        if delta > 0:
            loads[i % experts] += 1
        else:
            j = experts - 1 - (i % experts)
            loads[j if loads[j] > 0 else int(np.argmax(loads))] -= 1
    return tuple(int(v) for v in loads)


@lru_cache(maxsize=1 << 17)
def power_law_busiest(experts: int, top_k: int, tokens: int, ep: int, alpha: float) -> tuple[float, float]:
    """The busiest EP rank's token-expert pairs and touched experts under the power law (see above). Kept per
    key (two floats; not the loads, E integers): a price line asks for every row count 0–1,023 of a block, and
    every simulation of a plan builds its own lines over the same few expert layouts."""
    loads = power_law_loads(experts, top_k, tokens, alpha)
    per_rank, total, touched = experts / ep, tokens * top_k, sum(1 for v in loads if v > 0)
    if experts == 1:
        return float(total), 1.0
    others = (per_rank - 1) / (experts - 1)
    return loads[0] + others * (total - loads[0]), 1 + others * (touched - 1)


def busiest_rank(experts: int, top_k: int, tokens: Any, ep: int, alpha: float) -> tuple[Any, Any]:
    """`power_law_busiest` for a number of rows or an array of them (then two arrays)."""
    if not isinstance(tokens, np.ndarray):
        return power_law_busiest(experts, top_k, max(1, math.ceil(tokens)), ep, alpha)
    unique, where = np.unique(tokens, return_inverse=True)
    values = np.array(
        [power_law_busiest(experts, top_k, max(1, int(t)), ep, alpha) for t in unique.tolist()], dtype=float
    ).reshape(-1, 2)
    return values[:, 0][where].reshape(tokens.shape), values[:, 1][where].reshape(tokens.shape)


def parse_distribution(name: str) -> Routing:
    """AIConfigurator's distribution name (`power_law_1.01`, `balanced`) as a routing; balanced spreads every
    token-expert pair evenly, which touches at least as many experts as uniform: taken as uniform."""
    if name.startswith("power_law_"):
        return ("power_law", float(name.removeprefix("power_law_")))
    return UNIFORM
