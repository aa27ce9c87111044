"""Model and hardware descriptions: the data a preset file holds.

Kept apart from the scenario schema because memory accounting, the op list and the roofline all read
them, while none of those care how a scenario names or overrides them.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_serializer,
)

# nvfp4/mxfp4: FP4 e2m1 weights with block scales, run on FP4 tensor cores (W4A4); w4a8: INT4 group-wise weights
# with FP8 activations, run on FP8 tensor cores (simulator/pricing/formats.py has the bytes and rates).
WeightFormat = Literal["bf16", "fp8", "int4", "nvfp4", "mxfp4", "w4a8"]
FP4_FORMATS = frozenset({"nvfp4", "mxfp4"})
KVFormat = Literal["bf16", "fp8_e4m3"]
# The routers (simulator/serving/routing.py, docs/routing.md): the engines' own, then phaseplan's simpler ones.
RoutingPolicy = Literal[
    "cache_aware", "power_of_two", "scorers", "least_kv", "round_robin", "session_affinity", "prefix_aware"
]
Component = Literal[
    "attention",
    "indexer",
    "dense_ffn",
    "routed_experts",
    "shared_experts",
    "router",
    "embedding",
    "lm_head",
    "mtp",
    "norms",
]


class Strict(BaseModel):
    """Every spec rejects unknown keys: a typo in YAML must not silently become a default."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class MLA(Strict):
    type: Literal["mla"] = Field("mla", description="Multi-head latent attention (DeepSeek-V3, Kimi K2).")
    heads: PositiveInt = Field(description="Attention heads.")
    q_lora_rank: int = Field(ge=0, description="Rank of the query's low-rank projection (0: none).")
    kv_lora_rank: PositiveInt = Field(
        description="Rank of the compressed KV latent the cache holds per token and layer."
    )
    qk_rope_head_dim: PositiveInt = Field(description="Dims per head that carry RoPE (cached beside the latent).")
    qk_nope_head_dim: PositiveInt = Field(description="Query/key dims per head without RoPE.")
    v_head_dim: PositiveInt = Field(description="Value dims per head.")


class GQA(Strict):
    type: Literal["gqa"] = Field("gqa", description="Grouped-query attention.")
    heads: PositiveInt = Field(description="Query heads.")
    kv_heads: PositiveInt = Field(description="KV heads, each shared by a group of query heads.")
    head_dim: PositiveInt = Field(description="Dims per head.")
    qkv_bias: bool = Field(False, description="Biases on q, k and v (GLM-4.x: its config's attention_bias).")
    partial_rotary_factor: float = Field(1.0, gt=0, le=1, description="Share of head_dim RoPE rotates (GLM-4.x: 0.5).")
    # Queries and keys normalized before RoPE: per head (Qwen3's q_norm/k_norm over head_dim), or over all heads
    # at once (MiniMax-M2's `qk_norm_type: per_layer`): with the heads split by TP the ranks then all-reduce the
    # sum of squares every layer (sglang 0.5.8 models/minimax_m2.py `MiniMaxM2RMSNormTP.forward_qk`).
    qk_norm: Literal["none", "per_head", "across_heads"] = Field(
        "none",
        description="RMSNorm of queries and keys before RoPE: per head, or across all heads (under TP an "
        "all-reduce of the sum of squares each layer); none.",
    )


class Indexer(Strict):
    """DeepSeek Sparse Attention's lightning indexer: its own small attention, its own key cache."""

    heads: PositiveInt = Field(description="Indexer heads.")
    head_dim: PositiveInt = Field(description="Dims per indexer head.")
    topk: PositiveInt = Field(description="Tokens the indexer selects for each query's sparse attention.")
    share_layers: PositiveInt = Field(1, description="One indexer per this many layers (GLM-5.2's IndexShare).")
    key_bytes: PositiveInt = Field(
        132, description="Bytes of an indexer key per token and indexed layer (FP8 key + FP32 scale)."
    )


