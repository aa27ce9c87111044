"""W4A16 GEMM: BF16 activations times symmetric INT4 weights (group 32 or 128, BF16 scales).

Design (why): at decode sizes (M <= 16) the GEMM only streams weights, so INT4's win is bytes. The kernel
* reads weights packed as `pack_int4` lays them out: row n of W (an output channel), eight consecutive K
  values per int32, low nibble first, stored with +8 offset: one 16-byte load gives 32 weights of one row;
* turns nibbles into 16-bit floats with one OR and one subtract (exponent "magic number": 0x6400|x is
  1024 + x in fp16, 0x4300|x is 128 + x in bf16), in registers, right before the MMA;
* applies the group scale after the dot when a K block lies inside one group (group >= BLOCK_K), else to the
  weight tile;
* for small M computes C^T = W x A^T so the weight tile is the MMA's M side (>= 64: wgmma on Hopper) and the
  few tokens are its N side; splits K across programs when output tiles are too few to fill the SMs;
* serves MoE as a grouped GEMM: rows are sorted by expert, `expert_offsets` bounds each expert's rows, and
  one program per (N tile, expert) walks its expert's row tiles.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.hopper import Launch, run

SM_COUNT = 132


@triton.jit
def _w4a16_kernel(
    a_ptr,
    stride_am,
    w_ptr,
    stride_we,
    stride_wn,
    s_ptr,
    stride_se,
    stride_sn,
    c_ptr,
    stride_cs,
    stride_cm,
    off_ptr,
    M,
    N,
    K,
    k_per_split,
    GROUP: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SWAP: tl.constexpr,
    MOE: tl.constexpr,
    MAGIC: tl.constexpr,
    BIAS: tl.constexpr,
):
    pid_n = tl.program_id(0)
    split = tl.program_id(2)
    if MOE:
        expert = tl.program_id(1)
        row_lo = tl.load(off_ptr + expert)
        row_hi = tl.load(off_ptr + expert + 1)
    else:
        expert = 0
        row_lo = tl.program_id(1) * BLOCK_M
        row_hi = tl.minimum(row_lo + BLOCK_M, M)
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = n < N
    w_rows = w_ptr + expert.to(tl.int64) * stride_we + n[:, None] * stride_wn
    s_rows = s_ptr + expert.to(tl.int64) * stride_se + n * stride_sn
    shifts = (tl.arange(0, 8) * 4)[None, None, :]
    k_lo = split * k_per_split
    k_hi = tl.minimum(k_lo + k_per_split, K)
    cdt = a_ptr.dtype.element_ty
    for m0 in range(row_lo, row_hi, BLOCK_M):
        rows = m0 + tl.arange(0, BLOCK_M)
        r_ok = rows < row_hi
        if SWAP:
            acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
        else:
            acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for k0 in range(k_lo, k_hi, BLOCK_K):
            kk = k0 + tl.arange(0, BLOCK_K)
            a = tl.load(a_ptr + rows[:, None].to(tl.int64) * stride_am + kk[None, :], mask=r_ok[:, None], other=0.0)
            packed = tl.load(w_rows + k0 // 8 + tl.arange(0, BLOCK_K // 8)[None, :], mask=n_ok[:, None], other=0)
            nib = (packed[:, :, None] >> shifts) & 0xF
            w = ((nib | MAGIC).to(tl.int16).to(cdt, bitcast=True) - BIAS).reshape(BLOCK_N, BLOCK_K)
            if GROUP >= BLOCK_K:
                scale = tl.load(s_rows + k0 // GROUP, mask=n_ok, other=0.0).to(tl.float32)
                if SWAP:
                    acc += tl.dot(w, tl.trans(a)) * scale[:, None]
                else:
                    acc += tl.dot(a, tl.trans(w)) * scale[None, :]
            else:
                g = k0 // GROUP + tl.arange(0, BLOCK_K // GROUP)
                scale = tl.load(s_rows[:, None] + g[None, :], mask=n_ok[:, None], other=0.0).to(tl.float32)
                w = w.to(tl.float32).reshape(BLOCK_N, BLOCK_K // GROUP, GROUP) * scale[:, :, None]
                w = w.reshape(BLOCK_N, BLOCK_K).to(cdt)
                if SWAP:
                    acc += tl.dot(w, tl.trans(a))
                else:
                    acc += tl.dot(a, tl.trans(w))
        c_base = c_ptr + split.to(tl.int64) * stride_cs
        if SWAP:
            tl.store(
                c_base + rows[None, :].to(tl.int64) * stride_cm + n[:, None],
                acc.to(c_ptr.dtype.element_ty),
                mask=r_ok[None, :] & n_ok[:, None],
            )
        else:
            tl.store(
                c_base + rows[:, None].to(tl.int64) * stride_cm + n[None, :],
                acc.to(c_ptr.dtype.element_ty),
                mask=r_ok[:, None] & n_ok[None, :],
            )


@triton.jit
def _split_sum_kernel(ws_ptr, c_ptr, numel, SPLITS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < numel
    acc = tl.zeros([BLOCK], tl.float32)
    for s in range(SPLITS):
        acc += tl.load(ws_ptr + s * numel + offs, mask=ok, other=0.0)
    tl.store(c_ptr + offs, acc.to(c_ptr.dtype.element_ty), mask=ok)


def quantize_int4(w: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric group quantization of w [..., N, K] -> (q int8 in [-8, 7], scales bf16 [..., N, K // group])."""
    g = w.float().unflatten(-1, (-1, group))
    scales = (g.abs().amax(-1) / 7.0).clamp_min(1e-8).to(torch.bfloat16)
    q = torch.round(g / scales.float()[..., None]).clamp(-8, 7).to(torch.int8)
    return q.flatten(-2), scales


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """q [..., N, K] int8 in [-8, 7] -> int32 [..., N, K // 8]: value k of a row in bits 4*(k % 8), +8 offset."""
    nib = (q.to(torch.int64) + 8).unflatten(-1, (-1, 8))
    shifts = torch.arange(0, 32, 4, dtype=torch.int64, device=q.device)
    word = (nib << shifts).sum(-1)  # disjoint nibbles: sum == OR
    return torch.where(word >= 2**31, word - 2**32, word).to(torch.int32)


