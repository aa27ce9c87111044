"""One reader for every file the program opens: scenarios, traces, length files, profiles, AIConfigurator tables,
benchmark result files and uploads.

Each kind of file has its limits here, checked before a byte is read: it must be a regular file (a FIFO without
a writer blocks the open for ever, a device such as /dev/zero or /dev/urandom reads without end), no larger
than its kind's size, and read as a stream of lines with a cap on their number and length where the program
reads it line by line. Text that is not UTF-8 is one error naming the file and the line. The size a file has
is also what `simulator.budget` charges to a run's memory before the run starts.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from simulator.errors import InputError

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


@dataclass(frozen=True)
class Kind:
    """A kind of input file and its limits; `what` is how errors name it."""

    what: str
    max_bytes: int
    max_lines: int | None = None  # read line by line: at most this many lines (rows)
    max_line_bytes: int | None = None  # and each line at most this long


SCENARIO = Kind("scenario file", 1 * MIB)  # the bundled ones are under 2 KiB
UPLOAD = Kind("uploaded scenario", 256 * KIB)  # the app: a scenario is a page of YAML
# A trace: the bundled Mooncake trace is 3 MB for 12,031 rows; a row of a 10^8-token prompt lists ~195,000 hash ids.
TRACE = Kind("trace", 1 * GIB, max_lines=20_000_000, max_line_bytes=8 * MIB)
LENGTHS = Kind("length file", 256 * MIB, max_lines=20_000_000, max_line_bytes=64)  # one integer per line
PROFILE = Kind("profile", 32 * MIB)  # the largest bundled profile (140,000 measured rows) is 5.3 MB
AIC_TABLE = Kind("AIConfigurator table", 512 * MIB)  # a Parquet table; the largest shipped is a few MB
AIC_META = Kind("AIConfigurator collection_meta.yaml", 1 * MIB)
# a serving benchmark's result file: with per-request details (vLLM --save-detailed, 10k requests) ~10 MiB
BENCH = Kind("benchmark file", 64 * MIB)
# a Hugging Face config.json: the largest published ones (per-layer quantization lists) are under 100 KiB
MODEL_CONFIG = Kind("model config", 4 * MIB)

KINDS = (SCENARIO, UPLOAD, TRACE, LENGTHS, PROFILE, AIC_TABLE, AIC_META, BENCH, MODEL_CONFIG)


def check_regular(path: str | Path, what: str) -> None:
    """Refuse a path that is not a regular file before opening it (a missing one is left to the opener, which
    says why in its caller's words)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        raise InputError(f"{path}: {what} is not a regular file ({_kind_of(mode)})")


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def size(path: str | Path, kind: Kind) -> int:
    """The file's size, refused when it is not a regular file or is over its kind's limit (0 when missing)."""
    check_regular(path, kind.what)
    try:
        n = os.stat(path).st_size
    except OSError:
        return 0
    _check_size(path, kind, n)
    return n


def _check_size(path: str | Path, kind: Kind, n: int) -> None:
    if n > kind.max_bytes:
        limit = _bytes(kind.max_bytes)
        raise InputError(f"{path}: {kind.what} is {_bytes(n)}, over the {limit} a {kind.what} may have")


def _bytes(n: float) -> str:
    for unit, step in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= step:
            return f"{n / step:,.1f} {unit}".replace(".0 ", " ")
    return f"{n:,.0f} bytes"


def _open(path: str | Path, kind: Kind) -> int:
    """A file descriptor of the file, which must be regular (checked again on the open file: no race) and within
    its kind's size. O_NONBLOCK: a path swapped for a FIFO after the check cannot block the open."""
    check_regular(path, kind.what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise InputError(f"{path}: cannot read {kind.what} ({e.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise InputError(f"{path}: {kind.what} is not a regular file ({_kind_of(st.st_mode)})")
    try:
        _check_size(path, kind, st.st_size)
    except InputError:
        os.close(fd)
        raise
    return fd


def read_bytes(path: str | Path, kind: Kind) -> bytes:
    """The whole file, at most its kind's size (a file that grows while read is cut there and refused)."""
    fd = _open(path, kind)
    try:
        with os.fdopen(fd, "rb") as f:
            raw = f.read(kind.max_bytes + 1)
    except OSError as e:
        raise InputError(f"{path}: cannot read {kind.what} ({e.strerror})") from None
    _check_size(path, kind, len(raw))
    return raw


def read_text(path: str | Path, kind: Kind) -> str:
    """The whole file as UTF-8 text."""
    return decode(read_bytes(path, kind), str(path), kind.what)


def decode(raw: bytes, name: str, what: str) -> str:
    """UTF-8 text, or one error with the line and offset of the first byte that is not."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise InputError(
            f"{name}: line {line}: {what} is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})"
        ) from None


def lines(path: str | Path, kind: Kind) -> Iterator[tuple[int, str]]:
    """(line number, text) of every non-blank line, streamed: never more than one line in memory, each line at
    most `kind.max_line_bytes`, at most `kind.max_lines` lines."""
    assert kind.max_lines is not None and kind.max_line_bytes is not None
    fd = _open(path, kind)
    with os.fdopen(fd, "rb") as f:
        n, total = 0, 0
        while True:
            try:
                raw = f.readline(kind.max_line_bytes + 1)
            except OSError as e:
                raise InputError(f"{path}: line {n + 1}: cannot read {kind.what} ({e.strerror})") from None
            if not raw:
                return
            n += 1
            total += len(raw)
            if total > kind.max_bytes:
                _check_size(path, kind, total)
            if len(raw) > kind.max_line_bytes and not raw.endswith(b"\n"):
                raise InputError(
                    f"{path}: line {n}: longer than {_bytes(kind.max_line_bytes)}, the most a line of a "
                    f"{kind.what} may hold"
                )
            if n > kind.max_lines:
                raise InputError(f"{path}: more than {kind.max_lines:,} lines, the most a {kind.what} may have")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(
                    f"{path}: line {n}: {kind.what} is not UTF-8 text (byte 0x{raw[e.start]:02x} at column "
                    f"{e.start + 1})"
                ) from None
            if text.strip():
                yield n, text.rstrip("\r\n")
