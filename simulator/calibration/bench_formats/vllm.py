"""vLLM `vllm bench serve --save-result` (and the older `benchmarks/benchmark_serving.py --save-result`): one
JSON object per file; with `--append-result` one object per line.

Sources followed (github.com/vllm-project/vllm):

* benchmarks/benchmark_serving.py @0049e29c41fd: `date` (`%Y%m%d-%H%M%S`), `backend`, `model_id`,
  `tokenizer_id`, `num_prompts`, `--metadata KEY=VALUE` pairs as top-level strings, `request_rate` (a number,
  or the string "inf"), `burstiness`, `max_concurrency`, then the benchmark's `duration, completed,
  total_input_tokens, total_output_tokens, request_throughput, "request_goodput:", output_throughput,
  total_token_throughput` and, for each of `ttft, tpot, itl, e2el` selected by `--percentile-metrics`
  (default `ttft,tpot,itl`), `mean_X_ms, median_X_ms, std_X_ms` and `pNN_X_ms` for each of
  `--metric-percentiles` (default 99).
* vllm/benchmarks/serve.py @009e6d4a1cd6 (`vllm bench serve`): adds `endpoint_type` (= backend, "for
  backward compatibility"), `label`, `failed`, `request_goodput`, `max_output_tokens_per_s`,
  `max_concurrent_requests`, `rtfx`, ramp-up keys (`ramp_up_strategy`, start/end RPS) and, with speculative
  decoding, `spec_decode_acceptance_length` (1 + accepted / drafts). No input throughput: it is derived as
  `total_input_tokens / duration`, as the tool's own totals are.
* 2024 copies of benchmark_serving.py (before `burstiness`) state `input_throughput` and spell the request
  throughput `request_inthroughput` (sic): both are read.

Meaning and units: `duration` seconds; `*_ms` milliseconds; `request_throughput` completed requests per
second, `output_throughput` generated tokens per second; `request_rate` requests per second; `burstiness` the
shape of the gamma distribution of inter-arrival gaps (1: Poisson); totals over completed requests. TPOT is
per request `(latency − ttft) / (output_len − 1)`; ITL pools every token gap; E2EL is a request's latency.
The result does not record the dataset or the requested lengths (only what was measured), nor any server
argument unless the user passed it as `--metadata` (the tool's own example: `--metadata version=0.3.3 tp=1`).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from datetime import datetime
from typing import Any

import simulator.calibration.bench_formats.flat as flat
from simulator.calibration.bench_fields import Doc
from simulator.calibration.bench_formats.format import Format, counts, per_request, place
from simulator.calibration.bench_run import BenchRun, Lengths, Load, StatedConfig

SCRIPT = "benchmarks/benchmark_serving.py"
CLI = "vllm bench serve"
DATE = "%Y%m%d-%H%M%S"

_METRIC = re.compile(r"(mean|median|std|p\d+(\.\d+)?)_[a-z_]+_ms")
_KNOWN = {
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
    "burstiness", "max_concurrency", "ramp_up_strategy", "duration", "completed", "failed", "total_input_tokens",
    "total_output_tokens", "request_throughput", "request_goodput", "request_goodput:", "output_throughput",
    "total_token_throughput", "input_throughput", "max_output_tokens_per_s", "max_concurrent_requests",
    "request_inthroughput",
}  # fmt: skip


def detect(d: dict[str, Any]) -> bool:
    return "completed" in d and "duration" in d and any(k in d for k in ("model_id", "tokenizer_id", "burstiness"))


def read(doc: Doc, sha256: str) -> list[BenchRun]:
    completed = doc.need_int("completed", "count")
    if completed == 0:
        raise doc.error("completed", "0 requests completed: the run measured nothing")
    duration = doc.need_num("duration", "duration_s")
    in_tput = doc.num("input_throughput", "tok_s")  # only the earliest versions state it
    total_in = doc.need_int("total_input_tokens", "total_tokens")
    burstiness = doc.num("burstiness", "burstiness")
    rate = doc.rate("request_rate")
    ramp = doc.text("ramp_up_strategy")
    return [
        BenchRun(
            tool="vllm",
            variant=CLI if "endpoint_type" in doc.data or "failed" in doc.data else SCRIPT,
            **place(doc, sha256),
            date=_date(doc),
            tool_version=None,
            load=Load(
                request_rate=rate,
                arrival=_arrival(rate, burstiness, ramp),
                burstiness=burstiness,
                max_concurrency=doc.integer("max_concurrency", "concurrency"),
            ),
            num_prompts=doc.integer("num_prompts", "count"),
            dataset=None,
            input_tokens=Lengths(mean=per_request(doc, "total_input_tokens", completed)),
            output_tokens=Lengths(mean=per_request(doc, "total_output_tokens", completed)),
            duration_s=duration,
            completed=completed,
            failed=doc.integer("failed", "count"),
            request_throughput=_request_throughput(doc),
            input_throughput=in_tput if in_tput is not None else total_in / duration,
            output_throughput=doc.need_num("output_throughput", "tok_s"),
            ttft=flat.latency(doc, "ttft", "latency_ms"),
            tpot=flat.latency(doc, "tpot", "step_ms"),
            itl=flat.latency(doc, "itl", "step_ms"),
            e2e=flat.latency(doc, "e2el", "latency_ms"),
            accept_length=doc.num("spec_decode_acceptance_length", "accept_length"),
            config=StatedConfig(
                model=doc.text("model_id"),
                tokenizer=doc.text("tokenizer_id"),
                backend=doc.text("backend") or doc.text("endpoint_type"),
                metadata=_metadata(doc),
            ),
        )
    ]


def _request_throughput(doc: Doc) -> float:
    if "request_throughput" not in doc.data and "request_inthroughput" in doc.data:
        return doc.need_num("request_inthroughput", "req_s")  # the 2024 script's spelling
    return doc.need_num("request_throughput", "req_s")


def _arrival(rate: float | None, burstiness: float | None, ramp: str | None) -> str | None:
    if ramp is not None:
        return "ramp"
    if rate is None or rate == math.inf:
        return None
    return "poisson" if burstiness in (None, 1.0) else "gamma"


def _date(doc: Doc) -> str | None:
    text = doc.text("date")
    if text is None:
        return None
    try:
        return datetime.strptime(text, DATE).isoformat()
    except ValueError:
        raise doc.error("date", f"{text!r} is not vLLM's YYYYMMDD-HHMMSS date") from None


def _metadata(doc: Doc) -> dict[str, str]:
    """`--metadata KEY=VALUE` pairs and `label`: the top-level strings that are none of the tool's own keys."""
    out = {}
    for k, v in doc.data.items():
        if isinstance(v, str) and (k == "label" or (k not in _KNOWN and not _METRIC.fullmatch(k))):
            out[k] = doc.text(k) or ""
    return out