def _magic(dtype: torch.dtype) -> tuple[int, float]:
    """OR-mask and bias that turn a nibble x into the 16-bit float x - 8 (see module docstring)."""
    if dtype == torch.float16:
        return 0x6400, 1032.0
    if dtype == torch.bfloat16:
        return 0x4300, 136.0
    raise TypeError(f"W4A16 takes fp16/bf16 activations, got {dtype}")


def _tiles(rows_per_group: int, k: int, group: int) -> tuple[int, int, int, bool, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, SWAP, num_warps, num_stages) for rows_per_group rows per weight."""
    block_k = 128 if group >= 128 else 64  # scaling each weight (group 32) costs registers: smaller K tile
    if rows_per_group <= 64:
        return max(16, triton.next_power_of_2(rows_per_group)), 128, block_k, True, 4, 4
    return 128, 128, 64, False, 8, 3


def _split_k(programs: int, k: int, block_k: int, group: int) -> tuple[int, int]:
    """(splits, K per split): enough programs for ~2 waves, each split a whole number of K blocks/groups."""
    unit = max(block_k, group)
    splits = max(1, min(triton.cdiv(2 * SM_COUNT, programs), k // unit, 16))
    per = triton.cdiv(triton.cdiv(k, splits), unit) * unit
    return triton.cdiv(k, per), per


def _plan(
    a: torch.Tensor,
    packed: torch.Tensor,
    scales: torch.Tensor,
    group: int,
    offsets: torch.Tensor | None,
    rows_per_group: int,
) -> tuple[list[Launch], torch.Tensor]:
    m, k = a.shape
    moe = offsets is not None
    n = packed.shape[-2]
    if k % 128 or k % group or packed.shape[-1] * 8 != k:
        raise ValueError(f"K={k} must be a multiple of 128 and of the group {group}, packed as K // 8 words")
    block_m, block_n, block_k, swap, warps, stages = _tiles(rows_per_group, k, group)
    groups = packed.shape[0] if moe else triton.cdiv(m, block_m)
    splits, per = _split_k(triton.cdiv(n, block_n) * groups, k, block_k, group) if rows_per_group <= 64 else (1, k)
    out = torch.empty(m, n, dtype=a.dtype, device=a.device)
    c = out if splits == 1 else torch.empty(splits, m, n, dtype=torch.float32, device=a.device)
    magic, bias = _magic(a.dtype)
    main = Launch(
        _w4a16_kernel,
        (triton.cdiv(n, block_n), groups, splits),
        dict(
            a_ptr=a,
            stride_am=a.stride(0),
            w_ptr=packed,
            stride_we=packed.stride(0) if moe else 0,
            stride_wn=packed.stride(-2),
            s_ptr=scales,
            stride_se=scales.stride(0) if moe else 0,
            stride_sn=scales.stride(-2),
            c_ptr=c,
            stride_cs=m * n,
            stride_cm=n,
            off_ptr=offsets if moe else packed,
            M=m,
            N=n,
            K=k,
            k_per_split=per,
        ),
        dict(
            GROUP=group, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, SWAP=swap, MOE=moe, MAGIC=magic, BIAS=bias
        ),
        num_warps=warps,
        num_stages=stages,
    )
    if splits == 1:
        return [main], out
    block = 1024
    reduce = Launch(
        _split_sum_kernel,
        (triton.cdiv(m * n, block),),
        dict(ws_ptr=c, c_ptr=out, numel=m * n),
        dict(SPLITS=splits, BLOCK=block),
        num_warps=4,
        num_stages=1,
    )
    return [main, reduce], out


def plan_gemm(
    a: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, group: int
) -> tuple[list[Launch], torch.Tensor]:
    """Launches for a [M, K] x W^T with W given as `pack_int4` words [N, K // 8] and scales [N, K // group]."""
    return _plan(a, packed, scales, group, None, a.shape[0])


def plan_moe_gemm(
    a: torch.Tensor, expert_offsets: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, group: int
) -> tuple[list[Launch], torch.Tensor]:
    """Launches for the grouped GEMM: a [T, K] sorted by expert, expert_offsets [E + 1] int32, packed
    [E, N, K // 8], scales [E, N, K // group]. Tile shapes follow the mean rows per expert (a shape, not data)."""
    per_expert = triton.cdiv(a.shape[0], packed.shape[0])
    return _plan(a, packed, scales, group, expert_offsets, per_expert)


def w4a16_gemm(a: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, group: int) -> torch.Tensor:
    """a [M, K] (fp16/bf16) x dequantized W [N, K] transposed -> [M, N] in a's dtype."""
    launches, out = plan_gemm(a, packed, scales, group)
    for launch in launches:
        run(launch)
    return out


def w4a16_moe_gemm(
    a: torch.Tensor, expert_offsets: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, group: int
) -> torch.Tensor:
    """Grouped expert GEMM (see `plan_moe_gemm`) -> [T, N] in a's dtype."""
    launches, out = plan_moe_gemm(a, expert_offsets, packed, scales, group)
    for launch in launches:
        run(launch)
    return out
