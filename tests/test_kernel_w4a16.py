"""W4A16 INT4 GEMM (dense, split-K, MoE grouped) vs the torch reference on the same quantized weights.

Tolerance: |err| <= 1e-2 * max|ref| + 2e-3: the output is rounded to fp16/bf16 once and group-32 weights are
scaled in 16-bit before the MMA (one rounding per weight).
"""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import DEVICES, act_dtype

from kernels import reference as ref
from kernels.w4a16 import pack_int4, quantize_int4, w4a16_gemm, w4a16_moe_gemm


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    tol = 1e-2 * want.abs().max().item() + 2e-3
    err = (got.float().cpu() - want).abs().max().item()
    assert err <= tol, f"max error {err} > tolerance {tol} (1% of max |ref| + 2e-3)"


def test_int4_pack_roundtrip() -> None:
    q = torch.randint(-8, 8, (5, 64), dtype=torch.int8)
    words = pack_int4(q)
    nib = (words[..., None] >> torch.arange(0, 32, 4, dtype=torch.int32)) & 0xF
    assert torch.equal(nib.flatten(-2).to(torch.int8) - 8, q), "pack order: 8 K-values per word, low nibble first"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("m", "n", "k", "group"), [(3, 200, 256, 32), (13, 136, 384, 128), (70, 130, 256, 32)])
def test_w4a16_int4_gemm(device: str, m: int, n: int, k: int, group: int) -> None:
    gen = torch.Generator().manual_seed(m)
    a = torch.randn(m, k, generator=gen).to(act_dtype(device))
    q, scales = quantize_int4(torch.randn(n, k, generator=gen), group)
    got = w4a16_gemm(a.to(device), pack_int4(q).to(device), scales.to(device), group)
    _close(got, ref.w4a16_gemm(a, q, scales, group))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("group", [32, 128])
def test_w4a16_int4_moe_gemm(device: str, group: int) -> None:
    gen = torch.Generator().manual_seed(group)
    counts = torch.tensor([3, 0, 9, 1, 0, 20])  # empty experts and uneven groups
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]).to(torch.int32)
    k, n = 256, 72
    a = torch.randn(int(counts.sum()), k, generator=gen).to(act_dtype(device))
    q, scales = quantize_int4(torch.randn(len(counts), n, k, generator=gen), group)
    got = w4a16_moe_gemm(a.to(device), offsets.to(device), pack_int4(q).to(device), scales.to(device), group)
    _close(got, ref.w4a16_moe_gemm(a, offsets, q, scales, group))
