"""Weight formats: the bytes one weight costs with its scales, and which tensor cores run its GEMMs.

Memory accounting and the roofline both read these, so a format's size is written once.

* bf16: 2 B. fp8: e4m3 + one fp32 scale per 128×128 block (≈ 8.002 bits).
* int4 (W4A16): 4 bits + a BF16 scale per group (4.125 bits at group 128); dequantized to BF16 tensor cores.
* w4a8: INT4 group-wise weights as int4, with activations quantized to FP8: FP8 tensor cores after an
  INT4 → FP8 conversion in the main loop.
* nvfp4: FP4 e2m1 + one FP8 e4m3 scale per 16 weights = 4.5 bits, plus one fp32 scale per tensor (4 B for
  millions of weights, ≤ 3e-7 B per weight for a 7168×2048 expert matrix: not counted); W4A4 on FP4 tensor
  cores (Blackwell), activations quantized to NVFP4 per step.
* mxfp4 (OCP microscaling): FP4 e2m1 + one E8M0 (8-bit power-of-two) scale per 32 weights = 4.25 bits; W4A4
  on the same FP4 tensor cores.
"""

from __future__ import annotations

from simulator.config.specs import FP4_FORMATS, HardwareSpec

BF16_BYTES = 2.0
FP8_BLOCK = 128  # FP8 checkpoints carry one fp32 scale per 128×128 weight block
FP8_BYTES = 1.0 + 4.0 / (FP8_BLOCK * FP8_BLOCK)
DEFAULT_INT4_GROUP = 128
NVFP4_BLOCK, NVFP4_SCALE_BITS = 16, 8  # FP8 e4m3 scale per 16 values
MXFP4_BLOCK, MXFP4_SCALE_BITS = 32, 8  # E8M0 scale per 32 values
FP4_BLOCK = {"nvfp4": NVFP4_BLOCK, "mxfp4": MXFP4_BLOCK}
GROUPED = frozenset({"int4", "w4a8"})  # formats with a user-set group size (INT4 group scales)
QUANTIZED_ACTIVATIONS = frozenset({"fp8", "w4a8", *FP4_FORMATS})  # a quantize kernel runs before their GEMMs


def bytes_per_weight(fmt: str, group_size: int | None = None) -> float:
    """Bytes one weight costs in `fmt`, its scales included (`group_size`: INT4's group, default 128)."""
    if fmt == "bf16":
        return BF16_BYTES
    if fmt == "fp8":
        return FP8_BYTES
    if fmt == "nvfp4":
        return (4 + NVFP4_SCALE_BITS / NVFP4_BLOCK) / 8
    if fmt == "mxfp4":
        return (4 + MXFP4_SCALE_BITS / MXFP4_BLOCK) / 8
    return (4 + 16 / (group_size or DEFAULT_INT4_GROUP)) / 8  # int4, w4a8


def tensor_core(fmt: str) -> str:
    """The tensor-core rate a format's GEMMs run at: bf16, int4 (BF16 after dequantization), fp8, w4a8 (FP8
    after conversion) or fp4."""
    return "fp4" if fmt in FP4_FORMATS else fmt


def fp4_tflops(hw: HardwareSpec) -> float:
    if hw.fp4_tflops is None:  # the scenario rejects FP4 weights on such hardware first
        raise ValueError(f"hardware '{hw.name}' has no FP4 tensor cores")
    return hw.fp4_tflops