class MoE(Strict):
    routed_experts: PositiveInt = Field(description="Routed experts per MoE layer.")
    top_k: PositiveInt = Field(description="Experts each token is routed to.")
    shared_experts: int = Field(ge=0, description="Shared experts every token passes through.")
    intermediate: PositiveInt = Field(description="FFN width of one expert.")
    # DeepSeek-V3's router, which Kimi K2 and GLM-4.5 on keep: sigmoid scores plus a learned correction bias, top-k
    # within the best expert groups (config n_group/topk_group, topk_method noaux_tc). An engine runs it as one
    # fused kernel only for the expert counts its kernel takes (Pool.router_chain_kernels).
    grouped_router: bool = Field(
        False,
        description="DeepSeek-style router: sigmoid scores with a correction bias, top-k over expert groups; "
        "false: one softmax or sigmoid top-k.",
    )


class FormatRule(Strict):
    """Which components a weight format quantizes; the rest stay BF16, or in the model's `rest` format where the
    rule converts an FP8 release (what the conversion did not touch keeps the release's format)."""

    components: list[Component] = Field(description="Components the format quantizes; the rest stay BF16.")
    rest: Literal["bf16", "fp8"] = Field(
        "bf16",
        description="Format of the matrices this rule leaves that the model's `fp8` rule covers (bf16: all BF16).",
    )
    group_size: PositiveInt | None = Field(
        None, description="Weights per scale of a group-wise format; null: the format's default."
    )
    scheme: str = Field(
        "", description="What the rule stands for, as phaseplan capacity names it (e.g. how a release quantizes)."
    )


class ModelSpec(Strict):
    name: str = Field(description="The model's name.")
    source: str = Field("", description="Where the figures come from.")
    layers: PositiveInt = Field(description="Transformer layers.")
    dense_layers: int = Field(ge=0, description="Leading layers with a dense FFN instead of experts.")
    hidden: PositiveInt = Field(description="Hidden size.")
    vocab: PositiveInt = Field(description="Vocabulary entries.")
    attention: MLA | GQA = Field(discriminator="type", description="Attention: mla or gqa (its `type`).")
    indexer: Indexer | None = Field(
        None, description="A sparse-attention indexer (DeepSeek Sparse Attention); null: dense attention."
    )
    dense_intermediate: PositiveInt = Field(description="FFN width of the dense layers.")
    moe: MoE | None = Field(None, description="Mixture of experts; null: a dense model.")
    mtp_layers: int = Field(
        0, ge=0, description="Multi-token-prediction layers (speculative method mtp drafts with them)."
    )
    tie_embeddings: bool = Field(False, description="The LM head shares the embedding's weights.")
    context_tokens: PositiveInt | None = Field(
        None, description="Longest prompt the model reads (its config's context); null: unknown."
    )
    formats: dict[WeightFormat, FormatRule] = Field(
        default_factory=dict, description="Weight formats the model is served in, and what each quantizes."
    )
    # Named alternatives to a format's rule, chosen per pool by `weights_scheme` (e.g. "int4-all-linear").
    schemes: dict[str, FormatRule] = Field(
        default_factory=dict,
        description="Named alternatives to a format's rule, chosen per pool by weights_scheme (e.g. int4-all-linear).",
    )

    release: WeightFormat = Field(
        "bf16",
        description="The format the published checkpoint stores its quantized layers in (its config's "
        "quantization_config; the `formats` rule of that format says which layers).",
    )
    checkpoint: str = Field(
        "", description="Where an engine loads the weights: a Hugging Face repo id or a local folder; empty: unknown."
    )
    trust_remote_code: bool = Field(
        False, description="The checkpoint ships its own model code (its config's auto_map): engines must trust it."
    )

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.moe else 0


class RooflineFit(Strict):
    """A hardware's roofline factors fitted to measured tables (names of simulator.pricing.roofline.Factors)."""

    source: str = Field(description="Where the fit comes from.")
    factors: dict[str, float | None] = Field(
        description="Roofline factors by name (simulator.pricing.roofline.Factors)."
    )

    # The factors of SGLang's Triton attention kernels: a Result lists them only where a pool runs that backend.
    TRITON_FACTORS: ClassVar[frozenset[str]] = frozenset(
        {"triton_cta_gbs", "triton_ctas_per_sm", "floor_triton_decode_us", "mma_eff_prefill_attn_triton"}
    )


