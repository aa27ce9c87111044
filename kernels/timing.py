"""Which clock times work on a device.

GPU: wall time (`perf_counter`) around a device synchronize. CPU: the calling thread's CPU time
(`thread_time`, CLOCK_THREAD_CPUTIME_ID): the torch reference ops run in this one thread (torch is set to one
thread), and on a machine shared with other processes wall time also counts their time slices — on the 2-core
development machine, shared by several agents, wall times of the same op moved by 2× between minutes; a CPU
profile and a CPU replay must be timed by the same clock to be compared at all.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable


def clock(device: str) -> Callable[[], float]:
    """Seconds, for differences only."""
    return time.thread_time if device == "cpu" else time.perf_counter


def preemptions() -> int:
    """Times the OS has taken the core from this thread so far (involuntary context switches; 0 where the OS does
    not count them per thread). Thread CPU time leaves the time away out but not what it costs on return: caches
    and TLB refilled after another process ran (0.3–1.5 ms of CPU time each on the 2-core development VM,
    `compare --device cpu`'s estimate)."""
    try:
        return resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw
    except (AttributeError, OSError):
        return 0
