"""Shared helpers for the kernel tests: devices, random paged tables, the interpreter's FP8 rounding defects.

On CPU the kernels run in the Triton interpreter (kernels.hopper.run), where bf16 math is broken: CPU tests use
float16 activations, CUDA tests bf16.
"""

from __future__ import annotations

import pytest
import torch

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")),
]


def act_dtype(device: str) -> torch.dtype:
    return torch.float16 if device == "cpu" else torch.bfloat16


def paged_table(lens: list[int], page: int, spare_slots: int = 2, seed: int = 0) -> tuple[torch.Tensor, int]:
    """Block table [B, max_pages] int32 over a permuted pool of pages, -1 in unused slots; returns (table, pages)."""
    gen = torch.Generator().manual_seed(seed)
    need = [-(-n // page) for n in lens]
    total = sum(need) + 3
    perm = torch.randperm(total, generator=gen)
    table = torch.full((len(lens), max(need) + spare_slots), -1, dtype=torch.int32)
    used = 0
    for b, n in enumerate(need):
        table[b, :n] = perm[used : used + n]
        used += n
    return table, total


def fp8_interpreter_defects(scaled: torch.Tensor, ref: torch.Tensor, got: torch.Tensor) -> torch.Tensor:
    """Where the interpreter's float32 -> e4m3 conversion may differ from round-to-nearest-even.

    Verified defects (KERNELS.md): a rounding carry into the exponent is OR'd (1.94 -> 1.0, not 2.0); seen here
    too: exact ties do not round to even, and subnormals (|x| < 2^-6) may be off by one step (2^-9).
    `scaled` is the pre-rounding value, ref torch's rounding, got the kernel's.
    """
    r, g, y = ref.float(), got.float(), scaled.float()
    mant, _ = torch.frexp(r.abs())
    carry = (mant == 0.5) & (r.abs() > y.abs())
    tie = (y - r).abs() == (g - y).abs()
    subnormal = (y.abs() < 2**-6) & ((g - r).abs() <= 2**-9)
    return carry | tie | subnormal
