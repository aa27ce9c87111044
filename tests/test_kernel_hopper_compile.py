"""Every kernel compiles for Hopper (sm_90) on the CPU at profiled shapes: matrix kernels use wgmma, nothing
touches local memory or spills. Plans are built from meta tensors, exactly as the launchers build them."""

from __future__ import annotations

import pytest
import torch
from triton import knobs

from kernels import decode_attention, integrity_check, kv_write, w4a16
from kernels.hopper import Launch, compile_sm90

META = "meta"
BF16, FP8, I32 = torch.bfloat16, torch.float8_e4m3fn, torch.int32


def _e(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device=META)


def _mla(heads: int, layout: str) -> list[Launch]:
    batch, pages_per_seq, page = 64, 64, 64  # context 4096
    width, dt = {"bf16": (576, BF16), "fp8": (576, FP8), "tiled": (656, torch.uint8)}[layout]
    cache = _e(batch * pages_per_seq, page, width, dtype=dt)
    scale = _e(1, dtype=torch.float32) if layout == "fp8" else None
    table, lens = _e(batch, pages_per_seq, dtype=I32), _e(batch, dtype=I32)
    return decode_attention.plan_mla(_e(batch, heads, 576), cache, table, lens, 0.07, scale)[0]


def _gqa(q_heads: int, kv_heads: int, fp8: bool) -> list[Launch]:
    batch, pages_per_seq, page = 32, 256, 16
    cache = _e(batch * pages_per_seq, page, kv_heads, 128, dtype=FP8 if fp8 else BF16)
    scale = _e(kv_heads, dtype=torch.float32) if fp8 else None
    table, lens = _e(batch, pages_per_seq, dtype=I32), _e(batch, dtype=I32)
    return decode_attention.plan_gqa(_e(batch, q_heads, 128), cache, cache, table, lens, 0.09, scale, scale)[0]


def _gemm(m: int, n: int, k: int, group: int) -> list[Launch]:
    return w4a16.plan_gemm(_e(m, k), _e(n, k // 8, dtype=I32), _e(n, k // group), group)[0]


def _moe(tokens: int, experts: int, n: int, k: int, group: int) -> list[Launch]:
    packed, scales = _e(experts, n, k // 8, dtype=I32), _e(experts, n, k // group)
    return w4a16.plan_moe_gemm(_e(tokens, k), _e(experts + 1, dtype=I32), packed, scales, group)[0]


CASES = {
    "mla8_fp8_flat": lambda: _mla(8, "fp8"),
    "mla128_fp8_tiled": lambda: _mla(128, "tiled"),
    "mla16_bf16": lambda: _mla(16, "bf16"),
    "gqa12_fp8": lambda: _gqa(12, 1, True),
    "gqa96_8_bf16": lambda: _gqa(96, 8, False),
    "w4a16_m1_g32": lambda: _gemm(1, 7168, 2048, 32),
    "w4a16_m16_g128": lambda: _gemm(16, 4096, 7168, 128),
    "w4a16_m2048_g32": lambda: _gemm(2048, 4096, 7168, 32),
    "w4a16_moe_decode": lambda: _moe(512, 256, 4096, 7168, 32),
    "kv_write_fp8": lambda: [
        kv_write.plan_kv_write(_e(512, 64, 576, dtype=FP8), _e(64, 576), _e(64, dtype=I32), _e(1, dtype=torch.float32))
    ],
    "kv_write_mla_tiled": lambda: [
        kv_write.plan_mla_tiled_write(_e(512, 64, 656, dtype=torch.uint8), _e(64, 576), _e(64, dtype=I32))
    ],
    "integrity_b64": lambda: [
        integrity_check.plan_integrity_check(
            _e(64, 4096, dtype=I32), _e(64, 4096, dtype=I32), _e(262144, dtype=I32), _e(64, dtype=I32)
        )[0]
    ],
}
MATRIX_KERNELS = {"_decode_split_kernel", "_w4a16_kernel"}


@pytest.mark.skipif(knobs.runtime.interpret, reason="TRITON_INTERPRET replaces triton's helpers; compile needs the JIT")
@pytest.mark.parametrize("case", sorted(CASES))
def test_kernel_compiles_for_sm90(case: str) -> None:
    for launch in CASES[case]():
        report = compile_sm90(launch)
        if report.name in MATRIX_KERNELS:
            assert report.wgmma, f"{case}/{report.name}: no wgmma in the sm_90 PTX"
        assert report.local_bytes == 0 and report.spill_bytes == 0, (
            f"{case}/{report.name}: local memory {report.local_bytes} B, spills {report.spill_bytes} B"
        )
        assert report.registers <= 255, f"{case}/{report.name}: {report.registers} registers"
