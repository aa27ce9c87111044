"""Attention of one rank over the paged cache: MLA (absorbed for decode, expanded MHA for prefill chunks, as
`simulator.pricing.ops` prices them) and GQA. Every op goes through the stopwatch under its op family.

Rows of a step are the decode batch's tokens first, then each prefill chunk's, in plan order. Each layer writes
all new rows' KV into their slots first; decode rows then attend over their block tables (the paged kernel:
`reference.paged_decode_attention` on CPU, the Triton split-KV kernels on CUDA); a chunk gathers its whole
context from its pages and runs causal attention over it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from kernels import reference as ref
from kernels.executor.device import Stopwatch
from kernels.executor.paged_kv import PagedKV
from kernels.executor.weights import Weight
from simulator.config.specs import GQA, MLA


@dataclass
class Chunk:
    """One prefill chunk of a step: rows [start, start + tokens) of the step, after `before` cached tokens;
    `slots` are the flat cache slots of its whole context (before + tokens)."""

    start: int
    tokens: int
    before: int
    slots: torch.Tensor


@dataclass
class Batch:
    """What attention needs of a step beyond the activations (built by `kernels.executor.step`)."""

    positions: torch.Tensor  # [T] position of each row's token
    slots: torch.Tensor  # [T] flat cache slot each row's KV goes to
    decode: int  # the first `decode` rows are decode tokens
    block_table: torch.Tensor  # [decode, max pages] physical page ids, -1 past a table's end
    seq_lens: torch.Tensor  # [decode] tokens each decode row attends to (its own included)
    chunks: list[Chunk]
    queries: int = 1  # decode rows per sequence, consecutive (a speculative verify step: k + 1)

    def folded(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The block table and lengths of one row per sequence when a verify step's k+1 rows are folded into the
        heads: the kernel reads each cache once, over the whole window (its last row's length)."""
        q = self.queries
        return self.block_table[q - 1 :: q], self.seq_lens[q - 1 :: q]


class Rope:
    """Rotary embedding over the last `dim` values of a tensor, tables grown on demand; a step's cos/sin rows are
    gathered once and reused by every layer (the positions are the step's)."""

    def __init__(self, dim: int, dev: torch.device, dtype: torch.dtype) -> None:
        self.dim, self.dev, self.dtype = dim, dev, dtype
        self.inv = 1.0 / (10000 ** (torch.arange(0, dim, 2, device=dev, dtype=torch.float32) / dim))
        self.cos = self.sin = torch.empty(0, dim // 2, device=dev)
        self._pos: torch.Tensor | None = None
        self._rows = (self.cos, self.sin)

    def __call__(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """x [T, ..., dim] at positions pos [T]."""
        if pos is not self._pos:
            need = int(pos.max()) + 1 if pos.numel() else 0
            if need > self.cos.shape[0]:
                t = torch.arange(max(need, 2 * self.cos.shape[0], 1024), device=self.dev, dtype=torch.float32)
                ang = torch.outer(t, self.inv)
                self.cos, self.sin = ang.cos().to(self.dtype), ang.sin().to(self.dtype)
            self._pos, self._rows = pos, (self.cos[pos], self.sin[pos])
        shape = (pos.shape[0],) + (1,) * (x.dim() - 2) + (self.dim // 2,)
        c, s = self._rows[0].view(shape), self._rows[1].view(shape)
        x1, x2 = x[..., : self.dim // 2], x[..., self.dim // 2 :]
        return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


def _norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), w)


def _prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sm: float) -> torch.Tensor:
    """Causal attention of a chunk's t queries over its C keys (the last t are the chunk's own) -> [t, H, Dv]."""
    if q.device.type == "cpu":
        return ref.prefill_attention(q, k, v, sm)
    from torch.nn.attention.bias import causal_lower_right

    qh, kh, vh = (x.transpose(0, 1).unsqueeze(0).to(torch.bfloat16) for x in (q, k, v))
    out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=causal_lower_right(q.shape[0], k.shape[0]), scale=sm)
    return out[0].transpose(0, 1)


