"""What every benchmark format provides, and the parts of a run all readers fill the same way."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simulator.calibration.bench_fields import RANGES, Doc
from simulator.calibration.bench_run import BenchRun, Tool


@dataclass(frozen=True)
class Format:
    tool: Tool
    detect: Callable[[dict[str, Any]], bool]  # does this parsed object look like this tool's result?
    read: Callable[[Doc, str], list[BenchRun]]  # (document, the file's sha256) -> its runs
    render: Callable[[list[BenchRun]], str]  # runs -> the file text the tool would write
    # a run -> what reading `render([run])` gives back: the fields the format cannot state dropped, the
    # tool's defaults filled in (the equality a round-trip test asserts, up to float rounding)
    as_written: Callable[[BenchRun], BenchRun]
    jsonl: bool = False  # the tool appends one run per line (SGLang always)
    one_run: bool = False  # a file holds exactly one run (GenAI-Perf, AIPerf)


def place(doc: Doc, sha256: str) -> dict[str, Any]:
    """The BenchRun fields that say where a run came from."""
    return {"path": doc.where.path, "sha256": sha256, "line": doc.where.line, "index": doc.where.index}


def per_request(doc: Doc, total_key: str, completed: int) -> float:
    """Mean tokens per request from a run's total (SGLang and vLLM state totals over completed requests)."""
    total = doc.need_int(total_key, "total_tokens")
    mean = total / completed
    lo, hi, what = RANGES["tokens"]
    if not lo <= mean <= hi:
        raise doc.error(
            total_key, f"{total} over {completed} completed requests is {mean:g} {what}, outside [{lo:g}, {hi:g}]"
        )
    return mean


def counts(run: BenchRun) -> tuple[int, float]:
    """(completed, duration) for a writer whose format states both: one derived from the other and the request
    throughput when the run lacks it (GenAI-Perf states neither before its 2024-12 `request_count`)."""
    if run.completed is not None and run.duration_s is not None:
        return run.completed, run.duration_s
    if run.duration_s is not None:
        return round(run.request_throughput * run.duration_s), run.duration_s
    if run.completed is not None:
        return run.completed, run.completed / run.request_throughput
    raise ValueError(f"{run.where}: the run states neither completed requests nor duration")
