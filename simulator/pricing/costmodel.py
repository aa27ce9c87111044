"""Step times of one serving instance: the step's op list priced by a profile, the roofline where none covers.

The engine prices runs of identical decode steps whose total context grows by `batch` each step, so a decode
step splits into what depends only on the batch (GEMMs, norms, all-reduces, KV writes: priced once per batch
size and cached) and what moves with the context (attention, the DSA indexer) or the pages (the integrity
check): those are evaluated on the whole array of steps at once. A single decode-only step (`step_s` without
chunks) goes through the same arithmetic, so pricing n steps at once or one by one gives bit-identical times.

A step with prefill chunks is priced as the sum of its parts (`ops.step_lines` and friends): the lines —
ops that depend on one count of the step only (its tokens, its sampled rows, its MLA-absorbed rows) —
priced for every count at once, a block of counts at a time, on first use; the decode batch's attention
at its context and pages (the decode pricing's parts); and each chunk's own ops, remembered per
(tokens, context before). Chunk sizes are continuous, so pricing `step_ops` whole per step would rebuild
and price ~40 ops each time; the parts reuse everything but the chunks' few attention ops. Each op is
priced by the same function as in a whole-list pricing; only the order of the sum differs, so a mixed step
equals its whole-list price to rounding (~1e-15 relative) and is the same on every call — less what its prompts
share: one varlen attention kernel per layer runs all of a step's prompts, so each prompt beyond the first does not
pay a one-token prompt's own ops again (`chunks_us`).

Every priced second is charged to where it came from — a profile table, the roofline fallback, or a
collective (modeled, unless a third-party profile measured it) — so a report can say how much of its step
time was measured. Booking is exact per call: each part keeps its seconds by source and its fallback op
counts alongside its time.

A step with prefill rows that no CUDA graph captures is launched kernel by kernel from Python, and the GPU cannot
finish before the CPU has launched the last: it lasts at least its op list's kernels times the engine's
`eager_kernel_us` (`eager_floor_us`), the time beyond its priced kernels booked as modeled.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from simulator.config.scenario import Pool
from simulator.config.specs import MLA, HardwareSpec, ModelSpec, RooflineFit
from simulator.config.tiers import has_tiers
from simulator.pricing import overlap, reference
from simulator.pricing.decode_pricing import DecodePricing, DecodeSteps, Varying, line_run
from simulator.pricing.lines import Line, Part, PricedAt, price_ops
from simulator.pricing.ops import (
    DECODE_CONTEXT_FAMILIES,
    LINES,
    Op,
    Shape,
    Spec,
    chunk_ops,
    compiled_kernels,
    context_cap,
    line_ops,
    step_lines,
    step_ops,
)
from simulator.pricing.profile import Profile
from simulator.pricing.reference import Priced
from simulator.pricing.speculative import draft_ops, verify_ops
from simulator.pricing.tier_pricing import TierPricing
from simulator.pricing.usage import SOURCES, Usage

ATTENTION = frozenset({"decode_attention_mla", "decode_attention_gqa", "decode_attention_triton"})
VARYING = DECODE_CONTEXT_FAMILIES | {"integrity_check"}
LAYERS = "decode_layers"  # the breakdown's name for the engine's per-layer cost of a graphed decode step
LAUNCH = "eager_launch"  # the breakdown's name for what an eager step's kernel launches add beyond its kernels
MLA_GRAPH_TOKENS = 2048  # SGLang's piecewise CUDA graphs under an MLA backend capture steps of up to this
CHUNK_CACHE = 1 << 16  # chunks remembered (a prompt's full-size chunks repeat; its last one rarely does)


class CostModel:
    """Prices steps of one instance of `pool` (model, hardware, formats) from `profile`."""

    def __init__(self, model: ModelSpec, hw: HardwareSpec, pool: Pool, profile: Profile, integrity: bool) -> None:
        # The pool's engine reads an FP8 cache, and runs block-FP8 GEMMs, at its own cost.
        engine = {
            "fp8_kv_dequant_factor": pool.fp8_kv_read_factor,
            "fp8_kv_floor_us": pool.fp8_kv_fixed_us,
            "fp8_gemm_mma_factor": pool.fp8_gemm_mma_factor,
        }
        if blackwell_fp8_factor(pool, hw):  # Blackwell's own kernels
            engine["fp8_gemm_mma_factor"] = pool.fp8_gemm_mma_factor_blackwell
        if pool.kv_cache == "fp8_e4m3" and pool.fp8_sparse_prefill == "trtllm" and hw.roofline is not None:
            # its sparse prefill runs TRT-LLM's kernel where the GPU has one (none: FlashMLA's head blocks)
            engine["sparse_attn_head_block"] = hw.roofline.factors.get("trtllm_sparse_head_block")
        engine = {k: v for k, v in engine.items() if v is not None}
        if engine:
            factors = {**(hw.roofline.factors if hw.roofline else {}), **engine}
            source = hw.roofline.source if hw.roofline else "documented defaults"
            hw = hw.model_copy(update={"roofline": RooflineFit(source=source, factors=factors)})
        self.model, self.hw, self.pool, self.profile, self.integrity = model, hw, pool, profile, integrity
        # Load-backs from the tiers below HBM, priced with the step that reads them (None: HBM only)
        self.tiers = TierPricing(model, hw, pool) if has_tiers(pool) else None
        # A profile that measured whole fused-MoE calls prices each layer's routed experts as one op.
        self.fused_moe = any(family == "fused_moe" for family, _ in profile.tables)
        # Decode-only steps replay a CUDA graph: the roofline's generic launch floor is the graph's (the pool's
        # `decode_graph_floor_us`); mixed and prefill steps launch eagerly.
        floor = pool.decode_graph_floor_us
        self.decode_hw = hw if floor is None else hw.model_copy(update={"kernel_floor_us": floor})
        self.usage = Usage()
        self._prices: dict[tuple[str, Shape], tuple[float, str]] = {}
        self._decode: dict[int, DecodePricing] = {}
        self._varyings: dict[tuple[Op, bool], Varying] = {}
        self._eager: dict[int, list[Varying]] = {}
        self._kernels: dict[tuple[bool, tuple[bool, ...]], int] = {}  # by (decode rows?, each chunk after context?)
        # Speculative decoding: a decode step is a verify step and its draft steps (`pricing/speculative.py`); a
        # mixed step's decode part reads the plain pricing.
        self._plain: dict[int, DecodePricing] = self._decode if pool.speculative is None else {}
        self._lines = {line: Line(self._line_pricer(line)) for line in LINES}
        # A prompt's first chunk (nothing before it) is most chunks and varies only in length: priced like a
        # line, for every length at once, instead of op by op per new length.
        self._first_chunks = Line(lambda xs: self.price_ops(chunk_ops(self.model, self.pool, xs, 0), xs.size))
        self._chunks: dict[tuple[int, int], Part] = {}
        self._launch_us: float | None = None  # a one-token prompt's own ops (`prompt_launch_us`), and their usage
        self._launch_usage = Usage()
        # A step that is one whole prompt and nothing else (most prefill steps), by the prompt's length: its
        # parts summed for every length at once, a block of lengths at a time.
        self._solos = Line(self._solo_pricer)

    # -- public ------------------------------------------------------------------------------------------
    def decode_run(
        self, batch: int, ctx0: int, pages0: int, growth: np.ndarray, clock: float
    ) -> tuple[DecodeSteps, list[float]]:
        """A run of decode steps of `batch` sequences that hold `ctx0` tokens and `pages0` pages before it and
        take `growth[i]` more pages by step i, starting at `clock`: the priced steps (charged by the caller once
        it knows how many ran) and each step's end time."""
        pricing = self._pricing(batch)
        if not pricing.parts:
            run = line_run(pricing.a, pricing.b, pricing.c, ctx0, batch, pages0, growth, clock)
            return DecodeSteps(pricing, run[0], None, (), run[2]), run[1].tolist()
        steps = pricing.price(ctx0 + batch * np.arange(1, len(growth) + 1, dtype=np.int64), pages0 + growth)
        return steps, np.add.accumulate(np.concatenate(([clock], steps.us * 1e-6)))[1:].tolist()

    def decode_steps(self, batch: int, ctx_total: np.ndarray, pages_total: np.ndarray) -> DecodeSteps:
        """Decode-only steps of `batch` sequences, one per element of the context/page totals, priced but not
        charged: the caller charges the steps that ran (a run of steps may be cut short)."""
        return self._pricing(batch).price(ctx_total, pages_total)

    def decode_step_s(
        self, batch: int, ctx_total: np.ndarray, pages_total: np.ndarray, usage: Usage | None = None
    ) -> np.ndarray:
        """Seconds of decode-only steps, all charged to `usage` (default: this model's own)."""
        steps = self.decode_steps(batch, ctx_total, pages_total)
        steps.charge(len(steps.us), self.usage if usage is None else usage)
        return steps.us * 1e-6

    def step_s(
        self,
        decode_batch: int,
        decode_ctx_total: int,
        decode_pages: int,
        chunks: Sequence[tuple[int, int]],
        usage: Usage | None = None,
    ) -> float:
        """Seconds of one step: decode of `decode_batch` sequences plus prefill chunks (new, context before)."""
        todo = real_chunks(chunks)
        if not todo:
            return float(
                self.decode_step_s(
                    decode_batch, np.array([float(decode_ctx_total)]), np.array([float(decode_pages)]), usage
                )[0]
            )
        usage = self.usage if usage is None else usage
        mine = todo if self.pool.dp == 1 else busiest_rank(todo, self.pool.dp)  # this GPU's chunks
        if not decode_batch and len(todo) == 1 and todo[0][1] == 0:  # a prompt alone, the usual prefill step
            us = self._solos.charge(todo[0][0], usage)
        else:
            us = 0.0
            for line, x in step_lines(self.model, decode_batch, todo).items():
                if x:
                    us += self.line_us(line, x, usage)
            if decode_batch:
                us += self.decode_parts(decode_batch, decode_ctx_total, decode_pages, usage)
            us += self.chunks_us(mine, usage)
        floor = self.eager_floor_us(decode_batch, mine)
        if floor > us:  # the launches bound the step: the rest is modeled
            usage.add("fallback", (floor - us) * 1e-6)
            us = floor
        return us * 1e-6

    def eager_floor_us(self, decode_batch: int, chunks: tuple[tuple[int, int], ...]) -> float:
        """µs a step of `decode_batch` decode rows and prefill `chunks` (one GPU's: under DP attention, its rank's)
        lasts at least: launched eagerly, its op list's kernels times the pool's `eager_kernel_us` (a compiled
        function's kernels one launch for the call, `ops.compiled_kernels`); 0 where a piecewise CUDA graph
        captures it."""
        per = self.pool.eager_kernel_us
        if not per or not chunks or self.prefill_graphed(decode_batch + sum(t for t, _ in chunks)):
            return 0.0
        key = (decode_batch > 0, tuple(sorted({before > 0 for _, before in chunks})))
        kernels = self._kernels.get(key)
        if kernels is None:  # the same kernels whatever the sizes and however many prompts: once per kind of step
            decode, after = key
            pages = 1 if decode and self.integrity else 0
            shape = [(1, int(b)) for b in after]  # a chunk after cached tokens runs attention kernels of its own
            ops = step_ops(self.model, self.pool, int(decode), 1, shape, pages, fused_moe=self.fused_moe)
            kernels = self._kernels[key] = sum(op.count for op in ops) - compiled_kernels(self.model, self.pool)
        return per * kernels

    def prefill_graphed(self, tokens: int) -> bool:
        """Whether a step of `tokens` rows with prefill replays a CUDA graph. vLLM's rule where the pool sets
        `prefill_graph_tokens`: up to that many tokens and twice the rows the running requests decode (one each,
        1 + k under speculation), in any deployment. Else SGLang's piecewise graphs (`Pool.prefill_graphs`, which
        disaggregation turns off): not under DP attention or speculation, nor for a DSA model, and only up to the
        chunk size (2,048 tokens under MLA: SGLang's `piecewise_cuda_graph_max_tokens` defaults)."""
        pool = self.pool
        if pool.prefill_graph_tokens is not None:
            rows = 1 + (pool.speculative.draft_tokens if pool.speculative is not None else 0)
            return tokens <= min(pool.prefill_graph_tokens, 2 * pool.max_running * rows)
        if not pool.prefill_graphs or pool.dp > 1 or pool.speculative is not None or self.model.indexer is not None:
            return False
        return tokens <= (MLA_GRAPH_TOKENS if isinstance(self.model.attention, MLA) else pool.chunk_size)

    def line_us(self, line: str, x: int, usage: Usage) -> float:
        """Microseconds of one line of a step at count x (`lines.Line`), charged to `usage`."""
        return self._lines[line].charge(x, usage)

    def chunks_us(self, keys: Sequence[tuple[int, int]], usage: Usage) -> float:
        """Microseconds of a step's prefill chunks' own ops, charged to `usage`: each chunk's price (`chunk_us`)
        less the launches the prompts of one step share (`shared_prompts`)."""
        priced = [self.chunk_us(key, usage) for key in keys]
        share = shared_prompts(priced, self.prompt_launch_us())
        if share:
            usage.take_back(self._launch_usage, share)
        return sum(priced) - share * self.prompt_launch_us()

    def prompt_launch_us(self) -> float:
        """Microseconds of a one-token prompt's own ops: their kernels' launch floors and the weights they read
        (MLA's expansion), what each prompt of a step beyond the first does not pay again."""
        if self._launch_us is None:
            self._launch_us = self._first_chunks.charge(1, self._launch_usage)
        return self._launch_us

    def chunk_us(self, key: tuple[int, int], usage: Usage) -> float:
        """Microseconds of one prefill chunk's own ops (tokens, context before), charged to `usage`: a prompt's
        first chunk priced like a line, any later one remembered by its key."""
        if key[1] == 0:
            return self._first_chunks.charge(key[0], usage)
        c = self._chunks.get(key)
        if c is None:
            if len(self._chunks) >= CHUNK_CACHE:
                self._chunks.clear()
            c = self._chunks[key] = self._chunk(*key)
        return c.charge(usage)

    def breakdown(
        self, decode_batch: int, decode_ctx_total: int, decode_pages: int, chunks: Sequence[tuple[int, int]] = ()
    ) -> dict[str, float]:
        """Seconds per op family of one step (what `step_s` sums), largest first; charges no usage."""
        todo = real_chunks(chunks)
        mine = todo if self.pool.dp == 1 else busiest_rank(todo, self.pool.dp)  # this GPU's chunks
        out: dict[str, float] = {}
        if not todo:
            pricing = self._pricing(decode_batch)
            out.update(pricing.fixed.by_family)
            parts = pricing.all_parts
        else:
            lines = step_lines(self.model, decode_batch, todo)
            ops = [
                op
                for line, x in lines.items()
                if x
                for op in line_ops(self.model, self.pool, line, np.array([x]), self.fused_moe)
            ]
            ops += [op for t, before in mine for op in chunk_ops(self.model, self.pool, t, before)]
            for fam, us in self.price_ops(ops, 1).by_family.items():
                out[fam] = float(us[0])
            priced = [self.chunk_us(key, Usage()) for key in mine]
            share = shared_prompts(priced, self.prompt_launch_us())
            if share:  # what the prompts share, taken off by family as `chunks_us` takes it off the step
                for fam, us in self.price_ops(chunk_ops(self.model, self.pool, 1, 0), 1).by_family.items():
                    out[fam] -= share * float(us[0])
            parts = self._mixed_parts(decode_batch) if decode_batch else []
        ctx = decode_ctx_total / max(decode_batch, 1)
        for v in parts:
            x = np.array([float(decode_pages) if v.key == "pages" else ctx])
            if v.cap is not None:
                x = np.minimum(x, v.cap)
            t = v.at(x)
            out[v.family] = out.get(v.family, 0.0) + float(v.roof(x)[0] if np.isnan(t[0]) else t[0])
        launched = self.eager_floor_us(decode_batch, mine) - sum(out.values())
        if launched > 0:
            out[LAUNCH] = launched
        return {f: us * 1e-6 for f, us in sorted(out.items(), key=lambda kv: -kv[1])}

    def ops_breakdown(self, ops: list[Op]) -> dict[str, float]:
        """Seconds per op family of a list of ops at the shapes they name (e.g. a verify step and its draft
        steps, apart), as a decode-only step runs them (under its CUDA graph); charges no usage."""
        by_family = self.price_ops([Spec(op.family, op.params, op.count) for op in ops], 1, self.decode_hw).by_family
        return {f: float(us[0]) * 1e-6 for f, us in sorted(by_family.items(), key=lambda kv: -float(kv[1][0]))}

    # -- internals ---------------------------------------------------------------------------------------
    def _pricing(self, batch: int) -> DecodePricing:
        """A decode-only step of `batch` sequences: plain, or a verify step and its drafts with speculation on."""
        pricing = self._decode.get(batch)
        if pricing is None:
            pricing = self._decode[batch] = self._build(batch, self.pool.speculative is not None)
        return pricing

    def _plain_pricing(self, batch: int) -> DecodePricing:
        """The decode pricing without speculation (a mixed step's decode part; `_pricing` without speculation)."""
        pricing = self._plain.get(batch)
        if pricing is None:
            pricing = self._plain[batch] = self._build(batch, False)
        return pricing

    def _build(self, batch: int, speculative: bool) -> DecodePricing:
        """The op list of a decode step with a one-token context, its context-dependent ops kept as functions of
        the context and pages (`decode_pricing.Varying`)."""
        ops = self.decode_ops(batch, 1, 1 if self.integrity else 0, speculative)
        fixed = with_layers(self.fix(ops), self.layer_us(speculative))
        return DecodePricing(batch, fixed, [self.varying(op) for op in ops if op.family in VARYING])

    def layer_us(self, speculative: bool) -> float:
        """What the engine's graphed decode step costs per layer beyond its op list (`pool.decode_layer_us`), over
        the layers one step runs: the model's, and with speculation each draft step's (an MTP module's layers,
        or a draft model's)."""
        per = self.pool.decode_layer_us
        spec = self.pool.speculative
        if not per:
            return 0.0
        layers = self.model.layers
        if speculative and spec is not None:
            draft = self.model.mtp_layers if spec.method == "mtp" else spec.draft_model.layers  # type: ignore[union-attr]
            layers += spec.draft_tokens * draft
        return per * layers

    def decode_ops(self, batch: int, context: int, pages: int, speculative: bool | None = None) -> list[Op]:
        """The op list of one decode-only step of `batch` sequences at a mean context and pages: a plain step
        (shared experts beside the routed ones where the engine overlaps them), or with speculation a verify step
        and its draft steps (the scheduler draws the tokens they give)."""
        if self.pool.speculative is not None if speculative is None else speculative:
            verify, draft = self.speculative_ops(batch, context, pages)
            return verify + draft
        ops = step_ops(self.model, self.pool, batch, context, (), pages, fused_moe=self.fused_moe)
        if overlap.applies(self.model, self.pool, batch):
            ops = overlap.overlapped(
                ops, self.model, self.pool, batch, self.fused_moe, lambda op: self.price(op)[0] * op.count
            )
        return ops

    def speculative_ops(self, batch: int, context: int, pages: int) -> tuple[list[Op], list[Op]]:
        """A speculative step's verify ops (over (k+1)·batch rows, shared experts beside the routed ones where the
        engine overlaps them, as in a plain decode step) and its draft ops."""
        spec = self.pool.speculative
        assert spec is not None
        verify = verify_ops(self.model, self.pool, batch, context, pages, fused_moe=self.fused_moe)
        rows = (spec.draft_tokens + 1) * batch
        if overlap.applies(self.model, self.pool, rows):
            verify = overlap.overlapped(
                verify, self.model, self.pool, rows, self.fused_moe, lambda op: self.price(op)[0] * op.count
            )
        return verify, draft_ops(self.model, self.pool, batch, context)

    def _mixed_parts(self, batch: int) -> list[Varying]:
        """The decode batch's varying parts as a mixed step runs them: without speculation, and eagerly (no CUDA
        graph)."""
        if self.decode_hw is self.hw:
            return self._plain_pricing(batch).all_parts
        parts = self._eager.get(batch)
        if parts is None:
            ops = step_ops(self.model, self.pool, batch, 1, (), 1 if self.integrity else 0, fused_moe=self.fused_moe)
            parts = self._eager[batch] = [self.varying(op, eager=True) for op in ops if op.family in VARYING]
        return parts

    def decode_parts(self, batch: int, ctx_total: int, pages: int, usage: Usage) -> float:
        """Microseconds of the decode batch's attention, indexer and integrity check in a mixed step (the
        decode pricing's parts, one step, in plain floats); charges them to `usage`."""
        ctx = ctx_total / batch
        us = 0.0
        for v in self._mixed_parts(batch):
            x = float(pages) if v.key == "pages" else ctx
            if v.cap is not None:
                x = min(x, v.cap)
            t = math.nan if v.curve is None else float(v.curve.us(x))
            if math.isnan(t):
                t = float(v.roof(x))
                usage.add("fallback", t * 1e-6)
                usage.count(v.family, v.ops)
            else:
                usage.add("table", t * 1e-6)
            us += t
        return us

    def _solo_pricer(self, xs: np.ndarray) -> PricedAt:
        """Steps that are one whole prompt of each length in `xs`: the lines at the prompt's counts, then its
        first chunk, added elementwise in the order `step_s` adds a step's parts (a part a step skips adds
        zero), so each length gets the bits pricing it part by part gives. By source, the parts' seconds are
        summed in that order and the sum kept in microseconds, as charging the parts to a fresh usage and
        reading it back would."""
        n = xs.size
        counts = step_lines(self.model, 0, ((xs, 0),))  # each an array over xs, or one count for all
        parts = [(self._lines[line], np.broadcast_to(counts[line], (n,))) for line in LINES]
        parts.append((self._first_chunks, xs))
        p = PricedAt(np.zeros(n), {src: np.zeros(n) for src in SOURCES}, {}, {})
        for part, at in parts:
            us, by_source, fallbacks = part.values(at)
            p.us += us
            for src in SOURCES:
                p.by_source[src] += by_source[src] * 1e-6
            for fam, k in fallbacks.items():
                p.fallbacks[fam] = p.fallbacks.get(fam, 0) + k
        for src in SOURCES:
            p.by_source[src] *= 1e6
        return p

    def _chunk(self, tokens: int, before: int) -> Part:
        """A chunk's own ops, priced one by one in plain floats (`reference.price`)."""
        p = reference.price(chunk_ops(self.model, self.pool, tokens, before), self.profile, self.hw)
        src = p.by_source
        return Part(p.us, src["table"], src["fallback"], src["collective"], tuple(p.fallbacks.items()))

    def _line_pricer(self, line: str) -> Callable[[np.ndarray], PricedAt]:
        return lambda xs: self.price_ops(line_ops(self.model, self.pool, line, xs, self.fused_moe), xs.size)

    def price_ops(self, ops: list[Spec], n: int, hw: HardwareSpec | None = None) -> PricedAt:
        """Ops whose shape values may be arrays of n step sizes, priced at each (`lines.price_ops`); `hw`: the
        roofline's hardware (default the eager one)."""
        return price_ops(ops, n, self.profile, self.hw if hw is None else hw)

    def varying(self, op: Op, eager: bool = False) -> Varying:
        v = self._varyings.get((op, eager))
        if v is None:
            params = op.params
            key = "pages" if op.family == "integrity_check" else "context"
            cap = context_cap(self.model) if op.family in ATTENTION else None
            curve = self.profile.curve(op.family, params)
            v = self._varyings[op, eager] = Varying(
                op.family, params, op.count, key, cap, curve, self.hw if eager else self.decode_hw
            )
        return v

    def fix(self, ops: list[Op]) -> Priced:
        """The ops of a decode-only step that do not move with the context, summed once (`reference.price`, each
        op's price remembered by shape)."""
        return reference.price((op for op in ops if op.family not in VARYING), self.profile, self.decode_hw, self.price)

    def price(self, op: Op) -> tuple[float, str]:
        """Microseconds of one op of a decode-only step and where the number came from (`reference.price_op`
        under the decode step's CUDA graph floor), remembered by shape."""
        key = (op.family, op.shape)
        hit = self._prices.get(key)
        if hit is None:
            hit = self._prices[key] = reference.price_op(op.family, op.params, self.profile, self.decode_hw)
        return hit