class MLAAttention:
    """One layer's MLA on one rank: `heads` of the model's heads, the latent cache replicated."""

    def __init__(
        self,
        a: MLA,
        hidden: int,
        heads: int,
        fmt: tuple[str, int],
        rope: Rope,
        gen: torch.Generator,
        dev: torch.device,
        act: torch.dtype,
    ) -> None:
        self.a, self.heads = a, heads
        self.latent = a.kv_lora_rank + a.qk_rope_head_dim
        self.qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        f, g = fmt
        if a.q_lora_rank:
            self.w_a = Weight.random(gen, (a.q_lora_rank + self.latent, hidden), f, g, dev)
            self.w_qb = Weight.random(gen, (heads * self.qk, a.q_lora_rank), f, g, dev)
            self.q_norm = torch.ones(a.q_lora_rank, device=dev, dtype=act)
        else:
            self.w_a = Weight.random(gen, (self.latent, hidden), f, g, dev)
            self.w_qb = Weight.random(gen, (heads * self.qk, hidden), f, g, dev)
        self.kv_norm = torch.ones(a.kv_lora_rank, device=dev, dtype=act)
        self.w_kv_b = Weight.random(gen, (heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank), f, g, dev)
        # absorbed form (decode): W_UK and W_UV per head, BF16 for the batched GEMMs
        self.w_uk = (
            torch.randn(heads, a.qk_nope_head_dim, a.kv_lora_rank, generator=gen, device=dev) / a.qk_nope_head_dim**0.5
        ).to(act)
        self.w_uv = (
            torch.randn(heads, a.kv_lora_rank, a.v_head_dim, generator=gen, device=dev) / a.kv_lora_rank**0.5
        ).to(act)
        self.w_o = Weight.random(gen, (hidden, heads * a.v_head_dim), f, g, dev)
        self.rope = rope
        self.sm = 1.0 / math.sqrt(self.qk)

    def __call__(self, x: torch.Tensor, b: Batch, cache: PagedKV, layer: int, sw: Stopwatch) -> torch.Tensor:
        a, h = self.a, self.heads
        r = sw.run
        nope, rope_d, kvl = a.qk_nope_head_dim, a.qk_rope_head_dim, a.kv_lora_rank
        if a.q_lora_rank:
            fused = r("gemm", self.w_a.matmul, x)
            q_in = r("elementwise", _norm, fused[:, : a.q_lora_rank], self.q_norm)
            kv = fused[:, a.q_lora_rank :]
            q = r("gemm", self.w_qb.matmul, q_in)
        else:
            kv = r("gemm", self.w_a.matmul, x)
            q = r("gemm", self.w_qb.matmul, x)
        q = q.view(-1, h, self.qk)

        def latent_rows() -> tuple[torch.Tensor, torch.Tensor]:
            c = _norm(kv[:, :kvl], self.kv_norm)
            k_rope = self.rope(kv[:, kvl:], b.positions)
            q_rope = self.rope(q[:, :, nope:], b.positions)
            return torch.cat((c, k_rope), dim=-1), q_rope

        rows, q_rope = r("elementwise", latent_rows)
        r("kv_write", cache.write, layer, rows, b.slots)
        outs = []
        if b.decode:
            d = b.decode
            q_lat = r("gemm", torch.bmm, q[:d, :, :nope].transpose(0, 1), self.w_uk)  # [h, d, kvl]
            q_full = torch.cat((q_lat.transpose(0, 1), q_rope[:d]), dim=-1)
            o_lat = r(
                "decode_attention_mla", self._verify if b.queries > 1 else self._decode, q_full, cache, layer, b
            )  # [d, h, kvl]
            outs.append(
                r("gemm", torch.bmm, o_lat.transpose(0, 1).to(self.w_uv.dtype), self.w_uv)
                .transpose(0, 1)
                .reshape(d, -1)
            )
        for ch in b.chunks:
            ctx = cache.gather(layer, ch.slots)  # [C, latent]
            kvb = r("gemm", self.w_kv_b.matmul, ctx[:, :kvl].to(x.dtype)).view(-1, h, nope + a.v_head_dim)
            k = torch.cat((kvb[:, :, :nope], ctx[:, None, kvl:].expand(-1, h, rope_d).to(kvb.dtype)), dim=-1)
            qc = torch.cat((q[ch.start : ch.start + ch.tokens, :, :nope], q_rope[ch.start : ch.start + ch.tokens]), -1)
            o = r("prefill_attention", _prefill, qc, k, kvb[:, :, nope:], self.sm)
            outs.append(o.reshape(ch.tokens, -1).to(x.dtype))
        return r("gemm", self.w_o.matmul, torch.cat(outs) if len(outs) > 1 else outs[0])

    def _decode(self, q: torch.Tensor, cache: PagedKV, layer: int, b: Batch) -> torch.Tensor:
        data, kvl = cache.layer(layer), self.a.kv_lora_rank
        if q.device.type == "cuda":
            from kernels.decode_attention import mla_decode

            return mla_decode(q.to(torch.bfloat16), data, b.block_table, b.seq_lens, self.sm, kv_scale=cache.scale)
        return mla_decode_cpu(q, data, kvl, b.block_table, b.seq_lens, self.sm, cache.scale)

    def _verify(self, q: torch.Tensor, cache: PagedKV, layer: int, b: Batch) -> torch.Tensor:
        """A verify step's k+1 query rows per sequence folded into the heads, as FlashMLA runs a multi-token
        decode: one read of the cache per sequence. Every row attends over the whole window (a verify kernel
        masks later draft positions from earlier rows: the same bytes and FLOPs)."""
        n, h = q.shape[0] // b.queries, q.shape[1]
        table, lens = b.folded()
        folded = Batch(b.positions, b.slots, n, table, lens, [])
        return self._decode(q.reshape(n, b.queries * h, -1), cache, layer, folded).reshape(q.shape[0], h, -1)


