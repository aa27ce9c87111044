"""The roofline: what one op should take on a device when no measured table covers it.

    time = max(bytes / (copy_gbs × mem_eff) × mem_factor, flops_padded / (rate × mma_eff)) + kernels × floor

(a kernel that does not hide its math under its loads — Marlin's W4A16 grouped GEMM — adds the two terms).

A pure bytes/FLOPs bound is an order of magnitude too optimistic at small batch, where a step is hundreds of
small kernels, each paying a launch and a tail, plus two all-reduces per layer that pay their latency. The
floors and the achieved-efficiency factors below are what make the fallback usable; every one says where its
value comes from. They are leads, to be replaced by measured tables: a measured profile wins.

Rates come from the HardwareSpec, which holds *achievable* ceilings (measured copy bandwidth, the measured
8192³ BF16 GEMM rate, FP8 at twice that); the factors here are the further share real kernels of each kind
reach at model shapes.

Shape values may be numpy arrays (e.g. a decode batch's context at many steps); the result then is too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from simulator.config import formats
from simulator.config.specs import HardwareSpec
from simulator.errors import InputError
from simulator.pricing.expert_routing import UNIFORM
from simulator.pricing.ops import routed_parts

# -- achieved share of HardwareSpec.copy_gbs (the measured device-to-device copy bandwidth) --------------------
# Weight-streaming GEMM at small m: cuBLAS/Triton GEMV-like kernels on weights of several MB reach 80–90% of
# copy bandwidth on Hopper (judgement from public GEMV benchmarks); 0.85 is the midpoint.
MEM_EFF_GEMM = 0.85
# W4A16 at small m: Marlin reaches 3.9× of FP16 where 4× is ideal up to M = 16–32 (KERNELS.md anchor, A10),
# i.e. 3.9/4 of the FP16 kernel's bandwidth share.
MEM_EFF_INT4 = MEM_EFF_GEMM * 3.9 / 4
# Fused MoE grouped GEMM: per-expert weight tiles of a few MB and gathered token rows; tuned Triton fused_moe
# configs reach ~60–75% of bandwidth at decode sizes (judgement) — 0.70.
MEM_EFF_MOE = 0.70
# Paged split-KV decode attention: a typical Triton/FA paged decode reaches 40–60% of HBM datasheet bandwidth
# at moderate sizes (KERNELS.md anchor, H100); 50% of datasheet ≈ 55% of copy (copy ≈ 0.9 × datasheet on
# H200: 4.3 of 4.8 TB/s). FlashMLA's 90% (anchor) is the ceiling a tuned CUDA kernel shows, not the default.
MEM_EFF_DECODE_ATTN = 0.55
# Norms, activations, residual adds, sampling: streaming kernels, 70% of copy at the sizes of a step (judgement;
# small tensors are dominated by the floor anyway).
MEM_EFF_ELEMENTWISE = 0.70
# Scattered row writes into pages (KV append, fused FP8 quantize) and tag gathers of the integrity check:
# 64–1152 B rows at random pages, ~half of a streaming copy (judgement).
MEM_EFF_SCATTER = 0.50

# -- achieved share of the tensor-core rate (HardwareSpec.bf16_tflops / fp8_tflops, already measured) --------
# Model-shaped GEMMs (n, k of 0.5–20K) reach ~80% of the 8192³ rate (cuBLAS at 4096–8192 sizes on H100/H200
# runs 600–700 of ~790 TFLOP/s; judgement from public sweeps).
MMA_EFF_GEMM = 0.80
# Grouped expert GEMMs: many small per-expert problems, ragged tails: ~60% (judgement; fused_moe Triton).
MMA_EFF_MOE = 0.60
# Causal flash-attention forward in Triton on Hopper: ~400–450 TFLOP/s BF16 against the 790 GEMM ceiling
# (FA3 in CUDA reaches ~600+): 0.55.
MMA_EFF_PREFILL_ATTN = 0.55
# Decode attention and indexer logits: small M tiles, softmax between the two dots: half the GEMM rate.
MMA_EFF_DECODE_ATTN = 0.50
# INT4 weights run BF16 tensor cores after dequantizing in registers; at large M the dequant in the main loop
# costs ~15–25% of the BF16 rate (Marlin/Machete papers report W4A16 at large batch within ~10–20% of FP16;
# a Triton kernel does worse): 0.80.
INT4_MMA_FACTOR = 0.80
# Marlin's W4A16 fused MoE (what SGLang and vLLM run for INT4 experts) is built around Ampere's mma.sync
# (IST-DASLab/marlin_artifact README: "MARLIN is not yet optimized for Hopper"): on Hopper its dequantize and
# multiply do not hide under the weight stream, and its work follows the token rows an expert really has (tokens
# sit on the MMA's narrow side), so its time is bytes/bandwidth + FLOPs/rate on unpadded rows. Fitted to
# AIConfigurator's measured H200 Marlin MoE tables (docs/calibration.md): log rms 0.138 against 0.200 for the
# overlapped, tile-padded form, which cannot give the measured crossover (INT4 no faster than FP8 from ~320 tokens
# per rank at TP8, half its speed at prefill sizes). Default: a quarter of the BF16 rate (judgement).
MMA_EFF_INT4_MOE = 0.25
# FP8 KV decode: half the bytes, but each loaded tile is dequantized (and scaled) before the BF16 dot.
# KERNELS.md: FP8 KV is often *slower* than BF16 unless dequant is once per tile; a kernel that does it once
# per tile still pays ~25% on its memory time (judgement): FP8 ends at ~0.63× BF16 time at long context.
FP8_KV_DEQUANT_FACTOR = 1.25
# FP8 KV decode also pays a fixed cost per call that does not grow with the bytes read (the scales' loads, the
# conversion's setup, in some engines a kernel of its own): AIConfigurator's H200 tables of SGLang 0.5.14's MLA decode
# put its FP8 rows 5-6 µs above the BF16 ones at every size too small to be bandwidth-bound (docs/calibration.md).
# The roofline's default: none; an engine that pays it sets its own (a pool's `fp8_kv_fixed_us`).
FP8_KV_FLOOR_US = 0.0
# The Triton fused MoE's tensor-core share grows with the rows each touched expert has: at a few tiles of rows a
# tile's pipeline fill, its gathered A rows and its scattered epilogue are most of its time; at thousands it
# approaches the kernel's large-M share: mma_eff × (rows / (rows + MOE_ROWS_HALF)) ** MOE_ROWS_EXP, rows per touched
# expert padded to one tile (MIN_TILE_M: below it the tile costs the same), on the BF16 and block-FP8
# paths (not Marlin's INT4, whose math follows its unpadded rows already). One law for every GPU (the same Triton
# kernel): fitted to AIConfigurator 0.12.0's measured H200 and B200 fused-MoE tables at once, each GPU with its own
# shares and floor (`fit.fit_moe_rows`; docs/calibration.md), and checked on its H100 tables, held out.
MOE_ROWS_HALF = 138.0
MOE_ROWS_EXP = 0.54
# Tensor-core tiles have at least 16 rows: decode attention's query heads per KV head (MLA: all heads of a
# rank) and MoE's tokens per expert are padded up to it (KERNELS.md: "so the dot has M ≥ 16").
MIN_TILE_M = 16
# FlashMLA's sparse attention (DeepSeek Sparse Attention's prefill kernel, flash_mla_sparse_fwd, which SGLang and
# vLLM both run) computes a rank's query heads in blocks of 64 on Hopper, so under TP a rank with fewer heads pads
# them: vllm-project/vllm vllm/v1/attention/backends/mla/flashmla_sparse.py ("kernel requires num_local_head to be
# a multiple of 64 on hopper and 128 on blackwell"), a padding vLLM's DeepSeek-V3.2 tracking issue #31473 lists as
# prefill work ("Support TP without padding — update kernel to support head counts of 16 and remove padding
# logic"). DeepSeek-V3.2 at TP8 (16 heads a rank) runs 4x its heads' FLOPs.
SPARSE_ATTN_HEAD_BLOCK = 64
# TRT-LLM's sparse MLA (FlashInfer's trtllm-gen kernels, Blackwell only) computes a rank's query heads as they are:
# SGLang's DSA backend hands it q of `tp_q_head_num` heads, where its FlashMLA path pads them (sglang 0.5.13.post1
# srt/layers/attention/dsa_backend.py `_forward_trtllm` against `_forward_flashmla_sparse`'s `required_padding`).
# A GPU without the kernel: None (an engine that asks for it runs FlashMLA's blocks).
TRTLLM_SPARSE_HEAD_BLOCK: int | None = None
# Block-FP8 GEMMs and grouped expert GEMMs (W8A8, 128x128 weight scales) take their tensor-core time at the fitted
# kernels' rate (AIConfigurator's tables, SGLang's kernels): 1. An engine whose block-FP8 kernels are not those
# sets its own factor (a pool's `fp8_gemm_mma_factor`).
FP8_GEMM_MMA_FACTOR = 1.0
# NCCL all-reduce on 8 NVLink-connected Hopper GPUs reaches ~400 GB/s bus bandwidth at large messages against
# the 900 GB/s nameplate (nccl-tests on DGX H100/H200): 0.45.
NVLINK_EFF = 0.45

# MoE all-to-all (dispatch, combine) under DP attention + wide EP, anchored on DeepEP's published figures
# (github.com/deepseek-ai/DeepEP, README and docs/legacy.md; DeepSeek-V3 settings, FP8 dispatch, BF16 combine):
# over NVLink, V1 reached 153-158 GB/s on H800 (whose NVLink DeepEP puts at ~160 GB/s; 400 GB/s nameplate) and V2
# 726-740 GB/s on B200 (1,800 nameplate): ~0.40 of the nameplate `nvlink_gbs`. Over RDMA, V1's low-latency decode
# kernels reached 39-46 GB/s per GPU at EP 64-256 on a 400 Gb/s CX7 NIC (~50 GB/s): 0.80 of `scaleout_gbs`.
A2A_NVLINK_EFF = 0.40
A2A_RDMA_EFF = 0.80

# SGLang's Triton attention backend (`--attention-backend triton`) runs its own kernels, not the FlashInfer/FA3/
# TRT-LLM ones the other families' tables measure. Its split-KV decode kernel (sglang srt/layers/attention/
# triton_ops/decode_attention.py, `_fwd_grouped_kernel_stage1`, the same in 0.5.6 and 0.5.14) gives each CTA one
# sequence, a block of 16 query heads sharing a KV head (BLOCK_H; MLA: all of a rank's heads share its latent) and
# one of at most 8 slices of the context (`--triton-attention-num-kv-splits`, default 8; fewer only once the grid
# fills the GPU: triton_backend.py `get_num_kv_splits_triton`), and walks its slice 32 tokens at a time, K and V
# tiles in turn. So a CTA streams at its own rate, and a few sequences use a few CTAs of the GPU's SMs: at one
# sequence of an MLA model 16 CTAs, whatever the context. Time = floor + bytes the CTAs stream / (CTA rate ×
# CTAs at once), the CTAs at once min(8 × sequences × head blocks, SMs × CTAs per SM). The rate, the CTAs per SM
# and the floor are fitted to AIConfigurator's measured Triton rows (`phaseplan profile fit`, docs/calibration.md);
# the defaults are H200's fit.
TRITON_KV_SPLITS = 8
TRITON_BLOCK_H = 16
TRITON_CTA_GBS = 13.02
TRITON_CTAS_PER_SM = 1.46
# Its prefill (extend) kernel is a Triton flash-attention forward: AIConfigurator's B200 rows reach ~170-200
# TFLOP/s at head dims 192-256 where TRT-LLM's reach ~1,100 (docs/calibration.md). Default: H200's fit.
MMA_EFF_PREFILL_ATTN_TRITON = 0.1113

# Launches per op: split-KV decode writes partials, then merges them; the indexer computes logits, then top-k.
KERNELS = {
    "decode_attention_mla": 2,
    "decode_attention_gqa": 2,
    "decode_attention_triton": 2,
    "decode_indexer": 2,
    "prefill_indexer": 2,
}

# Bytes per value of a KV-cache format; an MLA latent row in the tiled FP8 layout: 512 e4m3 + 4 fp32 scales +
# the 64 rope values in BF16 (models.md).
KV_BYTES = {"bf16": 2.0, "fp8_e4m3": 1.0}
MLA_LATENT, MLA_NOPE = 576, 512  # the latent row: 512 + 64 rope; V is its first 512
MLA_ROW_BYTES = {
    ("bf16", "flat"): 1152.0,
    ("bf16", "tiled"): 1152.0,
    ("fp8_e4m3", "flat"): 576.0,
    ("fp8_e4m3", "tiled"): 656.0,
}
INTEGRITY_BYTES_PER_PAGE = 12  # page id, recorded tag, current tag (int32 each)
FP8_BLOCK_SCALE_BYTES = 4 / (128 * 128)  # fp32 scale per 128×128 block
NEW_FORMATS = frozenset({"w4a8", "nvfp4", "mxfp4"})


@dataclass(frozen=True)
class Factors:
    """The factors above, and per-family launch floors, as one hardware's roofline uses them.

    A hardware preset may replace any of them (`HardwareSpec.roofline`: values fitted to measured tables by
    `phaseplan profile fit`, with their source); the defaults are the judgements documented above. A floor of
    None is the preset's `kernel_floor_us`.
    """

    mem_eff_gemm: float = MEM_EFF_GEMM
    mem_eff_int4: float = MEM_EFF_INT4
    mem_eff_moe: float = MEM_EFF_MOE
    mem_eff_decode_attn: float = MEM_EFF_DECODE_ATTN
    mem_eff_elementwise: float = MEM_EFF_ELEMENTWISE
    mem_eff_scatter: float = MEM_EFF_SCATTER
    mma_eff_gemm: float = MMA_EFF_GEMM
    mma_eff_moe: float = MMA_EFF_MOE
    mma_eff_prefill_attn: float = MMA_EFF_PREFILL_ATTN
    mma_eff_decode_attn: float = MMA_EFF_DECODE_ATTN
    int4_mma_factor: float = INT4_MMA_FACTOR
    mma_eff_int4_moe: float = MMA_EFF_INT4_MOE
    fp8_kv_dequant_factor: float = FP8_KV_DEQUANT_FACTOR
    fp8_kv_floor_us: float = FP8_KV_FLOOR_US
    sparse_attn_head_block: int = SPARSE_ATTN_HEAD_BLOCK
    trtllm_sparse_head_block: int | None = TRTLLM_SPARSE_HEAD_BLOCK
    fp8_gemm_mma_factor: float = FP8_GEMM_MMA_FACTOR
    nvlink_eff: float = NVLINK_EFF
    floor_gemm_us: float | None = None
    floor_moe_us: float | None = None
    # The block-FP8 fused MoE's own shares where a fit gave them (SGLang's w8a8 block kernel is its own Triton
    # kernel with its own tuned configs, not the BF16 one); None: the BF16 kernel's (`mem_eff_moe`, `mma_eff_moe`).
    mem_eff_moe_fp8: float | None = None
    mma_eff_moe_fp8: float | None = None
    # The fused MoE's tensor-core share by rows per touched expert (MOE_ROWS_HALF above); exponent 0: flat.
    moe_rows_half: float = MOE_ROWS_HALF
    moe_rows_exp: float = MOE_ROWS_EXP
    floor_decode_attn_us: float | None = None
    floor_prefill_attn_us: float | None = None
    # The all-gather's own latency and link share where a fit gave them (NCCL's all-gather is not the custom
    # all-reduce: ~12 µs of latency on H200); None: the all-reduce's (`allreduce_latency_us`, `nvlink_eff`).
    latency_allgather_us: float | None = None
    nvlink_eff_allgather: float | None = None
    # SGLang's Triton attention kernels (`Pool.attention_backend: triton`; TRITON_* above)
    triton_cta_gbs: float = TRITON_CTA_GBS
    triton_ctas_per_sm: float = TRITON_CTAS_PER_SM
    floor_triton_decode_us: float | None = None
    mma_eff_prefill_attn_triton: float = MMA_EFF_PREFILL_ATTN_TRITON


FACTOR_NAMES = frozenset(f.name for f in fields(Factors))
DEFAULT = Factors()
_FLOOR = {
    "gemm": "floor_gemm_us",
    "moe_gemm": "floor_moe_us",
    "decode_attention_mla": "floor_decode_attn_us",
    "decode_attention_gqa": "floor_decode_attn_us",
    "prefill_attention": "floor_prefill_attn_us",
    "decode_attention_triton": "floor_triton_decode_us",
    "prefill_attention_triton": "floor_prefill_attn_us",
}
_factors: dict[tuple, Factors] = {}


def factors(hw: HardwareSpec) -> Factors:
    """The roofline factors of `hw`: its preset's fitted values over the documented defaults."""
    if hw.roofline is None:
        return DEFAULT
    key = tuple(sorted(hw.roofline.factors.items()))
    f = _factors.get(key)
    if f is None:
        unknown = sorted(set(hw.roofline.factors) - FACTOR_NAMES)
        if unknown:
            raise InputError(
                f"hardware {hw.name}: roofline.factors: unknown factor(s) {', '.join(unknown)} "
                f"(known: {', '.join(sorted(FACTOR_NAMES))})"
            )
        f = _factors[key] = Factors(**hw.roofline.factors)
    return f


