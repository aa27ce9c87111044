"""The scenario schema: what a user writes in YAML, validated once, with every default visible here."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_serializer,
    model_validator,
)

from simulator.config import parallel, presets, tiers
from simulator.config.parallel import Speculative
from simulator.config.specs import (
    FP4_FORMATS,
    EngineSpec,
    HardwareSpec,
    KVFormat,
    ModelSpec,
    RooflineFit,
    RoutingPolicy,
    WeightFormat,
)
from simulator.config.tiers import StorageTier


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


ENGINE_DEFAULTS: dict[str, Any] = {
    "shared_expert_overlap": True,
    "moe_routing": "power_law",
    "moe_routing_alpha": 1.01,
    "fuse_elementwise": False,
    "fp8_sparse_prefill": "flashmla",
    "fp8_gemm_mma_factor_blackwell": None,
    "host_step_us": 0.0,
    "dp_sync_us": 0.0,
    "request_latency_us": 0.0,
    "frontend_accept_us": 0.0,
    "frontend_prepare_us": 0.0,
    "decode_layer_us": 0.0,
    "router_chain_kernels": 0,
    "eager_kernel_us": 0.0,
    "prefill_graphs": False,
    "prefill_graph_tokens": None,
    "overlap_scheduler": True,
    "overlap_with_speculation": False,
    "mixed_chunked_prefill": True,
    "tbo_hidden_share": 1.0,
    "a2a_node_dedup": False,
    "kv_tier_write": "write_through",
    "kv_tier_layerwise": True,
}


class Pool(Strict):
    """One pool of identical serving instances; one instance spans `tp` GPUs."""

    instances: PositiveInt = Field(1, description="Identical serving instances in the pool.")
    tp: PositiveInt = Field(
        8, description="GPUs of one instance (SGLang's --tp); under DP attention, attention TP × dp ranks."
    )
    ep: PositiveInt = Field(
        1, description="Expert-parallel groups an instance's GPUs form in MoE layers (divides tp; ep = tp is wide EP)."
    )
    weights: WeightFormat = Field(
        "bf16", description="Number format of the quantized weights (which components: the model preset's `formats`)."
    )
    int4_group_size: PositiveInt | None = Field(
        None, description="Weights per INT4 scale; null: the model preset's own group size."
    )
    weights_scheme: str | None = Field(
        None, description="A named alternative rule of the model preset (its `schemes`); null: the format's own."
    )
    kv_cache: KVFormat = Field("bf16", description="Number format of the KV cache.")
    kv_layout: Literal["flat", "tiled"] = Field(
        "flat", description="KV-cache layout: flat, or tiled (MLA only: the RoPE part kept in BF16)."
    )
    page_size: PositiveInt = Field(64, description="Tokens per KV-cache page.")
    attention_backend: Literal["default", "triton"] = Field(
        "default",
        description="Attention kernels (SGLang's --attention-backend): default, the engine's own for the GPU "
        "(FlashInfer, FA3, FlashMLA, TRT-LLM: what the measured tables hold), or triton, SGLang's Triton kernels "
        "(a split-KV decode that gives a few sequences a few CTAs; a slower prefill).",
    )
    max_running: PositiveInt = Field(
        256, description="Most requests running on one instance at once (SGLang's --max-running-requests)."
    )
    max_batch_tokens: PositiveInt = Field(
        16384, description="Most tokens one step of an instance computes, prefill chunks and decode tokens together."
    )
    chunk_size: PositiveInt = Field(
        8192, description="Most prompt tokens of one request in one prefill step (chunked prefill)."
    )
    mem_fraction: float = Field(
        0.85, gt=0, le=1, description="Share of HBM for weights plus the KV pool (SGLang's --mem-fraction-static)."
    )
    reserve_gib: NonNegativeFloat = Field(
        0.0, description="GiB per GPU kept out of the KV pool (activations, CUDA graphs: vLLM's non-KV memory)."
    )
    decode_reserve_tokens: NonNegativeInt = Field(
        256, description="Growth room, in tokens, a request must find free to be admitted."
    )
    recv_interval: PositiveInt = Field(
        1,
        description="Decode steps between the scheduler's polls for new requests (SGLang's --scheduler-recv-interval): "
        "a request that arrives while the instance decodes waits for the next poll; a step with prefill rows, or "
        "an idle instance, polls at once. 1: every step.",
    )
    max_preemptions: NonNegativeInt | None = Field(
        None,
        description="A request preempted this many times is aborted at its next preemption (a deployment's limit); "
        "null: never (SGLang and vLLM recompute a preempted request however often).",
    )
    # DP attention, wide EP across nodes, speculative decoding (simulator/config/parallel.py; all off by default)
    nodes: PositiveInt = Field(1, description="Nodes one instance spans: tp GPUs over nodes × hardware.gpus_per_node.")
    dp: PositiveInt = Field(
        1, description="DP attention ranks: each holds its own sequences' KV; attention TP = tp / dp."
    )
    redundant_experts: NonNegativeInt = Field(
        0, description="EPLB-style replicas of hot experts, spread over the EP ranks."
    )
    expert_imbalance: float = Field(
        1.0,
        ge=1.0,
        description="The busiest EP rank's token-expert pairs over the mean (uniform routing, or after EPLB).",
    )
    speculative: Speculative | None = Field(None, description="Speculative decoding (decode pools only); null: off.")
    two_batch_overlap: bool = Field(
        False, description="DP attention: all-to-alls hidden behind the other micro-batch's compute (a bound)."
    )
    # The pool's own GPU (prefill on one GPU, decode on another): priced, sized and costed as that GPU.
    hardware: HardwareSpec | None = Field(
        None, description="This pool's GPU: a preset's name or inline figures; null: the scenario's `hardware`."
    )
    # KV tiers below HBM (simulator/config/tiers.py; off by default).
    host_tier_gib: NonNegativeFloat = Field(
        0.0,
        description="GiB of host DRAM per instance that keeps KV pages evicted from HBM (0: HBM only; SGLang's "
        "--hicache-size is this over the instance's GPUs).",
    )
    storage_tier: StorageTier | None = Field(
        None, description="A tier below host memory per instance (local NVMe or a remote store); null: none."
    )

    @field_validator("hardware", mode="before")
    @classmethod
    def _hardware_preset(cls, v: Any) -> Any:
        return presets.named(presets.hardware, v)

    @model_serializer(mode="wrap")
    def _without_unused_features(self, handler: Any) -> Any:
        data = parallel.drop_defaults(handler(self))
        for key, default in {**ENGINE_DEFAULTS, **tiers.TIER_DEFAULTS, "hardware": None}.items():
            if key in data and data[key] == default:  # settings added later: defaults keep Results' bytes
                del data[key]
        if not tiers.has_tiers(self):
            for key in EngineSpec.TIER_TERMS:
                data.pop(key, None)
        return data

    # Decode-only steps run as CUDA graphs (SGLang, vLLM and TRT-LLM all do by default): a kernel the roofline
    # prices pays this floor instead of the hardware's eager launch floor (measured tables keep their own).
    # 3 µs is AIConfigurator 0.12.0's h200_sxm `mem_empirical_constant_latency` ("observations"); null: eager.
    decode_graph_floor_us: PositiveFloat | None = Field(
        3.0, description="µs a kernel of a decode-only step costs at least (CUDA graphs); null: eager launches."
    )
    # Reading an FP8 KV cache in decode attention costs this factor on memory time (dequantization); engines
    # differ (docs/calibration.md: SGLang 0.5.14's measured FP8 MLA kernel fits far above TRT-LLM's). None: the
    # hardware roofline's own factor (1.25: one dequantization per tile).
    fp8_kv_read_factor: PositiveFloat | None = Field(
        None, description="Factor on decode attention's memory time reading an FP8 cache; null: the roofline's own."
    )
    # And a fixed cost per call of that attention (scales, the conversion's setup), whatever the bytes: a pool's
    # engine pays its own. None: the hardware roofline's (none).
    fp8_kv_fixed_us: NonNegativeFloat | None = Field(
        None, description="µs a decode attention call reading an FP8 cache pays beyond its bytes; null: the roofline's."
    )
    # A graphed decode step costs more per layer than its op list prices (pricing/costmodel.py `layer_us`): the
    # kernels an engine's layer launches beyond the op's list and the gaps between them; the engine's own, fitted.
    decode_layer_us: NonNegativeFloat = Field(
        0.0, description="µs a layer of a decode-only (CUDA-graph) step costs beyond its op list (engine kernels)."
    )
    # A grouped router (ModelSpec.moe.grouped_router) whose expert count the engine's fused gate does not take runs
    # as a chain of small kernels in every MoE layer: SGLang fuses it for power-of-two counts (moe_fused_gate; from
    # 0.5.8 FlashInfer's fused top-k, both `is_power_of_two(num_experts)`) and Kimi K2's 384 (its own gate), and
    # otherwise runs `biased_grouped_topk_impl` (layers/moe/topk.py, 0.5.6-0.5.13), a torch.compile'd chain.
    router_chain_kernels: NonNegativeInt = Field(
        0,
        description="Kernels a grouped router launches per MoE layer where the engine's fused gate does not take "
        "the model's expert count (0: always fused).",
    )
    # A step with prefill rows that no CUDA graph captures launches its kernels one by one from Python: the GPU
    # cannot finish before the CPU has launched the last, so the step lasts at least its op list's kernels times
    # this (pricing/costmodel.py `eager_floor_us`). It shows where the GPU's own work is short: a few clients'
    # prompts (their TTFT) and the decode batches a prefill step holds up.
    eager_kernel_us: NonNegativeFloat = Field(
        0.0,
        description="µs of CPU time a step with prefill rows, launched eagerly, spends per kernel of its op list "
        "(the step lasts at least its kernels times this; 0: never the bound).",
    )
    # SGLang from 0.5.10 captures such steps in piecewise CUDA graphs by default, up to the chunk size (2,048
    # tokens under MLA), and turns them off under speculation, DP attention, PD disaggregation and for DSA models
    # (server_args.py `_handle_piecewise_cuda_graph`, model_config.py); a captured step pays no launch floor.
    prefill_graphs: bool = Field(
        False,
        description="Steps with prefill rows replay piecewise CUDA graphs where the deployment allows them (no "
        "speculation, DP attention, disaggregation or DSA; up to the chunk size, 2,048 tokens under MLA).",
    )
    # vLLM captures one CUDA graph per batch size up to min(2 × max_num_seqs, 512) tokens, decode or mixed
    # (`VllmConfig._set_cudagraph_sizes`: "max_graph_size = min(max_num_seqs * 2, 512)"), whatever the
    # deployment; a larger step runs the compiled model without a graph, its kernels launched from the CPU.
    prefill_graph_tokens: PositiveInt | None = Field(
        None,
        description="Steps with prefill rows of up to this many tokens (and twice the rows max_running decode) replay "
        "CUDA graphs, larger ones launch eagerly (vLLM's rule; null: prefill_graphs, SGLang's).",
    )
    # Block-FP8 GEMMs and grouped expert GEMMs take this factor on their tensor-core time: an engine whose kernels
    # are not the ones the hardware's roofline was fitted to (AIConfigurator's SGLang tables). None: the roofline's.
    fp8_gemm_mma_factor: PositiveFloat | None = Field(
        None, description="Factor on block-FP8 GEMMs' tensor-core time (the engine's kernels); null: the roofline's."
    )
    # An engine may run other block-FP8 kernels on Blackwell (a GPU with FP4 tensor cores) than on Hopper: vLLM 0.21's
    # FP8 MoE oracle prefers Triton (TP) or FlashInfer CUTLASS (EP) on SM 9.0 only and FlashInfer's TRT-LLM kernels
    # elsewhere. None: `fp8_gemm_mma_factor` on every GPU.
    fp8_gemm_mma_factor_blackwell: PositiveFloat | None = Field(
        None,
        description="Factor on block-FP8 GEMMs' tensor-core time on a GPU with FP4 tensor cores (Blackwell); "
        "null: fp8_gemm_mma_factor's.",
    )
    # MoE engine behaviour (docs/calibration.md §3). Shared experts run on a second CUDA stream beside the
    # routed experts in decode (SGLang's DeepseekV2MoE dual stream up to 1,024 tokens, without DeepEP; TRT-LLM's
    # maybe_execute_in_parallel; AIConfigurator's `generation_moe_overlap`): the layer takes the longer stream.
    shared_expert_overlap: bool = Field(
        True, description="Shared experts on a second stream beside the routed ones in decode (the longer counts)."
    )
    # Token-to-expert routing the roofline counts touched experts under (pricing/expert_routing.py): the bounded
    # power law AIConfigurator measured its MoE tables at and its SDK assumes for every MoE model (aiconfigurator-core
    # 0.12.0 sdk/config.py `workload_distribution: str = "power_law"`; alpha 1.01 for DeepSeek-family models,
    # sdk/models/deepseek.py), or uniform. A trained router is skewed: uniform routing touches more experts at
    # decode sizes and, held out, priced the published runs worse (docs/calibration.md §3).
    moe_routing: Literal["uniform", "power_law"] = Field(
        "power_law", description="Token-to-expert routing the roofline counts experts under: a power law or uniform."
    )
    moe_routing_alpha: PositiveFloat = Field(
        1.01, description="Exponent of power-law routing (1.01 for DeepSeek-family models)."
    )
    # Small kernels fused into their neighbours (pricing/ops.py `_Builder.fuse`): FP8 activation quantization
    # written by the norm or activation before the GEMM (vLLM's RMSNorm+quant and SiLU-mul+quant fusion passes,
    # TRT-LLM's fused norm-quant), RoPE and the KV-cache write as one kernel with a BF16 cache (SGLang's fused
    # set_kv_buffer). Off: each runs as its own kernel, as SGLang 0.5.14 runs DeepSeek-V3's block-FP8 path.
    fuse_elementwise: bool = Field(
        False, description="Small kernels fused into neighbours (FP8 activation quantization, RoPE + KV write)."
    )
    # The kernel a sparse-attention (DSA) model's prefill runs with an FP8 cache: FlashMLA's, which computes a rank's
    # query heads in whole head blocks (the roofline's `sparse_attn_head_block`: 64 on Hopper, 128 on Blackwell), or
    # TRT-LLM's sparse MLA where the GPU has it (the roofline's `trtllm_sparse_head_block`; Blackwell: no padding),
    # which SGLang runs there from 0.5.10 on (server_args.py `_set_default_nsa_backends`: FP8 cache, SM 10+).
    fp8_sparse_prefill: Literal["flashmla", "trtllm"] = Field(
        "flashmla",
        description="Sparse-attention prefill kernel with an FP8 cache: FlashMLA (heads padded to its block) or "
        "TRT-LLM's sparse MLA (where the GPU has it).",
    )
    # The engine's step loop (engine presets, simulator/config/presets/engines/): the CPU work of scheduling a
    # step, whether it overlaps the GPU's previous step, whether prefill chunks join the decode batch, and how
    # much of DP attention's all-to-alls two-batch overlap really hides. Priced at the engine's one seam
    # (engine/timer.py) and in the lock-step DP pricing (pricing/dpstep.py).
    host_step_us: NonNegativeFloat = Field(
        0.0, description="µs of CPU work the engine spends scheduling one step (batch, sampling, bookkeeping)."
    )
    dp_sync_us: NonNegativeFloat = Field(
        0.0,
        description=(
            "µs more CPU work per step under DP attention: the ranks agree on the step's batches (across nodes it "
            "stays on the step even with the overlap scheduler)."
        ),
    )
    # What a request spends outside the GPU steps (engine/simulation.py): the API server's HTTP handling and
    # tokenization, the hand-off to the scheduler and its TP ranks, and on the way back the first token's
    # detokenization and stream; priced where the request enters (the entry pool's value).
    request_latency_us: NonNegativeFloat = Field(
        0.0,
        description="µs a request spends outside the GPU steps (API server, tokenizer, hand-off to the scheduler, "
        "streaming back): on its TTFT and end-to-end latency, not on the GPU.",
    )
    # The API server's one CPU, which takes every request in before its scheduler sees it, one at a time
    # (engine/frontend.py): the entry pool's values.
    frontend_accept_us: NonNegativeFloat = Field(
        0.0,
        description="µs the API server's one CPU spends accepting each request on arrival (HTTP, chat template); a "
        "request's preparation queues behind every request that arrived meanwhile.",
    )
    frontend_prepare_us: NonNegativeFloat = Field(
        0.0,
        description="µs the API server's one CPU then spends preparing each request (tokenizing it, handing it to "
        "the scheduler), one request at a time.",
    )
    overlap_scheduler: bool = Field(
        True, description="The CPU work of a step runs while the GPU runs the previous one (a step: the longer)."
    )
    overlap_with_speculation: bool = Field(
        False, description="The overlap scheduler stays on under speculative decoding (off: CPU and GPU add)."
    )
    mixed_chunked_prefill: bool = Field(
        True, description="Prefill chunks share a step with the decode batch (off: a step with chunks has no decode)."
    )
    tbo_hidden_share: float = Field(
        1.0, ge=0, le=1, description="Share of the all-to-alls two-batch overlap hides (1: the perfect bound)."
    )
    a2a_node_dedup: bool = Field(
        False,
        description="MoE dispatch sends a token once per node and forwards it over NVLink (DeepEP's normal mode); "
        "off: once per expert rank (low-latency mode).",
    )
    # The engine's KV-tier policy (simulator/serving/tiers.py, pricing/tier_pricing.py): read only where the pool
    # has a tier, and left out of its JSON otherwise.
    kv_tier_write: Literal["write_through", "write_back"] = Field(
        "write_through",
        description="When a KV page is copied to the tier below HBM: once computed (write_through), or when evicted.",
    )
    kv_tier_layerwise: bool = Field(
        True, description="A prefix found below HBM loads back layer by layer, overlapped with the prefill's compute."
    )

    @model_validator(mode="after")
    def _recv_interval_without_dp(self) -> Pool:
        if self.recv_interval > 1 and self.dp > 1:
            raise ValueError(
                f"recv_interval {self.recv_interval} with dp {self.dp}: SGLang's receive skipper does not run under "
                "DP attention (scheduler_recv_skipper.py asserts it off); set recv_interval 1"
            )
        return self

    @model_validator(mode="after")
    def _one_source_of_expert_imbalance(self) -> Pool:
        if self.moe_routing == "power_law" and self.expert_imbalance != 1.0 and not self.redundant_experts:
            raise ValueError(
                "moe_routing 'power_law' sets the busiest EP rank's load itself: leave expert_imbalance at 1.0, "
                "or state redundant_experts (EPLB balances the ranks; expert_imbalance is then what it leaves)"
            )
        return self

    @property
    def gpus(self) -> int:
        return self.instances * self.tp


class Transfer(Strict):
    """Prefill → decode KV transfer link, per decode instance (RDMA over the scale-out network); a decode instance
    with DP attention has one per DP rank."""

    bandwidth_gbs: PositiveFloat = Field(
        50.0, description="GB/s of the KV link into one decode instance (into each DP rank under DP attention)."
    )
    latency_ms: NonNegativeFloat = Field(1.0, description="ms of latency of one transfer.")


class Deployment(Strict):
    mode: Literal["disaggregated", "colocated"] = Field(
        "colocated",
        description="colocated: one pool serves prefill and decode; disaggregated: a prefill pool and a decode pool.",
    )
    prefill: Pool | None = Field(None, description="The prefill pool (disaggregated mode).")
    decode: Pool = Field(default_factory=Pool, description="The decode pool (colocated: the only pool).")
    transfer: Transfer = Field(default_factory=Transfer, description="The KV-transfer link from prefill to decode.")

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
    enabled: bool = Field(
        True, description="Check every page's tag before each decode step (the page-integrity check)."
    )
    fault_rate: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Chance per decode step of a running request that a fault is planted in one of its pages.",
    )
    fault_kinds: list[FaultKind] = Field(
        default_factory=lambda: ["stale", "foreign"],
        description="Kinds of fault planted: stale, foreign, out_of_range.",
    )


class PrefixCache(Strict):
    enabled: bool = Field(
        True, description="Reuse the cached KV of prompt prefixes seen before (a radix prefix cache)."
    )


class ScorerWeights(Strict):
    """The `scorers` router's weights: the Gateway API inference extension's default profile (llm-d, the vLLM
    production stack), config/charts/inferencepool/templates/epp-config.yaml (docs/routing.md)."""

    queue: float = Field(2.0, description="Weight of the queue scorer (requests waiting on the instance).")
    kv_cache: float = Field(2.0, description="Weight of the KV-cache-utilization scorer (1 − share of pages in use).")
    prefix: float = Field(3.0, description="Weight of the prefix-cache scorer (share of the prompt's blocks matched).")

    @model_validator(mode="after")
    def _some_weight(self) -> ScorerWeights:
        if self.queue + self.kv_cache + self.prefix <= 0:
            raise ValueError("at least one scorer needs a positive weight (all 0 would send every request to one)")
        return self


class Routing(Strict):
    """How a request picks its instance: the engine's router unless `policy` names another (docs/routing.md)."""

    policy: RoutingPolicy | None = Field(
        None,
        description="cache_aware (SGLang's router), power_of_two, scorers (llm-d / vLLM production stack), least_kv "
        "(fewest prompt tokens queued, then KV pages), round_robin, session_affinity, prefix_aware; null: the "
        "engine's router.",
    )
    cache_threshold: float = Field(
        0.3, description="cache_aware: route to the longest cached prefix when it covers more than this share."
    )
    balance_abs_threshold: int = Field(
        64, description="cache_aware: loads are imbalanced when max − min in-flight requests exceeds this ..."
    )
    balance_rel_threshold: float = Field(
        1.5, description="cache_aware: ... and max exceeds this times min; then the least loaded instance."
    )
    weights: ScorerWeights = Field(default_factory=ScorerWeights, description="scorers: each scorer's weight.")


