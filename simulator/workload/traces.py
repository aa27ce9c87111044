"""Request traces → `Request`s: the project's JSONL, the Azure LLM inference CSV and the Mooncake JSONL.

Every reader clamps zero output tokens to 1 (a request always produces its first token, and a zero would
make TPOT undefined) and names the file and line of any row it cannot use. Rows whose content the format
does not describe get unique blocks, so a prefix cache only ever hits reuse the trace actually contains.

Block values are 63-bit splitmix64 hashes, stable across processes and platforms, unlike Python's salted
`hash()` of strings.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from simulator.config.scenario import Traffic
from simulator.errors import InputError
from simulator.workload.lengths import resolve
from simulator.workload.request import Request

M64 = (1 << 64) - 1
ROOT = 0x243F6A8885A308D3  # chain start for named content (digits of π: nothing up the sleeve)
UNIQUE_ROOT = 0x13198A2E03707344  # stream keys of content nobody else shares
MOONCAKE_BLOCK = 512
PHASEPLAN_KEYS = {"arrival", "prompt_tokens", "output_tokens", "session", "turn", "blocks", "block_tokens"}
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MAX_TOKENS = 100_000_000  # tokens of one request: no model reads more (the largest contexts are ~10M)


# --- content identity -------------------------------------------------------------------------------------


def mix64(x: Any) -> Any:
    """splitmix64's finaliser, on a Python int or a uint64 array alike."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def chain(prev: Any, content: Any) -> Any:
    """A block's value: its predecessor's value combined with its own content id, in 63 bits."""
    return mix64(prev ^ mix64(content)) >> 1


def chain_rows(rows: Sequence[Sequence[int]], root: int = ROOT) -> list[tuple[int, ...]]:
    """Chained block values of each row of non-negative content ids, vectorised across rows by position."""
    lens = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.uint64, count=int(lens.sum()))
    starts = np.cumsum(lens) - lens
    out = np.empty_like(flat)
    for p in range(int(lens.max(initial=0))):
        idx = starts[lens > p] + p
        prev = out[idx - 1] if p else np.full(len(idx), root, dtype=np.uint64)
        out[idx] = chain(prev, flat[idx])
    values = out.tolist()
    return [tuple(values[s : s + n]) for s, n in zip(starts.tolist(), lens.tolist(), strict=True)]


def stream_key(root: int, stream: Any) -> Any:
    """The key of a content stream (one request's, or one conversation's) that continues the prefix `root`:
    distinct streams get distinct, well-spread 62-bit keys (mix64 is a bijection)."""
    return mix64(root ^ stream) >> 2


def stream_blocks(key: int, start: int, stop: int) -> tuple[int, ...]:
    """Blocks start..stop-1 of a stream: block b's value is key + b.

    Within one stream block b's content always follows the same b blocks, so (stream, b) names the prefix
    as a chain through every block would, at the cost of a `range`. Keys are 62-bit, so ranges never wrap,
    and two streams' ranges overlap with probability about streams² × blocks / 2^62 (~1e-5 for 10^5 streams
    of 2,000 blocks).
    """
    return tuple(range(key + start, key + max(start, stop)))


def _give_unique_blocks(reqs: list[Request], rows: list[int]) -> None:
    """Rows whose content the trace does not describe get their own stream, keyed by row number."""
    for i in rows:
        r = reqs[i]
        r.blocks = stream_blocks(stream_key(UNIQUE_ROOT, i), 0, r.prompt_tokens // r.block_tokens)


# --- reading ----------------------------------------------------------------------------------------------


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every non-blank line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read trace ({getattr(e, 'strerror', None) or e})") from None
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            yield n, line


def _bad(path: Path, n: int, what: str) -> InputError:
    return InputError(f"{path}: line {n}: {what}")


def _json_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for n, line in _lines(path):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise _bad(path, n, f"not valid JSON ({e.msg})") from None
        except RecursionError:
            raise _bad(path, n, "JSON nested too deeply") from None
        if not isinstance(row, dict):
            raise _bad(path, n, f"expected a JSON object, got {type(row).__name__}")
        yield n, row


def _int(row: dict[str, Any], key: str, minimum: int, path: Path, n: int, maximum: int | None = None) -> int:
    v = row.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum or (maximum is not None and v > maximum):
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum:,}]"
        raise _bad(path, n, f"'{key}' must be an integer {bound}, got {_short(v)}")
    return v


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def _time(row: dict[str, Any], key: str, path: Path, n: int) -> float:
    v = row.get(key)
    if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
        raise _bad(path, n, f"'{key}' must be a non-negative number, got {v!r}")
    return float(v)


