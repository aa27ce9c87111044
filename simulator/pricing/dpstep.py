"""Lock-step steps of a DP-attention instance: every rank's own part, the slowest rank setting it, plus the routed
experts every rank shares.

Under DP attention (`pool.dp` > 1, wide EP) each rank runs attention, the dense layers, shared experts and the
head over its own sequences; the routed experts of every MoE layer see all ranks' tokens (dispatch, experts,
combine). A layer cannot start its dispatch before the slowest rank's attention is done, so a step takes

    max over ranks of (rank r's own ops, at its batch, context and pages) + the routed ops over Σ tokens.

A rank with nothing to run joins the step anyway (its own part is zero): SGLang gives an idle DP rank an idle
batch so that it takes part in the MoE collectives (`Scheduler.prepare_mlp_sync_batch` / `get_idle_batch`).

A rank's own ops at batch b are the instance's op list with b rows on every rank (`ops.step_ops` at dp·b, whose
busiest rank holds ceil(dp·b / dp) = b) less its routed ops at dp·b (`ops.routed_ops`), taken op by op, so the
same per-op prices as a uniform step. A run of decode steps is priced rank by rank, vectorised over its steps;
the max and the sum are elementwise, so pricing n steps at once or one by one gives bit-identical times.
A step with prefill chunks prices its lines the same way at each rank's counts (the line at dp·x less the
routed line at dp·x). Seconds by source and fallback op counts are charged as the slowest rank's, step by step,
plus the shared part's.

With `pool.two_batch_overlap` a step takes compute + all-to-all − h·min(compute, all-to-all) instead of their sum,
h the engine's `tbo_hidden_share` (h = 1: the perfect bound, max of the two): each batch runs as two
micro-batches, one's dispatch and combine running while the other computes — SGLang's
`--enable-two-batch-overlap` (python/sglang/srt/two_batch_overlap.py; in decode with DeepEP's low-latency
kernels), vLLM's dual batch overlap for DP + EP (docs.vllm.ai, design/dbo), DeepSeek's dual micro-batch prefill.
Real engines hide less than the bound (launch gaps, the micro-batches' smaller GEMMs, SM sharing with the
communication kernels); h is fitted to SGLang's own measured TBO gain. The hidden all-to-all seconds are not
charged.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from simulator.pricing.costmodel import VARYING, CostModel, real_chunks, with_layers
from simulator.pricing.decode_pricing import DecodePricing, DecodeSteps
from simulator.pricing.lines import Line
from simulator.pricing.ops import Op, Shape, routed_ops, routed_specs, step_lines, step_ops
from simulator.pricing.reference import Priced
from simulator.pricing.speculative import speculative_step_ops
from simulator.pricing.usage import Usage

RankDecode = tuple[int, np.ndarray, np.ndarray]  # a rank's decode run: batch, context and pages each step reads
# a rank's part of a step with chunks: decode batch, its context and pages, chunks, whether it is a verify step
RankStep = tuple[int, int, int, Sequence[tuple[int, int]], bool]


def _minus(ops: list[Op], less: list[Op]) -> list[Op]:
    """`ops` with the counts of `less` taken off, op by op (each of `less` is among `ops`)."""
    counts: Counter[tuple[str, Shape]] = Counter()
    for op in ops:  # (a speculative step's list holds the verify step's ops, then the draft's: not merged)
        counts[op.family, op.shape] += op.count
    for op in less:
        key = (op.family, op.shape)
        assert counts[key] >= op.count, f"{op.family} {op.shape} is not in the step's op list"
        counts[key] -= op.count
    return [Op(f, s, c) for (f, s), c in counts.items() if c]


class DPSteps:
    """Prices lock-step steps of one DP-attention instance from its cost model's per-op prices."""

    def __init__(self, cost: CostModel) -> None:
        self.cost = cost
        model, pool = cost.model, cost.pool
        self.dp = pool.dp
        self._spec = pool.speculative
        self.overlap = pool.two_batch_overlap
        self.hidden_share = pool.tbo_hidden_share
        self._ranks: dict[int, DecodePricing] = {}
        self._shared: dict[int, Priced] = {}
        self._a2a: dict[int, Priced] = {}
        self._routed_line = Line(lambda xs: cost.price_ops(routed_specs(model, pool, xs, model.moe_layers), xs.size))
        self._a2a_line = Line(
            lambda xs: cost.price_ops(
                [op for op in routed_specs(model, pool, xs, model.moe_layers) if op.family == "alltoall"], xs.size
            )
        )

    # -- decode runs ---------------------------------------------------------------------------------------
    def decode_run(self, ranks: list[RankDecode], clock: float) -> tuple[DPDecodeSteps, list[float]]:
        """A run of decode (or verify) steps of the ranks that decode (each: batch, and the context and pages each
        step reads), starting at `clock`: the priced steps (charged once it is known how many ran) and each
        step's end time."""
        own = [self.rank_pricing(b).price(ctx, pages) for b, ctx, pages in ranks]
        slowest = own[0].us if len(own) == 1 else np.maximum.reduce([s.us for s in own])
        tokens = sum(r[0] for r in ranks)
        shared = self.shared(tokens)
        if not self.overlap:
            us = slowest + shared.us
            hidden = None
        else:  # the all-to-alls run beside the compute: the engine's share of the shorter one is hidden
            a2a = self.alltoall(tokens)
            compute = slowest + (shared.us - a2a.us)
            us = compute + a2a.us - self.hidden_share * np.minimum(compute, a2a.us)
            hidden = (a2a, compute + a2a.us - us)
        ends = np.add.accumulate(np.concatenate(([clock], us * 1e-6)))[1:].tolist()
        return DPDecodeSteps(own, shared, hidden, us), ends

    def rank_pricing(self, b: int) -> DecodePricing:
        """A rank's own part of a decode step of its `b` sequences (plain, or a verify step and its drafts)."""
        pricing = self._ranks.get(b)
        if pricing is None:
            cost, dp = self.cost, self.dp
            pages = 1 if cost.integrity else 0
            if self._spec is not None:
                ops = speculative_step_ops(cost.model, cost.pool, dp * b, 1, pages)
            else:
                ops = step_ops(cost.model, cost.pool, dp * b, 1, (), pages, fused_moe=cost.fused_moe)
            own = _minus(ops, self._routed_ops(dp * b))
            fixed = with_layers(cost.fix(own), cost.layer_us(self._spec is not None))
            pricing = self._ranks[b] = DecodePricing(b, fixed, [cost.varying(op) for op in own if op.family in VARYING])
        return pricing

    def shared(self, tokens: int) -> Priced:
        """The routed experts of a decode step over every rank's `tokens` sequences."""
        fixed = self._shared.get(tokens)
        if fixed is None:
            fixed = self._shared[tokens] = self.cost.fix(self._routed_ops(tokens))
        return fixed

    def alltoall(self, tokens: int) -> Priced:
        """The dispatch and combine ops of `shared(tokens)` alone (what two-batch overlap hides)."""
        fixed = self._a2a.get(tokens)
        if fixed is None:
            ops = [op for op in self._routed_ops(tokens) if op.family == "alltoall"]
            fixed = self._a2a[tokens] = self.cost.fix(ops)
        return fixed

    def _routed_ops(self, tokens: int) -> list[Op]:
        """The routed ops of a decode step when the ranks hold `tokens` sequences in all: with speculation, the
        verify step's over (k+1)·tokens rows and each MTP draft step's (a draft model is dense)."""
        model, pool, spec = self.cost.model, self.cost.pool, self._spec
        if spec is None:
            return routed_ops(model, pool, tokens, model.moe_layers)
        return routed_ops(model, pool, tokens * (spec.draft_tokens + 1), model.moe_layers) + self._draft_ops(tokens)

    def _draft_ops(self, tokens: int) -> list[Op]:
        """The routed ops of the k MTP draft steps over `tokens` sequences (none for a dense draft model)."""
        model, pool, spec = self.cost.model, self.cost.pool, self._spec
        if spec is None or spec.method != "mtp" or not tokens:
            return []
        k = spec.draft_tokens
        return [Op(op.family, op.shape, op.count * k) for op in routed_ops(model, pool, tokens, model.mtp_layers)]

    # -- steps with prefill chunks -------------------------------------------------------------------------
    def step_s(self, ranks: list[RankStep]) -> float:
        """Seconds of one step in which some rank runs prefill chunks (each rank: decode batch, its context and
        pages, its chunks, whether its decode is a verify step); charges the slowest rank's part and the shared
        part to the cost model's usage. With speculation a rank runs its chunks alone or a verify step: the
        experts then see the chunks' tokens and the verify rows in one call, and the MTP drafts after it."""
        cost, dp = self.cost, self.dp
        best_us, best = -1.0, None
        tokens = verifying = 0
        launched = 0.0  # the longest launch of a rank's own eager step (`CostModel.eager_floor_us`)
        for b, ctx, pages, chunks, verify in ranks:
            todo = real_chunks(chunks)
            if not b and not todo:
                continue
            launched = max(launched, cost.eager_floor_us(b, todo))
            mine, routed = Usage(), Usage()
            if verify:  # its own part as a decode run prices it, one step
                assert self._spec is not None and not todo
                steps = self.rank_pricing(b).price(np.array([ctx]), np.array([pages]))
                steps.charge(1, mine)
                tokens += b * (self._spec.draft_tokens + 1)
                verifying += b
                if float(steps.us[0]) > best_us:
                    best_us, best = float(steps.us[0]), (mine, routed)
                continue
            us = 0.0
            for line, x in step_lines(cost.model, b, todo).items():
                if x:
                    us += cost.line_us(line, dp * x, mine)
            x = b + sum(t for t, _ in todo)
            tokens += x
            us -= self._routed_line.charge(dp * x, routed)
            if b:
                us += cost.decode_parts(dp * b, dp * ctx, pages, mine)
            us += cost.chunks_us(todo, mine)
            if us > best_us:
                best_us, best = us, (mine, routed)
        assert best is not None, "a step with nothing to run"
        mine, routed = best
        usage = cost.usage
        usage.merge(mine)
        usage.take_back(routed)
        usage.uncount(routed.fallback_ops)
        us = best_us + self._routed_line.charge(tokens, usage)
        if verifying and self._draft_ops(verifying):
            drafts = cost.fix(self._draft_ops(verifying))
            us += drafts.us
            for src, s in drafts.by_source.items():
                usage.add(src, s * 1e-6)
            usage.count_all(drafts.fallbacks.items())
        if self.overlap:
            comm = Usage()
            a2a = self._a2a_line.charge(tokens, comm)
            step = us - self.hidden_share * min(us - a2a, a2a)
            if a2a:
                usage.take_back(comm, (us - step) / a2a)  # the hidden share of the all-to-alls
            us = step
        if launched > us:  # the slowest rank's launches bound the lock-step: the rest is modeled
            usage.add("fallback", (launched - us) * 1e-6)
            us = launched
        return us * 1e-6