def floor_us(family: str, f: Factors, hw: HardwareSpec) -> float:
    """Launch floor of one kernel of `family`."""
    name = _FLOOR.get(family)
    v = getattr(f, name) if name else None
    return hw.kernel_floor_us if v is None else v


def weight_bytes(weights: str, group: int) -> float:
    """Bytes per weight: BF16 2, FP8 1 + block scales, INT4 half a byte + a BF16 scale per group; W4A8, NVFP4
    and MXFP4 as `simulator/config/formats.py` counts them."""
    if weights in NEW_FORMATS:
        return formats.bytes_per_weight(weights, group)
    if weights == "int4":
        return (4 + 16 / group) / 8
    return 1.0 + FP8_BLOCK_SCALE_BYTES if weights == "fp8" else 2.0


@dataclass(slots=True)  # not frozen: a frozen dataclass costs ~1.5 µs more to build, and ops are priced per step
class Work:
    """What an op must move and compute, and how well its kind of kernel does it."""

    bytes: Any
    flops: Any
    padded_flops: Any  # what the tensor cores actually run (tiles padded to MIN_TILE_M rows)
    rate: str  # bf16 | fp8 | int4
    mem_eff: float
    mma_eff: float
    mem_factor: float = 1.0
    kernels: int = 1
    overlapped: bool = True  # loads and math run at once (the slower sets the time); False: one after the other
    extra_us: float = 0.0  # a fixed cost per call beyond the kernels' floors (an FP8 cache's decode attention)