def _ints(row: dict[str, Any], key: str, path: Path, n: int) -> list[int]:
    v = row[key]
    if not isinstance(v, list) or (v and (set(map(type, v)) != {int} or min(v) < 0)):  # C-speed checks
        raise _bad(path, n, f"'{key}' must be a list of non-negative integers")
    return v


def read_phaseplan(path: Path) -> list[Request]:
    """The project's JSONL: one object per line with `arrival` (s), `prompt_tokens`, `output_tokens` and
    optionally `session`, `turn`, `blocks` and `block_tokens` (default 512); unknown keys are errors, so a
    typo cannot silently drop a field. Rows without `blocks` get unique content."""
    reqs: list[Request] = []
    no_blocks: list[int] = []
    for n, row in _json_rows(path):
        unknown = sorted(set(row) - PHASEPLAN_KEYS)
        if unknown:
            expected = ", ".join(sorted(PHASEPLAN_KEYS))
            raise _bad(path, n, f"unknown key(s) {', '.join(unknown)}; expected {expected}")
        prompt = _int(row, "prompt_tokens", 1, path, n, MAX_TOKENS)
        block_tokens = _int(row, "block_tokens", 1, path, n, MAX_TOKENS) if "block_tokens" in row else MOONCAKE_BLOCK
        blocks = tuple(_ints(row, "blocks", path, n)) if "blocks" in row else ()
        if len(blocks) * block_tokens > prompt:
            raise _bad(path, n, f"{len(blocks)} blocks × {block_tokens} tokens exceed {prompt} prompt tokens")
        if "blocks" not in row:
            no_blocks.append(len(reqs))
        session = row.get("session")
        reqs.append(
            Request(
                id=len(reqs),
                arrival=_time(row, "arrival", path, n),
                prompt_tokens=prompt,
                output_tokens=max(1, _int(row, "output_tokens", 0, path, n, MAX_TOKENS)),
                session=None if session is None else _int(row, "session", 0, path, n),
                turn=_int(row, "turn", 0, path, n) if "turn" in row else 0,
                blocks=blocks,
                block_tokens=block_tokens,
            )
        )
    _give_unique_blocks(reqs, no_blocks)
    return reqs


def _azure_ticks(stamp: str, days: dict[str, int]) -> int:
    """'2023-11-16 18:17:03.9799600' → integer 100 ns ticks: exact, where float seconds since 1 AD are not."""
    date, _, clock = stamp.strip().replace("T", " ").partition(" ")
    if date not in days:
        days[date] = dt.date.fromisoformat(date).toordinal()
    hms, _, frac = clock.partition(".")
    h, m, s = hms.split(":")
    if frac and not frac.isdigit():
        raise ValueError(frac)
    return (((days[date] * 24 + int(h)) * 60 + int(m)) * 60 + int(s)) * 10**7 + int((frac + "0" * 7)[:7])


