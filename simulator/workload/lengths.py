"""Token-length sampling: every distribution a scenario can name, drawn many at a time with numpy."""

from __future__ import annotations

import functools
from array import array
from pathlib import Path

import numpy as np

from simulator import input_files
from simulator.config.scenario import Length
from simulator.errors import InputError

MAX_LENGTH = 100_000_000  # tokens: no model reads more in one request


def resolve(path: str, base_dir: Path | None) -> Path:
    """A relative path names a file beside the scenario first, then one under the working directory.

    The fallback lets a scenario in `scenarios/` name `traces/x.jsonl` when run from the repository root.
    """
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    tried = [base_dir / p, p] if base_dir is not None else [p]
    return next((c for c in tried if c.exists()), tried[0])


def read_lengths(path: Path) -> np.ndarray:
    """One positive integer per line (blanks skipped): the population an empirical length is drawn from. Read
    as a stream into 8-byte integers, never as the whole text."""
    values = array("q")
    for n, line in input_files.lines(path, input_files.LENGTHS):
        try:
            v = int(line)
        except ValueError:
            v = 0
        if not 1 <= v <= MAX_LENGTH:
            raise InputError(
                f"{path}: line {n}: expected an integer length in [1, {MAX_LENGTH:,}], got {line.strip()[:40]!r}"
            )
        values.append(v)
    if not values:
        raise InputError(f"{path}: length file has no lengths")
    return np.frombuffer(values, dtype=np.int64)


@functools.lru_cache(maxsize=4)
def _population(path: Path, size: int, mtime_ns: int) -> np.ndarray:
    return read_lengths(path)


def population(path: Path) -> np.ndarray:
    """A length file's values, read once per version of the file (every draw of a run, and the work estimate
    before it, reads the same array: re-reading a large file for each chunk of draws took minutes)."""
    try:
        st = path.stat()
    except OSError as e:
        raise InputError(f"{path}: cannot read length file ({e.strerror})") from None
    return _population(path, st.st_size, st.st_mtime_ns)


def stats(path: Path) -> tuple[int, float]:
    """(how many lengths, their mean) of a length file, for the work estimate."""
    values = population(path)
    return values.size, float(values.mean())


def sample(length: Length, rng: np.random.Generator, n: int, base_dir: Path | None = None) -> np.ndarray:
    """`n` integer lengths, clipped to [1, length.max]; rounding and clipping keep every request servable."""
    if length.dist == "fixed":
        x = np.full(n, length.value, dtype=np.int64)
    elif length.dist == "uniform":
        x = rng.integers(length.low, length.high, size=n, endpoint=True, dtype=np.int64)
    elif length.dist == "lognormal":
        x = rng.lognormal(np.log(length.median), length.sigma, size=n)
        x = np.rint(np.minimum(x, 2.0**53)).astype(np.int64)  # a far tail must not overflow the cast
    else:
        assert length.file is not None
        x = rng.choice(population(resolve(length.file, base_dir)), size=n)
    return np.clip(x, 1, length.max if length.max is not None else None)
