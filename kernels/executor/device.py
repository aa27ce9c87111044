"""The device a replay runs on, and the op-family stopwatch the executor's ops report to.

CPU: the torch reference ops of `kernels.reference`, one thread (the CPU profile is measured the same way, so
their times can be compared) and denormals flushed (random weights must not hit the slow path). CUDA: the
Triton kernels of `kernels/`, cuBLAS and `torch._scaled_mm` where phaseplan has none (this path has not been
run: no GPU was lent while it was written).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import torch

from kernels.timing import clock

CPU_THREADS = 1
T = TypeVar("T")


def prepare(device: str) -> torch.device:
    """Set the process up for timing on `device` (the CPU profile uses the same settings)."""
    if device == "cpu":
        torch.set_num_threads(CPU_THREADS)
        torch.set_flush_denormal(True)
    elif not torch.cuda.is_available():
        from simulator.errors import InputError

        raise InputError("--device cuda: no CUDA device is visible to torch")
    return torch.device(device)


def synchronize(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


@dataclass
class Stopwatch:
    """Seconds by op family while `on` (a sampled step); otherwise one extra call per op, so timed steps pay
    almost nothing for it."""

    dev: torch.device
    on: bool = False
    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    now: Callable[[], float] = field(init=False)

    def __post_init__(self) -> None:
        self.now = clock(self.dev.type)  # CPU: this thread's CPU time (kernels.timing)

    def run(self, family: str, fn: Callable[..., T], *args: object) -> T:
        if not self.on:
            return fn(*args)
        synchronize(self.dev)
        t0 = self.now()
        out = fn(*args)
        synchronize(self.dev)
        self.seconds[family] += self.now() - t0
        return out

    def timed(self, fn: Callable[[], object]) -> float:
        """Wall seconds of `fn` on the device (synchronized before and after)."""
        synchronize(self.dev)
        t0 = self.now()
        fn()
        synchronize(self.dev)
        return self.now() - t0
