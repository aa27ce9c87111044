"""Where independent simulations run: this process, local worker processes, or a Ray cluster.

Every task is a pure function of its input and results come back in input order, whatever finished first,
so a sweep's, search's or repeat's output is byte-identical for every backend and worker count. Local
workers are forked from a fork server that imported the simulator once (not from this process, where a
progress bar's thread may be running), and load the compiled kernels from numba's on-disk cache. Ray is
an optional extra: `RAY_ADDRESS` names a cluster (whose nodes need phaseplan installed); unset, a local Ray
is started with `jobs` CPUs and stopped afterwards. Connecting is `ray_cluster.connect`'s: the address checked,
the wait bounded, SIGTERM honoured.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from typing import Any, TypeVar

from simulator import signals
from simulator.errors import InputError

KINDS = ("local", "ray")
STOP_S = 2.0  # how long a stopped worker may take to be reaped
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies
PRELOAD = ["simulator.planning.trial", "simulator.planning.sweeps"]  # imported once by the fork server
T = TypeVar("T")
R = TypeVar("R")


def _worker_start() -> None:
    """In each worker: a Ctrl-C on the terminal reaches the whole process group, but only the parent handles it
    (it stops the workers; a worker's own KeyboardInterrupt would print a traceback); and on Linux a worker
    whose parent (the fork server, which ends with this process) dies is killed too, even by SIGKILL."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _stop_helpers() -> None:
    """Stop and reap the fork server and multiprocessing's resource tracker, this process's own children, when it
    is ending early (left to end with it, they linger as zombies until init reaps them). Their stop methods are
    CPython's own, not public API: where they are missing the helpers end with this process as before."""
    from multiprocessing import forkserver, resource_tracker

    for helper in (forkserver._forkserver, resource_tracker._resource_tracker):
        with contextlib.suppress(Exception):
            helper._stop()


def _ray_running() -> bool:
    """Whether this process is connected to Ray already (a caller's own `ray.init`, which it ends itself)."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def default_jobs() -> int:
    """Local workers when `--jobs` is not given: one per CPU, at most 4."""
    return max(1, min(4, os.cpu_count() or 1))


class Backend:
    """`with Backend(kind, jobs) as b: b.map(fn, items, on_done)`; workers live as long as the block."""

    def __init__(self, kind: str = "local", jobs: int = 1) -> None:
        if kind not in KINDS:
            raise InputError(f"--backend {kind!r}: expected one of {', '.join(KINDS)}")
        self.kind, self.jobs = kind, max(1, jobs)
        self._pool: ProcessPoolExecutor | None = None
        self._ray: Any = None
        self._ray_started = False

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if self._pool is not None:
            if exc_type is not None:  # interrupted (SIGINT, SIGTERM) or failed: the running points die with us
                procs = list((getattr(self._pool, "_processes", None) or {}).values())  # the executor's workers
                for proc in procs:
                    proc.kill()
                for proc in procs:  # reaped by the fork server before it ends: no zombie outlives us
                    proc.join(STOP_S)
            self._pool.shutdown(wait=exc_type is None, cancel_futures=True)
            self._pool = None
            if exc_type is not None:
                _stop_helpers()
        if self._ray_started:
            self._ray.shutdown()
            self._ray_started = False

    def map(self, fn: Callable[[T], R], items: Sequence[T], on_done: Callable[[int], None] | None = None) -> list[R]:
        """`[fn(x) for x in items]`, in parallel where the backend allows; `on_done(n)` after each completion."""
        if self.kind == "ray":
            return self._map_ray(fn, items, on_done)
        if self.jobs == 1 or len(items) <= 1:
            out = []
            for i, x in enumerate(items):
                out.append(fn(x))
                if on_done is not None:
                    on_done(i + 1)
            return out
        with signals.held():  # every worker this starts is registered (so stopped on exit) before a signal lands
            if self._pool is None:
                ctx = multiprocessing.get_context("forkserver")
                ctx.set_forkserver_preload(PRELOAD)
                self._pool = ProcessPoolExecutor(self.jobs, mp_context=ctx, initializer=_worker_start)
            futures: dict[Future[R], int] = {self._pool.submit(fn, x): i for i, x in enumerate(items)}
        results: list[Any] = [None] * len(items)
        for n, fut in enumerate(as_completed(futures), 1):
            results[futures[fut]] = fut.result()
            if on_done is not None:
                on_done(n)
        return results

    def _map_ray(self, fn: Callable[[T], R], items: Sequence[T], on_done: Callable[[int], None] | None) -> list[R]:
        ray = self._connect()
        task = ray.remote(num_cpus=1)(fn)
        refs = [task.remote(x) for x in items]
        pending, n = list(refs), 0
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            n += len(done)
            if on_done is not None:
                on_done(n)
        return ray.get(refs)

    def _connect(self) -> Any:
        if self._ray is None:
            from simulator.planning.ray_cluster import connect

            started = _ray_running()
            self._ray = connect(self.jobs)
            self._ray_started = not started
        return self._ray
