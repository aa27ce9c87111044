"""NVIDIA GenAI-Perf's `profile_export_genai_perf.json` and its successor AIPerf's `profile_export_aiperf.json`
(which "mimic[s] the structure of the GenAI-Perf JSON output as closely as possible"): one run per file.

Sources followed:

* github.com/triton-inference-server/perf_analyzer, genai-perf/ @263c5f6e0c7a (2025-12-15):
  export_data/json_exporter.py writes the statistics dict with `input_config` beside it;
  metrics/statistics.py gives each metric `{"unit", "avg", "p1" … "p99", "min", "max", "std"}` (p25…p99 only
  before fd42a5c3, 2025-05-16; system metrics `request_throughput`, `output_token_throughput` carry `avg`
  only); metrics/llm_metrics.py names them `time_to_first_token`, `time_to_second_token`,
  `inter_token_latency`, `request_latency` (unit "ms"), `output_token_throughput` ("tokens/sec"),
  `output_token_throughput_per_user`, `output_sequence_length`, `input_sequence_length` ("tokens"),
  `request_throughput` ("requests/sec"), `request_count` ("count", since bf54dfb5, 2024-12-23).
  `input_config` is the argparse namespace (flat: `model`, `backend`, `endpoint_type`, `concurrency`,
  `request_rate`, `synthetic_input_tokens_mean/stddev`, `output_tokens_mean/stddev`, `request_count`,
  `tokenizer`) before the config-file rewrite 9fd79801 (2025-03-17), nested after it (`model_names`,
  `endpoint.backend/type`, `perf_analyzer.stimulus` = `{"concurrency": N}` or `{"request_rate": R}`,
  `perf_analyzer.measurement.{mode,num}`, `input.synthetic_tokens.{mean,stddev}`,
  `input.output_tokens.{mean,stddev}`, `tokenizer.name`).
* github.com/ai-dynamo/aiperf @db4f6397d11e (2025-10-10): common/models/export_models.py (JsonExportData,
  JsonMetricResult: the same `{"unit", "avg", "p1" … "p99", …}`), plus `benchmark_duration` (unit "sec"),
  `error_request_count`, `total_isl`, `start_time`/`end_time` (ISO datetimes) and `input_config` = the
  UserConfig (`endpoint.model_names/type`, `loadgen.concurrency/request_rate/request_rate_mode/
  request_count`, `input.prompt.input_tokens.{mean,stddev}`, `input.prompt.output_tokens.{mean,stddev}`,
  `tokenizer.name`), dumped with exclude_unset (a default the user left alone is absent).

Meaning and units: every value is converted by its stated `unit` (GenAI-Perf's first export, c18c493e
2024-05-16, stated times in "ns"; "ms" since 699bdd51, 2024-06-12; AIPerf's duration in "sec"). Both tools'
ITL is per request `(request_latency − ttft) / (output_sequence_length − 1)` (GenAI-Perf since 10ae3a4d,
2024-06-06; AIPerf's metrics/types/inter_token_latency_metric.py): that is TPOT as SGLang and vLLM define
it, so it is read into `tpot`. A file stating times in "ns" predates 699bdd51 and (but for six days) pooled
token gaps: its ITL is read into `itl`. Neither tool states the run's duration except AIPerf: for GenAI-Perf
it is derived as request_count / request_throughput (the tool computes the throughput as requests over its
duration). Input throughput is request throughput × mean input sequence length (AIPerf: total_isl /
benchmark_duration).
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from typing import Any

from simulator.calibration.bench_fields import Doc, check
from simulator.calibration.bench_formats.format import Format, counts, place
from simulator.calibration.bench_run import BenchRun, Latency, Lengths, Load, StatedConfig, Tool

TIME = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3, "sec": 1e3}  # unit -> milliseconds
UNITS = {
    "req_s": {"requests/sec", "per sec", "requests/s"},
    "tok_s": {"tokens/sec", "tokens/s"},
    "tokens": {"tokens"},
    "count": {"count", "requests"},
}
STATS = {"mean": "avg", "median": "p50", "p90": "p90", "p95": "p95", "p99": "p99"}  # ours -> theirs
HELD = tuple(STATS)

FLAT = "genai-perf with the flat CLI input_config (before 2025-03)"
NESTED = "genai-perf with the config-file input_config (since 2025-03)"
AIPERF_V = "aiperf profile_export_aiperf.json"


def _looks_nvidia(d: dict[str, Any]) -> bool:
    return isinstance(d.get("input_config"), dict) and any(
        isinstance(d.get(k), dict) and "unit" in d[k] for k in ("request_throughput", "request_latency")
    )


def _is_aiperf(d: dict[str, Any]) -> bool:
    return "was_cancelled" in d or "benchmark_duration" in d or "loadgen" in d["input_config"]


def detect_genai_perf(d: dict[str, Any]) -> bool:
    return _looks_nvidia(d) and not _is_aiperf(d)


def detect_aiperf(d: dict[str, Any]) -> bool:
    return _looks_nvidia(d) and _is_aiperf(d)


# --- reading ----------------------------------------------------------------------------------------------


def _time(doc: Doc, key: str, kind: str) -> Latency:
    sub = doc.sub(key)
    if sub is None:
        return Latency()
    unit = sub.text("unit", required=True)
    if unit not in TIME:
        raise sub.error("unit", f"{unit!r} is not a time unit ({', '.join(TIME)})")
    out = {}
    for ours, theirs in STATS.items():
        v = sub.finite(theirs)
        out[ours] = None if v is None or v == 0 else check(sub, theirs, v * TIME[unit], kind)
    return Latency(**out)


def _avg(doc: Doc, key: str, kind: str, required: bool = False) -> float | None:
    """A metric's average, its unit (when stated) one of those the kind allows."""
    sub = doc.sub(key, required)
    if sub is None:
        return None
    unit = sub.text("unit")
    if unit is not None and unit not in UNITS[kind]:
        raise sub.error("unit", f"{unit!r} is not a unit of {kind} ({', '.join(sorted(UNITS[kind]))})")
    return sub.num("avg", kind, required=True)


