"""What a CPU replay will take before it starts: the host memory of its rank models, the layers it can hold and
its wall time. Torch-free, so a replay that cannot run is refused before torch loads.

On the CPU a weight costs more than its format's bytes: the torch reference keeps a float32 copy of BF16 and FP8
weights (INT4 keeps its int8 nibbles) next to the stored tensor, and drawing one matrix (float32 random values,
quantized, for INT4 through int64 words) briefly takes several times that. Measured on this project's 2-core x86
machine (CPython 3.11, torch 2.13 CPU, one thread, `Weight.random` of an [8, 1024, 4096] stack, RSS and peak
RSS): held 6.0 / 2.6 / 1.81 B per parameter (BF16 / FP8 / INT4; FP8 is counted at its 1 + 4 B upper end), peak
while drawing 10.0 / 18.3 / 22.3 B; drawing took 13.6 / 34.3 / 49.2 ns per parameter; the reference GEMMs ran at
19–141 GFLOP/s (INT4 at m = 64 the slowest). So one MoE layer of a Kimi K2.6 TP8 rank (2.1 G parameters) holds
~3.7 GiB and takes ~31 GiB more while its expert stack is drawn: no CPU replay of it fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.capacity import draft_pool, kv_bytes_per_token, pool_capacity, rank_parts
from simulator.config.scenario import Pool, Scenario
from simulator.config.specs import ModelSpec
from simulator.errors import InputError

GIB = 1024**3
CPU_BUDGET_GIB = 4.0  # memory the CPU replay may take for weights and caches (a choice, stated in the Result)
WEIGHT_SHARE = 0.8  # of the device budget, the most the ranks' weights may take before layers are subset
EXECUTED = ("bf16", "fp8", "int4")  # the weight formats the executor draws and runs
STORED_B = {"bf16": 2.0, "fp8": 1.0, "int4": 0.5625}  # bytes per parameter as stored (scales included)
HELD_B = {"bf16": 6.0, "fp8": 5.0, "int4": 1.9}  # CPU bytes held per parameter (stored + the reference's copy)
DRAW_B = {"bf16": 10.0, "fp8": 18.5, "int4": 22.5}  # CPU peak bytes per parameter while one matrix is drawn
DRAW_S = 50e-9  # CPU seconds to draw one parameter (the slowest format, INT4)
CPU_FLOPS = 19e9  # the slowest reference GEMM measured (INT4, m = 64): a step's time at the upper end
EMBED_B = 4  # the CPU embedding table is float32 (on a GPU, BF16)


@dataclass(frozen=True)
class Rank:
    """One rank's parameters by where they sit (format -> parameters): once per rank, per dense layer, per MoE
    layer; its largest single matrix; the parameters one token touches per layer."""

    model: ModelSpec
    embedding: float
    once: dict[str, float]
    dense_layer: dict[str, float]
    moe_layer: dict[str, float]
    largest: tuple[str, float]
    active_dense: float
    active_moe: float

    def held(self, dense: int, moe: int, cpu: bool = True) -> float:
        """Bytes the weights hold with `dense` and `moe` layers: on the CPU with the reference's copies."""
        per = HELD_B if cpu else STORED_B

        def b(params: dict[str, float]) -> float:
            return sum(n * per[f] for f, n in params.items())

        return (
            self.embedding * (EMBED_B if cpu else 2)
            + b(self.once)
            + dense * b(self.dense_layer)
            + moe * b(self.moe_layer)
        )

    def drawing(self) -> float:
        """Bytes the CPU takes beyond what is held while the largest matrix is drawn."""
        fmt, n = self.largest
        return n * (DRAW_B[fmt] - HELD_B[fmt])

    def params(self, dense: int, moe: int) -> float:
        layer = dense * sum(self.dense_layer.values()) + moe * sum(self.moe_layer.values())
        return self.embedding + sum(self.once.values()) + layer


def _add(d: dict[str, float], fmt: str, n: float) -> None:
    d[fmt] = d.get(fmt, 0.0) + n