# --- writing ----------------------------------------------------------------------------------------------


def _doc(run: BenchRun) -> dict[str, Any]:
    """`vllm bench serve`'s key order: setup, metadata, traffic, then results (per-request lists left out, as
    without --save-detailed)."""
    completed, duration = counts(run)
    meta = dict(run.config.metadata)
    d: dict[str, Any] = {}
    if run.date is not None:
        d["date"] = datetime.fromisoformat(run.date).strftime(DATE)
    d |= {"endpoint_type": run.config.backend, "backend": run.config.backend, "label": meta.pop("label", None)}
    d |= {"model_id": run.config.model, "tokenizer_id": run.config.tokenizer, "num_prompts": run.num_prompts}
    d |= meta
    rate = run.load.request_rate if run.load.request_rate is not None else math.inf
    d["request_rate"] = "inf" if rate == math.inf else rate
    d["burstiness"] = run.load.burstiness if run.load.burstiness is not None else 1.0
    d["max_concurrency"] = run.load.max_concurrency
    d |= {
        "duration": duration,
        "completed": completed,
        "failed": run.failed if run.failed is not None else 0,
        "total_input_tokens": round((run.input_tokens.mean or 0) * completed),
        "total_output_tokens": round((run.output_tokens.mean or 0) * completed),
        "request_throughput": run.request_throughput,
        "request_goodput": None,
        "output_throughput": run.output_throughput,
    }
    for metric, lat in (("ttft", run.ttft), ("tpot", run.tpot), ("itl", run.itl), ("e2el", run.e2e)):
        d |= flat.keys(metric, lat)
    if run.accept_length is not None:
        d["spec_decode_acceptance_length"] = run.accept_length
    return d


def render(runs: list[BenchRun]) -> str:
    """One run: the --save-result file; more: the --append-result file (one object per line)."""
    return "\n".join(json.dumps(_doc(r)) for r in runs)


def as_written(run: BenchRun) -> BenchRun:
    completed, duration = counts(run)
    rate = run.load.request_rate if run.load.request_rate is not None else math.inf
    burstiness = run.load.burstiness if run.load.burstiness is not None else 1.0
    return replace(
        run,
        tool="vllm",
        variant=CLI,
        date=None
        if run.date is None
        else datetime.fromisoformat(run.date).replace(microsecond=0, tzinfo=None).isoformat(),
        tool_version=None,
        load=Load(
            request_rate=rate,
            arrival=_arrival(rate, burstiness, None),
            burstiness=burstiness,
            max_concurrency=run.load.max_concurrency,
        ),
        dataset=None,
        input_tokens=Lengths(mean=run.input_tokens.mean),
        output_tokens=Lengths(mean=run.output_tokens.mean),
        completed=completed,
        duration_s=duration,
        failed=run.failed if run.failed is not None else 0,
        input_throughput=round((run.input_tokens.mean or 0) * completed) / duration,
        config=StatedConfig(
            model=run.config.model,
            tokenizer=run.config.tokenizer,
            backend=run.config.backend,
            metadata={k: v for k, v in run.config.metadata.items() if v is not None},
        ),
    )


FORMAT = Format("vllm", detect, read, render, as_written)
