"""Benchmark result files → BenchRuns, and BenchRuns → files in each tool's format (for round-trip tests).

`read(path, tool=None)` refuses, as one InputError naming the file (and line) and the field, anything that is
not a regular file, is over 64 MiB (input_files.BENCH, checked before reading), is empty, not UTF-8, not JSON
(or a JSONL with one bad line), nested too deeply, holds a duplicate key, is none of the supported formats, or
states a field missing, mistyped, non-finite or outside its physical range (bench_fields.RANGES). The format is detected
from the content unless named. `write_as` writes runs as a tool would; `run_from_result` turns a phaseplan
Result into the run such a file describes, so the calibration round trip can start from simulated runs.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from simulator import input_files
from simulator.atomic import write_atomic
from simulator.calibration.bench_fields import Doc, Where
from simulator.calibration.bench_formats import FORMATS
from simulator.calibration.bench_run import TOOLS, BenchRun, Latency, Lengths, Load, Scalar, StatedConfig, Tool
from simulator.config.scenario import Length, Pool, Scenario, Traffic
from simulator.errors import InputError


class _Duplicate(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _Duplicate(k)
            seen.add(k)
    return d


def _int(digits: str) -> int | float:
    """A JSON integer; one of 300 digits or more is read as the float it overflows to (inf), which the
    range checks refuse, instead of Python's int (unbounded, and refused past 4,300 digits with a ValueError)."""
    return int(digits) if len(digits) < 300 else float(digits)


def _parse(text: str, where: Where) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_int=_int)
    except _Duplicate as e:
        raise where.error("", f"duplicate key {e.args[0]!r} (the tools write each key once)") from None
    except json.JSONDecodeError as e:
        at = "" if where.line is not None else f", line {e.lineno} column {e.colno}"
        raise where.error("", f"not valid JSON ({e.msg}{at})") from None
    except RecursionError:
        raise where.error("", "JSON nested too deeply") from None


def _documents(path: str, text: str, jsonl: bool) -> list[tuple[Where, Any]]:
    """The file's JSON documents: one, or one per non-blank line of a JSONL file. A file is JSONL when the
    tool writes JSONL (SGLang), or when it has several lines and its first line is a JSON object by itself."""
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not jsonl and len(lines) > 1:
        try:
            jsonl = isinstance(json.loads(lines[0][1], parse_int=_int), dict)
        except (ValueError, RecursionError):
            jsonl = False
    if jsonl:
        return [(Where(path, n), _parse(line, Where(path, n))) for n, line in lines]
    return [(Where(path), _parse(text, Where(path)))]


def detect(data: dict[str, Any]) -> Tool | None:
    """The tool whose result format this parsed object follows, or None."""
    return next((t for t, f in FORMATS.items() if f.detect(data)), None)


def read(path: str | Path, tool: Tool | None = None) -> list[BenchRun]:
    """Every run a benchmark result file holds, in file order."""
    name = str(path)
    if tool is not None and tool not in FORMATS:
        raise InputError(f"{name}: unknown benchmark format {tool!r} (one of {', '.join(TOOLS)})")
    raw = input_files.read_bytes(path, input_files.BENCH)  # a regular file within its size, checked first
    # a byte-order mark (Windows editors) is no part of the JSON
    text = input_files.decode(raw, name, input_files.BENCH.what).removeprefix("\ufeff")
    if not text.strip():
        raise InputError(f"{name}: empty benchmark file")
    sha256 = hashlib.sha256(raw).hexdigest()
    runs: list[BenchRun] = []
    for where, data in _documents(name, text, tool is not None and FORMATS[tool].jsonl):
        if not isinstance(data, dict):
            raise where.error("", f"expected a JSON object, got {type(data).__name__}")
        found = tool or detect(data)
        if found is None:
            raise where.error("", f"not a result file of {', '.join(TOOLS)} (none of their keys found)")
        if FORMATS[found].jsonl and where.line is None:  # a one-line JSONL file, parsed whole: still line 1
            where = Where(name, next(n for n, line in enumerate(text.splitlines(), 1) if line.strip()))
        runs += FORMATS[found].read(Doc(data, where), sha256)
    return runs


def read_all(paths: list[str] | list[Path], tool: Tool | None = None) -> list[BenchRun]:
    return [run for p in paths for run in read(p, tool)]


# --- writing ----------------------------------------------------------------------------------------------


def render(tool: Tool, runs: list[BenchRun]) -> str:
    fmt = FORMATS[tool]
    if not runs:
        raise ValueError("no runs to write")
    if fmt.one_run and len(runs) != 1:
        raise ValueError(f"a {tool} file holds one run, not {len(runs)}: write one file per run")
    return fmt.render(runs)


