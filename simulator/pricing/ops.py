"""The op list of one model step: which kernels one GPU of an instance runs, and with which shapes.

Written once and read three ways: the cost model prices it, the profiler measures exactly its shapes, the
replay executor runs it. Family names and shape keys are the contract of docs/ops.md.

Sharding of one instance of `tp` GPUs (every rank runs the same list; the ops are one rank's):
* attention heads, dense FFN, shared experts, o_proj and the vocabulary (embedding, lm_head) split by TP;
  MLA's down-projections (`q_a`, `kv_a`) and the latent cache are replicated, as SGLang and vLLM run them
  (a split `q_a` would need an all-gather before its layernorm);
* GQA K/V heads split by TP, a head replicated when `tp` exceeds the KV heads;
* routed experts over EP × expert-TP = `tp` GPUs: `ep` groups hold E/ep whole experts each, every expert's
  intermediate split over the tp/ep ranks of its group; activations are replicated (TP attention), each rank
  runs its own experts' share of the routed tokens and the layer's second all-reduce combines them;
* the router and the DSA indexer are replicated (the indexer sums its heads before top-k, so splitting heads
  would cost an all-reduce of the logits).

MLA runs in two forms. Decode uses the absorbed form (queries projected into the 576-wide latent by a batched
`W_UK`, attention over the latent, `W_UV` back to `v_head_dim`), which reads the cache once. Dense prefill
uses the unabsorbed ("MHA") form, as DeepSeek, SGLang and vLLM do: the chunk's whole context is expanded by
`kv_b_proj` into per-head K/V, then plain attention with qk = nope + rope, v = v_head_dim — about 3.4× fewer
attention FLOPs than the absorbed form, which outweighs the expansion GEMM. Sparse (DSA) prefill stays in the
absorbed MQA form, because each query attends to its own top-k set of latents (FlashMLA's sparse prefill), and so
does a chunk after a prefix on SGLang's Triton backend.

DP attention with wide EP (`pool.dp` > 1, ep = tp; simulator/config/parallel.py): each DP rank runs attention,
dense layers, shared experts and the head for its own sequences over its attention TP group of tp / dp GPUs,
and the busiest rank sets the step: a line of x rows puts ceil(x / dp) of them on it. The routed experts see
every rank's tokens: tokens reach the rank holding their expert by an all-to-all dispatch (FP8 with one fp32
scale per 128 values, as DeepEP dispatches) and come back by an all-to-all combine (BF16); the busiest EP rank
receives the pairs its routing gives it: under the default `power_law` routing the rank holding the most loaded
expert, unless EPLB (`redundant_experts`) has balanced the ranks, when it receives `expert_imbalance` × the mean.
A step's prefill chunks run on different DP ranks at once: `step_ops` lists every chunk's own ops, and the cost
model prices the busiest rank's share of them (`costmodel.busiest_rank`).

DP attention with MoE TP (`pool.dp` > 1, ep = 1: SGLang's `--enable-dp-attention` without EP, "DPA does not
require EP", docs.sglang.io advanced_features/dp_dpa_smg_guide): every MoE layer gathers all ranks' rows to every
GPU and reduces the TP-split experts' output back (SGLang's dp_gather and the experts' TP all-reduce: two
all-reduces of all rows), and the routed and shared experts run over all rows, each split over the instance's
GPUs; that is the part the ranks share.

Speculative decoding (`pool.speculative`): `step_ops(..., queries=k+1)` is the verify step — every line at
(k+1) rows per sequence (all positions are sampled to verify), decode attention with k+1 queries per sequence
folded into the head dimension as FlashMLA runs it (one read of the cache); `mtp_draft_ops` is one draft step
of an MTP module (simulator/pricing/speculative.py composes them).

Engine behaviour a pool states: `moe_routing` (experts touched and the busiest EP rank, `expert_routing.py`),
`fuse_elementwise` (FP8 input quantization written by the norm or activation before it; RoPE and a BF16 KV
write as one kernel), `router_chain_kernels` (a grouped router the engine's fused gate does not take, run as a chain
of small kernels), and `shared_expert_overlap`, which leaves the list alone: the cost model prices a decode step's
two MoE streams (`moe_streams`) and keeps the longer (`overlap.py`). A model's QK norm across all heads adds its
all-reduce of the sums of squares under TP.

Not modeled: EP load imbalance without DP attention beyond `expert_imbalance`, and varlen attention kernels
(each prefill chunk is its own attention op).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from simulator.capacity import component_format, format_rule
from simulator.config.formats import QUANTIZED_ACTIVATIONS
from simulator.config.scenario import Pool
from simulator.config.specs import MLA, Component, ModelSpec
from simulator.pricing.expert_routing import UNIFORM, Routing, busiest_rank, uniform_experts

Shape = tuple[tuple[str, int | str], ...]

FAMILIES: dict[str, tuple[str, ...]] = {
    "decode_attention_mla": ("heads", "batch", "context", "kv", "layout", "page_size"),
    "decode_attention_gqa": ("q_heads", "kv_heads", "head_dim", "batch", "context", "kv", "page_size"),
    "prefill_attention": ("heads", "kv_heads", "qk_dim", "v_dim", "tokens", "context", "topk"),
    # SGLang's Triton attention backend (Pool.attention_backend): its own kernels, priced and measured apart
    "decode_attention_triton": ("q_heads", "kv_heads", "k_dim", "v_dim", "batch", "context", "kv", "page_size"),
    "prefill_attention_triton": ("heads", "kv_heads", "qk_dim", "v_dim", "tokens", "context", "topk"),
    "decode_indexer": ("heads", "head_dim", "key_bytes", "topk", "batch", "context"),
    "prefill_indexer": ("heads", "head_dim", "key_bytes", "topk", "tokens", "context"),
    "gemm": ("m", "n", "k", "batch", "weights", "group"),
    "moe_gemm": ("tokens", "experts", "n", "k", "weights", "group"),
    # One layer's whole routed-expert call on one rank (align, both grouped GEMMs, activation, combine), keyed
    # as AIConfigurator measures SGLang's fused MoE: the layer's tokens and the model's full expert shapes.
    "fused_moe": ("tokens", "experts", "top_k", "hidden", "inter", "tp", "ep", "weights", "group"),
    "kv_write": ("tokens", "width", "kv"),
    "integrity_check": ("pages",),
    "elementwise": ("bytes",),
    "allreduce": ("bytes", "ranks"),
    "allgather": ("bytes", "ranks"),
    # MoE dispatch or combine: bytes the busiest EP rank receives; `remote` the share of its cross-node bytes that
    # cross (1: every token-expert pair; below: a token sent once per node and forwarded over NVLink)
    "alltoall": ("bytes", "ranks", "nodes", "remote"),
}
_KEYS = {f: frozenset(keys) for f, keys in FAMILIES.items()}
# One GPU cannot time collectives: the roofline prices them, or a third party's measured table.
COLLECTIVES = frozenset({"allreduce", "allgather", "alltoall"})
# Families whose time moves with the decode batch's context (or pages) while the batch stays the same.
DECODE_CONTEXT_FAMILIES = frozenset(
    {"decode_attention_mla", "decode_attention_gqa", "decode_attention_triton", "decode_indexer"}
)

# Bundled studies' operating points, and the extra grid a profile needs to interpolate between them.
STUDY_BATCHES = tuple(2**i for i in range(9))  # decode batch 1..256
STUDY_CONTEXTS = tuple(2**i for i in range(10, 16))  # 1K..32K tokens per sequence
STUDY_CHUNKS = tuple(2**i for i in range(9, 15))  # prefill chunks 512..16384
STUDY_PREFIXES = (0, *STUDY_CONTEXTS)  # context before a chunk
GRID_OUTER = tuple(2**i for i in range(0, 10))  # batch or chunk tokens 1..512
GRID_CONTEXT = tuple(2**i for i in range(6, 18))  # 64..128K tokens per sequence
GRID_PREFIX = (0, *GRID_CONTEXT)
GRID_M = tuple(sorted({2**i for i in range(18)} | {3 * 2**i for i in range(16)}))  # 1..128K rows
GRID_PAGES = tuple(2**i for i in range(19))
GRID_BYTES = tuple(2**i for i in range(10, 33))
GRID_PER_EXPERT = tuple(2**i for i in range(15))  # token-expert pairs per touched expert
MAX_KV_TOKENS = 2**23  # batch × context the profiler allocates at most (one layer, ≤ ~10 GB BF16)
MAX_PAIRS = 2**18


@dataclass(frozen=True)
class Op:
    """`count` identical kernels of one family and shape (e.g. one per layer)."""

    family: str
    shape: Shape
    count: int = 1

    @classmethod
    def of(cls, family: str, count: int = 1, **shape: int | str) -> Op:
        if shape.keys() != _KEYS[family]:
            raise ValueError(f"{family}: shape keys {sorted(shape)} != {sorted(FAMILIES[family])}")
        return cls(family, tuple(sorted(shape.items())), count)

    @property
    def params(self) -> dict[str, int | str]:
        return dict(self.shape)


class Spec(NamedTuple):
    """An op as the parts of a step are priced: `params` may hold arrays (one value per step size)."""

    family: str
    params: dict[str, Any]
    count: int


def expected_experts(experts: int, top_k: int, tokens: float) -> float:
    """Distinct experts a batch of `tokens` touches when each picks top_k of `experts` uniformly."""
    return uniform_experts(experts, top_k, tokens)


def context_cap(model: ModelSpec) -> int | None:
    """Keys the main attention reads per query at most: DSA's top-k, else all of them (None)."""
    return model.indexer.topk if model.indexer else None


