"""A MoE layer on one rank: a random router, a real top-k, this rank's experts' share of the routed tokens.

Expert placement follows `simulator.pricing.ops`: `ep` groups hold E/ep whole experts each, every expert's
intermediate split over the tp/ep ranks of its group; this rank holds the first group's experts. Tokens are
routed by softmax scores over all E experts; the pairs that land on this rank's experts are sorted by expert
and run as grouped GEMMs (`Weight.grouped`), then combined weighted into the layer's output. What other ranks
compute, and the all-reduce that sums it, are not run here (the all-reduce is priced by the cost model).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.executor.device import Stopwatch
from kernels.executor.weights import Weight
from simulator.config.specs import MoE


def _silu_mul(x: torch.Tensor) -> torch.Tensor:
    g, u = x.chunk(2, dim=-1)
    return F.silu(g) * u


class DenseFFN:
    """SwiGLU FFN of `inter` intermediate columns (a rank's share of a dense layer or of the shared experts)."""

    def __init__(self, hidden: int, inter: int, fmt: tuple[str, int], gen: torch.Generator, dev: torch.device) -> None:
        self.up = Weight.random(gen, (2 * inter, hidden), *fmt, dev)
        self.down = Weight.random(gen, (hidden, inter), *fmt, dev)

    def __call__(self, x: torch.Tensor, sw: Stopwatch) -> torch.Tensor:
        h = sw.run("gemm", self.up.matmul, x)
        return sw.run("gemm", self.down.matmul, sw.run("elementwise", _silu_mul, h).to(x.dtype))


class MoELayer:
    def __init__(
        self,
        moe: MoE,
        hidden: int,
        tp: int,
        ep: int,
        fmt: tuple[str, int],
        shared_fmt: tuple[str, int],
        gen: torch.Generator,
        dev: torch.device,
        act: torch.dtype,
    ) -> None:
        self.moe = moe
        self.local = -(-moe.routed_experts // ep)
        inter = -(-moe.intermediate // (tp // ep))
        self.router = (torch.randn(moe.routed_experts, hidden, generator=gen, device=dev) / hidden**0.5).to(act)
        self.up = Weight.random(gen, (self.local, 2 * inter, hidden), *fmt, dev)
        self.down = Weight.random(gen, (self.local, hidden, inter), *fmt, dev)
        self.shared = (
            DenseFFN(hidden, -(-moe.shared_experts * moe.intermediate // tp), shared_fmt, gen, dev)
            if moe.shared_experts
            else None
        )

    def _route(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int]]:
        """Top-k experts of each token by router score, weighted by a softmax over the chosen ones; the pairs on
        this rank's experts sorted by expert: (token of each pair, weight of each pair, expert offsets, the
        same as a list)."""
        k = self.moe.top_k
        top, ids = logits.float().topk(k, dim=-1)
        w, ids = top.softmax(-1).flatten(), ids.flatten()
        tok = torch.arange(logits.shape[0], device=ids.device).repeat_interleave(k)
        if self.local < self.moe.routed_experts:  # other ranks' experts are their work
            mine = ids < self.local
            tok, ids, w = tok[mine], ids[mine], w[mine]
        order = torch.argsort(ids, stable=True)
        counts = torch.bincount(ids, minlength=self.local)
        offsets = torch.cat((counts.new_zeros(1), counts.cumsum(0)))
        return tok[order], w[order], offsets, offsets.tolist()

    def __call__(self, x: torch.Tensor, sw: Stopwatch) -> torch.Tensor:
        r = sw.run
        logits = r("gemm", torch.mm, x, self.router.T)
        tok, w, offsets, bounds = r("elementwise", self._route, logits)
        out = torch.zeros_like(x) if self.shared is None else self.shared(x, sw)
        if tok.numel():
            rows = x[tok]
            h = r("moe_gemm", self.up.grouped, rows, offsets, bounds)
            h = r("elementwise", _silu_mul, h).to(x.dtype)
            y = r("moe_gemm", self.down.grouped, h, offsets, bounds)
            r("elementwise", out.index_add_, 0, tok, (y * w.unsqueeze(1)).to(out.dtype))
        return out
