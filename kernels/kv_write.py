"""Append new tokens' K/V (or MLA latent) into their pages, quantizing to FP8 e4m3 in the same kernel.

Why fused: an FP8 cache only pays off when the write does not cost a separate quantize pass (read BF16,
write FP8, read FP8 again). One program per token writes one cache row; slot -1 (padding) writes nothing.
Division is round-to-nearest (div_rn) so the result matches the torch reference bit for bit on the GPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.hopper import Launch, run
from kernels.reference import FP8, FP8_MAX, MLA_NOPE, MLA_ROPE, MLA_TILE, MLA_TILED_BYTES


@triton.jit
def _kv_write_kernel(
    new_ptr,
    stride_nt,
    cache_ptr,
    stride_cs,
    slot_ptr,
    scale_ptr,
    stride_sc,
    ROW: tl.constexpr,
    WIDTH: tl.constexpr,
    BLOCK: tl.constexpr,
    QUANT: tl.constexpr,
    QMAX: tl.constexpr,
):
    t = tl.program_id(0)
    slot = tl.load(slot_ptr + t)
    if slot >= 0:
        c = tl.arange(0, BLOCK)
        ok = c < ROW
        x = tl.load(new_ptr + t.to(tl.int64) * stride_nt + c, mask=ok, other=0.0).to(tl.float32)
        if QUANT:
            s = tl.load(scale_ptr + (c // WIDTH) * stride_sc, mask=ok, other=1.0)
            x = tl.clamp(tl.math.div_rn(x, s), -QMAX, QMAX)
        tl.store(cache_ptr + slot.to(tl.int64) * stride_cs + c, x.to(cache_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _mla_tiled_write_kernel(
    new_ptr,
    stride_nt,
    q_ptr,
    stride_qs,
    s_ptr,
    stride_ss,
    r_ptr,
    stride_rs,
    slot_ptr,
    NOPE: tl.constexpr,
    ROPE: tl.constexpr,
    TILE: tl.constexpr,
    QMAX: tl.constexpr,
):
    t = tl.program_id(0)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    if slot >= 0:
        row = new_ptr + t.to(tl.int64) * stride_nt
        x = tl.load(row + tl.arange(0, NOPE)).to(tl.float32).reshape(NOPE // TILE, TILE)
        scale = tl.maximum(tl.max(tl.abs(x), axis=1), 1e-12)
        scale = tl.math.div_rn(scale, tl.full(scale.shape, QMAX, tl.float32))
        qv = tl.clamp(tl.math.div_rn(x, scale[:, None]), -QMAX, QMAX).reshape(NOPE)
        tl.store(q_ptr + slot * stride_qs + tl.arange(0, NOPE), qv.to(q_ptr.dtype.element_ty))
        tl.store(s_ptr + slot * stride_ss + tl.arange(0, NOPE // TILE), scale)
        rope = tl.load(row + NOPE + tl.arange(0, ROPE)).to(tl.float32)
        tl.store(r_ptr + slot * stride_rs + tl.arange(0, ROPE), rope.to(r_ptr.dtype.element_ty))


def plan_kv_write(
    cache: torch.Tensor, new: torch.Tensor, slots: torch.Tensor, scale: torch.Tensor | None = None
) -> Launch:
    """Launch for a flat cache [pages, page_size, *row] (row = [width] or [heads, width]); new [T, *row];
    slots [T] int32/int64 flat ids (page * page_size + offset, -1 = skip). FP8 caches need `scale`
    ([1] per tensor or [heads] per head); a bf16/fp16 cache stores a plain copy."""
    row = new[0].numel()
    width = new.shape[-1]
    quant = cache.dtype == FP8
    flat = cache.view(-1, row)
    scale = scale if quant else slots
    return Launch(
        _kv_write_kernel,
        (new.shape[0],),
        dict(
            new_ptr=new,
            stride_nt=new.stride(0),
            cache_ptr=flat,
            stride_cs=flat.stride(0),
            slot_ptr=slots,
            scale_ptr=scale,
            stride_sc=1 if quant and scale.numel() > 1 else 0,
        ),
        dict(ROW=row, WIDTH=width, BLOCK=triton.next_power_of_2(row), QUANT=quant, QMAX=FP8_MAX),
        num_warps=4,
        num_stages=1,
    )


def plan_mla_tiled_write(cache: torch.Tensor, latent: torch.Tensor, slots: torch.Tensor) -> Launch:
    """Launch for the tiled MLA layout: cache [pages, page_size, 656] uint8, latent [T, 576]."""
    rows = cache.view(-1, MLA_TILED_BYTES)
    q = rows.view(FP8)
    s = rows.view(torch.float32)[:, MLA_NOPE // 4 :]
    r = rows.view(torch.bfloat16)[:, (MLA_NOPE + 16) // 2 :]
    return Launch(
        _mla_tiled_write_kernel,
        (latent.shape[0],),
        dict(
            new_ptr=latent,
            stride_nt=latent.stride(0),
            q_ptr=q,
            stride_qs=q.stride(0),
            s_ptr=s,
            stride_ss=s.stride(0),
            r_ptr=r,
            stride_rs=r.stride(0),
            slot_ptr=slots,
        ),
        dict(NOPE=MLA_NOPE, ROPE=MLA_ROPE, TILE=MLA_TILE, QMAX=FP8_MAX),
        num_warps=4,
        num_stages=1,
    )


def kv_write(cache: torch.Tensor, new: torch.Tensor, slots: torch.Tensor, scale: torch.Tensor | None = None) -> None:
    """Write new tokens into a flat cache in place (see `plan_kv_write`)."""
    run(plan_kv_write(cache, new, slots, scale))


def mla_tiled_write(cache: torch.Tensor, latent: torch.Tensor, slots: torch.Tensor) -> None:
    """Write new latents into a tiled MLA cache in place (see `plan_mla_tiled_write`)."""
    run(plan_mla_tiled_write(cache, latent, slots))