class HardwareSpec(Strict):
    name: str = Field(description="The GPU's name.")
    source: str = Field("", description="Where the figures come from.")
    hbm_gib: PositiveFloat = Field(description="GiB of HBM per GPU.")
    hbm_gbs: PositiveFloat = Field(description="Datasheet HBM bandwidth, GB/s per GPU.")
    copy_gbs: PositiveFloat = Field(description="Achievable device-to-device copy bandwidth, GB/s per GPU.")
    bf16_tflops: PositiveFloat = Field(description="Achievable dense BF16 matrix rate, TFLOP/s per GPU.")
    fp8_tflops: PositiveFloat = Field(description="Achievable dense FP8 matrix rate, TFLOP/s per GPU.")
    nvlink_gbs: PositiveFloat = Field(description="NVLink bandwidth per GPU, one direction, GB/s.")
    kernel_floor_us: PositiveFloat = Field(4.0, description="µs of the launch and tail of one small kernel.")
    allreduce_latency_us: PositiveFloat = Field(8.0, description="µs of latency of one all-reduce.")
    gpu_hour_usd: PositiveFloat = Field(3.5, description="USD per GPU-hour (the presets' prices are illustrative).")
    # Wide EP and FP4 (simulator/pricing/wide_ep.py, formats.py). A scenario's resolved hardware lists them only
    # where a pool uses them, so Results of deployments without them keep their bytes.
    fp4_tflops: PositiveFloat | None = Field(
        None, description="Achievable dense FP4 matrix rate, TFLOP/s per GPU; null: no FP4 tensor cores."
    )
    gpus_per_node: PositiveInt = Field(8, description="GPUs one NVLink domain (node) holds.")
    scaleout_gbs: PositiveFloat = Field(50.0, description="Scale-out (RDMA) bandwidth per GPU, one direction, GB/s.")
    # KV tiers below HBM (simulator/serving/tiers.py): the GPU's link to host memory, which evicted KV pages cross
    # down and back. On PCIe hosts the GPU's RDMA NIC hangs off the same PCIe switch, so an inbound KV hand-off and a
    # load-back share the GPU's x16 link; NVLink-C2C (Grace) parts reach host memory apart from the NIC.
    host_link_gbs: PositiveFloat = Field(
        50.0, description="GB/s between one GPU and host memory, one direction (PCIe Gen5 x16, or NVLink-C2C)."
    )
    host_link_shares_nic: bool = Field(
        True, description="The host link is the PCIe link the GPU's RDMA NIC uses too (false: NVLink-C2C)."
    )
    # SGLang's Triton attention kernels split a sequence's context by the GPU's SMs (simulator/pricing/roofline.py)
    sm_count: PositiveInt = Field(132, description="Streaming multiprocessors per GPU (H100/H200 SXM 132, B200 148).")

    # The fields above that a Result's resolved scenario carries only when a pool uses them.
    FP4_FIELDS: ClassVar[frozenset[str]] = frozenset({"fp4_tflops"})
    SCALE_OUT_FIELDS: ClassVar[frozenset[str]] = frozenset({"gpus_per_node", "scaleout_gbs"})
    HOST_LINK_FIELDS: ClassVar[frozenset[str]] = frozenset({"host_link_gbs", "host_link_shares_nic"})
    TRITON_FIELDS: ClassVar[frozenset[str]] = frozenset({"sm_count"})
    roofline: RooflineFit | None = Field(
        None, description="Roofline factors fitted to measured tables; null: the roofline's documented defaults."
    )