class Length(Strict):
    """A token-length distribution; a bare integer in YAML means `fixed`."""

    dist: Literal["fixed", "uniform", "lognormal", "empirical"] = Field(
        "fixed", description="Distribution: fixed, uniform, lognormal or empirical (a bare integer means fixed)."
    )
    value: PositiveInt | None = Field(None, description="fixed: the length in tokens.")
    low: PositiveInt | None = Field(None, description="uniform: the shortest length.")
    high: PositiveInt | None = Field(None, description="uniform: the longest length.")
    median: PositiveFloat | None = Field(None, description="lognormal: the median length.")
    sigma: NonNegativeFloat = Field(0.5, description="lognormal: the spread of the length's logarithm.")
    file: str | None = Field(
        None, description="empirical: a file of lengths, one a line (relative to the scenario's folder)."
    )
    max: PositiveInt | None = Field(None, description="Longer lengths are cut to this; null: no cut.")

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

    period_s: PositiveFloat = Field(86400.0, description="Seconds of one period.")
    multipliers: list[NonNegativeFloat] = Field(
        default_factory=lambda: [0.5, 1.0, 1.5, 1.0],
        min_length=1,
        description="Rate multipliers at evenly spaced points of the period, joined linearly.",
    )


class Sessions(Strict):
    """Multi-turn conversations: later turns carry all earlier turns as a reusable prefix."""

    turns: PositiveInt = Field(
        1, description="Turns per conversation; later turns carry the earlier ones as a reusable prefix."
    )
    think_time_s: NonNegativeFloat = Field(
        5.0, description="Seconds between an answer and the conversation's next turn."
    )


