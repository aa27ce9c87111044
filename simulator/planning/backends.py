"""Where independent simulations run: this process, local worker processes, or a Ray cluster.

Every task is a pure function of its input and results come back in input order, whatever finished first,
so a sweep's, search's or repeat's output is byte-identical for every backend and worker count. Local
workers are forked from a fork server that imported the simulator once (not from this process, where a
progress bar's thread may be running), and load the compiled kernels from numba's on-disk cache. Ray is
an optional extra: `RAY_ADDRESS` names a cluster (whose nodes need phaseplan installed); unset, a local Ray
is started with `jobs` CPUs and stopped afterwards.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from typing import Any, TypeVar

from simulator.errors import InputError

KINDS = ("local", "ray")
PRELOAD = ["simulator.planning.trial", "simulator.planning.sweeps"]  # imported once by the fork server
T = TypeVar("T")
R = TypeVar("R")


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

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
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
        if self._pool is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(PRELOAD)
            self._pool = ProcessPoolExecutor(self.jobs, mp_context=ctx)
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
        if self._ray is not None:
            return self._ray
        try:
            import ray
        except ImportError:
            raise InputError("--backend ray: Ray is not installed (pip install 'phaseplan[ray]')") from None
        if not ray.is_initialized():
            address = os.environ.get("RAY_ADDRESS") or None
            quiet = {"include_dashboard": False, "logging_level": "ERROR", "log_to_driver": False}
            if address:
                ray.init(address=address, **quiet)
            else:
                ray.init(num_cpus=self.jobs, **quiet)
            self._ray_started = True
        self._ray = ray
        return ray