class CalibrationFile(Strict):
    """One benchmark file a calibrated engine was fitted to: enough to tell it is still the same file."""

    path: str = Field(description="The file as given to `phaseplan calibrate`.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="Its SHA-256.")
    tool: str = Field(description="The benchmark tool that wrote it.")
    runs: PositiveInt = Field(description="Benchmark runs read from it.")
    date: str | None = Field(None, description="The date the file states, when it states one.")


class CalibrationTerm(Strict):
    before: float = Field(description="The base preset's value.")
    after: float = Field(description="The fitted value.")
    informed: bool = Field(description="Whether any run moves with this term (else it stays at the base's value).")


class CalibrationError(Strict):
    """The fitted engine's error on its own runs, per kind of figure: the band shown beside its answers."""

    median: NonNegativeFloat = Field(description="Median |error| (a fraction).")
    max: NonNegativeFloat = Field(description="Worst |error| (a fraction).")
    cases: PositiveInt = Field(description="Figures it is taken over.")
    leave_one_out: bool = Field(description="Leave-one-out by run (>= 4 runs), else the fit's own residual.")


class Calibration(Strict):
    """Where a fitted engine's terms come from (`phaseplan calibrate`): the deployment, its files, the fit."""

    base: str = Field(description="The engine preset the fit started from.")
    deployment: str = Field(description="The scenario that describes the measured deployment.")
    files: list[CalibrationFile] = Field(min_length=1, max_length=64, description="The benchmark files.")
    runs: PositiveInt = Field(description="Benchmark runs fitted to.")
    terms: dict[str, CalibrationTerm] = Field(description="Per fitted term: before, after, informed.")
    error: dict[Literal["throughput", "tpot", "ttft", "e2el", "latency"], CalibrationError] = Field(
        description="Per kind of figure: the error on the runs (`latency`: TPOT and TTFT together, as files "
        "written before they were told apart hold them)."
    )


class Releases(Strict):
    """The later releases of an engine a preset describes: a benchmark of `of` at a release from `since` on runs
    these kernels, not the ones `of` was fitted to (`presets.for_release`)."""

    of: str = Field(description="The engine preset whose later releases these are; its terms are the defaults.")
    since: str = Field(pattern=r"^\d+\.\d+\.\d+$", description="The first release, e.g. 0.5.10.")


class EngineSpec(Strict):
    """What a serving engine does with the kernels, as pool defaults: a scenario's pools take every term they do
    not set themselves (`Scenario._engine_terms`), so one field names the engine and a pool still overrides.

    The terms are Pool fields (their meaning is documented there); `sources` says where each value comes from."""

    name: str = Field(description="The engine's name.")
    version: str = Field("", description="The engine versions the values describe.")
    source: str = Field("", description="Where the values come from, overall.")
    sources: dict[str, str] = Field(default_factory=dict, description="Per term: where its value comes from.")
    decode_graph_floor_us: PositiveFloat | None = Field(
        3.0, description="µs a kernel of a decode-only step costs at least (CUDA graphs); null: eager launches."
    )
    fp8_kv_read_factor: PositiveFloat | None = Field(
        None, description="Factor on decode attention's memory time reading an FP8 cache; null: the roofline's own."
    )
    fp8_kv_fixed_us: NonNegativeFloat | None = Field(
        None, description="µs a decode attention call reading an FP8 cache pays beyond its bytes; null: the roofline's."
    )
    fp8_gemm_mma_factor: PositiveFloat | None = Field(
        None, description="Factor on block-FP8 GEMMs' tensor-core time (the engine's kernels); null: the roofline's."
    )
    fp8_gemm_mma_factor_blackwell: PositiveFloat | None = Field(
        None, description="That factor on a GPU with FP4 tensor cores (Blackwell); null: fp8_gemm_mma_factor's."
    )
    decode_layer_us: NonNegativeFloat = Field(
        0.0, description="µs a layer of a decode-only (CUDA-graph) step costs beyond its op list (engine kernels)."
    )
    router_chain_kernels: NonNegativeInt = Field(
        0, description="Kernels a grouped router launches per MoE layer where the engine's fused gate does not fit."
    )
    eager_kernel_us: NonNegativeFloat = Field(
        0.0, description="µs of CPU time an eagerly launched step with prefill rows spends per kernel of its op list."
    )
    prefill_graphs: bool = Field(
        False, description="Steps with prefill rows replay piecewise CUDA graphs where the deployment allows them."
    )
    prefill_graph_tokens: PositiveInt | None = Field(
        None, description="Steps with prefill rows of up to this many tokens replay CUDA graphs (vLLM's rule)."
    )
    shared_expert_overlap: bool = Field(True, description="Shared experts on a second stream beside the routed ones.")
    fuse_elementwise: bool = Field(False, description="Small kernels fused into neighbours.")
    fp8_sparse_prefill: Literal["flashmla", "trtllm"] = Field(
        "flashmla", description="Sparse-attention prefill kernel with an FP8 cache (FlashMLA, or TRT-LLM's)."
    )
    host_step_us: NonNegativeFloat = Field(0.0, description="µs of CPU scheduling work per step.")
    dp_sync_us: NonNegativeFloat = Field(0.0, description="µs more per step under DP attention (ranks' CPU sync).")
    request_latency_us: NonNegativeFloat = Field(
        0.0, description="µs a request spends outside the GPU steps (API server, tokenizer, streaming back)."
    )
    frontend_accept_us: NonNegativeFloat = Field(
        0.0, description="µs the API server's one CPU spends accepting each request (HTTP, chat template)."
    )
    frontend_prepare_us: NonNegativeFloat = Field(
        0.0, description="µs the API server's one CPU spends preparing each request (tokenizer, hand-off)."
    )
    overlap_scheduler: bool = Field(True, description="The CPU work of a step runs while the GPU runs the last one.")
    overlap_with_speculation: bool = Field(
        False, description="The overlap scheduler stays on under speculative decoding."
    )
    mixed_chunked_prefill: bool = Field(True, description="Prefill chunks share a step with the decode batch.")
    tbo_hidden_share: float = Field(
        1.0, ge=0, le=1, description="Share of the all-to-alls two-batch overlap hides (1: the perfect bound)."
    )
    prefill_a2a_node_dedup: bool = Field(
        False, description="A prefill pool's MoE dispatch sends a token once per node (DeepEP normal mode)."
    )
    kv_tier_write: Literal["write_through", "write_back"] = Field(
        "write_through",
        description="When a KV page is copied to the tier below HBM: once computed (write_through), or when evicted.",
    )
    kv_tier_layerwise: bool = Field(
        True, description="A prefix found below HBM loads back layer by layer, overlapped with the prefill's compute."
    )
    router: RoutingPolicy = Field(
        "cache_aware",
        description="The router a deployment of the engine runs (a scenario's routing.policy still overrides).",
    )
    calibration: Calibration | None = Field(
        None, description="Set by `phaseplan calibrate`: what the terms were fitted to; null: a preset as published."
    )
    releases: Releases | None = Field(
        None, description="Set on a preset of an engine's later releases: which engine, from which release."
    )

    TERMS: ClassVar[tuple[str, ...]] = (
        "decode_graph_floor_us",
        "fp8_kv_read_factor",
        "fp8_kv_fixed_us",
        "fp8_gemm_mma_factor",
        "fp8_gemm_mma_factor_blackwell",
        "decode_layer_us",
        "router_chain_kernels",
        "eager_kernel_us",
        "prefill_graphs",
        "prefill_graph_tokens",
        "shared_expert_overlap",
        "fuse_elementwise",
        "fp8_sparse_prefill",
        "host_step_us",
        "dp_sync_us",
        "request_latency_us",
        "frontend_accept_us",
        "frontend_prepare_us",
        "overlap_scheduler",
        "overlap_with_speculation",
        "mixed_chunked_prefill",
        "tbo_hidden_share",
        "kv_tier_write",
        "kv_tier_layerwise",
    )
    # Terms a Result's engine lists only where a pool has a KV tier below HBM (`Scenario`'s serializer).
    TIER_TERMS: ClassVar[frozenset[str]] = frozenset({"kv_tier_write", "kv_tier_layerwise"})

    @model_serializer(mode="wrap")
    def _without_absent_fields(self, handler: Any) -> dict[str, Any]:
        """A published preset dumps as it did before calibration and releases existed: Results stay bit-for-bit."""
        out = handler(self)
        for absent in ("calibration", "releases"):
            if out.get(absent, 0) is None:
                del out[absent]
        return out