class Agentic(Strict):
    """Agent tasks: an orchestrating agent calls the model `steps` times, each call's context the last one's plus its
    answer and a tool's result, a tool call's pause between calls; after its first call it may fan out to parallel
    sub-agents that share its context as their prefix, wait for them all, and read their reports. Every call of a
    task carries its session id (session-affinity routing keeps a task on one instance)."""

    steps: PositiveInt = Field(8, description="Model calls of the orchestrating agent per task.")
    tool_time_s: NonNegativeFloat = Field(
        2.0, description="Mean seconds of a tool call between an answer and the next call (exponential)."
    )
    tool_output_tokens: Length = Field(
        default_factory=lambda: Length(value=512),
        description="Tokens a tool's result adds to the context before the next call (a distribution, or an integer).",
    )
    subagents: NonNegativeInt = Field(
        0, description="Parallel sub-agents the orchestrator fans out to after its first call (0: none)."
    )
    subagent_steps: PositiveInt = Field(4, description="Model calls of each sub-agent.")

    @property
    def calls(self) -> int:
        """Model calls of one task."""
        return self.steps + self.subagents * self.subagent_steps


class Retries(Strict):
    """What a client does when its request fails: it sends it again after a backoff, up to `max` times. The backoff
    is openai-python's (src/openai/_base_client.py `_calculate_retry_timeout`: min(0.5 s × 2^n, 8 s) × (1 − 0.25 ×
    U[0, 1)) before retry n + 1; `_constants.py`: DEFAULT_MAX_RETRIES = 2); a benchmark client (SGLang's
    bench_serving) counts a failed request and never sends it again, hence `max` 0 (docs/retries.md)."""

    max: NonNegativeInt = Field(
        0, description="Retries of one request after its first attempt (openai-python: 2); 0: none, as benchmarks."
    )
    backoff_s: NonNegativeFloat = Field(0.5, description="Seconds before the first retry (openai-python: 0.5).")
    multiplier: float = Field(2.0, description="Each further retry waits this many times longer (openai-python: 2).")
    max_backoff_s: NonNegativeFloat = Field(8.0, description="The longest wait before a retry (openai-python: 8 s).")
    jitter: float = Field(
        0.25, description="A wait is cut by up to this share, drawn per retry from the seed (openai-python: 0.25)."
    )
    on: list[Literal["integrity", "preemption", "rejected"]] = Field(
        default_factory=lambda: ["integrity", "preemption"],
        description="Failures retried: an integrity abort, a preemption-limit abort (both server errors, which "
        "clients retry), a rejection (a request no instance can hold: a 4xx clients do not retry by default).",
    )


