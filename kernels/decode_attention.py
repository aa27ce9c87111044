"""Paged decode attention, split-KV ("flash-decoding") with a merge pass, for GQA and MLA caches.

Design (why): decode reads the whole KV cache once per step, so the kernel is built around the KV stream.
* One program handles all query heads that share a KV head (GQA group or all MLA heads), so each KV tile is
  read and dequantized once and feeds every head.
* The dots are computed transposed (tokens x heads): the token tile is the MMA's M dimension (>= 64), so
  Hopper uses wgmma even with 8-16 heads, and the dequantized tile goes straight from registers into the MMA.
* For MLA the 512-wide part of the latent tile is both K and V: loaded and dequantized once, used twice.
* FP8 scales are applied to the scores and the output, not to the tile (per-tensor / per-head scales), or once
  per tile (tiled MLA layout, one scale per 128 values of each token).
* The split count depends only on shapes (batch, heads, block-table width), never on lengths, so a decode step
  can be captured in a CUDA graph; a split without tokens writes lse = -inf and the merge weighs it zero.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels.hopper import Launch, run
from kernels.reference import FP8, MLA_NOPE, MLA_ROPE, MLA_TILE, MLA_TILED_BYTES

SM_COUNT = 132  # H100/H200; the split heuristic aims at about two waves on it
_MIN_TOKENS_PER_SPLIT = 256
_SCALE_NONE, _SCALE_HEAD, _SCALE_TILE = 0, 1, 2


@triton.jit
def _decode_split_kernel(
    q_ptr,
    stride_qb,
    stride_qh,
    k_ptr,
    stride_ks,
    stride_kh,
    r_ptr,
    stride_rs,
    stride_rh,
    v_ptr,
    stride_vs,
    stride_vh,
    ks_ptr,
    stride_kss,
    stride_ksh,
    vs_ptr,
    stride_vsh,
    bt_ptr,
    stride_btb,
    len_ptr,
    op_ptr,
    lse_ptr,
    sm_scale,
    tokens_per_split,
    num_heads,
    GROUP: tl.constexpr,
    BLOCK_H: tl.constexpr,
    DM: tl.constexpr,
    DR: tl.constexpr,
    DV: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SHARED_KV: tl.constexpr,
    SCALE_MODE: tl.constexpr,
    TILE: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
):
    b = tl.program_id(0)
    head_blocks = tl.cdiv(GROUP, BLOCK_H)
    kvh = tl.program_id(1) // head_blocks
    split = tl.program_id(2)
    heads = (tl.program_id(1) % head_blocks) * BLOCK_H + tl.arange(0, BLOCK_H)
    head_ok = heads < GROUP
    qh = kvh * GROUP + heads
    dm = tl.arange(0, DM)
    q_main = tl.load(q_ptr + b * stride_qb + qh[:, None] * stride_qh + dm[None, :], mask=head_ok[:, None], other=0.0)
    cdt = q_main.dtype
    log2e: tl.constexpr = 1.4426950408889634
    qk_scale = sm_scale * log2e
    if SCALE_MODE == 1:
        qk_scale = qk_scale * tl.load(ks_ptr + kvh * stride_ksh)
    if DR > 0:
        dr = tl.arange(0, DR)
        q_rope = tl.load(
            q_ptr + b * stride_qb + qh[:, None] * stride_qh + DM + dr[None, :], mask=head_ok[:, None], other=0.0
        )
    seq_len = tl.load(len_ptr + b)
    start = split * tokens_per_split
    end = tl.minimum(start + tokens_per_split, seq_len)
    m_i = tl.full([BLOCK_H], -1.0e30, tl.float32)  # finite: an all-masked tile gives alpha = 1, p = 0
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([DV, BLOCK_H], tl.float32)
    dv = tl.arange(0, DV)
    for t0 in range(start, end, BLOCK_N):
        tok = t0 + tl.arange(0, BLOCK_N)
        in_seq = tok < end
        page = tl.load(bt_ptr + b * stride_btb + tok // PAGE, mask=in_seq, other=-1)
        valid = in_seq & (page >= 0)
        slot = tl.where(valid, page, 0).to(tl.int64) * PAGE + tok % PAGE
        k = tl.load(k_ptr + slot[:, None] * stride_ks + kvh * stride_kh + dm[None, :], mask=valid[:, None], other=0.0)
        if SCALE_MODE == 2:
            tile_scale = tl.load(
                ks_ptr + slot[:, None] * stride_kss + (dm // TILE)[None, :], mask=valid[:, None], other=0.0
            )
            k = (k.to(tl.float32) * tile_scale).to(cdt)
        else:
            k = k.to(cdt)
        s = tl.dot(k, tl.trans(q_main))  # [BLOCK_N, BLOCK_H]
        if DR > 0:
            r = tl.load(
                r_ptr + slot[:, None] * stride_rs + kvh * stride_rh + dr[None, :], mask=valid[:, None], other=0.0
            )
            s += tl.dot(r.to(tl.float32).to(cdt), tl.trans(q_rope))
        s = tl.where(valid[:, None], s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[None, :])
        l_i = l_i * alpha + tl.sum(p, axis=0)
        if SHARED_KV:
            v = k
        else:
            v = tl.load(
                v_ptr + slot[:, None] * stride_vs + kvh * stride_vh + dv[None, :], mask=valid[:, None], other=0.0
            )
            v = v.to(cdt)
        acc = acc * alpha[None, :] + tl.dot(tl.trans(v), p.to(cdt))  # [DV, BLOCK_H]
        m_i = m_new
    if SCALE_MODE == 1:
        acc = acc * tl.load(vs_ptr + kvh * stride_vsh)
    has = l_i > 0.0
    out = acc / tl.where(has, l_i, 1.0)[None, :]
    row = (b * num_heads + qh) * NUM_SPLITS + split
    tl.store(op_ptr + row[None, :] * DV + dv[:, None], out, mask=head_ok[None, :])
    lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
    tl.store(lse_ptr + row, lse, mask=head_ok)


@triton.jit
def _merge_kernel(op_ptr, lse_ptr, o_ptr, NUM_SPLITS: tl.constexpr, BLOCK_S: tl.constexpr, DV: tl.constexpr):
    row = tl.program_id(0)  # b * heads + h
    sp = tl.arange(0, BLOCK_S)
    lse = tl.load(lse_ptr + row * NUM_SPLITS + sp, mask=sp < NUM_SPLITS, other=float("-inf"))
    m = tl.max(lse, axis=0)
    w = tl.exp2(lse - tl.where(m == float("-inf"), 0.0, m))  # all-empty rows: weights 0, output 0
    dv = tl.arange(0, DV)
    parts = tl.load(
        op_ptr + (row * NUM_SPLITS + sp)[:, None] * DV + dv[None, :], mask=(sp < NUM_SPLITS)[:, None], other=0.0
    )
    den = tl.sum(w, axis=0)
    out = tl.sum(parts * w[:, None], axis=0) / tl.where(den > 0.0, den, 1.0)
    tl.store(o_ptr + row * DV + dv, out.to(o_ptr.dtype.element_ty))


def num_splits(batch: int, head_programs: int, max_tokens: int) -> int:
    """Splits per sequence: about two waves of SMs, each split covering >= 256 tokens of table capacity."""
    want = triton.cdiv(2 * SM_COUNT, max(1, batch * head_programs))
    cap = max(1, max_tokens // _MIN_TOKENS_PER_SPLIT)
    return int(min(want, cap, 64))


def _config(group: int, dm: int) -> tuple[int, int, int]:
    """(BLOCK_H, BLOCK_N, num_warps): MLA's 512-wide tiles get smaller head blocks to bound registers."""
    block_h = min(max(16, triton.next_power_of_2(group)), 32 if dm >= 512 else 64)
    block_n = 32 if dm >= 512 else 64
    return block_h, block_n, 8 if dm >= 512 else 4


