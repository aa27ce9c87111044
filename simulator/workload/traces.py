"""Request traces → `Request`s: the project's JSONL, the Azure LLM inference CSV and the Mooncake JSONL.

Every reader clamps zero output tokens to 1 (a request always produces its first token, and a zero would
make TPOT undefined) and names the file and line of any row it cannot use. Rows whose content the format
does not describe get unique blocks, so a prefix cache only ever hits reuse the trace actually contains.

Block values are 63-bit splitmix64 hashes, stable across processes and platforms, unlike Python's salted
`hash()` of strings.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simulator import input_files
from simulator.config.bounds import BOUNDS
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
HORIZON_S = BOUNDS[("Traffic", "duration_s")][1]  # arrivals lie within the longest run a scenario may ask for
ID_MAX = 2**63 - 1  # session, turn, block and hash ids: 63-bit integers (int64 arrays hold them)


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
# Every reader streams its file through `input_files.lines` (regular file, size, line count and length capped)
# and yields validated rows; the Requests are built from those rows, and `summary` counts them without building
# any, for the work estimate made before a run.


def _bad(path: Path, n: int, what: str) -> InputError:
    return InputError(f"{path}: line {n}: {what}")


def _json(path: Path, n: int, line: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise _bad(path, n, f"not valid JSON ({e.msg})") from None
    except RecursionError:
        raise _bad(path, n, "JSON nested too deeply") from None
    except ValueError as e:  # Python refuses integers of more than 4,300 digits
        raise _bad(path, n, f"not usable JSON ({str(e).split(':')[0]})") from None


def _json_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for n, line in input_files.lines(path, input_files.TRACE):
        row = _json(path, n, line)
        if not isinstance(row, dict):
            raise _bad(path, n, f"expected a JSON object, got {type(row).__name__}")
        yield n, row


def _int(row: dict[str, Any], key: str, minimum: int, path: Path, n: int, maximum: int = ID_MAX) -> int:
    v = row.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or not minimum <= v <= maximum:
        raise _bad(path, n, f"'{key}' must be an integer in [{minimum}, {maximum:,}], got {_short(v)}")
    return v


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def _time(row: dict[str, Any], key: str, path: Path, n: int, per_s: float) -> float:
    """A time in seconds (the field in units of 1/per_s s), within the horizon of `traffic.duration_s`."""
    v = row.get(key)
    top = HORIZON_S * per_s
    if not isinstance(v, int | float) or isinstance(v, bool) or not 0 <= v <= top:
        unit = "s" if per_s == 1 else "ms"
        raise _bad(path, n, f"'{key}' must be a number of {unit} in [0, {top:.0e}], got {_short(v)}")
    return float(v) / per_s if per_s != 1 else float(v)


def _ints(row: dict[str, Any], key: str, path: Path, n: int) -> list[int]:
    v = row[key]
    if not isinstance(v, list) or (v and (set(map(type, v)) != {int} or min(v) < 0 or max(v) > ID_MAX)):  # C speed
        raise _bad(path, n, f"'{key}' must be a list of integers in [0, {ID_MAX:,}] (63-bit ids)")
    return v


# (line, arrival s, prompt, output, session, turn, blocks or None, block_tokens)
PhaseplanRow = tuple[int, float, int, int, int | None, int, tuple[int, ...] | None, int]


def _phaseplan_rows(path: Path) -> Iterator[PhaseplanRow]:
    for n, row in _json_rows(path):
        unknown = sorted(set(row) - PHASEPLAN_KEYS)
        if unknown:
            expected = ", ".join(sorted(PHASEPLAN_KEYS))
            raise _bad(path, n, f"unknown key(s) {', '.join(unknown)}; expected {expected}")
        prompt = _int(row, "prompt_tokens", 1, path, n, MAX_TOKENS)
        block_tokens = _int(row, "block_tokens", 1, path, n, MAX_TOKENS) if "block_tokens" in row else MOONCAKE_BLOCK
        blocks = tuple(_ints(row, "blocks", path, n)) if "blocks" in row else None
        if blocks is not None and len(blocks) * block_tokens > prompt:
            raise _bad(path, n, f"{len(blocks)} blocks × {block_tokens} tokens exceed {prompt} prompt tokens")
        session = None if row.get("session") is None else _int(row, "session", 0, path, n)
        arrival = _time(row, "arrival", path, n, 1)
        output = _int(row, "output_tokens", 0, path, n, MAX_TOKENS)
        turn = _int(row, "turn", 0, path, n) if "turn" in row else 0
        yield n, arrival, prompt, output, session, turn, blocks, block_tokens


def read_phaseplan(path: Path) -> list[Request]:
    """The project's JSONL: one object per line with `arrival` (s), `prompt_tokens`, `output_tokens` and
    optionally `session`, `turn`, `blocks` and `block_tokens` (default 512); unknown keys are errors, so a
    typo cannot silently drop a field. Rows without `blocks` get unique content."""
    reqs: list[Request] = []
    no_blocks: list[int] = []
    for _, arrival, prompt, output, session, turn, blocks, block_tokens in _phaseplan_rows(path):
        if blocks is None:
            no_blocks.append(len(reqs))
        reqs.append(
            Request(
                id=len(reqs),
                arrival=arrival,
                prompt_tokens=prompt,
                output_tokens=max(1, output),
                session=session,
                turn=turn,
                blocks=blocks or (),
                block_tokens=block_tokens,
            )
        )
    _give_unique_blocks(reqs, no_blocks)
    return reqs


def _azure_ticks(stamp: str, days: dict[str, int]) -> int:
    """'2023-11-16 18:17:03.9799600' → integer 100 ns ticks: exact, where float seconds since 1 AD are not.
    Hours, minutes and seconds must be a clock's (a leap second allowed); a bad one is a ValueError."""
    date, _, clock = stamp.strip().replace("T", " ").partition(" ")
    if date not in days:
        days[date] = dt.date.fromisoformat(date).toordinal()
    hms, _, frac = clock.partition(".")
    h, m, s = (int(x) for x in hms.split(":"))
    if not (0 <= h < 24 and 0 <= m < 60 and 0 <= s <= 60) or (frac and not frac.isdigit()):
        raise ValueError(clock)
    return (((days[date] * 24 + h) * 60 + m) * 60 + s) * 10**7 + int((frac + "0" * 7)[:7])


