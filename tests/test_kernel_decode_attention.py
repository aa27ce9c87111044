"""Paged split-KV decode attention (GQA and MLA; BF16/FP16, FP8 flat, FP8 tiled) vs the torch reference.

Inputs: odd lengths, an empty sequence, permuted pages, -1 slots, and forced split counts that leave splits
empty. Tolerance: 2e-3 absolute on outputs of magnitude ~1 (fp16/bf16 tiles and output rounding); the reference
gets the same dequantized cache, so FP8 rounding is not part of the error.
"""

from __future__ import annotations

import math

import pytest
import torch
from kernel_helpers import DEVICES, act_dtype, paged_table

from kernels import reference as ref
from kernels.decode_attention import gqa_decode, mla_decode

LENS = [37, 0, 130, 5, 64]
ATOL = {"cpu": 2e-3, "cuda": 1.6e-2}  # bf16 on the GPU: 8 mantissa bits


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kv", ["bf16", "fp8_head", "fp8_tensor"])
@pytest.mark.parametrize("splits", [1, 4])
def test_gqa_decode_attention(device: str, kv: str, splits: int) -> None:
    gen = torch.Generator().manual_seed(2)
    page, hq, hkv, d = 16, 12, 2, 128
    table, pages = paged_table(LENS, page, seed=3)
    lens = torch.tensor(LENS, dtype=torch.int32)
    dt = act_dtype(device)
    q = torch.randn(len(LENS), hq, d, generator=gen).to(dt)
    k = torch.randn(pages, page, hkv, d, generator=gen).to(dt)
    v = torch.randn(pages, page, hkv, d, generator=gen).to(dt)
    k_scale = v_scale = None
    if kv != "bf16":
        n = hkv if kv == "fp8_head" else 1
        k_scale, v_scale = torch.rand(n, generator=gen) + 0.5, torch.rand(n, generator=gen) + 0.5
        k = ref.quantize_fp8(k, k_scale.view(-1, 1))
        v = ref.quantize_fp8(v, v_scale.view(-1, 1))
    want = ref.paged_decode_attention(
        q, ref.dequantize_cache(k, k_scale), ref.dequantize_cache(v, v_scale), table, lens, 1 / math.sqrt(d)
    )
    dev = [t.to(device) if t is not None else None for t in (q, k, v, table, lens, k_scale, v_scale)]
    got = gqa_decode(*dev[:5], k_scale=dev[5], v_scale=dev[6], splits=splits).float().cpu()
    assert not got.isnan().any(), "empty splits / empty sequences must not produce NaN"
    torch.testing.assert_close(got, want, atol=ATOL[device], rtol=0, msg=f"GQA {kv}: atol {ATOL[device]}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["bf16", "fp8_flat", "fp8_tiled"])
@pytest.mark.parametrize("heads", [8, 20])
def test_mla_decode_attention(device: str, layout: str, heads: int) -> None:
    gen = torch.Generator().manual_seed(4)
    page = 32
    table, pages = paged_table(LENS, page, seed=5)
    lens = torch.tensor(LENS, dtype=torch.int32)
    dt = act_dtype(device)
    q = (0.1 * torch.randn(len(LENS), heads, 576, generator=gen)).to(dt)
    latent = torch.randn(pages, page, 576, generator=gen).to(dt)
    scale = None
    if layout == "fp8_flat":
        scale = torch.tensor([0.02])
        cache = ref.quantize_fp8(latent, scale)
        dense = cache.float() * scale
    elif layout == "fp8_tiled":
        cache = ref.mla_tiled_pack(latent.view(-1, 576)).view(pages, page, -1)
        dense = ref.mla_tiled_unpack(cache)
    else:
        cache, dense = latent, latent.float()
    sm_scale = 1 / math.sqrt(192)
    want = ref.mla_decode_attention(q, dense, table, lens, sm_scale)
    got = (
        mla_decode(
            q.to(device),
            cache.to(device),
            table.to(device),
            lens.to(device),
            sm_scale,
            kv_scale=scale.to(device) if scale is not None else None,
            splits=3,
        )
        .float()
        .cpu()
    )
    assert not got.isnan().any(), "empty splits / empty sequences must not produce NaN"
    torch.testing.assert_close(got, want, atol=ATOL[device], rtol=0, msg=f"MLA {layout}: atol {ATOL[device]}")