def _need_avg(doc: Doc, key: str, kind: str) -> float:
    v = _avg(doc, key, kind, required=True)
    assert v is not None
    return v


def _seconds(doc: Doc, key: str) -> float | None:
    sub = doc.sub(key)
    if sub is None:
        return None
    unit = sub.text("unit", required=True)
    if unit not in TIME:
        raise sub.error("unit", f"{unit!r} is not a time unit ({', '.join(TIME)})")
    return check(sub, "avg", _finite(sub, "avg") * TIME[unit] / 1e3, "duration_s")


def _finite(doc: Doc, key: str) -> float:
    v = doc.finite(key, required=True)
    assert v is not None
    return v


def _length(doc: Doc | None, key: str) -> float | None:
    """A configured length: 0 and -1 are the tools' "not set" (GenAI-Perf's output_tokens_mean default)."""
    if doc is None:
        return None
    v = doc.finite(key)
    return None if v is None or v in (0, -1) else check(doc, key, v, "tokens")


def _date(doc: Doc) -> str | None:
    text = doc.text("start_time")
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text).isoformat()
    except ValueError:
        raise doc.error("start_time", f"{text!r} is not an ISO 8601 date") from None


def _read(doc: Doc, sha256: str, tool: Tool) -> list[BenchRun]:
    cfg = doc.need("input_config")
    req_tput = _need_avg(doc, "request_throughput", "req_s")
    isl = _avg(doc, "input_sequence_length", "tokens")
    count = _avg(doc, "request_count", "count")
    if count is not None and not count.is_integer():
        raise doc.error("request_count.avg", f"expected a whole number of requests, got {count:g}")
    completed = None if count is None else int(count)
    if completed == 0:
        raise doc.error("request_count.avg", "0 requests completed: the run measured nothing")
    ttft = _time(doc, "time_to_first_token", "latency_ms")
    itl = _time(doc, "inter_token_latency", "step_ms")
    itl_doc = doc.sub("inter_token_latency")
    pooled = itl_doc is not None and itl_doc.data.get("unit") == "ns"  # before GenAI-Perf 699bdd51
    if tool == "aiperf":
        duration = _seconds(doc, "benchmark_duration")
        total_isl = _avg(doc, "total_isl", "tokens") if duration is not None else None
        failed = _avg(doc, "error_request_count", "count")
        load, num_prompts, inputs, outputs, config = _aiperf_config(cfg)
        variant, date = AIPERF_V, _date(doc)
    else:
        duration = completed / req_tput if completed is not None else None
        total_isl, failed, date = None, None, None
        flat = "model_names" not in cfg.data and "perf_analyzer" not in cfg.data
        load, num_prompts, inputs, outputs, config = _flat_config(cfg) if flat else _nested_config(cfg)
        variant = FLAT if flat else NESTED
    in_tput = total_isl / duration if total_isl is not None and duration else (req_tput * isl if isl else None)
    return [
        BenchRun(
            tool=tool,
            variant=variant,
            **place(doc, sha256),
            date=date,
            tool_version=None,
            load=load,
            num_prompts=num_prompts,
            dataset=None,
            input_tokens=replace(inputs, mean=isl),
            output_tokens=replace(outputs, mean=_avg(doc, "output_sequence_length", "tokens")),
            duration_s=duration,
            completed=completed,
            failed=None if failed is None else int(failed),
            request_throughput=req_tput,
            input_throughput=in_tput,
            output_throughput=_need_avg(doc, "output_token_throughput", "tok_s"),
            ttft=ttft,
            tpot=Latency() if pooled else itl,
            itl=itl if pooled else Latency(),
            e2e=_time(doc, "request_latency", "latency_ms"),
            accept_length=None,
            config=config,
        )
    ]