def read_azure(path: Path) -> list[Request]:
    """The Azure LLM inference trace CSV (`TIMESTAMP,ContextTokens,GeneratedTokens`, absolute wall times):
    arrivals become seconds after the earliest row. It says nothing of content, so every row is unique."""
    lines = _lines(path)
    first = next(lines, None)
    if first is None:
        raise InputError(f"{path}: empty trace")
    n, header = first
    cols = [c.strip() for c in header.split(",")]
    if not set(AZURE_COLUMNS) <= set(cols):
        raise _bad(path, n, f"expected a header with {','.join(AZURE_COLUMNS)}, got {header.strip()!r}")
    it, ic, ig = (cols.index(c) for c in AZURE_COLUMNS)
    days: dict[str, int] = {}
    ticks: list[int] = []
    lens: list[tuple[int, int]] = []
    for n, line in lines:
        parts = line.split(",")
        try:
            if len(parts) != len(cols):
                raise ValueError
            t, prompt, output = _azure_ticks(parts[it], days), int(parts[ic]), int(parts[ig])
            if not (1 <= prompt <= MAX_TOKENS and 0 <= output <= MAX_TOKENS):
                raise ValueError
        except ValueError:
            expected = f"TIMESTAMP,ContextTokens in [1, {MAX_TOKENS:,}],GeneratedTokens in [0, {MAX_TOKENS:,}]"
            raise _bad(path, n, f"expected {expected}, got {_short(line.strip())}") from None
        ticks.append(t)
        lens.append((prompt, output))
    t0 = min(ticks, default=0)
    reqs = [
        Request(id=i, arrival=(t - t0) / 1e7, prompt_tokens=p, output_tokens=max(1, o))
        for i, (t, (p, o)) in enumerate(zip(ticks, lens, strict=True))
    ]
    _give_unique_blocks(reqs, list(range(len(reqs))))
    return reqs


def read_mooncake(path: Path) -> list[Request]:
    """The Mooncake trace JSONL (`timestamp` ms, `input_length`, `output_length`, `hash_ids` of 512-token
    blocks, equal ids = equal content). A block's value chains its hash id onto its predecessor's value;
    the prompt's last, partial block is dropped, since only whole blocks can be shared."""
    reqs: list[Request] = []
    ids: list[list[int]] = []
    no_blocks: list[int] = []
    for n, row in _json_rows(path):
        prompt = _int(row, "input_length", 1, path, n, MAX_TOKENS)
        if "hash_ids" in row:
            ids.append(_ints(row, "hash_ids", path, n)[: prompt // MOONCAKE_BLOCK])
        else:
            no_blocks.append(len(reqs))
            ids.append([])
        reqs.append(
            Request(
                id=len(reqs),
                arrival=_time(row, "timestamp", path, n) / 1000.0,
                prompt_tokens=prompt,
                output_tokens=max(1, _int(row, "output_length", 0, path, n, MAX_TOKENS)),
                block_tokens=MOONCAKE_BLOCK,
            )
        )
    for r, blocks in zip(reqs, chain_rows(ids), strict=True):
        r.blocks = blocks
    _give_unique_blocks(reqs, no_blocks)
    return reqs


READERS: dict[str, Callable[[Path], list[Request]]] = {
    "phaseplan": read_phaseplan,
    "azure": read_azure,
    "mooncake": read_mooncake,
}


def detect_format(path: Path) -> str:
    """By extension (.csv → azure), else by the first line: a CSV header, or a JSON object's keys."""
    if path.suffix.lower() == ".csv":
        return "azure"
    n, line = next(_lines(path), (1, ""))
    if line.lstrip().startswith(AZURE_COLUMNS[0]):
        return "azure"
    try:
        keys = set(json.loads(line))
    except (json.JSONDecodeError, TypeError):
        keys = set()
    if "arrival" in keys:
        return "phaseplan"
    if {"timestamp", "input_length"} <= keys:
        return "mooncake"
    raise _bad(path, n, "cannot tell the format (phaseplan, azure or mooncake); set traffic.trace_format")


def load_trace(traffic: Traffic, base_dir: Path | None = None) -> list[Request]:
    """The scenario's trace, time-ordered, sped up by `trace_speedup` and cut to `duration_s` / `requests`;
    ids are reassigned 0, 1, 2, … in arrival order."""
    assert traffic.trace is not None
    path = resolve(traffic.trace, base_dir)
    fmt = detect_format(path) if traffic.trace_format == "auto" else traffic.trace_format
    reqs = sorted(READERS[fmt](path), key=lambda r: r.arrival)
    if not reqs:
        raise InputError(f"{path}: trace has no requests")
    for r in reqs:
        r.arrival /= traffic.trace_speedup
    if traffic.duration_s is not None:
        reqs = [r for r in reqs if r.arrival < traffic.duration_s]
    reqs = reqs[: traffic.requests]
    for i, r in enumerate(reqs):
        r.id = i
    return reqs
