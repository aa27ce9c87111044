"""Model and hardware descriptions: the data a preset file holds.

Kept apart from the scenario schema because memory accounting, the op list and the roofline all read
them, while none of those care how a scenario names or overrides them.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt

# nvfp4/mxfp4: FP4 e2m1 weights with block scales, run on FP4 tensor cores (W4A4); w4a8: INT4 group-wise weights
# with FP8 activations, run on FP8 tensor cores (simulator/pricing/formats.py has the bytes and rates).
WeightFormat = Literal["bf16", "fp8", "int4", "nvfp4", "mxfp4", "w4a8"]
FP4_FORMATS = frozenset({"nvfp4", "mxfp4"})
KVFormat = Literal["bf16", "fp8_e4m3"]
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
    type: Literal["mla"] = "mla"
    heads: PositiveInt
    q_lora_rank: int = Field(ge=0)
    kv_lora_rank: PositiveInt
    qk_rope_head_dim: PositiveInt
    qk_nope_head_dim: PositiveInt
    v_head_dim: PositiveInt


class GQA(Strict):
    type: Literal["gqa"] = "gqa"
    heads: PositiveInt
    kv_heads: PositiveInt
    head_dim: PositiveInt
    qkv_bias: bool = False  # GLM-4.x carries biases on q/k/v (its config's attention_bias)
    partial_rotary_factor: float = Field(1.0, gt=0, le=1)  # share of head_dim RoPE rotates (GLM-4.x: 0.5)


class Indexer(Strict):
    """DeepSeek Sparse Attention's lightning indexer: its own small attention, its own key cache."""

    heads: PositiveInt
    head_dim: PositiveInt
    topk: PositiveInt
    share_layers: PositiveInt = 1  # GLM-5.2's IndexShare: one indexer per this many layers
    key_bytes: PositiveInt = 132  # FP8 key + fp32 scale per token per indexed layer


class MoE(Strict):
    routed_experts: PositiveInt
    top_k: PositiveInt
    shared_experts: int = Field(ge=0)
    intermediate: PositiveInt


class FormatRule(Strict):
    """Which components a weight format quantizes; everything else stays BF16."""

    components: list[Component]
    group_size: PositiveInt | None = None
    scheme: str = ""  # what the rule stands for, as `phaseplan capacity` names it (e.g. how a release quantizes)


class ModelSpec(Strict):
    name: str
    source: str = ""
    layers: PositiveInt
    dense_layers: int = Field(ge=0)
    hidden: PositiveInt
    vocab: PositiveInt
    attention: MLA | GQA = Field(discriminator="type")
    indexer: Indexer | None = None
    dense_intermediate: PositiveInt
    moe: MoE | None = None
    mtp_layers: int = Field(0, ge=0)
    tie_embeddings: bool = False
    context_tokens: PositiveInt | None = None  # longest prompt the model reads (its config's context); None: unknown
    formats: dict[WeightFormat, FormatRule] = Field(default_factory=dict)
    # Named alternatives to a format's rule, chosen per pool by `weights_scheme` (e.g. "int4-all-linear").
    schemes: dict[str, FormatRule] = Field(default_factory=dict)

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.moe else 0


class RooflineFit(Strict):
    """A hardware's roofline factors fitted to measured tables (names of simulator.pricing.roofline.Factors)."""

    source: str
    factors: dict[str, float | None]


class HardwareSpec(Strict):
    name: str
    source: str = ""
    hbm_gib: PositiveFloat
    hbm_gbs: PositiveFloat  # datasheet bandwidth
    copy_gbs: PositiveFloat  # achievable device-to-device copy bandwidth
    bf16_tflops: PositiveFloat  # achievable dense BF16 matrix rate
    fp8_tflops: PositiveFloat
    nvlink_gbs: PositiveFloat  # per-GPU unidirectional NVLink bandwidth
    kernel_floor_us: PositiveFloat = 4.0  # launch + tail of one small kernel
    allreduce_latency_us: PositiveFloat = 8.0
    gpu_hour_usd: PositiveFloat = 3.5
    # Wide EP and FP4 (simulator/pricing/wide_ep.py, formats.py). A scenario's resolved hardware lists them only
    # where a pool uses them, so Results of deployments without them keep their bytes.
    fp4_tflops: PositiveFloat | None = None  # achievable dense FP4 matrix rate; None: no FP4 tensor cores
    gpus_per_node: PositiveInt = 8  # GPUs one NVLink domain (node) holds
    scaleout_gbs: PositiveFloat = 50.0  # per-GPU scale-out (RDMA) bandwidth, one direction

    # The fields above that a Result's resolved scenario carries only when a pool uses them.
    FP4_FIELDS: ClassVar[frozenset[str]] = frozenset({"fp4_tflops"})
    SCALE_OUT_FIELDS: ClassVar[frozenset[str]] = frozenset({"gpus_per_node", "scaleout_gbs"})
    roofline: RooflineFit | None = None  # None: the roofline's documented default factors