def _azure_rows(path: Path) -> Iterator[tuple[int, int, int, int]]:
    """(line, 100 ns ticks since 1 AD, prompt, output) of each row, after the header; the span of the ticks is
    checked against the horizon once all are read (the earliest row may come last)."""
    lines = input_files.lines(path, input_files.TRACE)
    first = next(lines, None)
    if first is None:
        raise InputError(f"{path}: empty trace")
    n, header = first
    cols = [c.strip() for c in header.split(",")]
    if not set(AZURE_COLUMNS) <= set(cols):
        raise _bad(path, n, f"expected a header with {','.join(AZURE_COLUMNS)}, got {_short(header.strip())}")
    it, ic, ig = (cols.index(c) for c in AZURE_COLUMNS)
    days: dict[str, int] = {}
    lo = hi = None  # (ticks, line) of the earliest and the latest row
    for n, line in lines:
        parts = line.split(",")
        try:
            if len(parts) != len(cols):
                raise ValueError
            t, prompt, output = _azure_ticks(parts[it], days), int(parts[ic]), int(parts[ig])
            if not (1 <= prompt <= MAX_TOKENS and 0 <= output <= MAX_TOKENS):
                raise ValueError
        except ValueError:
            expected = (
                f"TIMESTAMP (YYYY-MM-DD hh:mm:ss[.fffffff]),ContextTokens in [1, {MAX_TOKENS:,}],"
                f"GeneratedTokens in [0, {MAX_TOKENS:,}]"
            )
            raise _bad(path, n, f"expected {expected}, got {_short(line.strip())}") from None
        lo = (t, n) if lo is None or t < lo[0] else lo
        hi = (t, n) if hi is None or t > hi[0] else hi
        if (hi[0] - lo[0]) / 1e7 > HORIZON_S:
            late, early = (hi, lo) if n == hi[1] else (lo, hi)
            raise _bad(
                path,
                late[1],
                f"TIMESTAMP lies more than {HORIZON_S:.0e} s (the horizon of traffic.duration_s) from the row "
                f"on line {early[1]}",
            )
        yield n, t, prompt, output


def read_azure(path: Path) -> list[Request]:
    """The Azure LLM inference trace CSV (`TIMESTAMP,ContextTokens,GeneratedTokens`, absolute wall times):
    arrivals become seconds after the earliest row. It says nothing of content, so every row is unique."""
    ticks: list[int] = []
    lens: list[tuple[int, int]] = []
    for _, t, prompt, output in _azure_rows(path):
        ticks.append(t)
        lens.append((prompt, output))
    t0 = min(ticks, default=0)
    reqs = [
        Request(id=i, arrival=(t - t0) / 1e7, prompt_tokens=p, output_tokens=max(1, o))
        for i, (t, (p, o)) in enumerate(zip(ticks, lens, strict=True))
    ]
    _give_unique_blocks(reqs, list(range(len(reqs))))
    return reqs


