"""Random weights of one rank in a pool's formats, and how the device multiplies by them.

Formats (what `capacity.py` counts): BF16; FP8 e4m3 with one fp32 scale per 128×128 block; INT4 symmetric,
packed eight to an int32 as `kernels.w4a16.pack_int4` lays them out, one BF16 scale per group of the pool's
size. The values are random (a replay measures time, not text), drawn once from a seeded generator on the
device (a whole Kimi K2.6 TP8 rank, ~70 GiB, would take minutes to draw on the host).

CPU (torch reference, what the CPU profile times): BF16 and FP8 weights are dequantized once at load into a
float32 copy and multiplied in float32 (`kernels.measure` times CPU GEMMs the same way); INT4 goes through
`reference.w4a16_gemm`, which dequantizes its groups on every call, as the profile's CPU timing does.
CUDA: BF16 by cuBLAS, FP8 by `torch._scaled_mm` with the block scales folded into one per tensor (the bytes
moved are the same; the profile times the same call), INT4 by the Triton W4A16 kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels import reference as ref

FP8_BLOCK = 128


def _fp8_blocks(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [..., N, K] -> (e4m3 [..., N, K], fp32 scales [..., ceil(N/128), ceil(K/128)])."""
    n, k = w.shape[-2:]
    pn, pk = -n % FP8_BLOCK, -k % FP8_BLOCK
    padded = torch.nn.functional.pad(w, (0, pk, 0, pn))
    blocks = padded.unflatten(-1, (-1, FP8_BLOCK)).unflatten(-3, (-1, FP8_BLOCK))  # [..., nb, 128, kb, 128]
    scales = (blocks.abs().amax(dim=(-3, -1)) / ref.FP8_MAX).clamp_min(1e-12)  # [..., nb, kb]
    full = scales.repeat_interleave(FP8_BLOCK, -2).repeat_interleave(FP8_BLOCK, -1)[..., :n, :k]
    return ref.quantize_fp8(w, full), scales