class BenchRandom(Strict):
    """SGLang's benchmark client (`python -m sglang.bench_serving --dataset-name random`) drawing the lengths: a
    published run of it is reproduced request by request, its lengths the ones the run sent, not a fresh sample of
    their distribution (a run of ten requests has a median of its own)."""

    input_len: PositiveInt = Field(description="--random-input-len: the longest prompt it draws.")
    output_len: PositiveInt = Field(description="--random-output-len: the longest output it draws.")
    range_ratio: float = Field(
        0.0, ge=0.0, le=1.0, description="--random-range-ratio: the shortest draw's share of the longest (default 0)."
    )
    seed: int = Field(1, ge=0, lt=2**32, description="--seed (its default 1).")
    zero_outputs: bool = Field(
        False,
        description="Outputs drawn from 0, as SGLang 0.5.6.post1 and before drew them (from 1 since 0.5.6.post2); a "
        "0 is served as 1 token.",
    )

    def prompt_tokens(self) -> Length:
        """The distribution the prompts are drawn from."""
        return Length(dist="uniform", low=max(int(self.input_len * self.range_ratio), 1), high=self.input_len)

    def output_tokens(self) -> Length:
        """The distribution the outputs are drawn from (a drawn 0 is served as 1 token)."""
        return Length(dist="uniform", low=max(int(self.output_len * self.range_ratio), 1), high=self.output_len)


