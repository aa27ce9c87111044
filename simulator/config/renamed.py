"""Fields renamed since scenarios were first written: an old spelling in a file, a `--set` or a sweep still
loads, with one `warning:` line on stderr naming the new spelling (once per process, however many points a
sweep loads)."""

from __future__ import annotations

import sys
from typing import Any

from simulator.errors import InputError

# (mapping's path, old key) -> new key
RENAMED: dict[tuple[str, str], str] = {
    ("slo", "ttft_ms"): "ttft_p95_ms",  # one spelling for the file and `--slo` (issue 24)
    ("slo", "tpot_ms"): "tpot_p95_ms",
}
_warned: set[str] = set()


def _warn(old: str, new: str, where: str) -> None:
    if old not in _warned:
        _warned.add(old)
        print(f"warning: {where}{old} is deprecated, use {new}", file=sys.stderr)


def upgrade(data: dict[str, Any], source: str) -> dict[str, Any]:
    """The raw scenario mapping with old keys under their new names (a copy where anything moved)."""
    out = data
    for (parent, old), new in RENAMED.items():
        block = out.get(parent)
        if not isinstance(block, dict) or old not in block:
            continue
        if new in block:
            raise InputError(f"{source}: {parent}: both {old} and {new} given ({old} is the old name of {new})")
        if out is data:
            out = dict(data)
        out[parent] = {(new if k == old else k): v for k, v in block.items()}
        _warn(f"{parent}.{old}", f"{parent}.{new}", f"{source}: ")
    return out


def path(dotted: str, where: str = "--set ") -> str:
    """A dotted path with an old field name replaced by its new one (warned once)."""
    parent, _, key = dotted.rpartition(".")
    new = RENAMED.get((parent, key))
    if new is None:
        return dotted
    _warn(dotted, f"{parent}.{new}", where)
    return f"{parent}.{new}"
