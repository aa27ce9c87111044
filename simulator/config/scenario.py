"""The scenario schema: what a user writes in YAML, validated once, with every default visible here."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_serializer,
    model_validator,
)

from simulator.config import parallel
from simulator.config.parallel import Speculative
from simulator.config.specs import FP4_FORMATS, HardwareSpec, KVFormat, ModelSpec, WeightFormat


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


ENGINE_DEFAULTS: dict[str, Any] = {
    "shared_expert_overlap": True,
    "moe_routing": "uniform",
    "moe_routing_alpha": 1.01,
    "fuse_elementwise": False,
}


class Pool(Strict):
    """One pool of identical serving instances; one instance spans `tp` GPUs."""

    instances: PositiveInt = 1
    tp: PositiveInt = 8
    ep: PositiveInt = 1
    weights: WeightFormat = "bf16"
    int4_group_size: PositiveInt | None = None  # None: the model preset's own group size
    weights_scheme: str | None = None  # a named alternative rule of the model preset (its `schemes`); None: its own
    kv_cache: KVFormat = "bf16"
    kv_layout: Literal["flat", "tiled"] = "flat"
    page_size: PositiveInt = 64
    max_running: PositiveInt = 256
    max_batch_tokens: PositiveInt = 16384
    chunk_size: PositiveInt = 8192
    mem_fraction: float = Field(0.85, gt=0, le=1)
    reserve_gib: NonNegativeFloat = 0.0
    decode_reserve_tokens: NonNegativeInt = 256  # growth room a request must find free to be admitted
    # DP attention, wide EP across nodes, speculative decoding (simulator/config/parallel.py; all off by default)
    nodes: PositiveInt = 1  # nodes one instance spans: tp GPUs over nodes × hardware.gpus_per_node
    dp: PositiveInt = 1  # attention data-parallel ranks: each holds its own sequences' KV; attention TP = tp / dp
    redundant_experts: NonNegativeInt = 0  # EPLB-style replicas of hot experts, spread over the EP ranks
    expert_imbalance: float = Field(1.0, ge=1.0)  # the busiest EP rank's token-expert pairs / the mean
    speculative: Speculative | None = None
    two_batch_overlap: bool = False  # DP attention: all-to-alls hidden behind the other micro-batch's compute

    @model_serializer(mode="wrap")
    def _without_unused_features(self, handler: Any) -> Any:
        data = parallel.drop_defaults(handler(self))
        for key, default in ENGINE_DEFAULTS.items():  # engine settings added later: defaults keep Results' bytes
            if key in data and data[key] == default:
                del data[key]
        return data

    # Decode-only steps run as CUDA graphs (SGLang, vLLM and TRT-LLM all do by default): a kernel the roofline
    # prices pays this floor instead of the hardware's eager launch floor (measured tables keep their own).
    # 3 µs is AIConfigurator 0.12.0's h200_sxm `mem_empirical_constant_latency` ("observations"); null: eager.
    decode_graph_floor_us: PositiveFloat | None = 3.0
    # Reading an FP8 KV cache in decode attention costs this factor on memory time (dequantization); engines
    # differ (docs/calibration.md: SGLang 0.5.14's measured FP8 MLA kernel fits far above TRT-LLM's). None: the
    # hardware roofline's own factor (1.25: one dequantization per tile).
    fp8_kv_read_factor: PositiveFloat | None = None
    # MoE engine behaviour (docs/calibration.md §3). Shared experts run on a second CUDA stream beside the
    # routed experts in decode (SGLang's DeepseekV2MoE dual stream up to 1,024 tokens, without DeepEP; TRT-LLM's
    # maybe_execute_in_parallel; AIConfigurator's `generation_moe_overlap`): the layer takes the longer stream.
    shared_expert_overlap: bool = True
    # Token-to-expert routing the roofline counts touched experts under (pricing/expert_routing.py): uniform, or
    # the bounded power law AIConfigurator measured its MoE tables at (alpha 1.01 for DeepSeek-family models).
    moe_routing: Literal["uniform", "power_law"] = "uniform"
    moe_routing_alpha: PositiveFloat = 1.01
    # Small kernels fused into their neighbours (pricing/ops.py `_Builder.fuse`): FP8 activation quantization
    # written by the norm or activation before the GEMM (vLLM's RMSNorm+quant and SiLU-mul+quant fusion passes,
    # TRT-LLM's fused norm-quant), RoPE and the KV-cache write as one kernel with a BF16 cache (SGLang's fused
    # set_kv_buffer). Off: each runs as its own kernel, as SGLang 0.5.14 runs DeepSeek-V3's block-FP8 path.
    fuse_elementwise: bool = False

    @model_validator(mode="after")
    def _one_source_of_expert_imbalance(self) -> Pool:
        if self.moe_routing == "power_law" and self.expert_imbalance != 1.0:
            raise ValueError(
                "moe_routing 'power_law' sets the busiest EP rank's load itself: leave expert_imbalance "
                "at 1.0 (it scales uniform routing's mean)"
            )
        return self

    @property
    def gpus(self) -> int:
        return self.instances * self.tp


class Transfer(Strict):
    """Prefill → decode KV transfer link, per decode instance (RDMA over the scale-out network); a decode instance
    with DP attention has one per DP rank."""

    bandwidth_gbs: PositiveFloat = 50.0
    latency_ms: NonNegativeFloat = 1.0


class Deployment(Strict):
    mode: Literal["disaggregated", "colocated"] = "colocated"
    prefill: Pool | None = None
    decode: Pool = Field(default_factory=Pool)
    transfer: Transfer = Field(default_factory=Transfer)

    @model_validator(mode="after")
    def _prefill_pool_for_disaggregated(self) -> Deployment:
        if self.mode == "disaggregated" and self.prefill is None:
            raise ValueError("mode 'disaggregated' needs a 'prefill' pool (or set mode: colocated)")
        return self

    def pools(self) -> dict[str, Pool]:
        """The pools that exist in this mode, by name; colocated serves both phases on 'decode'."""
        if self.mode == "colocated":
            return {"decode": self.decode}
        assert self.prefill is not None
        return {"prefill": self.prefill, "decode": self.decode}


FaultKind = Literal["stale", "foreign", "out_of_range"]


class Integrity(Strict):
    enabled: bool = True
    fault_rate: float = Field(0.0, ge=0, le=1)  # chance per decode step of a running request
    fault_kinds: list[FaultKind] = Field(default_factory=lambda: ["stale", "foreign"])


class PrefixCache(Strict):
    enabled: bool = True


class Routing(Strict):
    policy: Literal["round_robin", "least_kv", "session_affinity", "prefix_aware"] = "least_kv"


class Length(Strict):
    """A token-length distribution; a bare integer in YAML means `fixed`."""

    dist: Literal["fixed", "uniform", "lognormal", "empirical"] = "fixed"
    value: PositiveInt | None = None  # fixed
    low: PositiveInt | None = None  # uniform
    high: PositiveInt | None = None
    median: PositiveFloat | None = None  # lognormal
    sigma: NonNegativeFloat = 0.5
    file: str | None = None  # empirical: one length per line
    max: PositiveInt | None = None  # clip

    @model_validator(mode="before")
    @classmethod
    def _bare_int(cls, v: Any) -> Any:
        return {"dist": "fixed", "value": v} if isinstance(v, int) and not isinstance(v, bool) else v

    @model_validator(mode="after")
    def _needed_fields(self) -> Length:
        need = {"fixed": ["value"], "uniform": ["low", "high"], "lognormal": ["median"], "empirical": ["file"]}
        missing = [f for f in need[self.dist] if getattr(self, f) is None]
        if missing:
            raise ValueError(f"dist '{self.dist}' needs {', '.join(missing)}")
        if self.dist == "uniform" and self.low > self.high:  # type: ignore[operator]
            raise ValueError(f"uniform needs low <= high, got {self.low} > {self.high}")
        return self


class Diurnal(Strict):
    """Piecewise-linear rate multipliers over one period (e.g. 24 points over a day)."""

    period_s: PositiveFloat = 86400.0
    multipliers: list[NonNegativeFloat] = Field(default_factory=lambda: [0.5, 1.0, 1.5, 1.0], min_length=1)


class Sessions(Strict):
    """Multi-turn conversations: later turns carry all earlier turns as a reusable prefix."""

    turns: PositiveInt = 1
    think_time_s: NonNegativeFloat = 5.0


class Traffic(Strict):
    concurrency: PositiveInt | None = None  # closed loop: N clients, next request when the previous ends
    rate: PositiveFloat | None = None  # open loop, requests per second
    arrival: Literal["poisson", "bursty", "diurnal"] = "poisson"
    burst_cv: PositiveFloat = 2.0  # bursty: coefficient of variation of gamma inter-arrival times
    diurnal: Diurnal = Field(default_factory=Diurnal)
    trace: str | None = None
    trace_format: Literal["auto", "phaseplan", "azure", "mooncake"] = "auto"
    trace_speedup: PositiveFloat = 1.0
    prompt_tokens: Length = Field(default_factory=lambda: Length(value=2048))
    output_tokens: Length = Field(default_factory=lambda: Length(value=256))
    shared_prefix_tokens: NonNegativeInt = 0  # a system prompt every request starts with
    sessions: Sessions = Field(default_factory=Sessions)
    duration_s: PositiveFloat | None = None
    requests: PositiveInt | None = None
    truncate_to_context: bool = False  # cut prompts longer than the model's context instead of refusing them

    @model_validator(mode="after")
    def _one_source(self) -> Traffic:
        given = [k for k in ("concurrency", "rate", "trace") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of concurrency, rate, trace (got {given or 'none'})")
        if self.concurrency is not None and self.duration_s is None and self.requests is None:
            self.requests = 4 * self.concurrency
        if self.rate is not None and self.duration_s is None and self.requests is None:
            raise ValueError("open-loop traffic needs duration_s or requests")
        return self


class SLO(Strict):
    ttft_ms: PositiveFloat = 2000.0
    tpot_ms: PositiveFloat = 50.0


class Cost(Strict):
    gpu_hour_usd: PositiveFloat | None = None  # None: the hardware preset's price


def check_pool_fits_model(model: ModelSpec, hardware: HardwareSpec, name: str, pool: Pool) -> None:
    """Sharding and layout rules that need both the model and a pool; each error names the pool's path. (Apart
    from the validator so that `plan` can judge one pool of many candidates once.)"""
    a = model.attention
    where = f"deployment.{name}"
    parallel.check_pool(model, hardware, pool, where)
    if not parallel.attention_heads_ok(model, pool):
        via = f" (attention TP = tp / dp = {pool.tp} / {pool.dp})" if pool.dp > 1 else ""
        raise ValueError(f"{where}.tp: {pool.tp // pool.dp} does not divide the model's {a.heads} attention heads{via}")
    if pool.tp % pool.ep:
        raise ValueError(
            f"{where}.ep: {pool.ep} must divide tp {pool.tp} (an instance's GPUs are EP groups × expert-TP)"
        )
    if pool.kv_layout == "tiled" and a.type != "mla":
        raise ValueError(f"{where}.kv_layout: 'tiled' is an MLA cache layout; a GQA cache is 'flat'")
    if pool.weights_scheme is not None and pool.weights_scheme not in model.schemes:
        raise ValueError(
            f"{where}.weights_scheme: model {model.name} has no scheme "
            f"{pool.weights_scheme!r} (known: {', '.join(model.schemes) or 'none'})"
        )


class Scenario(Strict):
    name: str = "scenario"
    model: ModelSpec  # a preset name in YAML; the loader resolves it to the preset's data first
    hardware: HardwareSpec
    profile: str = "roofline"
    deployment: Deployment = Field(default_factory=Deployment)
    integrity: Integrity = Field(default_factory=Integrity)
    prefix_cache: PrefixCache = Field(default_factory=PrefixCache)
    routing: Routing = Field(default_factory=Routing)
    traffic: Traffic = Field(default_factory=lambda: Traffic(concurrency=1))
    slo: SLO = Field(default_factory=SLO)
    cost: Cost = Field(default_factory=Cost)
    seed: int = 0
    sweep: dict[str, list[Any]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _pools_fit_the_model(self) -> Scenario:
        for name, pool in self.deployment.pools().items():
            check_pool_fits_model(self.model, self.hardware, name, pool)
        return self

    @model_serializer(mode="wrap")
    def _hardware_figures_in_use(self, handler: Any) -> Any:
        """The resolved hardware lists its FP4 rate and scale-out links only where a pool uses them."""
        data = handler(self)
        hw, pools = data.get("hardware"), self.deployment.pools().values()
        if isinstance(hw, dict):
            unused = set()
            if not any(p.weights in FP4_FORMATS for p in pools):
                unused |= HardwareSpec.FP4_FIELDS
            if not any(parallel.uses_scale_out(p) for p in pools):
                unused |= HardwareSpec.SCALE_OUT_FIELDS
            data["hardware"] = {k: v for k, v in hw.items() if k not in unused}
        return data
