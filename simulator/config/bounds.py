"""Sane ranges for every number a scenario holds, each with the physical reason for its ends.

The schema types say positive or non-negative and (with `allow_inf_nan=False`) finite; these bounds add what
is physically plausible, so that a typo or a hostile value (`hbm_gib: 1e300`, `bandwidth_gbs: 1e-300`,
`burst_cv: 1e300`) is one error naming the field and the range instead of a crash, a hang or a
300-digit time. A number with no entry here must still lie within ±DEFAULT_LIMIT.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel

DEFAULT_LIMIT = 1e15
TOKENS = 100_000_000  # no model reads more than this many tokens in one request (the largest contexts are ~10M)
# A profile's times (median, p10, p90 of one kernel): a nanosecond is below any kernel launch, and a kernel of
# 1,000 s is no kernel (the bundled profiles span 2.25 µs to 0.71 s).
PROFILE_US = (1e-3, 1e9, "µs")

# (schema class, field) -> (low, high, what the number is)
BOUNDS: dict[tuple[str, str], tuple[float, float, str]] = {
    ("HardwareSpec", "hbm_gib"): (1, 4096, "GiB of HBM per GPU (today's largest GPUs carry under 300)"),
    ("HardwareSpec", "hbm_gbs"): (1, 1e6, "GB/s of HBM bandwidth per GPU"),
    ("HardwareSpec", "copy_gbs"): (1, 1e6, "GB/s of device copy bandwidth per GPU"),
    ("HardwareSpec", "bf16_tflops"): (0.01, 1e6, "dense BF16 TFLOP/s per GPU"),
    ("HardwareSpec", "fp8_tflops"): (0.01, 1e6, "dense FP8 TFLOP/s per GPU"),
    ("HardwareSpec", "sm_count"): (1, 1024, "streaming multiprocessors per GPU (today's largest carry under 200)"),
    ("HardwareSpec", "nvlink_gbs"): (0.01, 1e6, "GB/s of NVLink bandwidth per GPU"),
    ("HardwareSpec", "kernel_floor_us"): (0.01, 1e5, "µs of a kernel launch and tail"),
    ("HardwareSpec", "allreduce_latency_us"): (0.01, 1e5, "µs of an all-reduce's latency"),
    ("HardwareSpec", "gpu_hour_usd"): (1e-4, 1e4, "USD per GPU-hour"),
    ("HardwareSpec", "gpus_per_node"): (1, 1024, "GPUs in one node's NVLink domain"),
    ("HardwareSpec", "fp4_tflops"): (0.01, 1e6, "dense FP4 TFLOP/s per GPU"),
    ("HardwareSpec", "scaleout_gbs"): (0.01, 1e5, "GB/s of scale-out bandwidth per GPU"),
    ("HardwareSpec", "host_link_gbs"): (0.01, 1e5, "GB/s between a GPU and host memory (PCIe, NVLink-C2C)"),
    ("ModelSpec", "layers"): (1, 1000, "layers"),
    ("ModelSpec", "dense_layers"): (0, 1000, "dense layers"),
    ("ModelSpec", "hidden"): (1, 1 << 20, "hidden size"),
    ("ModelSpec", "vocab"): (1, 1 << 24, "vocabulary entries"),
    ("ModelSpec", "dense_intermediate"): (1, 1 << 22, "dense FFN width"),
    ("ModelSpec", "mtp_layers"): (0, 64, "multi-token-prediction layers"),
    ("ModelSpec", "context_tokens"): (1, TOKENS, "tokens of context"),
    ("MLA", "heads"): (1, 4096, "attention heads"),
    ("MLA", "q_lora_rank"): (0, 1 << 20, "query latent width (0: no query latent)"),
    ("MLA", "kv_lora_rank"): (1, 1 << 20, "KV latent width"),
    ("MLA", "qk_rope_head_dim"): (1, 1 << 16, "RoPE dims per head"),
    ("MLA", "qk_nope_head_dim"): (1, 1 << 16, "non-RoPE query/key dims per head"),
    ("MLA", "v_head_dim"): (1, 1 << 16, "value dims per head"),
    ("GQA", "heads"): (1, 4096, "attention heads"),
    ("GQA", "kv_heads"): (1, 4096, "KV heads"),
    ("GQA", "head_dim"): (1, 1 << 16, "dims per head"),
    ("GQA", "partial_rotary_factor"): (1e-3, 1, "share of a head's dims RoPE rotates"),
    ("Indexer", "heads"): (1, 4096, "indexer heads"),
    ("Indexer", "topk"): (1, TOKENS, "tokens an indexer selects"),
    ("Indexer", "head_dim"): (1, 1 << 16, "indexer dims per head"),
    ("Indexer", "share_layers"): (1, 1000, "layers one indexer serves"),
    ("Indexer", "key_bytes"): (1, 1 << 20, "bytes of an indexer key per token and layer"),
    ("MoE", "routed_experts"): (1, 1 << 16, "routed experts"),
    ("MoE", "top_k"): (1, 1 << 16, "experts per token"),
    ("MoE", "shared_experts"): (0, 1024, "shared experts"),
    ("MoE", "intermediate"): (1, 1 << 22, "expert FFN width"),
    ("FormatRule", "group_size"): (1, 1 << 20, "weights per INT4 scale"),
    ("RooflineFit", "factors"): (1e-4, 1e5, "roofline factor (an efficiency, a ratio or a floor in µs)"),
    ("Pool", "instances"): (1, 4096, "instances in one pool"),
    ("Pool", "tp"): (1, 1024, "GPUs of one instance"),
    ("Pool", "ep"): (1, 1024, "expert-parallel groups"),
    ("Pool", "int4_group_size"): (1, 1 << 20, "weights per INT4 scale"),
    ("Pool", "page_size"): (1, 1 << 16, "tokens per KV page"),
    ("Pool", "max_running"): (1, 1 << 20, "requests running on one instance"),
    ("Pool", "max_batch_tokens"): (1, 1 << 24, "tokens in one step"),
    ("Pool", "chunk_size"): (1, 1 << 24, "tokens in one prefill chunk"),
    ("Pool", "mem_fraction"): (1e-3, 1, "share of HBM the engine may take"),
    ("Pool", "reserve_gib"): (0, 4096, "GiB reserved per GPU"),
    ("Pool", "decode_reserve_tokens"): (0, TOKENS, "tokens of growth room"),
    ("Pool", "nodes"): (1, 1024, "nodes one instance spans"),
    ("Pool", "host_tier_gib"): (0, 1 << 20, "GiB of host DRAM per instance for KV (a node carries a few TiB)"),
    ("StorageTier", "capacity_gib"): (1e-3, 1 << 30, "GiB of KV storage per instance (1 EiB at most)"),
    ("StorageTier", "bandwidth_gbs"): (1e-3, 1e5, "GB/s an instance reads from its storage tier"),
    ("StorageTier", "latency_ms"): (0, 60_000, "ms before a storage read's first byte (a minute at most)"),
    ("Pool", "dp"): (1, 1024, "attention data-parallel ranks"),
    ("Pool", "redundant_experts"): (0, 1 << 16, "redundant expert replicas"),
    ("Pool", "expert_imbalance"): (1, 1000, "busiest EP rank's load over the mean"),
    ("Pool", "decode_graph_floor_us"): (0.01, 1e5, "µs of a graphed kernel's launch and tail"),
    ("Pool", "fp8_kv_read_factor"): (0.01, 100, "factor on an FP8 cache read's memory time"),
    ("Pool", "host_step_us"): (0, 1e6, "µs of CPU work per step (a second per step is no engine)"),
    ("Pool", "dp_sync_us"): (0, 1e6, "µs of CPU sync per DP-attention step"),
    ("EngineSpec", "dp_sync_us"): (0, 1e6, "µs of CPU sync per DP-attention step"),
    ("Pool", "fp8_kv_fixed_us"): (0, 1e5, "µs an FP8-cache decode attention call pays beyond its bytes"),
    ("EngineSpec", "fp8_kv_fixed_us"): (0, 1e5, "µs an FP8-cache decode attention call pays beyond its bytes"),
    ("Pool", "frontend_accept_us"): (0, 1e6, "µs of the API server's CPU a request (a second is no server)"),
    ("Pool", "frontend_prepare_us"): (0, 1e6, "µs of the API server's CPU a request (a second is no server)"),
    ("Pool", "decode_layer_us"): (0, 1e5, "µs a decode layer costs beyond its op list"),
    ("EngineSpec", "frontend_accept_us"): (0, 1e6, "µs of the API server's CPU a request (a second is no server)"),
    ("EngineSpec", "frontend_prepare_us"): (0, 1e6, "µs of the API server's CPU a request (a second is no server)"),
    ("EngineSpec", "decode_layer_us"): (0, 1e5, "µs a decode layer costs beyond its op list"),
    ("Pool", "router_chain_kernels"): (0, 64, "kernels an unfused grouped router launches per MoE layer"),
    ("EngineSpec", "router_chain_kernels"): (0, 64, "kernels an unfused grouped router launches per MoE layer"),
    ("Pool", "eager_kernel_us"): (0, 1e4, "µs of CPU launch time per kernel of an eager step"),
    ("EngineSpec", "eager_kernel_us"): (0, 1e4, "µs of CPU launch time per kernel of an eager step"),
    ("Pool", "prefill_graph_tokens"): (1, 1 << 20, "tokens of the largest step a CUDA graph captures"),
    ("EngineSpec", "prefill_graph_tokens"): (1, 1 << 20, "tokens of the largest step a CUDA graph captures"),
    ("Pool", "request_latency_us"): (0, 1e7, "µs a request spends outside the GPU steps"),
    ("EngineSpec", "request_latency_us"): (0, 1e7, "µs a request spends outside the GPU steps"),
    ("Pool", "tbo_hidden_share"): (0, 1, "share of the all-to-alls two-batch overlap hides"),
    ("EngineSpec", "tbo_hidden_share"): (0, 1, "share of the all-to-alls two-batch overlap hides"),
    ("EngineSpec", "decode_graph_floor_us"): (0.01, 1e5, "µs of a graphed kernel's launch and tail"),
    ("EngineSpec", "fp8_kv_read_factor"): (0.01, 100, "factor on an FP8 cache read's memory time"),
    ("Pool", "fp8_gemm_mma_factor"): (0.01, 100, "factor on a block-FP8 GEMM's tensor-core time"),
    ("EngineSpec", "fp8_gemm_mma_factor"): (0.01, 100, "factor on a block-FP8 GEMM's tensor-core time"),
    ("Pool", "fp8_gemm_mma_factor_blackwell"): (0.01, 100, "factor on a block-FP8 GEMM's tensor-core time"),
    ("EngineSpec", "fp8_gemm_mma_factor_blackwell"): (0.01, 100, "factor on a block-FP8 GEMM's tensor-core time"),
    ("EngineSpec", "host_step_us"): (0, 1e6, "µs of CPU work per step (a second per step is no engine)"),
    ("CalibrationFile", "runs"): (1, 64, "benchmark runs in one file (calibrate fits at most 64)"),
    ("Calibration", "runs"): (1, 64, "benchmark runs fitted to (calibrate fits at most 64)"),
    ("CalibrationTerm", "before"): (0, 1e6, "an engine term's value (each fitted term is one, ≥ 0)"),
    ("CalibrationTerm", "after"): (0, 1e6, "an engine term's value (each fitted term is one, ≥ 0)"),
    ("CalibrationError", "median"): (0, 100, "a fraction of the measured figure"),
    ("CalibrationError", "max"): (0, 100, "a fraction of the measured figure"),
    ("CalibrationError", "cases"): (1, 10_000, "figures of at most 64 runs"),
    ("Pool", "moe_routing_alpha"): (1e-3, 100, "power-law exponent of expert routing"),
    # Speculative decoding: SGLang's EAGLE trees verify up to 64 draft tokens a step; a step's work and the
    # acceptance chain grow with k, so 10^4 would be a run that never ends, not a deployment.
    ("Speculative", "draft_tokens"): (1, 64, "draft tokens per verify step"),
    ("Speculative", "acceptance"): (0, 65, "accepted tokens per step, or a probability"),
    ("Transfer", "bandwidth_gbs"): (0.01, 1e5, "GB/s of the KV-transfer link (0.01 GB/s is 80 Mbit/s)"),
    ("Transfer", "latency_ms"): (0, 60_000, "ms of KV-transfer latency (a minute at most)"),
    ("Integrity", "fault_rate"): (0, 1, "chance of a fault per decode step"),
    ("Length", "value"): (1, TOKENS, "tokens"),
    ("Length", "low"): (1, TOKENS, "tokens"),
    ("Length", "high"): (1, TOKENS, "tokens"),
    ("Length", "median"): (1, TOKENS, "tokens"),
    ("Length", "max"): (1, TOKENS, "tokens"),
    ("Length", "sigma"): (0, 5, "log-space spread (sigma 5 already spans a factor of e^10 either side)"),
    ("Diurnal", "period_s"): (1, 1e8, "seconds per period"),
    ("Diurnal", "multipliers"): (0, 1e6, "rate multiplier"),
    ("Sessions", "turns"): (1, 1000, "turns per conversation"),
    ("Sessions", "think_time_s"): (0, 1e6, "seconds between turns (about 11.6 days at most)"),
    ("Agentic", "steps"): (1, 1000, "model calls of an agent"),
    ("Agentic", "tool_time_s"): (0, 1e6, "seconds of a tool call (about 11.6 days at most)"),
    ("Agentic", "subagents"): (0, 1024, "sub-agents one task fans out to"),
    ("Agentic", "subagent_steps"): (1, 1000, "model calls of a sub-agent"),
    ("Routing", "cache_threshold"): (0, 1, "share of a prompt a cached prefix must cover"),
    ("Routing", "balance_abs_threshold"): (0, 1 << 20, "requests in flight between the busiest and idlest instance"),
    ("Routing", "balance_rel_threshold"): (1, 1e6, "busiest instance's requests in flight over the idlest's"),
    ("ScorerWeights", "queue"): (0, 1000, "a scorer's weight"),
    ("ScorerWeights", "kv_cache"): (0, 1000, "a scorer's weight"),
    ("ScorerWeights", "prefix"): (0, 1000, "a scorer's weight"),
    ("Pool", "max_preemptions"): (0, 1e6, "preemptions of one request before it is aborted"),
    ("Pool", "recv_interval"): (1, 1e4, "decode steps between polls for new requests"),
    ("BenchRandom", "input_len"): (1, TOKENS, "tokens"),
    ("BenchRandom", "output_len"): (1, TOKENS, "tokens"),
    ("BenchRandom", "range_ratio"): (0, 1, "share of the longest draw"),
    ("Retries", "max"): (0, 100, "retries of one request (clients retry a few times)"),
    ("Retries", "backoff_s"): (0, 3600, "seconds before a retry"),
    ("Retries", "multiplier"): (1, 100, "growth of the backoff per retry"),
    ("Retries", "max_backoff_s"): (0, 86400, "seconds before a retry at most"),
    ("Retries", "jitter"): (0, 1, "share of a backoff cut at random"),
    ("Traffic", "concurrency"): (1, 1 << 20, "closed-loop clients"),
    ("Traffic", "rate"): (1e-6, 1e6, "requests per second"),
    ("Traffic", "burst_cv"): (0.05, 20, "coefficient of variation of inter-arrival gaps"),
    ("Traffic", "trace_speedup"): (1e-3, 1e6, "times real time"),
    ("Traffic", "shared_prefix_tokens"): (0, TOKENS, "tokens"),
    ("Traffic", "duration_s"): (1e-3, 1e8, "seconds of traffic (about 3 years at most)"),
    ("Traffic", "requests"): (1, 1e12, "requests"),
    ("SLO", "ttft_p95_ms"): (1e-3, 1e9, "ms"),
    ("SLO", "tpot_p95_ms"): (1e-3, 1e9, "ms"),
    ("Cost", "gpu_hour_usd"): (1e-4, 1e4, "USD per GPU-hour"),
    ("Scenario", "seed"): (0, 2**63 - 1, "seed (a non-negative 63-bit integer)"),
}


def check(model: BaseModel, prefix: tuple[str, ...] = ()) -> None:
    """Raise ValueError('dotted.path: why') at the first number out of its range (the loader adds the line)."""
    for name in type(model).model_fields:
        check_value(type(model).__name__, name, getattr(model, name), prefix + (name,))


def check_value(cls: str, name: str, value: Any, path: tuple[str, ...]) -> None:
    """A field's value (`cls.name`, at `path`) within its range, its items and models' fields within theirs."""
    if isinstance(value, BaseModel):
        check(value, path)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            check_value(cls, name, v, path + (str(i),))
    elif isinstance(value, dict) and name == "sweep":  # each point checks its values; here only that they are finite
        for k, values in value.items():
            for i, v in enumerate(values):
                if isinstance(v, float) and not math.isfinite(v):
                    raise ValueError(f"sweep.{k}.{i}: {v} is not a finite number")
    elif isinstance(value, dict):
        for k, v in value.items():
            check_value(cls, name, v, path + (str(k),))
    elif isinstance(value, int | float) and not isinstance(value, bool):
        lo, hi, what = BOUNDS.get((cls, name), (-DEFAULT_LIMIT, DEFAULT_LIMIT, "any number"))
        if not lo <= value <= hi:
            span = f"[{format_number(lo)}, {format_number(hi)}]"
            raise ValueError(f"{'.'.join(path)}: {format_number(value)} is out of range: {what} must lie in {span}")


def format_number(v: float) -> str:
    """A bound as the errors and the schema reference print it."""
    if isinstance(v, int) and abs(v) >= 10**16:
        digits = str(abs(v))
        return f"{'-' if v < 0 else ''}{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"
    if v and not 1e-3 <= abs(v) < 1e16:
        return f"{v:.3g}"
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:g}"
