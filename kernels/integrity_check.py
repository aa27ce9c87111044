"""Batched page-integrity check: does every used block-table slot still point at the page it was given?

Why: a page freed and reallocated to another request carries a new generation tag, so a stale block-table
entry shows as a tag mismatch. A page id is validated against [0, pages) BEFORE it indexes the tag array: a -1
used as an index would silently read the last page (Python semantics) or out-of-bounds memory (GPU).
Status per request: 0 ok, 1 tag mismatch (stale or foreign page), 2 page id out of range in a used slot.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.hopper import Launch, run


@triton.jit
def _integrity_kernel(
    bt_ptr,
    stride_bt,
    rec_ptr,
    stride_rec,
    tags_ptr,
    npages_ptr,
    out_ptr,
    num_pages,
    BLOCK: tl.constexpr,
):
    b = tl.program_id(0)
    used_slots = tl.load(npages_ptr + b)
    bad = tl.zeros([BLOCK], tl.int32)
    stale = tl.zeros([BLOCK], tl.int32)
    for j0 in range(0, used_slots, BLOCK):
        j = j0 + tl.arange(0, BLOCK)
        used = j < used_slots
        page = tl.load(bt_ptr + b * stride_bt + j, mask=used, other=0)
        out_of_range = used & ((page < 0) | (page >= num_pages))
        valid = used & (page >= 0) & (page < num_pages)
        tag = tl.load(tags_ptr + tl.where(valid, page, 0), mask=valid, other=0)
        recorded = tl.load(rec_ptr + b * stride_rec + j, mask=valid, other=0)
        bad = tl.maximum(bad, out_of_range.to(tl.int32))
        stale = tl.maximum(stale, (valid & (tag != recorded)).to(tl.int32))
    status = tl.where(tl.max(bad, axis=0) > 0, 2, tl.where(tl.max(stale, axis=0) > 0, 1, 0))
    tl.store(out_ptr + b, status)


def plan_integrity_check(
    block_table: torch.Tensor, recorded_tags: torch.Tensor, current_tags: torch.Tensor, num_pages: torch.Tensor
) -> tuple[Launch, torch.Tensor]:
    """Launch: block_table / recorded_tags [B, max_pages] int32, current_tags [pages] int32, num_pages [B]."""
    out = torch.empty(block_table.shape[0], dtype=torch.int32, device=block_table.device)
    block = min(1024, max(16, triton.next_power_of_2(block_table.shape[1])))
    launch = Launch(
        _integrity_kernel,
        (block_table.shape[0],),
        dict(
            bt_ptr=block_table,
            stride_bt=block_table.stride(0),
            rec_ptr=recorded_tags,
            stride_rec=recorded_tags.stride(0),
            tags_ptr=current_tags,
            npages_ptr=num_pages,
            out_ptr=out,
            num_pages=current_tags.shape[0],
        ),
        dict(BLOCK=block),
        num_warps=4,
        num_stages=2,
    )
    return launch, out


def integrity_check(
    block_table: torch.Tensor, recorded_tags: torch.Tensor, current_tags: torch.Tensor, num_pages: torch.Tensor
) -> torch.Tensor:
    """Status per request (int32 [B]): 0 ok, 1 tag mismatch, 2 page id out of range in a used slot."""
    launch, out = plan_integrity_check(block_table, recorded_tags, current_tags, num_pages)
    run(launch)
    return out
