"""Progress on stderr for anything that runs many simulations: a bar per point, or a status line for a bisection.

Shown only on a terminal (piped output stays clean) and erased when done.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from simulator.console import PlainConsole


class Counter:
    """A bar's position across several `Backend.map` calls (each counts from 1 again)."""

    def __init__(self, update: Callable[[int], None] | None) -> None:
        self.update, self.base, self.last = update, 0, 0

    def start_batch(self) -> None:
        self.base += self.last
        self.last = 0

    def __call__(self, done: int) -> None:
        self.last = done
        if self.update is not None:
            self.update(self.base + done)


@contextmanager
def bar(label: str, total: int) -> Iterator[Callable[[int], None] | None]:
    """`tick(done)` for a bar of `total` points, or None when there is no terminal to show it on."""
    if total < 2 or not sys.stderr.isatty():
        yield None
        return
    prog = Progress(
        f"[progress.description]{label}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = prog.add_task(label, total=total)
    with prog:
        yield lambda done: prog.update(task, completed=done)


@contextmanager
def status(label: str) -> Iterator[Callable[[str], None] | None]:
    """`note(text)` shown after `label` on a status line, or None without a terminal."""
    if not sys.stderr.isatty():
        yield None
        return
    console = PlainConsole(stderr=True)  # a trial's reason may quote a file's path: shown as text
    with console.status(label) as st:
        yield lambda text: st.update(f"{label}: {text}")
