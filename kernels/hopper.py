"""Where a kernel runs: compiled for Hopper (sm_90) or, on CPU tensors, in the Triton interpreter.

Every kernel module builds `Launch` plans; `run` executes them (interpreter for CPU tensors, so tests need no
TRITON_INTERPRET and can mix with compile checks in one process), and `compile_sm90` compiles the very same
plan for sm_90 without a GPU (plans built from meta tensors) and reports what the interpreter cannot show:
wgmma use, registers, local memory and spills.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

_TRITON_TYPES = {
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.float32: "fp32",
    torch.float8_e4m3fn: "fp8e4nv",
    torch.int8: "i8",
    torch.int16: "i16",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.uint8: "u8",
}
_INTERPRETED: dict[Any, InterpretedFunction] = {}


@dataclass
class Launch:
    """One kernel launch: runtime arguments by name, compile-time constants, grid and launch options."""

    kernel: Any
    grid: tuple[int, ...]
    args: dict[str, Any]
    constexprs: dict[str, Any] = field(default_factory=dict)
    num_warps: int = 4
    num_stages: int = 2


@dataclass
class HopperReport:
    """What the sm_90 compile of one launch produced."""

    name: str
    ptx: str
    wgmma: bool
    registers: int
    local_bytes: int
    spill_bytes: int
    shared_bytes: int


def _python_fn(kernel: Any) -> Any:
    return kernel.fn if isinstance(kernel, JITFunction | InterpretedFunction) else kernel


def _interpreted(fn: Any) -> InterpretedFunction:
    if fn not in _INTERPRETED:
        _INTERPRETED[fn] = InterpretedFunction(fn)
    return _INTERPRETED[fn]


@contextmanager
def _jit_calls_interpreted() -> Iterator[None]:
    """Route calls to @triton.jit helpers (tl.sum, tl.cdiv, ...) through the interpreter while it runs.

    Without TRITON_INTERPRET set at import, triton's own helpers are compiled-only functions; this lets the
    interpreter run our kernels in a process that also compiles them for sm_90. The interpreter patches
    triton.language in place and does not undo the patches made by nested helper calls, so everything it may
    touch is restored afterwards; otherwise a later sm_90 compile in this process would see interpreter code.
    """
    touched = [tl, tl.core, tl.math, tl.standard, tl.core.tensor, tl.core.tensor_descriptor_base, JITFunction]
    saved = [dict(vars(obj)) for obj in touched]
    JITFunction.__call__ = lambda self, *args, **kwargs: _interpreted(self.fn)(*args, **kwargs)
    try:
        yield
    finally:
        for obj, before in zip(touched, saved, strict=True):  # names the interpreter adds stay: it caches them
            for name, value in before.items():
                if vars(obj).get(name) is not value:
                    setattr(obj, name, value)


def run(launch: Launch) -> None:
    """Launch on the tensors' device: compiled on CUDA, interpreted on CPU."""
    on_cpu = any(isinstance(v, torch.Tensor) and v.device.type == "cpu" for v in launch.args.values())
    if on_cpu:
        with _jit_calls_interpreted():
            _interpreted(_python_fn(launch.kernel))[launch.grid](**launch.args, **launch.constexprs)
    else:
        kernel = launch.kernel if isinstance(launch.kernel, JITFunction) else triton.jit(_python_fn(launch.kernel))
        kernel[launch.grid](
            **launch.args, **launch.constexprs, num_warps=launch.num_warps, num_stages=launch.num_stages
        )


def _signature(kernel: JITFunction, launch: Launch) -> tuple[dict[str, str], dict[tuple[int], list]]:
    """Triton signature plus the 16-divisibility hints the JIT would derive (aligned pointers, ints % 16)."""
    sig: dict[str, str] = {}
    attrs: dict[tuple[int], list] = {}
    for i, name in enumerate(kernel.arg_names):
        if name in launch.constexprs:
            sig[name] = "constexpr"
            continue
        value = launch.args[name]
        if isinstance(value, torch.Tensor):
            sig[name] = "*" + _TRITON_TYPES[value.dtype]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(value, bool | int):
            sig[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
            if value % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            sig[name] = "fp32"
    return sig, attrs


def _nvidia_tool(name: str) -> str | None:
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
    return str(bundled) if bundled.exists() else shutil.which(name)


def _resource_usage(cubin: bytes, ptx: str) -> tuple[int, int, int]:
    """(registers, local bytes, spill bytes) from cuobjdump/ptxas; PTX `.local` use if neither exists."""
    cuobjdump, ptxas = _nvidia_tool("cuobjdump"), _nvidia_tool("ptxas")
    regs = local = spills = 0
    with tempfile.TemporaryDirectory() as tmp:
        if cuobjdump:
            path = os.path.join(tmp, "k.cubin")
            Path(path).write_bytes(cubin)
            res = subprocess.run([cuobjdump, "-res-usage", path], capture_output=True, text=True).stdout
            regs = int(m.group(1)) if (m := re.search(r"REG:(\d+)", res)) else 0
            local = int(m.group(1)) if (m := re.search(r"LOCAL:(\d+)", res)) else 0
        else:
            local = len(re.findall(r"\b(?:ld|st)\.local", ptx))
        if ptxas:
            path = os.path.join(tmp, "k.ptx")
            Path(path).write_text(ptx)
            log = subprocess.run(
                [ptxas, "-arch=sm_90a", "-v", path, "-o", os.path.join(tmp, "o.cubin")],
                capture_output=True,
                text=True,
            ).stderr
            spills = sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log))
    return regs, local, spills


def compile_sm90(launch: Launch) -> HopperReport:
    """Compile one launch (meta tensors are enough) for sm_90 on the CPU and summarise the result."""
    fn = _python_fn(launch.kernel)
    kernel = launch.kernel if isinstance(launch.kernel, JITFunction) else JITFunction(fn)
    sig, attrs = _signature(kernel, launch)
    src = ASTSource(kernel, sig, launch.constexprs, attrs)
    compiled = triton.compile(
        src,
        target=GPUTarget("cuda", 90, 32),
        options={"num_warps": launch.num_warps, "num_stages": launch.num_stages},
    )
    ptx = compiled.asm["ptx"]
    regs, local, spills = _resource_usage(compiled.asm["cubin"], ptx)
    return HopperReport(
        name=fn.__name__,
        ptx=ptx,
        wgmma="wgmma" in ptx,
        registers=regs,
        local_bytes=local,
        spill_bytes=spills,
        shared_bytes=compiled.metadata.shared,
    )