class DPDecodeSteps:
    """A DP run of decode steps priced, not yet charged: each rank's own steps, the shared part, and with
    two-batch overlap the all-to-all part and the microseconds of it each step hides."""

    __slots__ = ("own", "shared", "hidden", "us")

    def __init__(
        self, own: list[DecodeSteps], shared: Priced, hidden: tuple[Priced, np.ndarray] | None, us: np.ndarray
    ) -> None:
        self.own, self.shared, self.hidden, self.us = own, shared, hidden, us

    def charge(self, m: int, usage: Usage) -> None:
        """Charge the first m steps: at each step the slowest rank's own part (ties to the first), and the
        shared part m times."""
        if len(self.own) == 1:
            self.own[0].charge(m, usage)
        else:
            slowest = np.argmax(np.stack([s.us[:m] for s in self.own]), axis=0)
            for j, steps in enumerate(self.own):
                mask = slowest == j
                if mask.any():
                    _charge_masked(steps, mask, usage)
        shared = self.shared
        for src, us in shared.by_source.items():
            usage.add(src, us * m * 1e-6)
        for fam, k in shared.fallbacks.items():
            usage.count(fam, k * m)
        if self.hidden is not None:
            a2a, hidden = self.hidden
            share = float(hidden[:m].sum()) / a2a.us if a2a.us else 0.0  # steps' worth of all-to-all hidden
            for src, us in a2a.by_source.items():
                usage.add(src, -(us * share * 1e-6))


def _charge_masked(steps: DecodeSteps, mask: np.ndarray, usage: Usage) -> None:
    """`DecodeSteps.charge` of the steps `mask` picks among the first len(mask)."""
    m = len(mask)
    steps.book(
        usage,
        int(mask.sum()),
        float(steps.us[:m][mask].sum()),
        None if steps.roof is None else float(steps.roof[:m][mask].sum()),
        [int((miss[:m] & mask).sum()) for _, miss, _ in steps.misses],
    )