Parts = tuple[Load, int | None, Lengths, Lengths, StatedConfig]


def _flat_config(cfg: Doc) -> Parts:
    rate = cfg.num("request_rate", "rate")
    load = (
        Load(request_rate=rate) if rate is not None else Load(max_concurrency=cfg.integer("concurrency", "concurrency"))
    )
    count = cfg.integer("request_count", "count")
    return (
        load,
        count or None,  # 0: the tool's default (measure by time window)
        Lengths(
            requested=_length(cfg, "synthetic_input_tokens_mean"),
            stddev=cfg.num("synthetic_input_tokens_stddev", "tokens", zero_absent=True),
        ),
        Lengths(
            requested=_length(cfg, "output_tokens_mean"),
            stddev=cfg.num("output_tokens_stddev", "tokens", zero_absent=True),
        ),
        StatedConfig(
            model=cfg.first_text("model"),
            tokenizer=cfg.text("tokenizer"),
            backend=cfg.text("backend") or cfg.text("endpoint_type"),
        ),
    )


def _nested_config(cfg: Doc) -> Parts:
    pa = cfg.sub("perf_analyzer")
    stimulus = pa.sub("stimulus") if pa else None
    load = Load()
    if stimulus is not None and stimulus.has("request_rate"):
        load = Load(request_rate=stimulus.num("request_rate", "rate"))
    elif stimulus is not None and stimulus.has("concurrency"):
        load = Load(max_concurrency=stimulus.integer("concurrency", "concurrency"))
    measurement = pa.sub("measurement") if pa else None
    count = None
    if measurement is not None and measurement.text("mode") == "request_count":
        count = measurement.integer("num", "count")
    inp = cfg.sub("input")
    synth = inp.sub("synthetic_tokens") if inp else None
    out = inp.sub("output_tokens") if inp else None
    endpoint = cfg.sub("endpoint")
    tokenizer = cfg.sub("tokenizer")
    return (
        load,
        count,
        Lengths(
            requested=_length(synth, "mean"), stddev=synth.num("stddev", "tokens", zero_absent=True) if synth else None
        ),
        Lengths(requested=_length(out, "mean"), stddev=out.num("stddev", "tokens", zero_absent=True) if out else None),
        StatedConfig(
            model=cfg.first_text("model_names"),
            tokenizer=tokenizer.text("name") if tokenizer else None,
            backend=(endpoint.text("backend") or endpoint.text("type")) if endpoint else None,
        ),
    )


