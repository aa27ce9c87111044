"""The console script's first instant: a SIGTERM that arrives while the CLI is still importing (about a second on
a busy machine) is held, and answered as the CLI answers one, instead of killing the process without a word."""

from __future__ import annotations

import signal
import sys


def main() -> None:
    got: list[int] = []
    before = signal.signal(signal.SIGTERM, lambda signum, _frame: got.append(signum))
    from phaseplan import cli  # click, rich, pydantic, numpy and the simulator: the slow part

    signal.signal(signal.SIGTERM, before)
    if got:  # nothing has started: there is nothing to finish or undo
        print("error: terminated (SIGTERM)", file=sys.stderr)
        sys.exit(143)
    cli.main()
