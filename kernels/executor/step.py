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


def _table(seq: Seq, tokens: int, page_size: int) -> np.ndarray:
    """The live pages of a sequence's block table; they must cover `tokens` tokens."""
    n = seq.table.n
    if n * page_size < tokens:
        raise RuntimeError(f"request {seq.req.id}: {n} pages cannot hold {tokens} tokens (pages not booked?)")
    return seq.table.pages[:n]


def build(plan: Plan, kv: PagedKV, queries: int = 1, offset: int = 0) -> StepInput:
    """The step's inputs; each decode sequence gives `queries` rows from position `computed + offset`."""
    ps, dev = kv.page_size, kv.dev
    toks, pos, slots, last = [], [], [], []
    lens = []
    decode = plan.decode
    tables = []
    for s in decode:
        p = np.arange(s.computed + offset, s.computed + offset + queries)
        pages = _table(s, int(p[-1]) + 1, ps)
        toks.append(token_ids(s.req.id, p))
        pos.append(p)
        slots.append(kv.slots(pages, p))
        lens += (p + 1).tolist()
        tables += [s] * queries
    b = len(lens)
    chunks = []
    row = b
    for s, c in plan.prefill:
        before = s.computed
        pages = _table(s, before + c, ps)
        ctx = np.arange(before + c)
        ctx_slots = kv.slots(pages, ctx)
        toks.append(token_ids(s.req.id, ctx[before:]))
        pos.append(ctx[before:])
        slots.append(ctx_slots[before:])
        chunks.append(Chunk(row, c, before, torch.from_numpy(ctx_slots).to(dev)))
        row += c
        last.append(row - 1)
    if b:
        width = max(-(-n // ps) for n in lens)
        table = np.full((b, width), -1, dtype=np.int64)
        for i, s in enumerate(tables):
            n = -(-lens[i] // ps)
            table[i, :n] = kv.physical_pages(s.table.pages[:n])
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