# The steady-state reading's shape (results/steady.py reads them as BATCHES, MIN_PER_BATCH): the window is cut
# into 10 batches, each at least one request's lifetime long and holding 20 completed requests.
STEADY_BATCHES = 10
STEADY_PER_BATCH = 20


def closed_loop_requests(clients: int) -> int:
    """Requests a closed loop of `clients` sends when neither a count nor a duration is given: enough for a steady
    state to be read. A client sends one request a lifetime, so the window's batches of a lifetime and 20
    completions each take max(1, 20 / clients) lifetimes; twice the window, since the warm-up may take half the
    arrivals (`results.steady.run_length`, the rule `phaseplan init` writes)."""
    return clients * math.ceil(2 * STEADY_BATCHES * max(1.0, STEADY_PER_BATCH / clients))


class Traffic(Strict):
    concurrency: PositiveInt | None = Field(
        None, description="Closed loop: clients, each sending its next request when its previous one ends."
    )
    rate: PositiveFloat | None = Field(
        None, description="Open loop: requests per second (with sessions: conversations per second)."
    )
    arrival: Literal["poisson", "bursty", "diurnal"] = Field(
        "poisson", description="Open-loop arrivals: poisson, bursty (gamma gaps) or diurnal."
    )
    burst_cv: PositiveFloat = Field(
        2.0, description="bursty: coefficient of variation of the gamma inter-arrival gaps."
    )
    diurnal: Diurnal = Field(default_factory=Diurnal, description="diurnal: the rate's multipliers over a period.")
    trace: str | None = Field(
        None, description="A trace to replay (phaseplan JSONL, Azure LLM 2023 CSV, Mooncake JSONL)."
    )
    trace_format: Literal["auto", "phaseplan", "azure", "mooncake"] = Field(
        "auto", description="The trace's format; auto: recognised from the file."
    )
    trace_speedup: PositiveFloat = Field(1.0, description="Trace replay speed, times real time.")
    bench_random: BenchRandom | None = Field(
        None,
        description="The lengths as SGLang's bench_serving draws them for its random dataset, in its order (a "
        "published run's own requests; needs `requests`, its --num-prompts); sets prompt_tokens and output_tokens.",
    )
    prompt_tokens: Length = Field(
        default_factory=lambda: Length(value=2048),
        description="Prompt lengths in tokens (a distribution, or a bare integer).",
    )
    output_tokens: Length = Field(
        default_factory=lambda: Length(value=256),
        description="Output lengths in tokens (a distribution, or a bare integer).",
    )
    shared_prefix_tokens: NonNegativeInt = Field(0, description="Tokens of a system prompt every request starts with.")
    sessions: Sessions = Field(default_factory=Sessions, description="Multi-turn conversations.")
    agentic: Agentic | None = Field(
        None, description="Agent tasks instead of single requests or conversations (`rate`: tasks per second)."
    )
    retries: Retries = Field(default_factory=Retries, description="Clients retrying failed requests.")
    duration_s: PositiveFloat | None = Field(
        None, description="Seconds of arrivals; the run ends when the last request is served."
    )
    requests: PositiveInt | None = Field(
        None,
        description="Requests to send (a closed loop without it or duration_s: enough for a steady state, "
        "concurrency × ⌈20 × max(1, 20 / concurrency)⌉).",
    )
    truncate_to_context: bool = Field(
        False, description="Cut prompts longer than the model's context instead of refusing them."
    )

    @model_validator(mode="after")
    def _one_source(self) -> Traffic:
        given = [k for k in ("concurrency", "rate", "trace") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of concurrency, rate, trace (got {given or 'none'})")
        if self.bench_random is not None:
            self._bench_lengths(self.bench_random)
        if self.concurrency is not None and self.duration_s is None and self.requests is None:
            self.requests = closed_loop_requests(self.concurrency)
        if self.rate is not None and self.duration_s is None and self.requests is None:
            raise ValueError("open-loop traffic needs duration_s or requests")
        if self.agentic is not None and self.sessions.turns > 1:
            raise ValueError("agentic: agent tasks are their own sessions; leave sessions.turns at 1")
        return self

    def _bench_lengths(self, b: BenchRandom) -> None:
        """The client's draws are the lengths: they replace prompt_tokens and output_tokens (given ones must be the
        same distributions, as a dumped scenario's are), and are sized by the run's request count."""
        if self.requests is None:
            raise ValueError("bench_random needs requests: the run's --num-prompts, which sizes its draws")
        if self.trace is not None or self.agentic is not None or self.sessions.turns > 1:
            raise ValueError("bench_random draws single requests: not with a trace, sessions or agent tasks")
        for name, length in (("prompt_tokens", b.prompt_tokens()), ("output_tokens", b.output_tokens())):
            if name in self.model_fields_set and getattr(self, name) != length:
                raise ValueError(f"give bench_random or {name}, not both (bench_random draws the lengths)")
            setattr(self, name, length)

    @model_serializer(mode="wrap")
    def _without_agentic(self, handler: Any) -> Any:
        """Traffic without agent tasks or the benchmark client's draws dumps as it did before they existed: Results
        keep their bytes."""
        data = handler(self)
        for key in ("agentic", "bench_random"):
            if isinstance(data, dict) and data.get(key, 0) is None:
                del data[key]
        return data

    @property
    def per_session(self) -> int:
        """Requests one arrival of synthetic traffic brings: a conversation's turns, or an agent task's calls."""
        return self.agentic.calls if self.agentic is not None else self.sessions.turns

    @property
    def session_gap_s(self) -> float:
        """Mean seconds between one session's requests: a conversation's think time, or an agent's tool calls."""
        return self.agentic.tool_time_s if self.agentic is not None else self.sessions.think_time_s


class SLO(Strict):
    """The service-level objective: p95 limits. The p95 is within a limit when at least 95% of requests are, so
    `run` counts the share of requests within both (its `slo_attainment`) and `plan`/`max-rate` judge the p95."""

    ttft_p95_ms: PositiveFloat = Field(2000.0, description="p95 time-to-first-token limit, ms.")
    tpot_p95_ms: PositiveFloat = Field(
        50.0, description="p95 time-per-output-token limit, ms (after the first token, per request)."
    )


class Cost(Strict):
    gpu_hour_usd: PositiveFloat | None = Field(None, description="USD per GPU-hour; null: the hardware preset's price.")


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
    if pool.attention_backend == "triton" and model.indexer is not None:
        raise ValueError(
            f"{where}.attention_backend: 'triton' with model {model.name}'s sparse (DSA) attention: SGLang runs a DSA "
            "model on its own NSA kernels; use 'default'"
        )
    if pool.weights_scheme is not None and pool.weights_scheme not in model.schemes:
        raise ValueError(
            f"{where}.weights_scheme: model {model.name} has no scheme "
            f"{pool.weights_scheme!r} (known: {', '.join(model.schemes) or 'none'})"
        )


class Scenario(Strict):
    name: str = Field("scenario", description="The scenario's name, shown in reports.")
    model: ModelSpec = Field(
        description="A model preset's name (phaseplan presets), or an inline architecture (ModelSpec below)."
    )
    hardware: HardwareSpec = Field(
        description="A GPU preset's name, or inline figures (HardwareSpec below); a scenario without it runs on h200."
    )
    engine: EngineSpec = Field(
        description="A serving-engine preset's name (phaseplan presets), an engine file's path (`engines/NAME.yaml`, "
        "as `phaseplan calibrate` writes one), or inline terms (EngineSpec below): what the engine does with the "
        "kernels, taken by every pool that does not set the term itself."
    )
    profile: str = Field(
        "roofline", description="What prices step times: roofline (modeled), or the path of a kernel profile JSON."
    )
    deployment: Deployment = Field(
        default_factory=Deployment, description="The pools, their layout and the KV-transfer link."
    )
    integrity: Integrity = Field(default_factory=Integrity, description="The page-integrity check and fault injection.")
    prefix_cache: PrefixCache = Field(default_factory=PrefixCache, description="Prefix caching.")
    routing: Routing = Field(default_factory=Routing, description="Request routing.")
    traffic: Traffic = Field(
        default_factory=lambda: Traffic(concurrency=1), description="Arrivals and lengths of the requests."
    )
    slo: SLO = Field(default_factory=SLO, description="Latency limits.")
    cost: Cost = Field(default_factory=Cost, description="GPU price.")
    seed: int = Field(0, description="Random seed: the same scenario and seed give the same result, bit for bit.")
    sweep: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="`phaseplan sweep`'s grid: dotted paths and their values; every combination is a point.",
    )
    focus: dict[str, bool | int | float | str] = Field(
        default_factory=dict,
        description="The sweep point the study's question turns on (`traffic.concurrency: 64`: where only an FP8 "
        "cache holds the clients): some of the sweep's paths, each at one of its values. The planner page opens "
        "there; `run` runs the scenario as written and Results leave it out.",
    )

    @model_validator(mode="after")
    def _engine_terms(self) -> Scenario:
        """Each pool takes the engine's value of every term it does not set itself (a pool still overrides)."""
        for name, pool in self.deployment.pools().items():
            for term in EngineSpec.TERMS:
                if term not in pool.model_fields_set:
                    object.__setattr__(pool, term, getattr(self.engine, term))
            if name == "prefill" and "a2a_node_dedup" not in pool.model_fields_set:
                object.__setattr__(pool, "a2a_node_dedup", self.engine.prefill_a2a_node_dedup)
            if self.deployment.mode == "disaggregated" and "prefill_graphs" not in pool.model_fields_set:
                object.__setattr__(pool, "prefill_graphs", False)  # SGLang: no piecewise graphs under PD disaggregation
        return self

    @model_validator(mode="after")
    def _engine_router(self) -> Scenario:
        """Unset, the routing policy is the engine's router (a deployment of the engine runs it)."""
        if self.routing.policy is None:
            object.__setattr__(self.routing, "policy", self.engine.router)
        return self

    @model_validator(mode="after")
    def _focus_is_a_sweep_point(self) -> Scenario:
        """A focus names a point of the sweep (a sweep's points are validated with both taken off,
        `loader.one_point`), so each of its values is bounded as that point's scenario."""
        if self.focus and not self.sweep:
            raise ValueError("focus: names a point of the sweep, but the scenario has no sweep")
        for path, value in self.focus.items():
            if path not in self.sweep:
                raise ValueError(f"focus: {path} is not one of the sweep's paths ({', '.join(self.sweep)})")
            if value not in self.sweep[path]:
                raise ValueError(f"focus: {path}={value} is not one of the sweep's values {self.sweep[path]}")
        return self

    @model_validator(mode="after")
    def _pools_fit_the_model(self) -> Scenario:
        for name, pool in self.deployment.pools().items():
            check_pool_fits_model(self.model, self.hardware_of(pool), name, pool)
        return self

    def hardware_of(self, pool: Pool) -> HardwareSpec:
        """The GPU a pool runs on: its own `hardware`, else the scenario's."""
        return pool.hardware or self.hardware

    @property
    def mixed_hardware(self) -> bool:
        """Whether some pool names a GPU of its own (then costs are reported per pool)."""
        return any(p.hardware is not None for p in self.deployment.pools().values())

    @model_serializer(mode="wrap")
    def _hardware_figures_in_use(self, handler: Any) -> Any:
        """The resolved hardware lists its FP4 rate, scale-out links and host link only where a pool uses them, and
        the engine its KV-tier terms only where a pool has a tier."""
        data = handler(self)
        pools = self.deployment.pools()
        dumped = data.get("deployment") or {}
        for name, pool in pools.items():
            hw = (dumped.get(name) or {}).get("hardware")
            if hw is None and self.mixed_hardware and isinstance(data.get("hardware"), dict):
                hw = data["hardware"]  # pools of different GPUs: every pool names its own
            if isinstance(hw, dict):
                dumped[name]["hardware"] = _figures_in_use(hw, [pool])
        if isinstance(data.get("hardware"), dict):
            data["hardware"] = _figures_in_use(data["hardware"], [p for p in pools.values() if p.hardware is None])
        engine = data.get("engine")
        if isinstance(engine, dict) and not any(tiers.has_tiers(p) for p in pools.values()):
            data["engine"] = {k: v for k, v in engine.items() if k not in EngineSpec.TIER_TERMS}
        return data


def _figures_in_use(hw: dict[str, Any], pools: list[Pool]) -> dict[str, Any]:
    """A hardware dump without the figures none of `pools` uses (FP4, scale-out, the host link, the Triton kernels')."""
    unused = set()
    if not any(p.weights in FP4_FORMATS for p in pools):
        unused |= HardwareSpec.FP4_FIELDS
    if not any(parallel.uses_scale_out(p) for p in pools):
        unused |= HardwareSpec.SCALE_OUT_FIELDS
    if not any(tiers.has_tiers(p) for p in pools):
        unused |= HardwareSpec.HOST_LINK_FIELDS
    triton = any(p.attention_backend == "triton" for p in pools)
    if not triton:
        unused |= HardwareSpec.TRITON_FIELDS
    out = {k: v for k, v in hw.items() if k not in unused}
    fit = out.get("roofline")
    if not triton and isinstance(fit, dict) and isinstance(fit.get("factors"), dict):
        out["roofline"] = {
            **fit,
            "factors": {k: v for k, v in fit["factors"].items() if k not in RooflineFit.TRITON_FACTORS},
        }
    return out