def _aiperf_config(cfg: Doc) -> Parts:
    lg = cfg.sub("loadgen")
    load = Load()
    if lg is not None and lg.has("request_rate"):
        mode = lg.text("request_rate_mode")
        load = Load(request_rate=lg.num("request_rate", "rate"), arrival=mode)
    elif lg is not None and lg.has("concurrency"):
        load = Load(max_concurrency=lg.integer("concurrency", "concurrency"))
    inp = cfg.sub("input")
    prompt = inp.sub("prompt") if inp else None
    it = prompt.sub("input_tokens") if prompt else None
    ot = prompt.sub("output_tokens") if prompt else None
    endpoint = cfg.sub("endpoint")
    tokenizer = cfg.sub("tokenizer")
    return (
        load,
        lg.integer("request_count", "count") if lg else None,
        Lengths(requested=_length(it, "mean"), stddev=it.num("stddev", "tokens", zero_absent=True) if it else None),
        Lengths(requested=_length(ot, "mean"), stddev=ot.num("stddev", "tokens", zero_absent=True) if ot else None),
        StatedConfig(
            model=endpoint.first_text("model_names") if endpoint else None,
            tokenizer=tokenizer.text("name") if tokenizer else None,
            backend=endpoint.text("type") if endpoint else None,
        ),
    )


def read_genai_perf(doc: Doc, sha256: str) -> list[BenchRun]:
    return _read(doc, sha256, "genai-perf")


def read_aiperf(doc: Doc, sha256: str) -> list[BenchRun]:
    return _read(doc, sha256, "aiperf")


# --- writing ----------------------------------------------------------------------------------------------


def _stat(unit: str, lat: Latency) -> dict[str, Any]:
    return {"unit": unit} | {
        theirs: getattr(lat, ours) for ours, theirs in STATS.items() if getattr(lat, ours) is not None
    }


def _metrics(run: BenchRun, count_unit: str) -> dict[str, Any]:
    """The statistics in llm_metrics.py's order (a latency the run lacks left out, as the tool skips empties)."""
    completed, _ = counts(run)
    d: dict[str, Any] = {}
    for key, lat in (
        ("time_to_first_token", run.ttft),
        ("request_latency", run.e2e),
        ("inter_token_latency", run.tpot),
    ):
        if lat.stated():
            d[key] = _stat("ms", lat)
    d["output_token_throughput"] = {"unit": "tokens/sec", "avg": run.output_throughput}
    d["request_throughput"] = {"unit": "requests/sec", "avg": run.request_throughput}
    d["request_count"] = {"unit": count_unit, "avg": completed}
    for key, mean in (
        ("output_sequence_length", run.output_tokens.mean),
        ("input_sequence_length", run.input_tokens.mean),
    ):
        if mean is not None:
            d[key] = {"unit": "tokens", "avg": mean}
    return d


def _lengths(lengths: Lengths) -> dict[str, Any]:
    return {k: v for k, v in (("mean", lengths.requested), ("stddev", lengths.stddev)) if v is not None}


def _render_genai_perf(runs: list[BenchRun]) -> str:
    (run,) = runs
    pa: dict[str, Any] = {}
    if run.load.max_concurrency is not None:
        pa["stimulus"] = {"concurrency": run.load.max_concurrency}
    elif run.load.request_rate is not None and run.load.request_rate != float("inf"):
        pa["stimulus"] = {"request_rate": run.load.request_rate}
    if run.num_prompts is not None:
        pa["measurement"] = {"mode": "request_count", "num": run.num_prompts}
    cfg: dict[str, Any] = {
        "model_names": [run.config.model] if run.config.model else [],
        "endpoint": {"backend": run.config.backend} if run.config.backend else {},
        "perf_analyzer": pa,
        "input": {"synthetic_tokens": _lengths(run.input_tokens), "output_tokens": _lengths(run.output_tokens)},
        "tokenizer": {"name": run.config.tokenizer} if run.config.tokenizer else {},
    }
    return json.dumps(_metrics(run, "count") | {"input_config": cfg}, indent=2)


