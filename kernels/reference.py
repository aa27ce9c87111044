"""Plain torch references: they DEFINE what each Triton kernel computes (float32 math).

Tests compare kernels against these; the CPU replay times them, so they stay readable, not fast.
"""

from __future__ import annotations

import math

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
MLA_NOPE, MLA_ROPE = 512, 64
MLA_TILE = 128
MLA_TILED_BYTES = MLA_NOPE + 4 * (MLA_NOPE // MLA_TILE) + 2 * MLA_ROPE  # 656 B per token


def quantize_fp8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Scale, saturate to ±448, round to nearest even e4m3 (the rounding the GPU kernel must match)."""
    return (x.float() / scale.float()).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def mla_tiled_pack(latent: torch.Tensor) -> torch.Tensor:
    """[T, 576] -> [T, 656] uint8: 512 e4m3 with one fp32 scale per 128 values, then 64 rope values in bf16."""
    t = latent.shape[0]
    nope = latent[:, :MLA_NOPE].float().view(t, -1, MLA_TILE)
    scale = nope.abs().amax(-1).clamp_min(1e-12) / FP8_MAX  # [T, 4]
    q = quantize_fp8(nope, scale[..., None]).view(t, MLA_NOPE)
    rope = latent[:, MLA_NOPE:].to(torch.bfloat16)
    return torch.cat([q.view(torch.uint8), scale.view(torch.uint8), rope.view(torch.uint8)], dim=1)


def mla_tiled_unpack(packed: torch.Tensor) -> torch.Tensor:
    """[..., 656] uint8 -> [..., 576] float32 (inverse of `mla_tiled_pack` up to the FP8 rounding)."""
    lead = packed.shape[:-1]
    flat = packed.reshape(-1, MLA_TILED_BYTES)
    q = flat[:, :MLA_NOPE].contiguous().view(FP8).float()
    scale = flat[:, MLA_NOPE : MLA_NOPE + 16].contiguous().view(torch.float32)
    rope = flat[:, MLA_NOPE + 16 :].contiguous().view(torch.bfloat16).float()
    nope = (q.view(-1, 4, MLA_TILE) * scale[..., None]).view(-1, MLA_NOPE)
    return torch.cat([nope, rope], dim=1).view(*lead, MLA_NOPE + MLA_ROPE)


def dequantize_cache(cache: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """Flat cache [..., heads, dim] (bf16/fp16, or e4m3 with a per-tensor [1] or per-head [heads] scale)."""
    x = cache.float()
    if scale is None:
        return x
    return x * scale.float().view(-1, 1)


def paged_decode_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    sm_scale: float,
) -> torch.Tensor:
    """Decode attention over a paged cache.

    q [B, Hq, Dqk]; k [pages, page_size, Hkv, Dqk] and v [pages, page_size, Hkv, Dv] already dequantized;
    query head h reads KV head h // (Hq // Hkv). Sequence b uses its first seq_lens[b] tokens, found through
    block_table[b] (-1 = unused slot). An empty sequence yields zeros. Returns float32 [B, Hq, Dv].
    """
    bsz, hq, _ = q.shape
    page_size, hkv = k.shape[1], k.shape[2]
    out = torch.zeros(bsz, hq, v.shape[-1], dtype=torch.float32)
    for b in range(bsz):
        n = int(seq_lens[b])
        if n == 0:
            continue
        tok = torch.arange(n)
        pages = block_table[b, tok // page_size].long()
        kb = k[pages, tok % page_size].float().repeat_interleave(hq // hkv, dim=1)  # [n, Hq, D]
        vb = v[pages, tok % page_size].float().repeat_interleave(hq // hkv, dim=1)
        s = torch.einsum("hd,nhd->hn", q[b].float(), kb) * sm_scale
        out[b] = torch.einsum("hn,nhd->hd", s.softmax(-1), vb)
    return out


def mla_decode_attention(
    q: torch.Tensor, latent: torch.Tensor, block_table: torch.Tensor, seq_lens: torch.Tensor, sm_scale: float
) -> torch.Tensor:
    """MLA decode: the 576-wide latent [pages, page_size, 576] is K; its first 512 values are V."""
    kv = latent.float().unsqueeze(2)
    return paged_decode_attention(q, kv, kv[..., :MLA_NOPE], block_table, seq_lens, sm_scale)


def kv_write(cache: torch.Tensor, new: torch.Tensor, slots: torch.Tensor, scale: torch.Tensor | None) -> None:
    """Store new [T, ...row] at flat slot ids (page * page_size + offset; -1 = skip) of cache [P, S, ...row].

    FP8 caches quantize with `scale` (per tensor [1], or per head [heads] for rows [heads, dim]).
    """
    flat = cache.view(-1, *cache.shape[2:])
    keep = slots >= 0
    rows = new[keep]
    if cache.dtype == FP8:
        rows = quantize_fp8(rows, scale.view(-1, 1) if rows.dim() == 3 else scale)
    flat[slots[keep].long()] = rows.to(cache.dtype)


def mla_tiled_write(cache: torch.Tensor, latent: torch.Tensor, slots: torch.Tensor) -> None:
    """Tiled MLA write: cache [P, S, 656] uint8, latent [T, 576]."""
    keep = slots >= 0
    cache.view(-1, MLA_TILED_BYTES)[slots[keep].long()] = mla_tiled_pack(latent[keep])


def int4_dequantize(q: torch.Tensor, scales: torch.Tensor, group: int) -> torch.Tensor:
    """Symmetric INT4: q [..., N, K] int8 in [-8, 7], scales [..., N, K // group] -> float32 weights."""
    return q.float() * scales.float().repeat_interleave(group, dim=-1)


def w4a16_gemm(a: torch.Tensor, q: torch.Tensor, scales: torch.Tensor, group: int) -> torch.Tensor:
    """a [M, K] times the dequantized weight [N, K] transposed -> float32 [M, N]."""
    return a.float() @ int4_dequantize(q, scales, group).T


def w4a16_moe_gemm(
    a: torch.Tensor, expert_offsets: torch.Tensor, q: torch.Tensor, scales: torch.Tensor, group: int
) -> torch.Tensor:
    """Grouped GEMM: rows expert_offsets[e]:expert_offsets[e+1] of a [T, K] use expert e's weight q[e]."""
    out = torch.zeros(a.shape[0], q.shape[1], dtype=torch.float32)
    for e in range(q.shape[0]):
        lo, hi = int(expert_offsets[e]), int(expert_offsets[e + 1])
        if hi > lo:
            out[lo:hi] = w4a16_gemm(a[lo:hi], q[e], scales[e], group)
    return out


def integrity_check(
    block_table: torch.Tensor, recorded_tags: torch.Tensor, current_tags: torch.Tensor, num_pages: torch.Tensor
) -> torch.Tensor:
    """Per request: 2 if a used slot holds a page id outside [0, pages), else 1 if a tag differs, else 0.

    Page ids are validated before they index `current_tags` (a -1 index would read the last page).
    """
    out = torch.zeros(block_table.shape[0], dtype=torch.int32)
    total = current_tags.shape[0]
    for b in range(block_table.shape[0]):
        ids = block_table[b, : int(num_pages[b])].long()
        if ((ids < 0) | (ids >= total)).any():
            out[b] = 2
        elif (current_tags[ids] != recorded_tags[b, : ids.shape[0]]).any():
            out[b] = 1
    return out


def prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sm_scale: float) -> torch.Tensor:
    """Causal chunk attention: q [T, H, Dqk] are the last T of the C keys k [C, H, Dqk], v [C, H, Dv]."""
    t, c = q.shape[0], k.shape[0]
    s = torch.einsum("thd,chd->htc", q.float(), k.float()) * sm_scale
    allowed = torch.arange(c)[None, :] <= torch.arange(c - t, c)[:, None]
    s = s.masked_fill(~allowed, -math.inf)
    return torch.einsum("htc,chd->thd", s.softmax(-1), v.float())