def _mooncake_rows(path: Path) -> Iterator[tuple[int, float, int, int, list[int] | None]]:
    """(line, arrival s, prompt, output, hash ids of the prompt's whole blocks or None)."""
    for n, row in _json_rows(path):
        prompt = _int(row, "input_length", 1, path, n, MAX_TOKENS)
        ids = _ints(row, "hash_ids", path, n)[: prompt // MOONCAKE_BLOCK] if "hash_ids" in row else None
        arrival = _time(row, "timestamp", path, n, 1000)
        yield n, arrival, prompt, _int(row, "output_length", 0, path, n, MAX_TOKENS), ids


def read_mooncake(path: Path) -> list[Request]:
    """The Mooncake trace JSONL (`timestamp` ms, `input_length`, `output_length`, `hash_ids` of 512-token
    blocks, equal ids = equal content). A block's value chains its hash id onto its predecessor's value;
    the prompt's last, partial block is dropped, since only whole blocks can be shared."""
    reqs: list[Request] = []
    ids: list[list[int]] = []
    no_blocks: list[int] = []
    for _, arrival, prompt, output, row_ids in _mooncake_rows(path):
        if row_ids is None:
            no_blocks.append(len(reqs))
        ids.append(row_ids or [])
        reqs.append(
            Request(
                id=len(reqs),
                arrival=arrival,
                prompt_tokens=prompt,
                output_tokens=max(1, output),
                block_tokens=MOONCAKE_BLOCK,
            )
        )
    for r, blocks in zip(reqs, chain_rows(ids), strict=True):
        r.blocks = blocks
    _give_unique_blocks(reqs, no_blocks)
    return reqs


@dataclass(frozen=True)
class Summary:
    """What a trace holds, counted without building its requests: what the work estimate needs."""

    rows: int
    output_tokens: int  # over every row, each at least 1
    longest_output: int
    blocks: int  # content blocks the rows' requests will carry
    arrivals: np.ndarray  # seconds at speed-up 1, sorted (relative to the earliest row for Azure)
    complete: bool = True  # False: reading stopped after `max_rows` rows (there are more)


def _rows(path: Path, fmt: str) -> Iterator[tuple[int, int, int]]:
    """(arrival in the format's units, output tokens, content blocks) of each row, checked as reading checks."""
    if fmt == "phaseplan":
        for _, arrival, prompt, output, _, _, row_blocks, block_tokens in _phaseplan_rows(path):
            yield arrival, max(1, output), len(row_blocks) if row_blocks is not None else prompt // block_tokens
    elif fmt == "mooncake":
        for _, arrival, prompt, output, _ in _mooncake_rows(path):
            yield arrival, max(1, output), prompt // MOONCAKE_BLOCK
    else:
        for _, t, prompt, output in _azure_rows(path):
            yield t, max(1, output), prompt // MOONCAKE_BLOCK


def _summarise(path: Path, fmt: str, max_rows: int | None) -> Summary:
    outputs = longest = blocks = 0
    times: list[Any] = []
    for t, output, row_blocks in _rows(path, fmt):
        if max_rows is not None and len(times) == max_rows:
            return Summary(max_rows + 1, outputs, longest, blocks, np.empty(0), complete=False)
        times.append(t)
        outputs += output
        longest = max(longest, output)
        blocks += row_blocks
    if fmt == "azure":
        t0 = min(times, default=0)
        times = [(t - t0) / 1e7 for t in times]  # as read_azure computes arrivals
    return Summary(len(times), outputs, longest, blocks, np.sort(np.array(times, dtype=float), kind="stable"))


@functools.lru_cache(maxsize=8)
def _cached_summary(path: Path, fmt: str, size: int, mtime_ns: int, max_rows: int | None) -> Summary:
    return _summarise(path, fmt, max_rows)


def summary(traffic: Traffic, base_dir: Path | None = None, max_rows: int | None = None) -> Summary:
    """The scenario's trace summarised (validated row by row, as reading it would), reading at most `max_rows`
    rows (a trace with more is summarised as incomplete: it is refused for its size, not read to its end); the
    same file read again in this process is not summarised again."""
    assert traffic.trace is not None
    path = resolve(traffic.trace, base_dir)
    fmt = detect_format(path) if traffic.trace_format == "auto" else traffic.trace_format
    try:
        st = path.stat()
    except OSError:
        return _summarise(path, fmt, max_rows)  # the reader names the missing file
    return _cached_summary(path, fmt, st.st_size, st.st_mtime_ns, max_rows)


READERS: dict[str, Callable[[Path], list[Request]]] = {
    "phaseplan": read_phaseplan,
    "azure": read_azure,
    "mooncake": read_mooncake,
}


def detect_format(path: Path) -> str:
    """By extension (.csv → azure), else by the first line: a CSV header, or a JSON object's keys."""
    if path.suffix.lower() == ".csv":
        return "azure"
    n, line = next(input_files.lines(path, input_files.TRACE), (1, ""))
    if line.lstrip().startswith(AZURE_COLUMNS[0]):
        return "azure"
    try:
        row = _json(path, n, line) if line.lstrip().startswith("{") else None
    except InputError as e:
        raise InputError(f"{e}; cannot tell the format (phaseplan, azure or mooncake)") from None
    keys = set(row) if isinstance(row, dict) else set()
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