def write_as(tool: Tool, runs: list[BenchRun], path: str | Path) -> None:
    """Write `runs` as `tool` writes its result file (all or nothing)."""
    write_atomic(Path(path), render(tool, runs))


def as_written(tool: Tool, run: BenchRun) -> BenchRun:
    """What reading `write_as(tool, [run], …)` gives back, apart from path, hash and line: the fields the
    format cannot state dropped, its defaults filled in."""
    return FORMATS[tool].as_written(run)


def run_from_result(result: dict[str, Any], model: str | None = None) -> BenchRun:
    """The run a benchmark of this simulated Result would report: its load, lengths and metrics, and the
    scenario's configuration as SGLang's server arguments state it. `model`: the id the file should name
    (default: the scenario's model preset name). Medians and percentiles only: a Result holds no means."""
    sc = Scenario.model_validate(result["scenario"])
    m = result["metrics"]
    whole = m["full_run"]  # a benchmark measures the whole run, fill and drain included
    completed, duration = int(m["completed"]), float(m["duration_s"])
    if completed <= 0 or duration <= 0:
        raise ValueError("the Result completed no request: there is no run to report")
    model = model or sc.model.name
    return BenchRun(
        tool="phaseplan",
        variant=result.get("schema", "phaseplan.result"),
        path="",
        sha256="",
        line=None,
        index=None,
        date=None,
        tool_version=None,
        load=_load(sc.traffic),
        num_prompts=int(m["requests"]),
        dataset="random",
        input_tokens=_lengths(sc.traffic.prompt_tokens, m["input_tokens"] / completed),
        output_tokens=_lengths(sc.traffic.output_tokens, m["output_tokens"] / completed),
        duration_s=duration,
        completed=completed,
        failed=int(m["rejected"]) + int(m["aborted"]),
        request_throughput=completed / duration,
        input_throughput=m["input_tokens"] / duration,
        output_throughput=m["output_tokens"] / duration,
        ttft=_latency(whole["ttft_ms"]),
        tpot=_latency(whole["tpot_ms"]),
        itl=Latency(),
        e2e=_latency(whole["e2e_ms"]),
        accept_length=None,
        config=StatedConfig(model=model, backend="sglang", servers=_servers(sc, model)),
    )


def _load(traffic: Traffic) -> Load:
    if traffic.concurrency is not None:  # closed loop: SGLang's and vLLM's `--request-rate inf --max-concurrency N`
        return Load(request_rate=math.inf, max_concurrency=traffic.concurrency)
    assert traffic.rate is not None
    if traffic.arrival == "bursty":  # gamma gaps of coefficient of variation cv have shape 1/cv² (vLLM burstiness)
        return Load(request_rate=traffic.rate, arrival="gamma", burstiness=1 / traffic.burst_cv**2)
    if traffic.arrival == "poisson":
        return Load(request_rate=traffic.rate, arrival="poisson", burstiness=1.0)
    return Load(request_rate=traffic.rate, arrival=traffic.arrival)


def _lengths(spec: Length, mean: float) -> Lengths:
    """The measured mean, and the requested length where the scenario's distribution is the tools' own:
    fixed (range ratio 1) or uniform in [ratio·L, L] (SGLang's and vLLM's random dataset)."""
    if spec.dist == "fixed" and spec.value is not None:
        return Lengths(mean=mean, requested=float(spec.value), range_ratio=1.0)
    if spec.dist == "uniform" and spec.low is not None and spec.high is not None:
        return Lengths(mean=mean, requested=float(spec.high), range_ratio=spec.low / spec.high)
    return Lengths(mean=mean)


def _latency(p: dict[str, float | None]) -> Latency:
    return Latency(median=p.get("p50"), p95=p.get("p95"), p99=p.get("p99"))


def _servers(sc: Scenario, model: str) -> dict[str, dict[str, Scalar]]:
    """SGLang's server arguments for the scenario's pools (tp_size, kv_cache_dtype, speculative settings)."""

    def args(pool: Pool, mode: str) -> dict[str, Scalar]:
        spec = pool.speculative
        return {
            "model_path": model,
            "tp_size": pool.tp,
            "dp_size": pool.dp,
            "enable_dp_attention": pool.dp > 1,
            "kv_cache_dtype": pool.kv_cache,
            "speculative_algorithm": None if spec is None else "NEXTN" if spec.method == "mtp" else "EAGLE",
            "speculative_num_steps": None if spec is None else spec.draft_tokens,
            "disaggregation_mode": mode,
        }

    dep = sc.deployment
    if dep.mode == "disaggregated" and dep.prefill is not None:
        return {"prefill": args(dep.prefill, "prefill"), "decode": args(dep.decode, "decode")}
    return {"server": args(dep.decode, "null")}
