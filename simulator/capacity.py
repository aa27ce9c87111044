"""Memory accounting: what a model's weights weigh per GPU and how many KV-cache tokens the rest holds.

Per GPU: `HBM × mem_fraction − weights shard − reserve = KV budget`; tokens = budget // KV bytes per token.

Every weight tensor is described once (`Part`: its component, size, whether it is a matrix a format may
quantize, and how tensor parallelism places it), so parameter counts, checkpoint sizes and per-GPU shards
are three sums over the same list and cannot disagree.

Placement under an instance of `tp` GPUs (the convention of the published Kimi K2.6 capacity figure):
* attention, dense FFN, shared experts, MTP `eh_proj`: split by TP (embedding and head by vocabulary);
* routed experts: spread over all of the instance's GPUs (EP × per-expert TP = `tp`);
* GQA K/V projections: split by KV head; a head is replicated when `tp` exceeds the KV heads;
* replicated on every rank: norms (incl. MLA's q/kv LoRA-rank layernorms), the router, the DSA indexer
  (its keys are scored by every rank) and, in the cache, the MLA latent and the indexer keys.
SGLang and vLLM also replicate MLA's down-projections (`q_a_proj`, `kv_a_proj_with_mqa`); this model splits
them, as the published figure's arithmetic does. For Kimi K2.6 on TP8 that leaves out ~1.5 GiB per GPU
(~23K of ~677K BF16 tokens, 3.4%).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

from rich.console import Group
from rich.table import Table
from rich.text import Text

from simulator.config import formats
from simulator.config.scenario import Pool, Scenario
from simulator.config.specs import GQA, MLA, Component, FormatRule, HardwareSpec, ModelSpec, WeightFormat
from simulator.config.tiers import has_tiers
from simulator.console import styled
from simulator.errors import InputError
from simulator.folding import Folded

GIB = 1024**3
FP8_BLOCK = 128  # FP8 checkpoints carry one fp32 scale per 128×128 weight block
FP8_BYTES = 1.0 + 4.0 / (FP8_BLOCK * FP8_BLOCK)  # ≈ 8.002 bits
DEFAULT_INT4_GROUP = 128
FP8_TILE = 128  # tiled FP8 MLA cache: one fp32 scale per 128 latent values

# What a format quantizes when a preset does not say: the linear layers, as FP8/INT4 releases usually do.
_LINEAR: list[Component] = ["attention", "dense_ffn", "routed_experts", "shared_experts", "mtp"]
DEFAULT_FORMATS: dict[WeightFormat, FormatRule] = {
    "fp8": FormatRule(components=_LINEAR),
    "int4": FormatRule(components=_LINEAR, group_size=DEFAULT_INT4_GROUP),
    "w4a8": FormatRule(components=_LINEAR, group_size=DEFAULT_INT4_GROUP),
    "nvfp4": FormatRule(components=_LINEAR),
    "mxfp4": FormatRule(components=_LINEAR),
}
NO_REST = FormatRule(components=[])  # a rule that leaves the rest BF16

Placement = Literal["tp", "kv_heads", "experts", "replicated"]


@dataclass(frozen=True)
class Part:
    """One kind of weight tensor, summed over the layers that hold it.

    `component` is where it is reported (all of an MTP layer reports as "mtp"); `kind` is what a format rule
    matches (an MTP layer's attention is kind "attention"), so a rule quantizes MTP only if it lists "mtp".
    """

    component: Component
    kind: Component
    params: int
    matrix: bool  # only matrices are quantized; norms and biases stay BF16
    placement: Placement


@dataclass(frozen=True)
class PoolCapacity:
    """What one GPU of a pool holds; `kv_tokens`/`pages` are per instance (every rank holds the same ones)."""

    weights_gib_per_gpu: float
    kv_bytes_per_token: int  # per GPU
    kv_budget_gib_per_gpu: float
    kv_tokens: int
    pages: int
    fits: bool
    reason: str
    instances: int
    gpus: int
    weights_scheme: str  # what the weights hold, in words
    # DP attention / wide EP (simulator/config/parallel.py): what one rank holds; None when the pool uses neither,
    # and then left out of the JSON (`capacity_dict`).
    per_rank: dict[str, Any] | None = None
    # KV tiers below HBM (simulator/config/tiers.py): the page slots of each rank's tiers; None without tiers.
    tiers: dict[str, int] | None = None


def capacity_dict(cap: PoolCapacity) -> dict[str, Any]:
    """The JSON form of a pool's capacity; `per_rank` appears only for pools with DP attention or wide EP."""
    out = asdict(cap)
    for key in ("per_rank", "tiers"):
        if out[key] is None:
            del out[key]
    return out


def _part(kind: Component, params: int, matrix: bool, placement: Placement, mtp: bool) -> Part:
    """A main-model part reports under its own kind; an MTP layer's under "mtp"."""
    return Part("mtp" if mtp else kind, kind, params, matrix, placement)


def _attention_parts(model: ModelSpec, n: int, mtp: bool) -> list[Part]:
    """Attention of `n` layers: projections (matrices) and the vectors that come with them."""
    h, a = model.hidden, model.attention
    if isinstance(a, MLA):
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        if a.q_lora_rank:
            q = [
                (h * a.q_lora_rank, True, "tp"),
                (a.q_lora_rank, False, "replicated"),  # q_a, q_a_layernorm
                (a.q_lora_rank * a.heads * qk, True, "tp"),
            ]  # q_b
        else:
            q = [(h * a.heads * qk, True, "tp")]
        shapes: list[tuple[int, bool, Placement]] = [
            *q,
            (h * (a.kv_lora_rank + a.qk_rope_head_dim), True, "tp"),  # kv_a_proj_with_mqa
            (a.kv_lora_rank, False, "replicated"),  # kv_a_layernorm
            (a.kv_lora_rank * a.heads * (a.qk_nope_head_dim + a.v_head_dim), True, "tp"),  # kv_b
            (a.heads * a.v_head_dim * h, True, "tp"),  # o_proj
        ]
    else:
        q_width, kv_width = a.heads * a.head_dim, 2 * a.kv_heads * a.head_dim
        shapes = [(h * q_width, True, "tp"), (h * kv_width, True, "kv_heads"), (q_width * h, True, "tp")]
        if a.qkv_bias:
            shapes += [(q_width, False, "tp"), (kv_width, False, "kv_heads")]
    return [_part("attention", n * p, m, pl, mtp) for p, m, pl in shapes]


def _indexer_parts(model: ModelSpec, n: int, mtp: bool) -> list[Part]:
    """DSA lightning indexer of `n` indexed layers: wq_b (from the q latent), wk, head weights, k norm."""
    ix = model.indexer
    if ix is None or n == 0:
        return []
    q_in = (
        model.attention.q_lora_rank
        if isinstance(model.attention, MLA) and model.attention.q_lora_rank
        else model.hidden
    )
    mats = q_in * ix.heads * ix.head_dim + model.hidden * ix.head_dim + model.hidden * ix.heads
    return [
        _part("indexer", n * mats, True, "replicated", mtp),
        _part("indexer", n * 2 * ix.head_dim, False, "replicated", mtp),
    ]


def _ffn_parts(model: ModelSpec, n: int, moe: bool, mtp: bool) -> list[Part]:
    """FFN of `n` layers: a dense gate/up/down, or routed + shared experts and the router."""
    h = model.hidden
    if not moe or model.moe is None:
        return [_part("dense_ffn", n * 3 * h * model.dense_intermediate, True, "tp", mtp)]
    m = model.moe
    expert = 3 * h * m.intermediate
    return [
        _part("routed_experts", n * m.routed_experts * expert, True, "experts", mtp),
        _part("shared_experts", n * m.shared_experts * expert, True, "tp", mtp),
        _part("router", n * m.routed_experts * h, True, "replicated", mtp),
        _part("router", n * m.routed_experts, False, "replicated", mtp),
    ]  # score-correction bias


def parts(model: ModelSpec) -> list[Part]:
    """Every weight tensor of the checkpoint, main model then MTP layers."""
    h, v = model.hidden, model.vocab
    moe_layers = model.moe_layers
    dense_layers = model.layers - moe_layers
    indexed = math.ceil(model.layers / model.indexer.share_layers) if model.indexer else 0
    out = [Part("embedding", "embedding", v * h, True, "tp")]
    if not model.tie_embeddings:
        out.append(Part("lm_head", "lm_head", v * h, True, "tp"))
    out += _attention_parts(model, model.layers, False)
    out += _indexer_parts(model, indexed, False)
    out += _ffn_parts(model, dense_layers, False, False)
    out += _ffn_parts(model, moe_layers, True, False)
    out.append(Part("norms", "norms", model.layers * 2 * h + h, False, "replicated"))  # 2 per layer + final
    n = model.mtp_layers
    if n:
        # One full decoder layer each (its own indexer, MoE if the model has one), plus eh_proj [2h → h],
        # enorm, hnorm, the two layer norms and the shared head's norm; embedding and head are shared.
        out += [_part("mtp", n * 2 * h * h, True, "tp", True), _part("norms", n * 5 * h, False, "replicated", True)]
        out += _attention_parts(model, n, True) + _indexer_parts(model, n, True)
        out += _ffn_parts(model, n, model.moe is not None, True)
    return [p for p in out if p.params]


def param_counts(model: ModelSpec) -> dict[str, int]:
    """Parameters by component (the keys of `Component` that the model has)."""
    counts: dict[str, int] = {}
    for p in parts(model):
        counts[p.component] = counts.get(p.component, 0) + p.params
    return counts


def total_params(model: ModelSpec, mtp: bool = True) -> int:
    """All parameters; `mtp=False` gives the main-model count that model cards usually quote."""
    return sum(c for k, c in param_counts(model).items() if mtp or k != "mtp")


def active_params(model: ModelSpec) -> int:
    """Parameters one token touches in the main model: all but the routed experts it was not sent to."""
    total = total_params(model, mtp=False)
    if model.moe is None:
        return total
    routed = param_counts(model)["routed_experts"]
    return total - routed + routed * model.moe.top_k // model.moe.routed_experts


def format_rule(model: ModelSpec, fmt: WeightFormat, scheme: str | None = None) -> FormatRule:
    """The preset's rule for a format (or the named alternative `scheme`), else the default; BF16 quantizes
    nothing."""
    if fmt == "bf16":
        return FormatRule(components=[], scheme="bf16: nothing quantized")
    if scheme is not None:
        if scheme not in model.schemes:
            known = ", ".join(model.schemes) or "none"
            raise InputError(f"weights_scheme: model {model.name} has no scheme {scheme!r} (known: {known})")
        return model.schemes[scheme]
    return model.formats.get(fmt, DEFAULT_FORMATS[fmt])


def component_format(
    model: ModelSpec, pool: Pool, component: Component, rule: FormatRule | None = None
) -> tuple[str, int]:
    """(format, group size) a component's matrices are stored in on this pool: the pool's format where its rule
    quantizes the component (`format_rule`), else BF16; the group size only for group-scaled formats. The one rule
    the op list prices by, the memory counts by, and the replay executor draws its weights in. `rule`: the pool's
    rule, when the caller holds it already."""
    rule = format_rule(model, pool.weights, pool.weights_scheme) if rule is None else rule
    if pool.weights != "bf16" and component in rule.components:
        grouped = pool.weights in formats.GROUPED
        return pool.weights, (pool.int4_group_size or rule.group_size or DEFAULT_INT4_GROUP) if grouped else 0
    if component in _rest_rule(model, rule).components:
        return rule.rest, 0
    return "bf16", 0


def _rest_rule(model: ModelSpec, rule: FormatRule) -> FormatRule:
    """The rule of the format a converted release keeps where the conversion did not reach (none: BF16)."""
    return NO_REST if rule.rest == "bf16" else format_rule(model, rule.rest)


def _part_format(p: Part, fmt: WeightFormat, rule: FormatRule, rest: FormatRule) -> WeightFormat:
    """The format a part is stored in: the pool's where its rule quantizes the part, the release's where a
    converted rule left it (`_rest_rule`), else BF16."""
    return fmt if _covered(p, rule) else rule.rest if _covered(p, rest) else "bf16"


def scheme_label(model: ModelSpec, fmt: WeightFormat, scheme: str | None = None) -> str:
    """How a pool's weights are quantized, in words: the rule's own description, else what it covers."""
    rule = format_rule(model, fmt, scheme)
    named = f"{scheme}: " if scheme else ""
    if rule.scheme:
        return named + rule.scheme
    group = f" (group {rule.group_size or DEFAULT_INT4_GROUP})" if fmt in formats.GROUPED else ""
    return f"{named}{fmt}{group}: {', '.join(rule.components)}; rest {rule.rest}"


def bytes_per_weight(fmt: WeightFormat, group_size: int | None = None) -> float:
    """BF16 2 B; FP8 1 B + an fp32 scale per 128×128 block; INT4 (and W4A8) 4 bits + a BF16 scale per group;
    NVFP4 4.5 bits, MXFP4 4.25 bits (`simulator/config/formats.py`)."""
    return formats.bytes_per_weight(fmt, group_size)


def _part_bytes(
    model: ModelSpec, fmt: WeightFormat, group_size: int | None, scheme: str | None = None
) -> list[tuple[Part, float]]:
    """Each part with its total bytes: covered matrices in the format, everything else BF16."""
    rule = format_rule(model, fmt, scheme)
    per_weight = bytes_per_weight(fmt, group_size or rule.group_size)
    rest = _rest_rule(model, rule)
    return [
        (p, p.params * (per_weight if _covered(p, rule) else bytes_per_weight(_part_format(p, fmt, rule, rest))))
        for p in parts(model)
    ]


def _covered(p: Part, rule: FormatRule) -> bool:
    """Whether a format rule quantizes a part (matrices of the kinds it lists; MTP layers only if it lists mtp)."""
    return p.matrix and p.kind in rule.components and (p.component != "mtp" or "mtp" in rule.components)


def rank_parts(model: ModelSpec, pool: Pool) -> list[tuple[Part, float, WeightFormat]]:
    """Each weight part with the parameters one GPU of an instance holds and the format it holds them in (what
    the replay executor draws for one rank)."""
    rule = format_rule(model, pool.weights, pool.weights_scheme)
    rest = _rest_rule(model, rule)
    return [(p, p.params * _share(p, model, pool), _part_format(p, pool.weights, rule, rest)) for p in parts(model)]


def checkpoint_bytes(model: ModelSpec, fmt: WeightFormat, group_size: int | None = None) -> float:
    """Size of the whole checkpoint (MTP included) in a weight format; `group_size` overrides INT4's."""
    return sum(b for _, b in _part_bytes(model, fmt, group_size))


def _share(p: Part, model: ModelSpec, pool: Pool) -> float:
    """Fraction of a part's bytes that one GPU of an instance holds. Under DP attention every DP rank holds the
    attention-side parts whole over its attention TP group of tp / dp GPUs (dp = 1: the instance's tp)."""
    tp = pool.tp // pool.dp
    if p.placement == "tp":  # shared experts behind DP attention with MoE TP: split over every GPU (ops.py)
        return 1 / (pool.tp if p.kind == "shared_experts" and pool.dp > 1 and pool.ep == 1 else tp)
    if p.placement == "replicated":
        return 1.0
    if p.placement == "kv_heads":
        assert isinstance(model.attention, GQA)
        kv = model.attention.kv_heads
        return math.ceil(kv / tp) / kv
    # Routed experts: whole experts over EP groups, each expert split over the tp/ep ranks of a group; redundant
    # experts (EPLB) add replicas, spread with the rest.
    assert model.moe is not None
    experts = model.moe.routed_experts
    return math.ceil((experts + pool.redundant_experts) / pool.ep) / experts / (pool.tp // pool.ep)


def weights_bytes_per_gpu(model: ModelSpec, pool: Pool) -> float:
    """Bytes of weights each GPU of one instance holds in the pool's weight format."""
    return sum(
        b * _share(p, model, pool)
        for p, b in _part_bytes(model, pool.weights, pool.int4_group_size, pool.weights_scheme)
    )


def kv_bytes_per_token(model: ModelSpec, pool: Pool) -> int:
    """KV-cache bytes one token costs on one GPU, over every layer that caches (MTP layers included)."""
    layers = model.layers + model.mtp_layers
    a = model.attention
    fp8 = pool.kv_cache == "fp8_e4m3"
    if isinstance(a, MLA):
        latent = a.kv_lora_rank + a.qk_rope_head_dim  # replicated on every TP rank
        if not fp8:
            per_layer = 2 * latent
        elif pool.kv_layout == "flat":
            per_layer = latent  # per-tensor scale: negligible
        else:  # tiled: e4m3 latent + fp32 scale per tile, rope part kept in BF16
            per_layer = a.kv_lora_rank + 4 * math.ceil(a.kv_lora_rank / FP8_TILE) + 2 * a.qk_rope_head_dim
    else:
        per_layer = 2 * math.ceil(a.kv_heads / (pool.tp // pool.dp)) * a.head_dim * (1 if fp8 else 2)
    total = layers * per_layer
    if model.indexer:  # DSA indexer keys: FP8 + scale whatever the cache format, replicated
        indexed = math.ceil(model.layers / model.indexer.share_layers) + model.mtp_layers
        total += indexed * model.indexer.key_bytes
    return total


def pool_capacity(model: ModelSpec, hw: HardwareSpec, pool: Pool) -> PoolCapacity:
    """KV capacity of one instance of a pool, or why its weights do not fit."""
    weights_gib = (weights_bytes_per_gpu(model, pool) + draft_weights_bytes_per_gpu(pool)) / GIB
    per_token = kv_bytes_per_token(model, pool) + draft_kv_bytes_per_token(pool)
    usable_gib = hw.hbm_gib * pool.mem_fraction - pool.reserve_gib
    budget_gib = max(0.0, usable_gib - weights_gib)
    tokens = int(budget_gib * GIB // per_token)
    pages = tokens // pool.page_size
    problem = ""
    if weights_gib > usable_gib:
        problem = f"weights {weights_gib:.1f} GiB > budget {max(usable_gib, 0.0):.1f} GiB per GPU"
    elif pages == 0:
        problem = f"KV budget {budget_gib:.2f} GiB per GPU holds no page of {pool.page_size} tokens"
    if problem:
        tokens = pages = 0
    reason = f"does not fit: {problem}" if problem else ""
    per_rank = None
    if pool.dp > 1 or pool.nodes > 1 or pool.redundant_experts:  # each DP rank holds its own sequences' KV
        per_rank = {
            "dp": pool.dp,
            "attention_tp": pool.tp // pool.dp,
            "ep": pool.ep,
            "nodes": pool.nodes,
            "experts_per_rank": experts_per_rank(model, pool),
            "redundant_experts": pool.redundant_experts,
            "weights_gib": weights_gib,
            "kv_tokens": tokens,
            "pages": pages,
        }
        tokens, pages = tokens * pool.dp, pages * pool.dp
    return PoolCapacity(
        weights_gib_per_gpu=weights_gib,
        kv_bytes_per_token=per_token,
        kv_budget_gib_per_gpu=budget_gib,
        kv_tokens=tokens,
        pages=pages,
        fits=not reason,
        reason=reason,
        instances=pool.instances,
        gpus=pool.gpus,
        per_rank=per_rank,
        weights_scheme=scheme_label(model, pool.weights, pool.weights_scheme),
        tiers=tier_pages(model, pool, per_token) if has_tiers(pool) and not problem else None,
    )


def tier_pages(model: ModelSpec, pool: Pool, per_token: int) -> dict[str, int]:
    """Page slots of one rank's tiers below HBM. Host DRAM is per instance, each GPU keeping its own share of a page
    as it does in HBM (`per_token`: a GPU's KV bytes per token; SGLang's --hicache-size is per rank), so a rank holds
    host_tier_gib / tp over its GPU's page bytes. A storage tier keeps one copy of every KV head per instance (HiCache
    writes an MLA page to L3 from one rank), split over the DP ranks."""
    host = int(pool.host_tier_gib * GIB / pool.tp // (pool.page_size * per_token))
    storage = 0
    if pool.storage_tier is not None:
        whole = kv_bytes_per_token(model, pool.model_copy(update={"tp": 1, "dp": 1}))
        storage = int(pool.storage_tier.capacity_gib * GIB / pool.dp // (pool.page_size * whole))
    return {"host_pages": host, "storage_pages": storage}


def experts_per_rank(model: ModelSpec, pool: Pool) -> int:
    """Routed experts (replicas included) whose weights one EP group holds."""
    return math.ceil((model.moe.routed_experts + pool.redundant_experts) / pool.ep) if model.moe else 0


def draft_pool(pool: Pool) -> Pool:
    """A draft model runs beside the target on each DP rank, split over its attention TP group."""
    return Pool(
        tp=pool.tp // pool.dp,
        weights=pool.weights,
        kv_cache=pool.kv_cache,
        kv_layout=pool.kv_layout,
        page_size=pool.page_size,
    )


def draft_weights_bytes_per_gpu(pool: Pool) -> float:
    """Weights a separate draft model adds per GPU (method draft; MTP layers are part of the model already)."""
    spec = pool.speculative
    if spec is None or spec.draft_model is None:
        return 0.0
    return weights_bytes_per_gpu(spec.draft_model, draft_pool(pool))


def draft_kv_bytes_per_token(pool: Pool) -> int:
    """KV bytes a separate draft model adds per token per GPU: it caches every sequence's context too."""
    spec = pool.speculative
    if spec is None or spec.draft_model is None:
        return 0
    return kv_bytes_per_token(spec.draft_model, draft_pool(pool))


def capacity_report(scenario: Scenario) -> dict[str, Any]:
    """The JSON-ready capacity of every pool, plus checkpoint sizes and parameter counts."""
    model, hw = scenario.model, scenario.hardware
    assert isinstance(model, ModelSpec) and isinstance(hw, HardwareSpec), "scenario presets are not resolved"
    pools = scenario.deployment.pools()
    return {
        "pools": {
            name: capacity_dict(pool_capacity(model, scenario.hardware_of(pool), pool)) for name, pool in pools.items()
        },
        "checkpoint_gib": {fmt: checkpoint_bytes(model, fmt) / GIB for fmt in _checkpoint_formats(pools.values())},
        "params": {"total": total_params(model), "active": active_params(model)},
    }


def _checkpoint_formats(pools: Any) -> list[WeightFormat]:
    """BF16, FP8 and INT4 always; a pool's other format (W4A8, NVFP4, MXFP4) too."""
    out: list[WeightFormat] = ["bf16", "fp8", "int4"]
    return out + sorted({p.weights for p in pools} - set(out))


def render_capacity(report: dict[str, Any]) -> Group:
    """The human view of a capacity report: one row per pool, then notes; a pool that does not fit says why."""
    p, ck = report["params"], report["checkpoint_gib"]
    notes = [
        f"params {p['total'] / 1e9:.1f}B total, {p['active'] / 1e9:.1f}B active; checkpoint "
        + ", ".join(f"{k} {v:.0f} GiB" for k, v in ck.items())
    ]
    table = Table(title="KV capacity per instance (weights, KV per GPU)")
    rows = []
    for name, c in report["pools"].items():
        tokens = f"{c['kv_tokens']:,}" if c["fits"] else styled(("0", "red"))
        shape = f"{c['instances']}×{c['gpus'] // c['instances']}"
        rows.append(
            [
                name,
                shape,
                f"{c['weights_gib_per_gpu']:.2f}",
                f"{c['kv_bytes_per_token']:,}",
                f"{c['kv_budget_gib_per_gpu']:.2f}",
                tokens,
                f"{c['pages']:,}",
            ]
        )
    # Headers on two lines, so that the numbers set the widths (it fits 80 columns), and a number folds on a
    # narrower terminal rather than losing its last digits to an ellipsis (`Text`: a string prints as one line).
    table.add_column("pool")
    for col in ("inst×TP", "weights\nGiB", "KV B/\ntoken", "KV\nGiB", "KV\ntokens", "pages"):
        table.add_column(Text(col), justify="right", overflow="fold")
    for row in rows:
        table.add_row(*row)
    for name, c in report["pools"].items():
        notes.append(f"{name} weights: {c['weights_scheme']}")
        if not c["fits"]:
            notes.append(styled((f"{name}: {c['reason']}", "red")))
        elif c.get("per_rank"):
            r = c["per_rank"]
            notes.append(
                f"{name}: {r['dp']} DP attention rank(s) of {r['attention_tp']} GPU(s) over {r['nodes']} "
                f"node(s), EP {r['ep']}: {r['experts_per_rank']} expert slots per EP rank "
                f"({r['redundant_experts']} redundant experts in the instance), {r['weights_gib']:.2f} GiB "
                f"of weights per GPU, {r['kv_tokens']:,} KV tokens per DP rank"
            )
    return Group(table, *(Folded(n) for n in notes))  # the notes fold at the console's width