def mla_decode_cpu(
    q: torch.Tensor,
    cache: torch.Tensor,
    kvl: int,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    sm: float,
    scale: torch.Tensor | None,
) -> torch.Tensor:
    """MLA decode on CPU as the replay runs it (and the CPU profile times it): the reference paged attention
    reading the cache in its stored format — latent rows are K, their first `kvl` values V; an FP8 cache's
    per-tensor scale goes on the query and the output; the tiled layout is unpacked first."""
    if cache.dtype == torch.uint8:
        cache = ref.mla_tiled_unpack(cache)
    kv = cache.unsqueeze(2)
    qs = q if scale is None else q * scale
    out = ref.paged_decode_attention(qs, kv, kv[..., :kvl], block_table, seq_lens, sm)
    return out if scale is None else out * scale


def gqa_decode_cpu(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    sm: float,
    scale: torch.Tensor | None,
) -> torch.Tensor:
    """GQA decode on CPU as the replay runs it: the reference over the stored K/V (one per-tensor FP8 scale)."""
    qs = q if scale is None else q * scale
    out = ref.paged_decode_attention(qs, k, v, block_table, seq_lens, sm)
    return out if scale is None else out * scale


def rotary_dim(a: MLA | GQA) -> int:
    """Values of each head RoPE rotates: MLA's rope part, GQA's rotary share of head_dim (even)."""
    if isinstance(a, MLA):
        return a.qk_rope_head_dim
    return max(2, int(a.head_dim * a.partial_rotary_factor) // 2 * 2)


class GQAAttention:
    """One layer's GQA on one rank: `heads` query heads and `kv_heads` K/V heads (replicated past the model's)."""

    def __init__(
        self,
        a: GQA,
        hidden: int,
        heads: int,
        kv_heads: int,
        fmt: tuple[str, int],
        rope: Rope,
        gen: torch.Generator,
        dev: torch.device,
    ) -> None:
        self.a, self.heads, self.kv_heads, self.d = a, heads, kv_heads, a.head_dim
        f, g = fmt
        self.w_qkv = Weight.random(gen, ((heads + 2 * kv_heads) * a.head_dim, hidden), f, g, dev)
        self.w_o = Weight.random(gen, (hidden, heads * a.head_dim), f, g, dev)
        self.rot = rope.dim
        self.rope = rope
        self.sm = 1.0 / math.sqrt(a.head_dim)

    def __call__(self, x: torch.Tensor, b: Batch, cache: PagedKV, layer: int, sw: Stopwatch) -> torch.Tensor:
        h, kvh, d = self.heads, self.kv_heads, self.d
        r = sw.run
        qkv = r("gemm", self.w_qkv.matmul, x).view(-1, h + 2 * kvh, d)

        def roped() -> tuple[torch.Tensor, torch.Tensor]:
            qk = qkv[:, : h + kvh]
            qk = torch.cat((self.rope(qk[..., : self.rot], b.positions), qk[..., self.rot :]), dim=-1)
            return qk[:, :h], torch.stack((qk[:, h:], qkv[:, h + kvh :]), dim=1)  # q, [T, 2, kvh, d]

        q, rows = r("elementwise", roped)
        r("kv_write", cache.write, layer, rows, b.slots)
        outs = []
        if b.decode:
            attend = self._verify if b.queries > 1 else self._decode
            outs.append(r("decode_attention_gqa", attend, q[: b.decode], cache, layer, b).reshape(b.decode, -1))
        for ch in b.chunks:
            ctx = cache.gather(layer, ch.slots)  # [C, 2, kvh, d]
            k, v = (ctx[:, i].repeat_interleave(h // kvh, dim=1) for i in (0, 1))
            o = r("prefill_attention", _prefill, q[ch.start : ch.start + ch.tokens], k, v, self.sm)
            outs.append(o.reshape(ch.tokens, -1).to(x.dtype))
        return r("gemm", self.w_o.matmul, torch.cat(outs) if len(outs) > 1 else outs[0])

    def _decode(self, q: torch.Tensor, cache: PagedKV, layer: int, b: Batch) -> torch.Tensor:
        data = cache.layer(layer)
        k, v = data[:, :, 0], data[:, :, 1]
        if q.device.type == "cuda":
            from kernels.decode_attention import gqa_decode

            s = cache.scale
            return gqa_decode(q.to(torch.bfloat16), k, v, b.block_table, b.seq_lens, self.sm, k_scale=s, v_scale=s)
        return gqa_decode_cpu(q, k, v, b.block_table, b.seq_lens, self.sm, cache.scale)

    def _verify(self, q: torch.Tensor, cache: PagedKV, layer: int, b: Batch) -> torch.Tensor:
        """A verify step's k+1 rows per sequence folded into each KV head's query group (one cache read per
        sequence; every row over the whole window, as in `MLAAttention._verify`)."""
        qn, kvh = b.queries, self.kv_heads
        n, g, d = q.shape[0] // qn, self.heads // self.kv_heads, self.d
        table, lens = b.folded()
        folded = Batch(b.positions, b.slots, n, table, lens, [])
        grouped = q.reshape(n, qn, kvh, g, d).transpose(1, 2).reshape(n, kvh * qn * g, d)
        out = self._decode(grouped, cache, layer, folded)
        return out.reshape(n, kvh, qn, g, d).transpose(1, 2).reshape(n * qn, kvh * g, d)