def _plan(
    q: torch.Tensor,
    k: tuple[torch.Tensor, int, int],
    rope: tuple[torch.Tensor, int, int] | None,
    v: tuple[torch.Tensor, int, int] | None,
    k_scale: tuple[torch.Tensor, int, int] | None,
    v_scale: tuple[torch.Tensor, int] | None,
    scale_mode: int,
    kv_heads: int,
    page_size: int,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    sm_scale: float,
    dv: int,
    splits: int | None,
) -> tuple[list[Launch], torch.Tensor]:
    bsz, heads, dqk = q.shape
    dr = MLA_ROPE if rope is not None else 0
    dm = dqk - dr
    group = heads // kv_heads
    block_h, block_n, warps = _config(group, dm)
    head_programs = kv_heads * triton.cdiv(group, block_h)
    splits = splits or num_splits(bsz, head_programs, block_table.shape[1] * page_size)
    per_split = triton.cdiv(triton.cdiv(block_table.shape[1] * page_size, splits), block_n) * block_n
    partial = torch.empty(bsz * heads * splits, dv, dtype=torch.float32, device=q.device)
    lse = torch.empty(bsz * heads * splits, dtype=torch.float32, device=q.device)
    out = torch.empty(bsz, heads, dv, dtype=q.dtype, device=q.device)
    rope = rope or k
    v = v or k
    k_scale = k_scale or (seq_lens, 0, 0)
    v_scale = v_scale or (seq_lens, 0)
    split_launch = Launch(
        _decode_split_kernel,
        (bsz, head_programs, splits),
        dict(
            q_ptr=q,
            stride_qb=q.stride(0),
            stride_qh=q.stride(1),
            k_ptr=k[0],
            stride_ks=k[1],
            stride_kh=k[2],
            r_ptr=rope[0],
            stride_rs=rope[1],
            stride_rh=rope[2],
            v_ptr=v[0],
            stride_vs=v[1],
            stride_vh=v[2],
            ks_ptr=k_scale[0],
            stride_kss=k_scale[1],
            stride_ksh=k_scale[2],
            vs_ptr=v_scale[0],
            stride_vsh=v_scale[1],
            bt_ptr=block_table,
            stride_btb=block_table.stride(0),
            len_ptr=seq_lens,
            op_ptr=partial,
            lse_ptr=lse,
            sm_scale=float(sm_scale),
            tokens_per_split=per_split,
            num_heads=heads,
        ),
        dict(
            GROUP=group,
            BLOCK_H=block_h,
            DM=dm,
            DR=dr,
            DV=dv,
            PAGE=page_size,
            BLOCK_N=block_n,
            SHARED_KV=v[0] is k[0],
            SCALE_MODE=scale_mode,
            TILE=MLA_TILE,
            NUM_SPLITS=splits,
        ),
        num_warps=warps,
        num_stages=2,
    )
    merge_launch = Launch(
        _merge_kernel,
        (bsz * heads,),
        dict(op_ptr=partial, lse_ptr=lse, o_ptr=out),
        dict(NUM_SPLITS=splits, BLOCK_S=triton.next_power_of_2(splits), DV=dv),
        num_warps=4,
        num_stages=1,
    )
    return [split_launch, merge_launch], out