# Scalars stay Python floats (a step prices dozens of scalar ops; numpy's per-call overhead would dominate).
def _maximum(a: Any, b: Any) -> Any:
    return np.maximum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else max(a, b)


def _minimum(a: Any, b: Any) -> Any:
    return np.minimum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else min(a, b)


def _pad(x: Any) -> Any:
    return _maximum(x, MIN_TILE_M)


def _causal_pairs(tokens: Any, context: Any, topk: int) -> Any:
    """(query, key) pairs of `tokens` new queries at positions context−tokens+1..context; ≤ topk keys each."""
    a, b = context - tokens + 1, context
    dense = tokens * (a + b) / 2
    if not topk:
        return dense
    k = topk
    partial = (a + k) * (k - a + 1) / 2 + (b - k) * k
    if isinstance(b, np.ndarray) or isinstance(a, np.ndarray):
        return np.where(k >= b, dense, np.where(k < a, k * tokens, partial))
    return dense if k >= b else k * tokens if k < a else partial


def work(family: str, s: Mapping[str, Any], f: Factors = DEFAULT) -> Work:
    if family == "gemm":
        m, n, k, batch = s["m"], s["n"], s["k"], s["batch"]
        w = s["weights"]
        wb = batch * n * k * weight_bytes(w, s["group"])
        flops = 2.0 * batch * m * n * k
        return Work(
            wb + batch * m * (n + k) * 2,
            flops,
            flops,
            formats.tensor_core(w),
            f.mem_eff_int4 if w in formats.GROUPED else f.mem_eff_gemm,
            f.mma_eff_gemm / (f.fp8_gemm_mma_factor if w == "fp8" else 1.0),
        )
    if family == "moe_gemm":
        t, e, n, k, w = s["tokens"], s["experts"], s["n"], s["k"], s["weights"]
        bytes_ = e * n * k * weight_bytes(w, s["group"]) + t * (n + k) * 2
        flops = 2.0 * t * n * k
        grouped_mem_eff = f.mem_eff_int4 * f.mem_eff_moe / f.mem_eff_gemm  # a 4-bit stream at the MoE's share
        if w == "int4":  # Marlin W4A16: unpadded rows on BF16 tensor cores, math after the loads (MMA_EFF_INT4_MOE)
            return Work(bytes_, flops, flops, "bf16", grouped_mem_eff, f.mma_eff_int4_moe, overlapped=False)
        rows = e * np.ceil(t / e / MIN_TILE_M) * MIN_TILE_M  # each touched expert's rows padded to a tile
        mem_eff, mma_eff, rate_factor = f.mem_eff_moe, f.mma_eff_moe, 1.0
        if w == "fp8":
            mem_eff = mem_eff if f.mem_eff_moe_fp8 is None else f.mem_eff_moe_fp8
            mma_eff, rate_factor = (mma_eff if f.mma_eff_moe_fp8 is None else f.mma_eff_moe_fp8), f.fp8_gemm_mma_factor
        elif w in formats.GROUPED:
            mem_eff = grouped_mem_eff
        if f.moe_rows_exp and w in ("bf16", "fp8"):
            # the tensor-core time at the large-M share (which an engine's own kernels scale), plus what a few rows
            # per expert add on top of it (each tile's fixed work, which no rate factor scales)
            r = _pad(t / _maximum(e, 1))  # below one tile's rows the tile costs the same
            mma_eff = mma_eff / (rate_factor - 1.0 + ((r + f.moe_rows_half) / r) ** f.moe_rows_exp)
        else:
            mma_eff = mma_eff / rate_factor
        return Work(bytes_, flops, 2.0 * rows * n * k, formats.tensor_core(w), mem_eff, mma_eff)
    if family == "decode_attention_mla":
        h, b, c, kv = s["heads"], s["batch"], s["context"], s["kv"]
        flops = 2.0 * b * c * (MLA_LATENT + MLA_NOPE)
        return Work(
            b * c * MLA_ROW_BYTES[kv, s["layout"]] + b * h * (MLA_LATENT + MLA_NOPE) * 2,
            flops * h,
            flops * _pad(h),
            "bf16",
            f.mem_eff_decode_attn,
            f.mma_eff_decode_attn,
            f.fp8_kv_dequant_factor if kv == "fp8_e4m3" else 1.0,
            KERNELS[family],
            extra_us=f.fp8_kv_floor_us if kv == "fp8_e4m3" else 0.0,
        )
    if family == "decode_attention_gqa":
        hq, hk, d, b, c, kv = s["q_heads"], s["kv_heads"], s["head_dim"], s["batch"], s["context"], s["kv"]
        per_head = 2.0 * b * c * 2 * d
        return Work(
            b * c * hk * 2 * d * KV_BYTES[kv] + b * hq * d * 2 * 2,
            per_head * hq,
            per_head * hk * _pad(hq / hk),
            "bf16",
            f.mem_eff_decode_attn,
            f.mma_eff_decode_attn,
            f.fp8_kv_dequant_factor if kv == "fp8_e4m3" else 1.0,
            KERNELS[family],
            extra_us=f.fp8_kv_floor_us if kv == "fp8_e4m3" else 0.0,
        )
    if family == "decode_attention_triton":
        hq, hk, b, c = s["q_heads"], s["kv_heads"], s["batch"], s["context"]
        loaded = b * c * triton_head_blocks(hq, hk) * (s["k_dim"] + s["v_dim"]) * KV_BYTES[s["kv"]]
        flops = 2.0 * b * c * hq * (s["k_dim"] + s["v_dim"])
        return Work(loaded, flops, flops, "bf16", 1.0, 1.0, kernels=KERNELS[family])
    if family in ("prefill_attention", "prefill_attention_triton"):
        h, hk, dq, dv, t, c = s["heads"], s["kv_heads"], s["qk_dim"], s["v_dim"], s["tokens"], s["context"]
        pairs = _causal_pairs(t, c, s["topk"])
        block = f.sparse_attn_head_block
        run = -(-h // block) * block if s["topk"] else h  # the sparse kernel computes whole head blocks (above)
        return Work(
            t * h * (dq + dv) * 2 + c * hk * (dq + dv) * 2,
            2.0 * h * pairs * (dq + dv),
            2.0 * run * pairs * (dq + dv),
            "bf16",
            f.mem_eff_decode_attn,
            f.mma_eff_prefill_attn_triton if family == "prefill_attention_triton" else f.mma_eff_prefill_attn,
        )
    if family in ("decode_indexer", "prefill_indexer"):
        h, d, kb = s["heads"], s["head_dim"], s["key_bytes"]
        if family == "decode_indexer":
            queries, pairs, keys = s["batch"], s["batch"] * s["context"], s["batch"] * s["context"]
        else:
            queries, pairs, keys = s["tokens"], _causal_pairs(s["tokens"], s["context"], 0), s["context"]
        # FP8 q·k per head, ReLU-weighted sum over heads, fp32 logits written then read by top-k.
        return Work(
            keys * kb + queries * h * d + pairs * 4 * 2,
            2.0 * pairs * h * d,
            2.0 * pairs * _pad(h) * d,
            "fp8",
            f.mem_eff_decode_attn,
            f.mma_eff_decode_attn,
            kernels=KERNELS[family],
        )
    if family == "kv_write":
        b = s["tokens"] * s["width"] * (2 + KV_BYTES[s["kv"]])
        return Work(b, 0.0, 0.0, "bf16", f.mem_eff_scatter, 1.0)
    if family == "integrity_check":
        return Work(s["pages"] * INTEGRITY_BYTES_PER_PAGE, 0.0, 0.0, "bf16", f.mem_eff_scatter, 1.0)
    if family == "elementwise":
        return Work(s["bytes"], 0.0, 0.0, "bf16", f.mem_eff_elementwise, 1.0)
    raise KeyError(f"no roofline for op family '{family}'")


def triton_head_blocks(q_heads: int, kv_heads: int) -> int:
    """CTAs one sequence's slice of context needs in SGLang's Triton decode: a block of up to 16 query heads that
    share a KV head each (a KV head with more query heads takes several blocks, each loading the KV again)."""
    group = max(1, q_heads // max(1, kv_heads))
    return kv_heads * -(-group // min(TRITON_BLOCK_H, group))


def triton_ctas_at_once(s: Mapping[str, Any], f: Factors, sm_count: int) -> Any:
    """CTAs of the Triton split-KV decode that run at once: its grid (TRITON_KV_SPLITS slices of each sequence's
    head blocks, above) up to what the GPU's SMs hold."""
    ctas = TRITON_KV_SPLITS * s["batch"] * triton_head_blocks(s["q_heads"], s["kv_heads"])
    return _minimum(ctas, sm_count * f.triton_ctas_per_sm)


def _rate_tflops(rate: str, hw: HardwareSpec, f: Factors) -> float:
    if rate == "fp8":
        return hw.fp8_tflops
    if rate == "fp4":
        return formats.fp4_tflops(hw)
    if rate == "w4a8":  # INT4 → FP8 conversion in the main loop: the same share as INT4's dequant to BF16
        return hw.fp8_tflops * f.int4_mma_factor
    return hw.bf16_tflops * (f.int4_mma_factor if rate == "int4" else 1.0)


def _collective_bytes(family: str, s: Mapping[str, Any]) -> Any:
    """Bytes each rank sends: ring all-reduce 2(n−1)/n × bytes, all-gather (n−1)/n × bytes."""
    n = s["ranks"]
    return (2 if family == "allreduce" else 1) * (n - 1) / n * s["bytes"]


def terms_us(family: str, s: Mapping[str, Any], hw: HardwareSpec) -> tuple[Any, Any, float]:
    """The memory time, the tensor-core time and the launch floors of one op (not a collective); for a kernel
    whose math does not overlap its loads, the memory term carries both (its time is then that term + floors)."""
    f = factors(hw)
    w = work(family, s, f)
    if family == "decode_attention_triton":  # CTA-bound, not HBM-bound: its rate includes its math
        mem = w.bytes / (f.triton_cta_gbs * 1e3 * triton_ctas_at_once(s, f, hw.sm_count))
        return mem, 0.0 * mem, w.kernels * floor_us(family, f, hw)
    mem = w.bytes / (hw.copy_gbs * w.mem_eff * 1e3) * w.mem_factor
    mma = w.padded_flops / (_rate_tflops(w.rate, hw, f) * w.mma_eff * 1e6)
    floor = w.kernels * floor_us(family, f, hw) + w.extra_us
    if not w.overlapped:
        return mem + mma, 0.0 * mma, floor
    return mem, mma, floor


def op_us(family: str, s: Mapping[str, Any], hw: HardwareSpec) -> Any:
    """Microseconds of one op of this family and shape on `hw`."""
    if family == "fused_moe":  # no kernel of its own here: the sum of the parts the unfused op list has
        return sum(op_us(f, p, hw) * c for f, p, c in routed_parts(s, s.get("routing", UNIFORM)))
    if family == "allreduce":
        return hw.allreduce_latency_us + _collective_bytes(family, s) / (hw.nvlink_gbs * factors(hw).nvlink_eff * 1e3)
    if family == "allgather":
        f = factors(hw)
        latency = hw.allreduce_latency_us if f.latency_allgather_us is None else f.latency_allgather_us
        eff = f.nvlink_eff if f.nvlink_eff_allgather is None else f.nvlink_eff_allgather
        return latency + _collective_bytes(family, s) / (hw.nvlink_gbs * eff * 1e3)
    if family == "alltoall":
        return hw.allreduce_latency_us + alltoall_transfer_us(s, hw, A2A_NVLINK_EFF, A2A_RDMA_EFF)
    mem, mma, floor = terms_us(family, s, hw)
    return _maximum(mem, mma) + floor


def ideal_us(family: str, s: Mapping[str, Any], hw: HardwareSpec) -> Any:
    """The pure bytes/FLOPs bound: datasheet HBM bandwidth, tensor-core ceiling, no floors, padding or latency."""
    if family in ("allreduce", "allgather"):
        return _collective_bytes(family, s) / (hw.nvlink_gbs * 1e3)
    if family == "alltoall":
        return alltoall_transfer_us(s, hw, 1.0, 1.0)
    if family == "fused_moe":
        return sum(ideal_us(f, p, hw) * c for f, p, c in routed_parts(s, s.get("routing", UNIFORM)))
    w = work(family, s)
    rate = {"fp8": hw.fp8_tflops, "w4a8": hw.fp8_tflops, "fp4": hw.fp4_tflops or hw.fp8_tflops}.get(
        w.rate, hw.bf16_tflops
    )
    return _maximum(w.bytes / (hw.hbm_gbs * 1e3), w.flops / (rate * 1e6))


def alltoall_split(s: Mapping[str, Any]) -> tuple[Any, Any]:
    """Bytes of an all-to-all that the busiest rank moves over NVLink (peers in its node) and over the scale-out
    network (peers in other nodes), with destinations spread evenly over the `ranks` (its own share stays)."""
    ranks, per_node = s["ranks"], s["ranks"] // s["nodes"]
    return s["bytes"] * (per_node - 1) / ranks, s["bytes"] * (ranks - per_node) / ranks * s.get("remote", 1.0)


def alltoall_transfer_us(s: Mapping[str, Any], hw: HardwareSpec, nvlink_eff: float, rdma_eff: float) -> Any:
    """NVLink and scale-out transfers run at once: the slower of the two sets the time."""
    intra, inter = alltoall_split(s)
    return _maximum(intra / (hw.nvlink_gbs * nvlink_eff * 1e3), inter / (hw.scaleout_gbs * rdma_eff * 1e3))
