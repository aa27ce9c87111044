"""A device executor's work per step beyond the op list's kernels, as a measured term of the device's profile.

The op list (`ops.py`) names the kernels an engine runs; its profile prices each one. An executor also spends
time between and around them: on the CPU replay (torch reference ops, one thread) the Python and tensor glue
between ops, the norms, ropes and routing that run as several torch ops where the op list counts one fused
kernel, and the KV write into the real cache. On a CPU that time is on the same thread as the ops, so it adds
to the step (it does not overlap, unlike an engine's scheduling work, `engine.timer.HostTime`).

It is measured by the profiler on probe steps of its own (`kernels.executor.overhead`), never on the steps a
comparison judges, and stated as a sum the executor's structure suggests: a base every step pays (the layer
loop), a part a step with decode rows pays (the absorbed-attention path), a part per prefill chunk (its own
attention path), a part per row (composites grow with the rows) and a part per cached token the decode rows
read (the glue runs slower after decode attention has streamed that cache through the CPU's caches: on this
2-core VM a batch of 16 at 200 tokens spent ~0.3 ms more on it than at 48). Apart from the forward pass, a
decode step whose pages are checked pays the check's glue beyond its priced kernel (the batch's tables and the
page tags turned into tensors, the violations read back): `check_us`.

The kernels themselves also run slower inside a step than the profile's shapes timed alone (medians of a few
short runs): inside a step the ops before evict each op's operands from the caches, and a step several ms long is
preempted on a loaded machine (1–4 times a step at loads 3–13 on the 2-core VM) and pays the cache refill on each
return, which thread CPU time counts and a 100-µs op's median escapes. Both grow with the kernels' own time (the
data they stream, the time that can be preempted), so the term carries them as `kernel_share`: the share by which
the op list's kernels (every family but the glue's) took longer inside the probe steps than the profile prices
them, measured in the same run under the same load. The step is priced `kernels · (1 + kernel_share) + glue`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

TERMS = ("base_us", "decode_us", "per_chunk_us", "per_token_us", "per_kv_token_us", "check_us")


@dataclass(frozen=True)
class StepOverhead:
    """µs a forward pass spends beyond its priced kernels: base_us + decode_us·[decode rows] +
    per_chunk_us·chunks + per_token_us·rows + per_kv_token_us·(tokens the decode rows attend to); check_us more
    for a decode step's integrity check where it runs; and `kernel_share` of the step's priced kernels more (their
    in-step slowdown, `in_step`). `probes`: how many probe steps it was measured on."""

    base_us: float
    decode_us: float
    per_chunk_us: float
    per_token_us: float
    per_kv_token_us: float
    check_us: float = 0.0
    probes: int = 0
    kernel_share: float = 0.0

    def __post_init__(self) -> None:
        for name in TERMS:
            v = getattr(self, name)
            if not (math.isfinite(v) and 0.0 <= v <= 1e6):
                raise ValueError(f"step overhead {name} must be in [0, 1e6] µs, got {v!r}")
        if not (math.isfinite(self.kernel_share) and 0.0 <= self.kernel_share <= 10.0):
            raise ValueError(f"step overhead kernel_share must be in [0, 10], got {self.kernel_share!r}")

    def seconds(self, decode: int, chunks: int, tokens: int, kv_tokens: float, checked: bool = False) -> float:
        """Seconds of one step of `decode` decode rows and `chunks` prefill chunks, `tokens` rows in all, its
        decode rows attending to `kv_tokens` cached tokens in all; `checked`: its pages' integrity checked."""
        us = self.base_us + self.per_chunk_us * chunks + self.per_token_us * tokens + self.per_kv_token_us * kv_tokens
        return (us + (self.decode_us if decode else 0.0) + (self.check_us if decode and checked else 0.0)) * 1e-6

    def in_step(self, kernels_s: float | np.ndarray) -> float | np.ndarray:
        """Seconds the step's kernels, priced `kernels_s` alone, take beyond that inside the step."""
        return kernels_s * self.kernel_share

    def as_doc(self) -> dict[str, float | int]:
        return {
            **{k: round(getattr(self, k), 3) for k in TERMS},
            "kernel_share": round(self.kernel_share, 4),
            "probes": self.probes,
        }


def fit(
    points: list[tuple[int, int, int, float, float]], check_us: float = 0.0, kernel_share: float = 0.0
) -> StepOverhead:
    """The term from probe steps (decode rows, chunks, rows, decode rows' cached tokens, measured µs beyond the
    priced kernels): least squares over the five parts. A part the probes never vary is left to the base; one
    that comes out negative is dropped and the rest refitted (glue cannot give time back); with no part left
    the term is zero. `check_us`: the check's glue, measured apart (below zero taken as zero); `kernel_share`: the
    kernels' in-step slowdown, measured apart (below zero taken as zero)."""
    x = np.array([(1.0, 1.0 if d else 0.0, c, t, kv) for d, c, t, kv, _ in points], dtype=float).reshape(-1, 5)
    y = np.array([us for *_, us in points], dtype=float)
    keep = [0] + [j for j in range(1, 5) if len(set(x[:, j])) > 1]
    coef = np.zeros(5)
    while keep:
        sol, _, rank, _ = np.linalg.lstsq(x[:, keep], y, rcond=None)
        if rank < len(keep):  # the probes cannot tell the parts apart: the last goes
            keep.pop()
            continue
        if (sol >= 0).all():
            coef[keep] = sol
            break
        keep.remove(keep[int(np.argmin(sol))])
    return StepOverhead(
        *(float(v) for v in coef),
        check_us=max(0.0, check_us),
        probes=len(points),
        kernel_share=max(0.0, kernel_share),
    )
