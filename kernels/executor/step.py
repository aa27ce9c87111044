"""A scheduler's plan turned into the runner's inputs: token ids, positions, KV slots from the block tables.

The plan is read exactly as the scheduler left it when the step starts (its pages booked): a decode sequence
writes its next token at position `computed` (the tokens cached before the step) and attends over
`computed + 1` tokens; a prefill chunk of `c` tokens writes positions `computed .. computed + c - 1` and attends
over everything before them too. Token ids are a fixed hash of (request, position): a replay measures time, so
the text does not matter, but the same request always feeds the same ids.

A speculative verify step gives each decode sequence `queries` = k+1 rows at positions `computed ..
computed + k` (attention folds them into the heads: one cache read per sequence); a draft step j is one row at
`computed + j`. The scheduler booked pages for all k+1 positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from kernels.executor.attention import Batch, Chunk
from kernels.executor.paged_kv import PagedKV
from simulator.serving.scheduler import Plan, Seq


@dataclass
class StepInput:
    tokens: torch.Tensor
    batch: Batch
    last_rows: torch.Tensor


def token_ids(req_id: int, positions: np.ndarray) -> np.ndarray:
    return (req_id * 1_000_003 + positions * 7_919) % 2_147_483_647


Live = tuple[int, int, np.ndarray]  # a sequence as a step reads it: request id, tokens cached, its live pages


def _pages(req: int, pages: np.ndarray, tokens: int, page_size: int) -> np.ndarray:
    """A sequence's live pages; they must cover `tokens` tokens."""
    if len(pages) * page_size < tokens:
        raise RuntimeError(f"request {req}: {len(pages)} pages cannot hold {tokens} tokens (pages not booked?)")
    return pages


def build(plan: Plan, kv: PagedKV, queries: int = 1, offset: int = 0) -> StepInput:
    """The step's inputs; each decode sequence gives `queries` rows from position `computed + offset`."""
    decode = [_live(s) for s in plan.decode]
    return assemble(decode, [(*_live(s), c) for s, c in plan.prefill], kv, queries, offset)


def _live(s: Seq) -> Live:
    return s.req.id, s.computed, s.table.pages[: s.table.n]


def assemble(
    decode: list[Live], prefill: list[tuple[int, int, np.ndarray, int]], kv: PagedKV, queries: int = 1, offset: int = 0
) -> StepInput:
    """The inputs of a step of decode sequences and prefill chunks (each a `Live` and its chunk's tokens)."""
    ps, dev = kv.page_size, kv.dev
    toks, pos, slots, last = [], [], [], []
    lens = []
    tables = []
    for req, computed, live in decode:
        p = np.arange(computed + offset, computed + offset + queries)
        pages = _pages(req, live, int(p[-1]) + 1, ps)
        toks.append(token_ids(req, p))
        pos.append(p)
        slots.append(kv.slots(pages, p))
        lens += (p + 1).tolist()
        tables += [pages] * queries
    b = len(lens)
    chunks = []
    row = b
    for req, before, live, c in prefill:
        pages = _pages(req, live, before + c, ps)
        ctx = np.arange(before + c)
        ctx_slots = kv.slots(pages, ctx)
        toks.append(token_ids(req, ctx[before:]))
        pos.append(ctx[before:])
        slots.append(ctx_slots[before:])
        chunks.append(Chunk(row, c, before, torch.from_numpy(ctx_slots).to(dev)))
        row += c
        last.append(row - 1)
    if b:
        width = max(-(-n // ps) for n in lens)
        table = np.full((b, width), -1, dtype=np.int64)
        for i, pages in enumerate(tables):
            n = -(-lens[i] // ps)
            table[i, :n] = kv.physical_pages(pages[:n])
    else:
        table = np.zeros((0, 1), dtype=np.int64)
    batch = Batch(
        positions=torch.from_numpy(np.concatenate(pos)).to(dev),
        slots=torch.from_numpy(np.concatenate(slots)).to(dev),
        decode=b,
        block_table=torch.from_numpy(table).to(torch.int32).to(dev),
        seq_lens=torch.tensor(lens, dtype=torch.int32, device=dev),
        chunks=chunks,
        queries=queries if b else 1,
    )
    last_rows = torch.tensor(list(range(b)) + last, dtype=torch.int64, device=dev)
    return StepInput(torch.from_numpy(np.concatenate(toks)).to(dev), batch, last_rows)
