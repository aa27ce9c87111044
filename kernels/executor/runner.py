"""One tensor-parallel rank's forward pass, in the spirit of a small inference engine's model runner: embed the
step's tokens, run every layer (attention over the paged cache, then a dense FFN or a MoE), take the logits of
each sequence's last row and sample greedily. Random weights in the pool's formats (`weights`).

A rank too big for the device runs a subset of its layers — the first dense layers and the first MoE layers
that fit (`LayerPlan`) — and each kind's measured time is scaled by layers / layers run; the Result states the
subset and the factors. The shard is the one `simulator.pricing.ops` prices: heads, dense FFN, shared experts
and vocabulary split by TP, MLA's down-projections and latent cache replicated, routed experts over EP.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from kernels.executor.attention import Batch, GQAAttention, MLAAttention, Rope, rotary_dim
from kernels.executor.device import Stopwatch, synchronize
from kernels.executor.footprint import mtp_layer_model
from kernels.executor.moe import DenseFFN, MoELayer
from kernels.executor.paged_kv import PagedKV
from kernels.executor.weights import Weight
from kernels.timing import clock
from simulator.capacity import component_format
from simulator.config.scenario import Pool
from simulator.config.specs import MLA, ModelSpec


@dataclass(frozen=True)
class LayerPlan:
    """Which layers run: the first `dense` of the model's dense layers and the first `moe` of its MoE layers."""

    dense: int
    moe: int

    @property
    def layers(self) -> int:
        return self.dense + self.moe

    def factors(self, model: ModelSpec) -> tuple[float, float]:
        """Measured time of each kind is multiplied by these to stand for the whole rank."""
        return (
            (model.layers - model.moe_layers) / self.dense if self.dense else 1.0,
            model.moe_layers / self.moe if self.moe else 1.0,
        )

    @classmethod
    def whole(cls, model: ModelSpec) -> LayerPlan:
        return cls(model.layers - model.moe_layers, model.moe_layers)


class RankModel:
    def __init__(self, model: ModelSpec, pool: Pool, plan: LayerPlan, dev: torch.device, seed: int) -> None:
        self.model, self.pool, self.plan, self.dev = model, pool, plan, dev
        self.act = torch.float32 if dev.type == "cpu" else torch.bfloat16
        gen = torch.Generator(device=dev).manual_seed(seed)
        tp, h, a = pool.tp, model.hidden, model.attention
        self.vocab = -(-model.vocab // tp)
        self.embed = torch.randn(self.vocab, h, generator=gen, device=dev).to(self.act)
        attn_fmt = component_format(model, pool, "attention")
        self.layers: list[tuple[object, object]] = []
        heads = -(-a.heads // tp)
        rope = Rope(rotary_dim(a), dev, self.act)  # one for every layer: a step's cos/sin rows gathered once
        for i in range(plan.layers):
            if isinstance(a, MLA):
                attn: object = MLAAttention(a, h, heads, attn_fmt, rope, gen, dev, self.act)
            else:
                attn = GQAAttention(a, h, heads, -(-a.kv_heads // tp), attn_fmt, rope, gen, dev)
            if i < plan.dense:
                ffn: object = DenseFFN(
                    h, -(-model.dense_intermediate // tp), component_format(model, pool, "dense_ffn"), gen, dev
                )
            else:
                assert model.moe is not None
                ffn = MoELayer(
                    model.moe,
                    h,
                    tp,
                    pool.ep,
                    component_format(model, pool, "routed_experts"),
                    component_format(model, pool, "shared_experts"),
                    gen,
                    dev,
                    self.act,
                )
            self.layers.append((attn, ffn))
        self.norm = torch.ones(h, device=dev, dtype=self.act)
        self.lm_head = Weight.random(gen, (self.vocab, h), *component_format(model, pool, "lm_head"), dev)
        self.dense_factor, self.moe_factor = plan.factors(model)
        self.scaled = plan != LayerPlan.whole(model)
        self._now = clock(dev.type)

    @property
    def weight_bytes(self) -> int:
        total = 0
        for obj in [self, *(x for pair in self.layers for x in pair)]:
            for v in vars(obj).values():
                if isinstance(v, Weight):
                    total += v.nbytes
                elif isinstance(v, torch.Tensor):
                    total += v.numel() * v.element_size()
                elif isinstance(v, DenseFFN):
                    total += v.up.nbytes + v.down.nbytes
        return total

    def forward(
        self, tokens: torch.Tensor, b: Batch, cache: PagedKV, last_rows: torch.Tensor, sw: Stopwatch
    ) -> tuple[torch.Tensor, float]:
        """Sampled token of each `last_rows` row, and the seconds the layers not run would have added (0 when
        the rank runs whole)."""
        r = sw.run
        x = self._inputs(r("elementwise", F.embedding, tokens % self.vocab, self.embed), sw)
        extra = 0.0
        t0 = self._mark()
        for i, (attn, ffn) in enumerate(self.layers):
            if self.scaled and i == self.plan.dense:  # dense layers done: their time, scaled
                t1 = self._mark()
                extra += (self.dense_factor - 1) * (t1 - t0)
                t0 = t1
            y = r("elementwise", F.rms_norm, x, (x.shape[-1],), self.norm)
            x = x + attn(y, b, cache, i, sw)  # type: ignore[operator]
            y = r("elementwise", F.rms_norm, x, (x.shape[-1],), self.norm)
            x = x + ffn(y, sw)  # type: ignore[operator]
        if self.scaled:
            last = self.dense_factor if self.plan.moe == 0 else self.moe_factor
            extra += (last - 1) * (self._mark() - t0)
        y = r("elementwise", F.rms_norm, x[last_rows], (x.shape[-1],), self.norm)
        logits = r("gemm", self.lm_head.matmul, y)
        return r("elementwise", torch.argmax, logits.float(), -1), extra

    def _inputs(self, x: torch.Tensor, sw: Stopwatch) -> torch.Tensor:
        """The first layer's input from the embedded tokens."""
        return x

    def _mark(self) -> float:
        if not self.scaled:
            return 0.0
        synchronize(self.dev)
        return self._now()


class MTPModule(RankModel):
    """One draft step of the model's multi-token-prediction module (DeepSeek-V3's MTP): the next token's embedding
    and the main model's hidden state, each normed, joined and projected back to the hidden size (eh_proj), then
    the module's decoder layer and the shared head. The replay feeds the embedding in the hidden state's place
    (the same shapes, so the same time); under TP, eh_proj's columns are split and their all-gather is priced
    with the step's collectives, its result stood in for by a copy."""

    def __init__(self, model: ModelSpec, pool: Pool, dev: torch.device, seed: int) -> None:
        layer = mtp_layer_model(model)
        super().__init__(layer, pool, LayerPlan.whole(layer), dev, seed)
        gen = torch.Generator(device=dev).manual_seed(seed + 1)
        h = model.hidden
        self.eh_proj = Weight.random(gen, (-(-h // pool.tp), 2 * h), *component_format(model, pool, "mtp"), dev)

    def _inputs(self, x: torch.Tensor, sw: Stopwatch) -> torch.Tensor:
        r = sw.run
        e = r("elementwise", F.rms_norm, x, (x.shape[-1],), self.norm)
        hn = r("elementwise", F.rms_norm, x, (x.shape[-1],), self.norm)
        y = r("gemm", self.eh_proj.matmul, torch.cat((e, hn), dim=-1))
        return y if y.shape[-1] == x.shape[-1] else y.repeat(1, self.pool.tp)[:, : x.shape[-1]]  # the all-gather's