def _attended(model: ModelSpec, context: int) -> int:
    cap = context_cap(model)
    return min(context, cap) if cap else context


def _div(x: int, parts: int) -> int:
    return -(-x // parts)


class _Builder:
    """Collects ops, merging identical ones, in order of first appearance.

    With `merge=False` ops are kept one by one as `Spec`s, unmerged and unsorted (cheaper to build for a
    part priced once), and shape values may be numpy arrays (one op list for many step sizes at once).
    """

    def __init__(self, model: ModelSpec, pool: Pool, merge: bool = True, fused_moe: bool = False) -> None:
        self.model, self.pool, self.merge, self.fused_moe = model, pool, merge, fused_moe
        self.fuse = pool.fuse_elementwise  # small kernels fused into their neighbours (`quant_bytes`, `_rope_kv_write`)
        self.rule = format_rule(model, pool.weights, pool.weights_scheme)
        self.tp = pool.tp // pool.dp  # the attention TP group (the instance's tp without DP attention)
        self.counts: dict[tuple[str, Shape], int] = {}
        self.unmerged: list[Spec] = []

    def add(self, family: str, count: int, **shape: Any) -> None:
        if count <= 0:
            return
        if shape.keys() != _KEYS[family]:
            raise ValueError(f"{family}: shape keys {sorted(shape)} != {sorted(FAMILIES[family])}")
        if self.merge:
            key = (family, tuple(sorted(shape.items())))
            self.counts[key] = self.counts.get(key, 0) + count
        else:
            self.unmerged.append(Spec(family, shape, count))

    def fmt(self, component: Component) -> tuple[str, int]:
        return component_format(self.model, self.pool, component, self.rule)

    def gemm(
        self, component: Component, m: Any, n: int, k: int, count: int, batch: int = 1, fused_quant: bool = False
    ) -> None:
        """`fused_quant`: the input comes from a norm or activation kernel that, with fusion on, also writes
        its FP8 copy (that kernel counts the bytes, `quant_bytes`)."""
        w, g = self.fmt(component)
        self.add("gemm", count, m=m, n=n, k=k, batch=batch, weights=w, group=g)
        # W8A8 block FP8 quantizes activations per 128-group first: its own kernel, unless fused into the producer
        if w in QUANTIZED_ACTIVATIONS and not (self.fuse and fused_quant):
            self.elementwise(m * k * batch * 3, count)

    def moe(self, tokens: Any, experts: Any, n: int, k: int, count: int, input_rows: Any) -> None:
        """`input_rows`: rows an FP8 activation quantize reads (the layer's tokens before they fan out); with
        fusion on, the norm or activation before it writes them (`quant_bytes`)."""
        w, g = self.fmt("routed_experts")
        self.add("moe_gemm", count, tokens=tokens, experts=experts, n=n, k=k, weights=w, group=g)
        if w in QUANTIZED_ACTIVATIONS and not self.fuse:
            self.elementwise(input_rows * k * 3, count)

    def quant_bytes(self, rows: Any, k: int, *consumers: Component) -> Any:
        """Bytes a fused norm or activation kernel adds by also writing the FP8 copy (1 byte a value) that a
        consumer GEMM of block-FP8 weights reads; 0 without fusion or without such a consumer."""
        if self.fuse and any(self.fmt(c)[0] in QUANTIZED_ACTIVATIONS for c in consumers):
            return rows * k
        return 0

    def elementwise(self, nbytes: Any, count: int) -> None:
        self.add("elementwise", count, bytes=nbytes if isinstance(nbytes, np.ndarray) else int(nbytes))

    def ops(self) -> list[Op]:
        return [Op(f, s, c) for (f, s), c in self.counts.items()]


def _round_up_from_one(x: Any) -> Any:
    """max(1, round(x)) for a number or an array (both round half to even)."""
    return np.maximum(1, np.rint(x)).astype(np.int64) if isinstance(x, np.ndarray) else max(1, round(x))


def step_ops(
    model: ModelSpec,
    pool: Pool,
    decode_batch: int,
    decode_context: int,
    prefill_chunks: Sequence[tuple[int, int]] = (),
    integrity_pages: int = 0,
    queries: int = 1,
    fused_moe: bool = False,
) -> list[Op]:
    """The kernels one GPU runs for one step: `decode_batch` sequences of `decode_context` tokens (mean)
    each decoding one token (`queries` > 1: verifying that many positions), plus prefill chunks of
    (new_tokens, context_before). `fused_moe`: each MoE layer's routed experts as one `fused_moe` op (for a
    profile that measured them so) instead of its parts."""
    chunks = [(int(t), int(c)) for t, c in prefill_chunks if t > 0]
    lines = step_lines(model, decode_batch * queries, chunks)
    if lines["tokens"] == 0:
        return []
    b = _Builder(model, pool, fused_moe=fused_moe)
    for line, x in lines.items():
        _LINES[line](b, x)
    _decode(b, decode_batch, decode_context, integrity_pages, queries)
    for t, before in chunks:
        _chunk(b, t, before)
    return b.ops()


# A step is the sum of parts that each depend on few numbers, so a cost model can price each part once per
# value: the "lines" (ops that depend on one count of the step only), the decode batch's attention, and one
# part per prefill chunk. `step_ops` is exactly their merge.


def step_lines(model: ModelSpec, decode_batch: int, chunks: Sequence[tuple[int, int]]) -> dict[str, int]:
    """The counts the step's lines depend on: tokens (every row of the step), rows (sequences that sample a
    token) and absorbed (rows through MLA's absorbed W_UK/W_UV: decode, plus the chunks' under DSA)."""
    new = sum(t for t, _ in chunks)
    absorbed = decode_batch + (new if model.indexer else 0) if isinstance(model.attention, MLA) else 0
    return {"tokens": decode_batch + new, "rows": decode_batch + len(chunks), "absorbed": absorbed}


def line_ops(model: ModelSpec, pool: Pool, line: str, x: Any, fused_moe: bool = False) -> list[Spec]:
    """The ops of one line (see `step_lines`) at count `x` (x > 0), or at every count of an array `x` at once
    (shape values are then arrays, one value per count)."""
    b = _Builder(model, pool, merge=False, fused_moe=fused_moe)
    _LINES[line](b, x)
    return b.unmerged


def chunk_ops(model: ModelSpec, pool: Pool, tokens: int, before: int) -> list[Spec]:
    """The ops of one prefill chunk of `tokens` new tokens after `before` that no other part shares."""
    b = _Builder(model, pool, merge=False)
    _chunk(b, tokens, before)
    return b.unmerged


def _rank_rows(b: _Builder, x: Any) -> Any:
    """Rows of a line on the busiest DP rank: ceil(x / dp) (all of them without DP attention)."""
    return x if b.pool.dp == 1 else _div(x, b.pool.dp)


def _tokens(b: _Builder, m_all: Any) -> None:
    """Everything that runs once per row of the step."""
    model = b.model
    m = _rank_rows(b, m_all)
    h, tp, layers = model.hidden, b.tp, model.layers
    b.elementwise(m * h * 2 * 2, 1)  # embedding gather (vocab-parallel)
    if b.fuse:  # each norm also writes the FP8 copy of its output that the next GEMM reads
        dense = layers - model.moe_layers
        b.elementwise(m * h * 2 * 4 + b.quant_bytes(m, h, "attention"), layers)
        b.elementwise(m * h * 2 * 4 + b.quant_bytes(m, h, "dense_ffn"), dense)
        b.elementwise(m * h * 2 * 4 + b.quant_bytes(m, h, "shared_experts", "routed_experts"), model.moe_layers)
    else:
        b.elementwise(m * h * 2 * 4, 2 * layers)  # input + post-attention RMSNorm fused with the residual add
    if isinstance(model.attention, MLA):
        _mla(b, m)
    else:
        _gqa(b, m)
    if model.indexer:
        _indexer(b, m)
    _dense_ffn(b, m, layers - model.moe_layers)
    if model.moe_layers:
        _moe(b, m_all, model.moe_layers)
    if tp > 1:
        b.add("allreduce", 2 * layers + 1, bytes=m * h * 2, ranks=tp)  # + the vocab-parallel embedding's
    b.elementwise(m * h * 2 * 2, 1)  # final norm


def _rows(b: _Builder, rows: Any) -> None:
    """Logits only for each sequence's last position."""
    model, tp = b.model, b.tp
    rows = _rank_rows(b, rows)
    b.gemm("lm_head", rows, _div(model.vocab, tp), model.hidden, 1)
    if tp > 1:
        b.add("allgather", 1, bytes=rows * model.vocab * 2, ranks=tp)
    b.elementwise(rows * model.vocab * 4 * 2, 1)  # softmax / sampling over fp32 logits


def _absorbed(b: _Builder, rows: Any) -> None:
    """MLA's absorbed form: W_UK takes per-head q_nope into the latent (kv_b_proj's K half, kept BF16 for the
    bmm), W_UV takes the latent output back to v_head_dim per head."""
    a = b.model.attention
    if not isinstance(a, MLA) or (not isinstance(rows, np.ndarray) and not rows):
        return
    rows = _rank_rows(b, rows)
    L, heads = b.model.layers, _div(a.heads, b.tp)
    b.add("gemm", L, m=rows, n=a.kv_lora_rank, k=a.qk_nope_head_dim, batch=heads, weights="bf16", group=0)
    b.add("gemm", L, m=rows, n=a.v_head_dim, k=a.kv_lora_rank, batch=heads, weights="bf16", group=0)


_LINES: dict[str, Callable[[_Builder, Any], None]] = {"tokens": _tokens, "rows": _rows, "absorbed": _absorbed}
LINES = tuple(_LINES)


def _decode(b: _Builder, batch: int, context: int, integrity_pages: int, queries: int = 1) -> None:
    """Decode attention of `batch` sequences; `queries` per sequence are folded into the heads (speculative
    verify: FlashMLA treats a sequence's query positions × heads as one query block over one cache read)."""
    model, pool = b.model, b.pool
    if not batch:
        return
    batch = _rank_rows(b, batch)
    a, L, tp = model.attention, model.layers, b.tp
    if pool.attention_backend == "triton":  # MLA: one KV head, the 576-wide latent as K, its first 512 as V
        mla = isinstance(a, MLA)
        b.add(
            "decode_attention_triton",
            L,
            q_heads=_div(a.heads, tp) * queries,
            kv_heads=1 if mla else _div(a.kv_heads, tp),
            k_dim=a.kv_lora_rank + a.qk_rope_head_dim if mla else a.head_dim,
            v_dim=a.kv_lora_rank if mla else a.head_dim,
            batch=batch,
            context=_attended(model, context),
            kv=pool.kv_cache,
            page_size=pool.page_size,
        )
    elif isinstance(a, MLA):
        b.add(
            "decode_attention_mla",
            L,
            heads=_div(a.heads, tp) * queries,
            batch=batch,
            context=_attended(model, context),
            kv=pool.kv_cache,
            layout=pool.kv_layout,
            page_size=pool.page_size,
        )
    else:
        b.add(
            "decode_attention_gqa",
            L,
            q_heads=_div(a.heads, tp) * queries,
            kv_heads=_div(a.kv_heads, tp),
            head_dim=a.head_dim,
            batch=batch,
            context=_attended(model, context),
            kv=pool.kv_cache,
            page_size=pool.page_size,
        )
    if model.indexer:
        b.add(
            "decode_indexer",
            _indexed_layers(model),
            batch=batch * queries,
            context=int(context),
            **_indexer_keys(model),
        )
    if integrity_pages > 0:
        b.add("integrity_check", 1, pages=int(integrity_pages))


def _chunk(b: _Builder, t: int, before: int) -> None:
    model = b.model
    a, L, tp = model.attention, model.layers, b.tp
    topk = model.indexer.topk if model.indexer else 0
    family = "prefill_attention_triton" if b.pool.attention_backend == "triton" else "prefill_attention"
    if isinstance(a, MLA):
        heads = _div(a.heads, tp)
        # SGLang's Triton backend runs the MHA form only for a chunk with no prefix (deepseek_v2.py
        # `handle_attention_triton`); a chunk after cached tokens is attended in the absorbed form (its W_UK/W_UV
        # rows, a small share of the chunk's attention, are not priced)
        absorbed = family == "prefill_attention_triton" and before > 0
        if model.indexer or absorbed:  # absorbed MQA over the latents (sparse: the top-k of them)
            b.add(
                family,
                L,
                heads=heads,
                kv_heads=1,
                qk_dim=a.kv_lora_rank + a.qk_rope_head_dim,
                v_dim=a.kv_lora_rank,
                tokens=t,
                context=before + t,
                topk=topk,
            )
        else:  # expand the whole context's latents into per-head K_nope and V, then MHA
            b.gemm("attention", before + t, heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank, L)
            b.add(
                family,
                L,
                heads=heads,
                kv_heads=heads,
                qk_dim=a.qk_nope_head_dim + a.qk_rope_head_dim,
                v_dim=a.v_head_dim,
                tokens=t,
                context=before + t,
                topk=0,
            )
    else:
        b.add(
            family,
            L,
            heads=_div(a.heads, tp),
            kv_heads=_div(a.kv_heads, tp),
            qk_dim=a.head_dim,
            v_dim=a.head_dim,
            tokens=t,
            context=before + t,
            topk=topk,
        )
    if model.indexer:
        b.add("prefill_indexer", _indexed_layers(model), tokens=t, context=before + t, **_indexer_keys(model))


def _mla(b: _Builder, m: Any) -> None:
    model = b.model
    a = model.attention
    assert isinstance(a, MLA)
    L, hd, tp = model.layers, model.hidden, b.tp
    heads = _div(a.heads, tp)
    latent = a.kv_lora_rank + a.qk_rope_head_dim
    qk = a.qk_nope_head_dim + a.qk_rope_head_dim
    if a.q_lora_rank:
        b.gemm("attention", m, a.q_lora_rank + latent, hd, L, fused_quant=True)  # fused q_a + kv_a, replicated
        b.elementwise(m * a.q_lora_rank * 2 * 2 + b.quant_bytes(m, a.q_lora_rank, "attention"), L)  # q_a norm
        b.gemm("attention", m, heads * qk, a.q_lora_rank, L, fused_quant=True)  # q_b
    else:
        b.gemm("attention", m, latent, hd, L, fused_quant=True)
        b.gemm("attention", m, heads * qk, hd, L, fused_quant=True)
    b.elementwise(m * a.kv_lora_rank * 2 * 2, L)  # kv_a layernorm
    _rope_kv_write(b, m, m * (heads + 1) * a.qk_rope_head_dim * 2 * 2, latent)  # rope on q and the shared k
    b.gemm("attention", m, hd, heads * a.v_head_dim, L)  # o_proj


def _rope_kv_write(b: _Builder, m: Any, rope_bytes: Any, width: int) -> None:
    """RoPE, then the new rows' KV-cache write; with fusion on and a BF16 cache, one kernel that ropes and
    writes (SGLang's `enable_fused_set_kv_buffer`, CUDA and BF16 caches only), its bytes both kernels'."""
    L, kv = b.model.layers, b.pool.kv_cache
    if b.fuse and kv == "bf16":
        b.elementwise(rope_bytes + m * width * (2 + 2), L)
        return
    b.elementwise(rope_bytes, L)
    b.add("kv_write", L, tokens=m, width=width, kv=kv)


def _gqa(b: _Builder, m: Any) -> None:
    model = b.model
    a = model.attention
    assert not isinstance(a, MLA)
    L, tp = model.layers, b.tp
    heads, kv_heads = _div(a.heads, tp), _div(a.kv_heads, tp)
    b.gemm("attention", m, (heads + 2 * kv_heads) * a.head_dim, model.hidden, L, fused_quant=True)
    _qk_norm(b, m, heads, kv_heads)
    rope = m * (heads + kv_heads) * a.head_dim * a.partial_rotary_factor * 2 * 2
    _rope_kv_write(b, m, rope, 2 * kv_heads * a.head_dim)
    b.gemm("attention", m, model.hidden, heads * a.head_dim, L)  # o_proj


def _qk_norm(b: _Builder, m: Any, heads: int, kv_heads: int) -> None:
    """RMSNorm of a rank's queries and keys across all heads: a kernel summing the squares, the all-reduce of those
    sums over the TP ranks (two floats a row), and a kernel applying them (sglang 0.5.8 models/minimax_m2.py
    `forward_qk`: `rms_sumsq_serial`, the all-reduce, `rms_apply_serial`). A norm per head is not priced: SGLang
    runs Qwen3's q and k norms on two streams beside each other in a captured decode step (models/qwen3.py
    `_apply_qk_norm`), and priced as two kernels a layer they took Qwen3's sources further out (docs/calibration.md
    §3)."""
    a, L = b.model.attention, b.model.layers
    assert not isinstance(a, MLA)
    if a.qk_norm != "across_heads":
        return
    q, k = m * heads * a.head_dim * 2, m * kv_heads * a.head_dim * 2  # bytes of a rank's BF16 queries and keys
    b.elementwise(q + k, L)
    if b.tp > 1:
        b.add("allreduce", L, bytes=m * 2 * 4, ranks=b.tp)
    b.elementwise((q + k) * 2, L)


def _indexed_layers(model: ModelSpec) -> int:
    """Layers that compute an index (IndexShare: one per `share_layers`)."""
    assert model.indexer is not None
    return math.ceil(model.layers / model.indexer.share_layers)


def _indexer_keys(model: ModelSpec) -> dict[str, int]:
    ix = model.indexer
    assert ix is not None
    return dict(heads=ix.heads, head_dim=ix.head_dim, key_bytes=ix.key_bytes, topk=ix.topk)


def _indexer(b: _Builder, m: Any) -> None:
    """DSA's lightning indexer: its projections and key writes (its scoring is per decode batch / chunk)."""
    model = b.model
    ix = model.indexer
    assert ix is not None
    n = _indexed_layers(model)
    a = model.attention
    q_in = a.q_lora_rank if isinstance(a, MLA) and a.q_lora_rank else model.hidden
    b.gemm("indexer", m, ix.heads * ix.head_dim, q_in, n)  # wq_b
    b.gemm("indexer", m, ix.head_dim + ix.heads, model.hidden, n)  # wk + per-head weights
    b.elementwise(m * (ix.heads + 1) * ix.head_dim * 2 * 2, n)  # k norm, rope, fp8 quantize of q and k
    b.add("kv_write", n, tokens=m, width=ix.head_dim, kv="fp8_e4m3")


def _dense_ffn(b: _Builder, m: Any, layers: int) -> None:
    inter = _div(b.model.dense_intermediate, b.tp)
    b.gemm("dense_ffn", m, 2 * inter, b.model.hidden, layers, fused_quant=True)
    b.elementwise(m * 3 * inter * 2 + b.quant_bytes(m, inter, "dense_ffn"), layers)  # SiLU(gate) × up
    b.gemm("dense_ffn", m, b.model.hidden, inter, layers, fused_quant=True)


def _moe(b: _Builder, m_all: Any, layers: int) -> None:
    """Routed experts over the instance's `m_all` rows; the router, shared experts and combine on a rank's own."""
    _router_and_routed(b, m_all, layers)
    moe = b.model.moe
    assert moe is not None
    if moe.shared_experts and not _moe_tp_behind_dp(b.pool):
        _shared(b, _rank_rows(b, m_all), b.tp, layers)


def _moe_tp_behind_dp(pool: Pool) -> bool:
    """DP attention with the experts split by TP (ep = 1, SGLang's --enable-dp-attention without EP): every MoE
    layer gathers all ranks' rows to every GPU and reduces the experts' output back, shared experts included."""
    return pool.dp > 1 and pool.ep == 1


def _router_and_routed(b: _Builder, m_all: Any, layers: int) -> None:
    """The router and the routed experts (one stream of a MoE layer; the shared experts are the other)."""
    model, pool = b.model, b.pool
    moe = model.moe
    assert moe is not None
    m = _rank_rows(b, m_all)
    hd, E = model.hidden, moe.routed_experts
    b.gemm("router", m, E, hd, layers)
    b.elementwise(m * E * 4 * 2, layers)  # scores, grouped top-k
    if chain := _router_chain(model, pool):
        b.elementwise(m * E * 4 * 2, layers * chain)  # the unfused chain (Pool's comment)
    if b.fused_moe and pool.dp == 1 and pool.expert_imbalance == 1.0 and not pool.redundant_experts:
        w, g = b.fmt("routed_experts")  # the form a fused-MoE table was measured in (one TP/EP instance)
        b.add(
            "fused_moe",
            layers,
            tokens=m_all,
            experts=E,
            top_k=moe.top_k,
            hidden=hd,
            inter=moe.intermediate,
            tp=pool.tp // pool.ep,
            ep=pool.ep,
            weights=w,
            group=g,
        )
        return
    _routed(b, m_all, m, layers)


def compiled_kernels(model: ModelSpec, pool: Pool) -> int:
    """Kernels of a step's op list that a torch.compile'd function launches rather than Python op by op: the
    unfused grouped router's chain (`biased_grouped_topk_impl`), one call a MoE layer for its kernels. An eager
    step pays a launch for the call, not for each kernel (`CostModel.eager_floor_us`)."""
    chain = _router_chain(model, pool)
    return model.moe_layers * (chain - 1) if chain else 0


def _router_chain(model: ModelSpec, pool: Pool) -> int:
    """Kernels a MoE layer's grouped router runs as a chain (the engine's `router_chain_kernels`), 0 where it is one
    fused gate: the engine fuses it (`_fused_gate`) or the router is not grouped."""
    moe = model.moe
    if moe is None or not moe.grouped_router or _fused_gate(moe.routed_experts):
        return 0
    return pool.router_chain_kernels


def _fused_gate(experts: int) -> bool:
    """Whether SGLang's fused gate takes a grouped router of this many experts: a power of two (moe_fused_gate;
    FlashInfer's fused top-k from 0.5.8), or Kimi K2's 384 (`kimi_k2_moe_fused_gate`)."""
    return experts & (experts - 1) == 0 or experts == 384


def _routed(b: _Builder, m_all: Any, m: Any, layers: int) -> None:
    """The routed experts of `layers` MoE layers over the instance's `m_all` rows (`m`: the busiest DP rank's):
    dispatch, both grouped GEMMs, combine. Under DP attention this is the part of a step every rank shares."""
    model, pool = b.model, b.pool
    moe = model.moe
    assert moe is not None
    hd, E = model.hidden, moe.routed_experts
    slots = E + pool.redundant_experts  # EPLB replicas are touched like the experts they copy
    if pool.moe_routing == "power_law" and not pool.redundant_experts:  # the busiest EP rank (expert_routing.py)
        busy, touched = busiest_rank(slots, moe.top_k, m_all, pool.ep, pool.moe_routing_alpha)
        pairs, local = _round_up_from_one(busy), _round_up_from_one(touched)
    else:  # the mean pairs a rank, times what uniform routing or EPLB's placement leaves; touched experts spread
        # evenly over the ranks (a skewed router's still leaves its cold experts untouched)
        if pool.moe_routing == "power_law":
            touched = busiest_rank(slots, moe.top_k, m_all, 1, pool.moe_routing_alpha)[1]
        else:
            touched = expected_experts(slots, moe.top_k, m_all)
        pairs = _round_up_from_one(m_all * moe.top_k * pool.expert_imbalance / pool.ep)
        local = _round_up_from_one(touched / pool.ep)
    inter = _div(moe.intermediate, pool.tp // pool.ep)
    if _moe_tp_behind_dp(pool):  # SGLang's dp_gather and the experts' TP reduction: two all-reduces of all rows
        b.add("allreduce", 2 * layers, bytes=m_all * hd * 2, ranks=pool.tp)
        if moe.shared_experts:  # on the gathered rows, split over every GPU (part of what the ranks share)
            _shared(b, m_all, pool.tp, layers)
    elif pool.dp > 1:  # tokens travel to their experts' ranks and back
        remote = node_dedup_share(pool.nodes, moe.top_k) if pool.a2a_node_dedup else 1.0
        b.add("alltoall", layers, bytes=pairs * dispatch_bytes(hd), ranks=pool.ep, nodes=pool.nodes, remote=remote)
        b.add("alltoall", layers, bytes=pairs * hd * 2, ranks=pool.ep, nodes=pool.nodes, remote=remote)
    b.elementwise(pairs * 4 * 2, layers)  # moe_align: sort token-expert pairs by expert, pad to tiles
    b.moe(pairs, local, 2 * inter, hd, layers, m)
    b.elementwise(pairs * 3 * inter * 2 + b.quant_bytes(pairs, inter, "routed_experts"), layers)
    b.moe(pairs, local, hd, inter, layers, pairs)
    b.elementwise((pairs + m) * hd * 2, layers)  # weighted combine of the top-k outputs


def routed_ops(model: ModelSpec, pool: Pool, m_all: int, layers: int) -> list[Op]:
    """The routed-expert ops `_moe` lists for `layers` MoE layers over the instance's `m_all` rows (DP attention:
    every rank's tokens), merged as in `step_ops`: what a DP step's ranks share, and what a rank's own op list
    is without (`pricing.dpstep`)."""
    b = _Builder(model, pool)
    _routed(b, m_all, _rank_rows(b, m_all), layers)
    return b.ops()


def routed_specs(model: ModelSpec, pool: Pool, m_all: Any, layers: int) -> list[Spec]:
    """`routed_ops` unmerged, at one count or at every count of an array at once (a line of a cost model)."""
    b = _Builder(model, pool, merge=False)
    _routed(b, m_all, _rank_rows(b, m_all), layers)
    return b.unmerged


def moe_streams(model: ModelSpec, pool: Pool, rows: int, fused_moe: bool = False) -> tuple[list[Op], list[Op]]:
    """A step's MoE layers over `rows` rows as their two streams: the router and routed experts, and the
    shared experts (which engines run beside them, `pricing/overlap.py`). Both are among `step_ops`' ops."""
    moe = model.moe
    assert moe is not None
    routed, shared = _Builder(model, pool, fused_moe=fused_moe), _Builder(model, pool, fused_moe=fused_moe)
    _router_and_routed(routed, rows, model.moe_layers)
    if moe.shared_experts and not _moe_tp_behind_dp(pool):
        _shared(shared, _rank_rows(shared, rows), shared.tp, model.moe_layers)
    return routed.ops(), shared.ops()


def _shared(b: _Builder, m: Any, tp: int, layers: int) -> None:
    moe = b.model.moe
    assert moe is not None
    hd, inter_s = b.model.hidden, _div(moe.shared_experts * moe.intermediate, tp)
    b.gemm("shared_experts", m, 2 * inter_s, hd, layers, fused_quant=True)
    b.elementwise(m * 3 * inter_s * 2 + b.quant_bytes(m, inter_s, "shared_experts"), layers)
    b.gemm("shared_experts", m, hd, inter_s, layers, fused_quant=True)


def node_dedup_share(nodes: int, top_k: int) -> float:
    """The share of a token's cross-node expert pairs that cross when it is sent once per node and forwarded to
    its experts there over NVLink (DeepEP's normal mode): with its top_k experts spread uniformly over `nodes`,
    it reaches 1 − (1 − 1/N)^k of the nodes, not k pairs' worth (N = 4, k = 8: 0.45)."""
    if nodes <= 1:
        return 1.0
    return min(1.0, (1 - (1 - 1 / nodes) ** top_k) / (top_k / nodes))


def dispatch_bytes(hidden: int) -> int:
    """Bytes one token-expert pair moves in an FP8 dispatch: e4m3 values and one fp32 scale per 128 (DeepEP)."""
    return hidden + 4 * _div(hidden, 128)


def mtp_draft_ops(model: ModelSpec, pool: Pool, batch: int, context: int) -> list[Op]:
    """One draft step of the model's MTP module for `batch` sequences: eh_proj over [embedding; hidden], its
    norms, one decoder layer (attention over the sequence's context, the FFN) and the shared head."""
    layer = model.model_copy(
        update={"layers": model.mtp_layers, "mtp_layers": 0, "dense_layers": 0 if model.moe else model.mtp_layers}
    )
    b = _Builder(model, pool)
    rows, h = _rank_rows(b, batch), model.hidden
    b.gemm("mtp", rows, _div(h, b.tp), 2 * h, model.mtp_layers)  # eh_proj
    b.elementwise(rows * h * 2 * 2 * 2, model.mtp_layers)  # enorm + hnorm
    return b.ops() + step_ops(layer, pool, batch, context)


def routed_parts(s: Mapping[str, Any], routing: Routing = UNIFORM) -> list[Spec]:
    """The unfused ops of one `fused_moe` op: what the op list holds without a fused table, and what the
    roofline sums to price a fused one, with experts touched as `routing` routes (a fit passes the routing
    the table was measured at). Shape values may be arrays (one per step size)."""
    m, top_k, ep, hd, w, g = s["tokens"], s["top_k"], s["ep"], s["hidden"], s["weights"], s["group"]
    if routing[0] == "power_law":  # the busiest EP rank, as the table timed it
        busy, touched = busiest_rank(s["experts"], top_k, m, ep, routing[1])
        pairs, local = _round_up_from_one(busy), _round_up_from_one(touched)
    else:
        pairs = _round_up_from_one(m * top_k / ep)
        local = _round_up_from_one(expected_experts(s["experts"], top_k, m) / ep)
    inter = _div(s["inter"], s["tp"])
    out: list[Spec] = []

    def elementwise(nbytes: Any) -> None:
        out.append(Spec("elementwise", {"bytes": nbytes if isinstance(nbytes, np.ndarray) else int(nbytes)}, 1))

    def grouped(n: int, k: int, input_rows: Any) -> None:
        out.append(Spec("moe_gemm", dict(tokens=pairs, experts=local, n=n, k=k, weights=w, group=g), 1))
        if w in QUANTIZED_ACTIVATIONS:  # the input rows are quantized first: their own kernel
            elementwise(input_rows * k * 3)

    elementwise(pairs * 4 * 2)  # moe_align: sort token-expert pairs by expert, pad to tiles
    grouped(2 * inter, hd, m)
    elementwise(pairs * 3 * inter * 2)
    grouped(hd, inter, pairs)
    elementwise((pairs + m) * hd * 2)  # weighted combine of the top-k outputs
    return out


# -- what a profile must measure ---------------------------------------------------------------------------


def profile_shapes(models_pools: Iterable[tuple[ModelSpec, Pool]]) -> dict[str, list[dict[str, int | str]]]:
    """Every shape the bundled studies' steps produce, plus the grid around them that interpolation needs.

    Collectives are left out (a single GPU cannot time them). Two-axis families get, for every outer value
    (batch, chunk tokens, touched experts), the whole inner grid, so any point between two profiled outer
    values is covered by both.
    """
    seen: dict[str, set[Shape]] = {}
    for model, pool in models_pools:
        local_experts = _div(model.moe.routed_experts, pool.ep) if model.moe else 1
        for op in {op for ops in _study_steps(model, pool) for op in ops if op.family not in COLLECTIVES}:
            shapes = seen.setdefault(op.family, set())
            shapes.add(op.shape)
            shapes.update(Op.of(op.family, **g).shape for g in _grid(op.family, op.params, local_experts))
    return {family: [dict(s) for s in sorted(shapes)] for family, shapes in sorted(seen.items())}


def _study_steps(model: ModelSpec, pool: Pool) -> Iterable[list[Op]]:
    for batch in STUDY_BATCHES:
        for ctx in STUDY_CONTEXTS:
            yield step_ops(model, pool, batch, ctx, (), batch * _div(ctx, pool.page_size))
    for chunk in STUDY_CHUNKS:
        for before in STUDY_PREFIXES:
            yield step_ops(model, pool, 0, 0, [(chunk, before)], 0)


def _grid(family: str, s: Mapping[str, int | str], local_experts: int) -> Iterable[dict[str, int | str]]:
    """Neighbours of one profiled shape along the family's interpolation axes."""
    if family in DECODE_CONTEXT_FAMILIES:
        for batch in {*GRID_OUTER, int(s["batch"])}:
            for ctx in GRID_CONTEXT:
                if batch * ctx <= MAX_KV_TOKENS:
                    yield {**s, "batch": batch, "context": ctx}
    elif family in ("prefill_attention", "prefill_attention_triton", "prefill_indexer"):
        for tokens in {*GRID_OUTER, *STUDY_CHUNKS, int(s["tokens"])}:
            for prefix in GRID_PREFIX:
                yield {**s, "tokens": tokens, "context": tokens + prefix}
    elif family == "moe_gemm":
        powers = {2**i for i in range(local_experts.bit_length())}
        for experts in {*powers, local_experts, int(s["experts"])}:
            for per in GRID_PER_EXPERT:
                if experts * per <= MAX_PAIRS:
                    yield {**s, "experts": experts, "tokens": experts * per}
    elif family in ("gemm", "kv_write"):
        axis = "m" if family == "gemm" else "tokens"
        for v in GRID_M:
            yield {**s, axis: v}
    elif family == "integrity_check":
        for v in GRID_PAGES:
            yield {"pages": v}
    elif family == "elementwise":
        for v in GRID_BYTES:
            yield {"bytes": v}
