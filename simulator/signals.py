"""SIGINT and SIGTERM held back through a short step that must not be cut in two, then delivered.

Two steps need it: putting a set of output files in place (`simulator.atomic`: a signal between two renames
would leave the new CSV beside the old JSON) and starting worker processes (`planning.backends`: a worker
forked while its parent is stopping is registered nowhere, so nothing stops it).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

HELD = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block ends, then deliver them (to the handler that was set, or by their
    default action). Handlers can be set only in the main thread; elsewhere (a page's worker thread) nothing is
    held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    before = {s: signal.signal(s, lambda signum, _frame: got.append(signum)) for s in HELD}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
        for s in dict.fromkeys(got):
            signal.raise_signal(s)
