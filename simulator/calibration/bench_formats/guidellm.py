"""guidellm's `benchmarks.json` report (`guidellm benchmark --output-path …json`): a list of benchmarks, one
run each (a sweep writes one per rate).

Sources followed (github.com/vllm-project/guidellm):

* v0.3.0 (2025-09-05), src/guidellm/benchmark/output.py `GenerativeBenchmarksReport` = `{"benchmarks": […]}`;
  benchmark.py `GenerativeBenchmark`: `args.strategy` (`type_` synchronous | concurrent (`streams`) |
  throughput (`max_concurrency`) | constant | poisson (`rate`)), `worker.backend_type/backend_target/
  backend_model`, `start_time`/`end_time` (Unix seconds), `request_totals` (successful, incomplete, errored,
  total), `metrics` (`GenerativeMetrics`). v0.2.1 has the same layout.
* v0.4.0 onward (v0.4.0 and v0.5.0 schemas/generative/*.py; v0.7.0 and HEAD ee7a77457ba6
  schemas/{report,benchmark,metrics}.py): a benchmark holds `config.strategy` and `config.backend` (the
  backend's `info`: `target`, `model`, …), computed `start_time`, `end_time`, `duration`, and
  `metrics.request_totals`; metrics add `prompt_tokens_per_second`. The report holds `args` (v0.4.0), then
  `metadata` (`version` 1 in v0.5.0, 2 in v0.7.0; `guidellm_version`) with `args`, then `config`.
* Each metric is a StatusDistributionSummary: `{"successful", "incomplete", "errored", "total"}`, each a
  DistributionSummary `{mean, median, mode, variance, std_dev, min, max, count, total_sum, percentiles:
  {p001, p01, p05, p10, p25, p50, p75, p90, p95, p99, p999}}` (src/guidellm/objects/statistics.py @v0.3.0,
  src/guidellm/schemas/statistics.py @HEAD). Only `successful` is read, as the other tools count completed
  requests only.

Meaning and units: `time_to_first_token_ms`, `inter_token_latency_ms` milliseconds; `request_latency`
SECONDS (converted); `requests_per_second`, `output_tokens_per_second`, `prompt_tokens_per_second` rates
whose `.successful.mean` is the figure guidellm's console reports; `prompt_token_count`,
`output_token_count` tokens per request. guidellm's ITL is per request `(last − first token) / (tokens − 1)`
weighted by `tokens − 1`, i.e. the token-weighted mean gap, read into `itl`. Its `time_per_output_token_ms`
divides by all output tokens, first included (its own docstring): not SGLang's TPOT, so not read. Input
throughput before v0.4 is request throughput × mean prompt tokens.

Writing: `render` writes the v0.4+ layout with only the statistics phaseplan holds (mean, median, p50, p90,
p95, p99); guidellm's own loader would want the rest of each distribution, the reader here does not.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from simulator.calibration.bench_fields import Doc, check
from simulator.calibration.bench_formats.format import Format, counts, place
from simulator.calibration.bench_run import BenchRun, Latency, Lengths, Load, StatedConfig

V03 = "guidellm v0.2-v0.3 report (args, worker)"
V04 = "guidellm v0.4+ report (metadata, config)"
STATS = ("mean", "median", "p90", "p95", "p99")


def detect(d: dict[str, Any]) -> bool:
    b = d.get("benchmarks")
    return isinstance(b, list) and bool(b) and isinstance(b[0], dict) and "metrics" in b[0]


def read(doc: Doc, sha256: str) -> list[BenchRun]:
    benchmarks = doc.items("benchmarks", required=True)
    if not benchmarks:
        raise doc.error("benchmarks", "the report holds no benchmark")
    meta = doc.sub("metadata")
    version = meta.text("guidellm_version") if meta else None
    report_args = doc.sub("args")
    return [_run(b, sha256, version, report_args) for b in benchmarks]


def _run(b: Doc, sha256: str, version: str | None, report_args: Doc | None) -> BenchRun:
    new = "config" in b.data
    m = b.need("metrics")
    totals = (m if new else b).need("request_totals")
    completed = totals.need_int("successful", "count")
    if completed == 0:
        raise totals.error("successful", "0 requests completed: the run measured nothing")
    start = b.num("start_time", "timestamp_s")
    if new:
        duration = b.need_num("duration", "duration_s")
    else:
        end = b.need_num("end_time", "timestamp_s")
        if start is None:
            raise b.error("start_time", "missing (required)")
        duration = check(b, "end_time", end - start, "duration_s")
    args = b.need("config" if new else "args")
    strategy = args.need("strategy")
    if new:
        backend = args.sub("backend")
        model = backend.text("model") if backend else None
        if model is None and report_args is not None:
            model = report_args.text("model")
        backend_name = backend.text("type") if backend else None
    else:
        worker = b.sub("worker")
        model = worker.text("backend_model") if worker else None
        backend_name = worker.text("backend_type") if worker else None
    req_tput = _need_mean(m, "requests_per_second", "req_s")
    prompt = _mean(m, "prompt_token_count", "tokens")
    in_tput = _mean(m, "prompt_tokens_per_second", "tok_s")
    if in_tput is None and prompt is not None:
        in_tput = req_tput * prompt
    return BenchRun(
        tool="guidellm",
        variant=V04 if new else V03,
        **place(b, sha256),
        date=None if start is None else datetime.fromtimestamp(start, tz=UTC).isoformat(),
        tool_version=version,
        load=_load(strategy),
        num_prompts=None,
        dataset=None,
        input_tokens=Lengths(mean=prompt),
        output_tokens=Lengths(mean=_mean(m, "output_token_count", "tokens")),
        duration_s=duration,
        completed=completed,
        failed=totals.integer("errored", "count"),
        request_throughput=req_tput,
        input_throughput=in_tput,
        output_throughput=_need_mean(m, "output_tokens_per_second", "tok_s"),
        ttft=_latency(m, "time_to_first_token_ms", "latency_ms"),
        tpot=Latency(),
        itl=_latency(m, "inter_token_latency_ms", "step_ms"),
        e2e=_latency(m, "request_latency", "latency_ms", 1e3),
        accept_length=None,
        config=StatedConfig(model=model, backend=backend_name),
    )


def _load(s: Doc) -> Load:
    kind = s.text("type_", required=True)
    cap = s.integer("max_concurrency", "concurrency")
    if kind == "synchronous":
        return Load(max_concurrency=1)
    if kind == "concurrent":
        return Load(max_concurrency=s.integer("streams", "concurrency", required=True))
    if kind == "throughput":
        return Load(request_rate=math.inf, max_concurrency=cap)
    if kind in ("constant", "poisson"):
        return Load(request_rate=s.num("rate", "rate", required=True), arrival=kind, max_concurrency=cap)
    if kind == "trace":
        return Load(arrival="trace", max_concurrency=cap)
    raise s.error(
        "type_", f"{kind!r} is not a guidellm strategy (synchronous, concurrent, throughput, constant, poisson, trace)"
    )


def _successful(m: Doc, key: str, required: bool) -> Doc | None:
    summary = m.sub(key, required)
    return summary.sub("successful", required=True) if summary is not None else None


def _mean(m: Doc, key: str, kind: str) -> float | None:
    s = _successful(m, key, False)
    return s.need_num("mean", kind) if s is not None else None


def _need_mean(m: Doc, key: str, kind: str) -> float:
    s = _successful(m, key, True)
    assert s is not None
    return s.need_num("mean", kind)


def _latency(m: Doc, key: str, kind: str, factor: float = 1.0) -> Latency:
    s = _successful(m, key, False)
    if s is None:
        return Latency()
    pct = s.sub("percentiles")

    def value(d: Doc | None, k: str) -> float | None:
        if d is None:
            return None
        v = d.finite(k)
        return None if v is None or v == 0 else check(d, k, v * factor, kind)

    median = value(s, "median")
    return Latency(
        mean=value(s, "mean"),
        median=median if median is not None else value(pct, "p50"),
        p90=value(pct, "p90"),
        p95=value(pct, "p95"),
        p99=value(pct, "p99"),
    )


# --- writing ----------------------------------------------------------------------------------------------


def _strategy(load: Load) -> dict[str, Any]:
    rate, cap = load.request_rate, load.max_concurrency
    if rate is None and load.arrival == "trace":
        return {"type_": "trace"} | ({"max_concurrency": cap} if cap else {})
    if rate is None and cap == 1:
        return {"type_": "synchronous"}
    if rate is None and cap is not None:
        return {"type_": "concurrent", "streams": cap}
    if rate is None or rate == math.inf:
        return {"type_": "throughput", "max_concurrency": cap}
    kind = "constant" if load.arrival == "constant" else "poisson"
    return {"type_": kind, "rate": rate} | ({"max_concurrency": cap} if cap else {})


def _summary(lat: Latency, factor: float = 1.0) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if lat.mean is not None:
        d["mean"] = lat.mean / factor
    if lat.median is not None:
        d["median"] = lat.median / factor
    pct = {k: getattr(lat, k) / factor for k in ("p90", "p95", "p99") if getattr(lat, k) is not None}
    if lat.median is not None:
        pct = {"p50": lat.median / factor} | pct
    return {"successful": d | {"percentiles": pct}}


def _value(v: float) -> dict[str, Any]:
    return {"successful": {"mean": v}}


def _benchmark(run: BenchRun) -> dict[str, Any]:
    completed, duration = counts(run)
    metrics: dict[str, Any] = {
        "request_totals": {"successful": completed, "incomplete": 0, "errored": run.failed or 0},
        "requests_per_second": _value(run.request_throughput),
        "request_latency": _summary(run.e2e, 1e3),
    }
    if run.input_tokens.mean is not None:
        metrics["prompt_token_count"] = _value(run.input_tokens.mean)
    if run.output_tokens.mean is not None:
        metrics["output_token_count"] = _value(run.output_tokens.mean)
    metrics["time_to_first_token_ms"] = _summary(run.ttft)
    metrics["inter_token_latency_ms"] = _summary(run.itl)
    if run.input_throughput is not None:
        metrics["prompt_tokens_per_second"] = _value(run.input_throughput)
    metrics["output_tokens_per_second"] = _value(run.output_throughput)
    backend = {k: v for k, v in (("model", run.config.model), ("type", run.config.backend)) if v is not None}
    b: dict[str, Any] = {
        "type_": "generative_benchmark",
        "config": {"strategy": _strategy(run.load), "backend": backend},
    }
    if run.date is not None:
        b["start_time"] = _timestamp(run.date)
    return b | {"duration": duration, "metrics": metrics}


def _timestamp(date: str) -> float:
    d = datetime.fromisoformat(date)
    return (d if d.tzinfo else d.replace(tzinfo=UTC)).timestamp()


def render(runs: list[BenchRun]) -> str:
    version = next((r.tool_version for r in runs if r.tool_version), None)
    meta: dict[str, Any] = {"version": 2} | ({"guidellm_version": version} if version else {})
    return json.dumps({"metadata": meta, "benchmarks": [_benchmark(r) for r in runs]})


def as_written(run: BenchRun) -> BenchRun:
    completed, duration = counts(run)
    s = _strategy(run.load)
    kind = s["type_"]
    load = {
        "synchronous": lambda: Load(max_concurrency=1),
        "concurrent": lambda: Load(max_concurrency=s["streams"]),
        "throughput": lambda: Load(request_rate=math.inf, max_concurrency=s["max_concurrency"]),
        "trace": lambda: Load(arrival="trace", max_concurrency=s.get("max_concurrency")),
    }.get(kind, lambda: Load(request_rate=s.get("rate"), arrival=kind, max_concurrency=s.get("max_concurrency")))()
    in_tput = run.input_throughput
    if in_tput is None and run.input_tokens.mean is not None:
        in_tput = run.request_throughput * run.input_tokens.mean
    date = None if run.date is None else datetime.fromtimestamp(_timestamp(run.date), tz=UTC).isoformat()
    return replace(
        run,
        tool="guidellm",
        variant=V04,
        date=date,
        load=load,
        num_prompts=None,
        dataset=None,
        input_tokens=Lengths(mean=run.input_tokens.mean),
        output_tokens=Lengths(mean=run.output_tokens.mean),
        duration_s=duration,
        completed=completed,
        failed=run.failed or 0,
        input_throughput=in_tput,
        tpot=Latency(),
        accept_length=None,
        config=StatedConfig(model=run.config.model, backend=run.config.backend),
    )


FORMAT = Format("guidellm", detect, read, render, as_written)