def plan_gqa(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    sm_scale: float,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    splits: int | None = None,
) -> tuple[list[Launch], torch.Tensor]:
    """Launches for GQA decode. q [B, Hq, D]; caches [pages, page_size, Hkv, D] (bf16/fp16, or e4m3 with
    k_scale / v_scale of shape [1] (per tensor) or [Hkv] (per head))."""
    pages, page_size, kv_heads, d = k_cache.shape
    fp8 = k_cache.dtype == FP8
    flat_k = (k_cache, k_cache.stride(1), k_cache.stride(2))
    flat_v = (v_cache, v_cache.stride(1), v_cache.stride(2))
    ks = (k_scale, 0, 1 if k_scale.numel() > 1 else 0) if fp8 else None
    vs = (v_scale, 1 if v_scale.numel() > 1 else 0) if fp8 else None
    return _plan(
        q,
        flat_k,
        None,
        flat_v,
        ks,
        vs,
        _SCALE_HEAD if fp8 else _SCALE_NONE,
        kv_heads,
        page_size,
        block_table,
        seq_lens,
        sm_scale,
        d,
        splits,
    )


def plan_mla(
    q: torch.Tensor,
    cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    sm_scale: float,
    kv_scale: torch.Tensor | None = None,
    splits: int | None = None,
) -> tuple[list[Launch], torch.Tensor]:
    """Launches for MLA decode. q [B, H, 576] (absorbed nope part + rope part).

    cache is flat [pages, page_size, 576] (bf16/fp16, or e4m3 with a per-tensor kv_scale [1]) or tiled
    [pages, page_size, 656] uint8 (see `reference.mla_tiled_pack`).
    """
    page_size = cache.shape[1]
    if cache.dtype == torch.uint8:
        rows = cache.view(-1, MLA_TILED_BYTES)
        nope = rows.view(FP8)
        scales = rows.view(torch.float32)[:, MLA_NOPE // 4 :]
        rope = rows.view(torch.bfloat16)[:, (MLA_NOPE + 16) // 2 :]
        return _plan(
            q,
            (nope, nope.stride(0), 0),
            (rope, rope.stride(0), 0),
            None,
            (scales, scales.stride(0), 0),
            None,
            _SCALE_TILE,
            1,
            page_size,
            block_table,
            seq_lens,
            sm_scale,
            MLA_NOPE,
            splits,
        )
    rows = cache.view(-1, MLA_NOPE + MLA_ROPE)
    rope = rows[:, MLA_NOPE:]
    fp8 = cache.dtype == FP8
    ks = (kv_scale, 0, 0) if fp8 else None
    vs = (kv_scale, 0) if fp8 else None
    return _plan(
        q,
        (rows, rows.stride(0), 0),
        (rope, rows.stride(0), 0),
        None,
        ks,
        vs,
        _SCALE_HEAD if fp8 else _SCALE_NONE,
        1,
        page_size,
        block_table,
        seq_lens,
        sm_scale,
        MLA_NOPE,
        splits,
    )


def _execute(launches: list[Launch]) -> None:
    for launch in launches:
        run(launch)


def gqa_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    sm_scale: float | None = None,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    splits: int | None = None,
) -> torch.Tensor:
    """GQA paged decode attention -> [B, Hq, D] in q's dtype (see `plan_gqa` for layouts)."""
    sm_scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    launches, out = plan_gqa(q, k_cache, v_cache, block_table, seq_lens, sm_scale, k_scale, v_scale, splits)
    _execute(launches)
    return out


def mla_decode(
    q: torch.Tensor,
    cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    sm_scale: float,
    kv_scale: torch.Tensor | None = None,
    splits: int | None = None,
) -> torch.Tensor:
    """MLA paged decode attention -> [B, H, 512] in q's dtype (see `plan_mla` for layouts)."""
    launches, out = plan_mla(q, cache, block_table, seq_lens, sm_scale, kv_scale, splits)
    _execute(launches)
    return out