def _render_aiperf(runs: list[BenchRun]) -> str:
    (run,) = runs
    completed, duration = counts(run)
    lg: dict[str, Any] = {}
    if run.load.max_concurrency is not None:
        lg["concurrency"] = run.load.max_concurrency
    elif run.load.request_rate is not None and run.load.request_rate != float("inf"):
        lg["request_rate"] = run.load.request_rate
        if run.load.arrival in ("constant", "poisson"):
            lg["request_rate_mode"] = run.load.arrival
    if run.num_prompts is not None:
        lg["request_count"] = run.num_prompts
    cfg: dict[str, Any] = {
        "endpoint": ({"model_names": [run.config.model]} if run.config.model else {})
        | ({"type": run.config.backend} if run.config.backend else {}),
        "input": {"prompt": {"input_tokens": _lengths(run.input_tokens), "output_tokens": _lengths(run.output_tokens)}},
        "tokenizer": {"name": run.config.tokenizer} if run.config.tokenizer else {},
        "loadgen": lg,
    }
    d = _metrics(run, "requests")
    if run.failed:
        d["error_request_count"] = {"unit": "requests", "avg": run.failed}
    d["benchmark_duration"] = {"unit": "sec", "avg": duration}
    if run.input_tokens.mean is not None:
        d["total_isl"] = {"unit": "tokens", "avg": round(run.input_tokens.mean * completed)}
    d |= {"input_config": cfg, "was_cancelled": False, "error_summary": []}
    if run.date is not None:
        d["start_time"] = run.date
    return json.dumps(d, indent=2)


def _as_written(run: BenchRun, tool: Tool) -> BenchRun:
    completed, duration = counts(run)
    if run.load.max_concurrency is not None:
        load = Load(max_concurrency=run.load.max_concurrency)
    elif run.load.request_rate is not None and run.load.request_rate != float("inf"):
        arrival = run.load.arrival if tool == "aiperf" and run.load.arrival in ("constant", "poisson") else None
        load = Load(request_rate=run.load.request_rate, arrival=arrival)
    else:
        load = Load()
    isl = run.input_tokens.mean
    if tool == "aiperf":
        in_tput = round(isl * completed) / duration if isl is not None else None
    else:
        duration = completed / run.request_throughput
        in_tput = run.request_throughput * isl if isl is not None else None
    return replace(
        run,
        tool=tool,
        variant=AIPERF_V if tool == "aiperf" else NESTED,
        date=run.date if tool == "aiperf" else None,
        tool_version=None,
        load=load,
        dataset=None,
        input_tokens=Lengths(mean=isl, requested=run.input_tokens.requested, stddev=run.input_tokens.stddev),
        output_tokens=Lengths(
            mean=run.output_tokens.mean, requested=run.output_tokens.requested, stddev=run.output_tokens.stddev
        ),
        duration_s=duration,
        completed=completed,
        failed=(run.failed or None) if tool == "aiperf" else None,
        input_throughput=in_tput,
        itl=Latency(),
        accept_length=None,
        config=StatedConfig(model=run.config.model, tokenizer=run.config.tokenizer, backend=run.config.backend),
    )


GENAI_PERF = Format(
    "genai-perf",
    detect_genai_perf,
    read_genai_perf,
    _render_genai_perf,
    lambda r: _as_written(r, "genai-perf"),
    one_run=True,
)
AIPERF = Format("aiperf", detect_aiperf, read_aiperf, _render_aiperf, lambda r: _as_written(r, "aiperf"), one_run=True)