def blackwell_fp8_factor(pool: Pool, hw: HardwareSpec) -> bool:
    """Whether the pool's engine prices block-FP8 GEMMs on `hw` by its Blackwell factor instead of
    `fp8_gemm_mma_factor`: a GPU with FP4 tensor cores, and an engine that states one (validation reads it too)."""
    return hw.fp4_tflops is not None and pool.fp8_gemm_mma_factor_blackwell is not None


def with_layers(fixed: Priced, us: float) -> Priced:
    """A decode step's fixed part with the engine's per-layer cost (`CostModel.layer_us`) added: modeled, so
    charged as the roofline's, under a family of its own in a breakdown."""
    if not us:
        return fixed
    by_source = {**fixed.by_source, "fallback": fixed.by_source["fallback"] + us}
    return Priced(fixed.us + us, by_source, {**fixed.by_family, LAYERS: us}, fixed.fallbacks)


def shared_prompts(priced: Sequence[float], launch_us: float) -> float:
    """How many prompts' launches a step's chunks share, given each chunk's own price: one varlen attention kernel
    (and under MLA one expansion GEMM) per layer runs every prompt of a step, so each prompt beyond the first
    adds its price less a one-token prompt's (`CostModel.prompt_launch_us`) — at most down to the dearest chunk
    alone."""
    if len(priced) < 2 or launch_us <= 0:
        return 0.0
    return min(len(priced) - 1.0, (sum(priced) - max(priced)) / launch_us)


def real_chunks(chunks: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """The chunks of a step that carry tokens, as ints."""
    return tuple((int(t), int(c)) for t, c in chunks if t > 0)


def busiest_rank(chunks: tuple[tuple[int, int], ...], dp: int) -> tuple[tuple[int, int], ...]:
    """Under DP attention a step's prefill chunks run on different ranks at once; their own ops (attention over
    the prompt so far) are priced on the busiest rank: chunks dealt out one per rank, it gets ceil(n / dp) of
    them, taken as the largest (the step's lines already spread its rows evenly, `ops._rank_rows`)."""
    if len(chunks) <= 1:
        return chunks
    return tuple(sorted(chunks, key=lambda c: (-c[0], -c[1]))[: -(-len(chunks) // dp)])