def rank(model: ModelSpec, pool: Pool) -> Rank:
    n_dense, n_moe = model.layers - model.moe_layers, model.moe_layers
    once: dict[str, float] = {}
    dense: dict[str, float] = {}
    moe: dict[str, float] = {}
    embedding, largest, active_dense, active_moe = 0.0, ("bf16", 0.0), 0.0, 0.0
    for p, n, fmt in rank_parts(model, pool):
        matrix = 0.0
        if p.component in ("mtp", "norms"):
            continue  # MTP layers are a draft model of their own; norms are vectors
        if p.component == "embedding":
            embedding = n
        elif p.component == "lm_head":
            _add(once, fmt, n)
            matrix = n
        elif p.component in ("attention", "indexer"):  # every layer has them
            per = n / model.layers
            if n_dense:
                _add(dense, fmt, per)
            if n_moe:
                _add(moe, fmt, per)
            active_dense, active_moe, matrix = active_dense + per, active_moe + per, per
        elif p.component == "dense_ffn":
            per = n / max(1, n_dense)
            _add(dense, fmt, per)
            active_dense, matrix = active_dense + per, per * 2 / 3  # gate and up as one matrix
        else:  # routed and shared experts, the router
            per = n / max(1, n_moe)
            _add(moe, fmt, per)
            moe_spec = model.moe
            routed = p.component == "routed_experts" and moe_spec is not None
            active_moe += per * min(1.0, moe_spec.top_k / moe_spec.routed_experts) if routed and moe_spec else per
            matrix = per * 2 / 3  # every local expert's gate and up in one stack
        if matrix > largest[1]:
            largest = (fmt, matrix)
    return Rank(model, embedding, once, dense, moe, largest, active_dense, active_moe)


def mtp_layer_model(model: ModelSpec) -> ModelSpec:
    """The model's MTP module as a model of its own: its decoder layer(s), with the main model's embedding and head
    (`simulator.pricing.ops.mtp_draft_ops` prices the same)."""
    return model.model_copy(
        update={"layers": model.mtp_layers, "mtp_layers": 0, "dense_layers": 0 if model.moe else model.mtp_layers}
    )


def ranks(sc: Scenario) -> list[Rank]:
    """The distinct rank models a replay builds (pools with the same shard share one), draft models included."""
    out: dict[tuple, Rank] = {}
    for pool in sc.deployment.pools().values():
        out.setdefault((pool.tp, pool.ep, pool.weights, pool.int4_group_size), rank(sc.model, pool))
        spec = pool.speculative
        if spec is not None and spec.draft_model is not None:
            out.setdefault(("draft", spec.draft_model.name), rank(spec.draft_model, draft_pool(pool)))
        elif spec is not None:  # the MTP module: its decoder layer with an embedding and head of its own
            out.setdefault(("mtp", pool.tp, pool.weights), rank(mtp_layer_model(sc.model), pool))
    return list(out.values())


def layer_plan(sc: Scenario, room: float, cpu: bool) -> tuple[int, int]:
    """(dense, MoE) layers the target's ranks run: every layer if the ranks' weights fit `room`, else the first
    of each kind in proportion to the room the per-rank parts (embedding, head, drafts; on the CPU the drawing
    of the largest matrix) leave. On the CPU by the bytes the torch reference really holds."""
    rs = ranks(sc)
    m = sc.model
    n_dense, n_moe = m.layers - m.moe_layers, m.moe_layers
    target = [r for r in rs if r.model == m]
    fixed = sum(r.held(0, 0, cpu) for r in target) + sum(_whole(r, cpu) for r in rs if r.model != m)
    fixed += max(r.drawing() for r in rs) if cpu else 0.0
    layers = sum(r.held(n_dense, n_moe, cpu) - r.held(0, 0, cpu) for r in target)
    if fixed + layers <= room:
        return n_dense, n_moe
    share = max(0.0, room - fixed) / layers
    return (
        min(n_dense, max(1, math.floor(n_dense * share))) if n_dense else 0,
        min(n_moe, max(1, math.floor(n_moe * share))) if n_moe else 0,
    )


def _whole(r: Rank, cpu: bool = True) -> float:
    return r.held(r.model.layers - r.model.moe_layers, r.model.moe_layers, cpu)


