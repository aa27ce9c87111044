"""The paged KV cache of one instance as a device tensor, in the pool's format, addressed through the page
allocator's block tables (`simulator.serving.tables.TableStore`): page p of a table is page p of this tensor.

MLA keeps one latent row per token (kv_lora_rank + rope wide: K and V at once), GQA a K and a V row per KV head
of this rank, one row of [2, kv_heads, head_dim] per token (one KV write per layer, as the op list counts it).
Formats: BF16; FP8 e4m3 with one per-tensor scale (flat); MLA's tiled FP8 (656 bytes per token: 512 e4m3 in
128-value tiles with fp32 scales, 64 BF16 rope values). Every layer's cache lives in one tensor.

When the device cannot hold every instance's pages, `physical` pages are fewer than the allocator's and page p
is stored at p mod physical: a step still reads and writes the same number of bytes at the same page
granularity (what its time depends on), but two live pages may alias; the Result says so.
"""

from __future__ import annotations

import numpy as np
import torch

from kernels import reference as ref
from simulator.config.scenario import Pool
from simulator.config.specs import MLA, ModelSpec

FP8_SCALE = 4.0 / ref.FP8_MAX  # activations here are ~N(0, 1): ±4 maps to the e4m3 range


def token_bytes(model: ModelSpec, pool: Pool, layers: int) -> int:
    """Bytes one token takes in this rank's cache over `layers` layers."""
    return layers * _row_width(model, pool) * _elem_bytes(model, pool)


def _tiled(model: ModelSpec, pool: Pool) -> bool:
    return isinstance(model.attention, MLA) and pool.kv_layout == "tiled" and pool.kv_cache != "bf16"


def _row_width(model: ModelSpec, pool: Pool) -> int:
    a = model.attention
    if isinstance(a, MLA):
        return ref.MLA_TILED_BYTES if _tiled(model, pool) else a.kv_lora_rank + a.qk_rope_head_dim
    return 2 * -(-a.kv_heads // pool.tp) * a.head_dim


def _elem_bytes(model: ModelSpec, pool: Pool) -> int:
    return 1 if _tiled(model, pool) or pool.kv_cache != "bf16" else 2


class PagedKV:
    """One instance's cache: `layers` layers of `physical` pages (+1 spare, never addressed by a live table)."""

    def __init__(
        self, model: ModelSpec, pool: Pool, layers: int, logical: int, physical: int, dev: torch.device
    ) -> None:
        self.model, self.pool, self.dev = model, pool, dev
        self.page_size = pool.page_size
        self.logical, self.physical = logical, physical
        self.mla = isinstance(model.attention, MLA)
        self.tiled = _tiled(model, pool)
        self.fp8 = pool.kv_cache != "bf16"
        dtype = torch.uint8 if self.tiled else (ref.FP8 if self.fp8 else torch.bfloat16)
        a = model.attention
        if self.mla:
            row: tuple[int, ...] = (_row_width(model, pool),)
        else:
            self.kv_heads = -(-a.kv_heads // pool.tp)  # type: ignore[union-attr]
            row = (2, self.kv_heads, a.head_dim)  # type: ignore[union-attr]
        # zeros, not empty: a reused (not executed) step leaves pages unwritten, and garbage may hold NaNs
        self.data = torch.zeros(layers, physical + 1, self.page_size, *row, dtype=dtype, device=dev)
        self.scale = torch.tensor([FP8_SCALE], device=dev) if self.fp8 and not self.tiled else None

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size()

    # -- addressing ------------------------------------------------------------------------------------------
    def physical_pages(self, pages: np.ndarray) -> np.ndarray:
        """Logical page ids (allocator's) -> this tensor's pages; ids outside the cache pass through as -1."""
        ok = (pages >= 0) & (pages < self.logical)
        return np.where(ok, pages % self.physical, -1)

    def slots(self, pages: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Flat slot ids (page * page_size + offset) of tokens at `positions` of a table holding `pages`."""
        return self.physical_pages(pages[positions // self.page_size]) * self.page_size + positions % self.page_size

    # -- reading and writing ---------------------------------------------------------------------------------
    def layer(self, i: int) -> torch.Tensor:
        return self.data[i]

    def write(self, i: int, rows: torch.Tensor, slots: torch.Tensor) -> None:
        """New tokens' rows ([T, width] MLA, [T, 2, kv_heads, head_dim] GQA) into their slots of layer i."""
        cache = self.data[i]
        if self.dev.type == "cpu":
            if self.tiled:
                ref.mla_tiled_write(cache, rows, slots)
            else:
                ref.kv_write(cache, rows, slots, self.scale)
            return
        from kernels.kv_write import kv_write, mla_tiled_write

        if self.tiled:
            mla_tiled_write(cache, rows.to(torch.bfloat16), slots.to(torch.int32))
        else:
            kv_write(cache, rows.to(torch.bfloat16).contiguous(), slots.to(torch.int32), self.scale)

    def gather(self, i: int, slots: torch.Tensor) -> torch.Tensor:
        """The rows at `slots` of layer i, dequantized to float32 (a prefill chunk's whole context)."""
        flat = self.data[i].view(-1, *self.data.shape[3:])
        rows = flat[slots]
        if self.tiled:
            return ref.mla_tiled_unpack(rows)
        out = rows.float()
        return out * self.scale if self.scale is not None else out