def _fp8_dequantize(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    n, k = q.shape[-2:]
    full = scales.repeat_interleave(FP8_BLOCK, -2).repeat_interleave(FP8_BLOCK, -1)[..., :n, :k]
    return q.float() * full


@dataclass
class Weight:
    """A weight matrix [N, K] (or a stack of experts' [E, N, K]) of one rank, in its format."""

    fmt: str  # "bf16" | "fp8" | "int4"
    group: int
    data: torch.Tensor  # bf16 [.., N, K] | e4m3 [.., N, K] | int32 packed [.., N, K // 8]
    scales: torch.Tensor | None  # fp8: fp32 block scales; int4: bf16 [.., N, K // group]
    cpu_dense: torch.Tensor | None = None  # CPU: float32 weights (bf16 / fp8), or int8 nibbles (int4)

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size() + (
            0 if self.scales is None else self.scales.numel() * self.scales.element_size()
        )

    @classmethod
    def random(cls, gen: torch.Generator, shape: tuple[int, ...], fmt: str, group: int, dev: torch.device) -> Weight:
        """Random weights of `shape` in `fmt`, drawn on the device from `gen` (a generator of that device)."""
        if fmt == "int4" and shape[-1] % group:
            raise ValueError(f"INT4 group {group} does not divide K = {shape[-1]}")
        if dev.type == "cpu":
            return cls._random_cpu(gen, shape, fmt, group)
        return cls._random_device(gen, shape, fmt, group, dev)

    @classmethod
    def _random_device(
        cls, gen: torch.Generator, shape: tuple[int, ...], fmt: str, group: int, dev: torch.device
    ) -> Weight:
        """Drawn straight in the stored format (no float32 copy of a 70 GiB rank ever exists)."""
        k = shape[-1]
        if fmt == "bf16":
            return cls(fmt, 0, torch.randn(*shape, generator=gen, device=dev, dtype=torch.bfloat16) / k**0.5, None)
        if fmt == "fp8":  # e4m3 values of N(0, 1) and one scale per block: the bytes and layout of a checkpoint
            q = torch.randn(*shape, generator=gen, device=dev, dtype=torch.bfloat16).to(ref.FP8)
            blocks = (*shape[:-2], -(-shape[-2] // FP8_BLOCK), -(-k // FP8_BLOCK))
            return cls(fmt, 0, q, torch.full(blocks, k**-0.5, device=dev))
        if fmt == "int4":  # any int32 is eight valid nibbles: random packed words, scales of a unit-variance row
            packed = torch.randint(-(2**31), 2**31, (*shape[:-1], k // 8), generator=gen, device=dev, dtype=torch.int32)
            scales = torch.full((*shape[:-1], k // group), 0.22 * k**-0.5, device=dev, dtype=torch.bfloat16)
            return cls(fmt, group, packed, scales)
        raise ValueError(f"unknown weight format {fmt!r}")

    @classmethod
    def _random_cpu(cls, gen: torch.Generator, shape: tuple[int, ...], fmt: str, group: int) -> Weight:
        """Quantized from float32 random weights as a checkpoint would be; the reference's inputs kept."""
        w = torch.randn(*shape, generator=gen) / shape[-1] ** 0.5
        if fmt == "bf16":
            data = w.to(torch.bfloat16)
            return cls(fmt, 0, data, None, data.float())
        if fmt == "fp8":
            q, scales = _fp8_blocks(w)
            return cls(fmt, 0, q, scales, _fp8_dequantize(q, scales))
        if fmt == "int4":
            from kernels.w4a16 import pack_int4, quantize_int4

            q, scales = quantize_int4(w, group)
            return cls(fmt, group, pack_int4(q), scales, q)
        raise ValueError(f"unknown weight format {fmt!r}")

    # -- one matrix ------------------------------------------------------------------------------------------
    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """x [M, K] times this weight transposed -> [M, N] (float32 on CPU, bf16 on CUDA)."""
        if self.cpu_dense is not None:
            if self.fmt == "int4":
                return ref.w4a16_gemm(x, self.cpu_dense, self.scales, self.group)
            return x @ self.cpu_dense.T
        if self.fmt == "bf16":
            return x @ self.data.T
        if self.fmt == "fp8":
            one = torch.ones((), device=x.device)
            w_scale = self.scales.max()  # type: ignore[union-attr]
            return torch._scaled_mm(
                x.to(ref.FP8).contiguous(), self.data.T, scale_a=one, scale_b=w_scale, out_dtype=torch.bfloat16
            )
        from kernels.w4a16 import w4a16_gemm

        return w4a16_gemm(x.contiguous(), self.data, self.scales, self.group)

    # -- a stack of experts ----------------------------------------------------------------------------------
    def grouped(self, x: torch.Tensor, offsets: torch.Tensor, bounds: list[int]) -> torch.Tensor:
        """Rows offsets[e]:offsets[e+1] of x (sorted by expert) times expert e's weight -> [T, N]."""
        if self.cpu_dense is not None and self.fmt == "int4":
            return ref.w4a16_moe_gemm(x, offsets, self.cpu_dense, self.scales, self.group)
        if self.fmt == "int4":
            from kernels.w4a16 import w4a16_moe_gemm

            return w4a16_moe_gemm(x, offsets.to(torch.int32), self.data, self.scales, self.group)
        if self.cpu_dense is None and self.fmt == "bf16":
            return torch._grouped_mm(x, self.data.transpose(1, 2), offs=offsets[1:].to(torch.int32))
        out = x.new_empty(
            x.shape[0], self.data.shape[-2], dtype=torch.float32 if self.cpu_dense is not None else torch.bfloat16
        )
        for e in range(len(bounds) - 1):  # one GEMM per touched expert (the profile's baseline)
            lo, hi = bounds[e], bounds[e + 1]
            if hi > lo:
                out[lo:hi] = self._expert(e).matmul(x[lo:hi])
        return out

    def _expert(self, e: int) -> Weight:
        return Weight(
            self.fmt,
            self.group,
            self.data[e],
            None if self.scales is None else self.scales[e],
            None if self.cpu_dense is None else self.cpu_dense[e],
        )