@dataclass(frozen=True)
class Estimate:
    dense: int  # layers of each kind the target's ranks run
    moe: int
    peak_bytes: float  # the ranks' weights held, and the larger of the largest matrix being drawn and the caches
    setup_s: float  # drawing the weights
    longest_step_s: float  # the largest prefill chunk through those layers, at the slowest reference GEMM rate


def cpu_estimate(sc: Scenario) -> Estimate:
    """A CPU replay's memory and time as `ReplayClock` will lay it out (its layer plan, its budget)."""
    dense, moe = layer_plan(sc, WEIGHT_SHARE * CPU_BUDGET_GIB * GIB, cpu=True)
    rs = ranks(sc)
    target = [r for r in rs if r.model == sc.model]
    drafts = [r for r in rs if r.model != sc.model]
    held = sum(r.held(dense, moe) for r in target) + sum(_whole(r) for r in drafts)
    pools = sc.deployment.pools()
    # the caches: the allocator's pages of every instance for the layers run, cut to what the budget leaves (the
    # clock shares physical pages beyond it), at least one page each; allocated once the weights are drawn
    share = (dense + moe) / sc.model.layers
    need = sum(
        p.instances
        * max(1, pool_capacity(sc.model, sc.hardware, p).pages)
        * p.page_size
        * kv_bytes_per_token(sc.model, p)
        for p in pools.values()
    )
    least = sum(p.instances * p.page_size * kv_bytes_per_token(sc.model, p) for p in pools.values())
    kv = max(least, min(need, 0.9 * (CPU_BUDGET_GIB * GIB - held))) * share
    params = sum(r.params(dense, moe) for r in target)
    params += sum(r.params(r.model.layers - r.model.moe_layers, r.model.moe_layers) for r in drafts)
    # the most tokens one step carries: a prefill chunk where a pool prefills, else a decode batch
    tokens = max(
        min(p.chunk_size, p.max_batch_tokens)
        if name == "prefill" or sc.deployment.mode == "colocated"
        else p.max_running * (1 + (p.speculative.draft_tokens if p.speculative else 0))
        for name, p in pools.items()
    )
    active = max(dense * r.active_dense + moe * r.active_moe for r in target)
    peak = held + max(max(r.drawing() for r in rs), kv)
    return Estimate(dense, moe, peak, params * DRAW_S, 2 * tokens * active / CPU_FLOPS)


def check_formats(sc: Scenario) -> None:
    """The executor draws and runs BF16, FP8 and INT4 weights only (on either device)."""
    for name, pool in sc.deployment.pools().items():
        if pool.weights not in EXECUTED:
            raise InputError(
                f"deployment.{name}.weights: the replay executes {', '.join(EXECUTED)} weights, not "
                f"{pool.weights}; replay another format, or `phaseplan run` it"
            )


def check_cpu(sc: Scenario, budget_s: float, max_s: float) -> Estimate:
    """Refuse a CPU replay that cannot fit its memory even with one layer of each kind, or whose wall time
    (drawing the weights, the device budget and a step that overruns it) is past `max_s`."""
    est = cpu_estimate(sc)
    m = sc.model
    if est.peak_bytes > CPU_BUDGET_GIB * GIB:
        raise InputError(
            f"replay --device cpu: even {est.dense + est.moe} of the {m.layers} layers of {m.name} per rank take about "
            f"{est.peak_bytes / GIB:,.1f} GiB of host memory (held, its largest matrix drawn, the KV "
            f"caches), over the {CPU_BUDGET_GIB:g} GiB a CPU replay may take; replay a smaller model "
            "(e.g. scenarios/tiny-cpu.yaml) or on a GPU that holds it (--device cuda)"
        )
    wall = est.setup_s + (budget_s + est.longest_step_s if budget_s > 0 else 0.0)
    if wall > max_s:
        raise InputError(
            f"replay --device cpu: about {wall:,.0f} s of wall time ({est.setup_s:,.0f} s drawing the weights, "
            f"--budget-s {budget_s:g}, one step of up to {est.longest_step_s:,.0f} s), over the limit of "
            f"{max_s:,.0f} s; lower --budget-s, replay a smaller model, or pass --no-limits"
        )
    return est
