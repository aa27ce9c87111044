"""SGLang `python -m sglang.bench_serving --output-file F.jsonl`: one JSON object appended per run.

Sources followed (github.com/sgl-project/sglang, python/sglang/bench_serving.py):

* commit 50a613687fe1 (2024), the early key set: `backend, dataset_name, request_rate, total_input_tokens,
  total_output_tokens, total_output_tokens_retokenized, mean_e2e_latency_ms, median_e2e_latency_ms,
  median_ttft_ms, median_itl_ms, output_throughput, sharegpt_output_len, random_input_len, random_output_len,
  random_range_ratio, duration, completed` — no request or input throughput, no means or p99 of TTFT/ITL, no
  TPOT. Request and input throughput are derived exactly as the tool computes them (`completed / duration`,
  `total_input_tokens / duration`).
* commit 0033168f0f58: adds `max_concurrency`, `request_throughput`, `input_throughput`, mean/median/std/p99
  of `ttft`, `tpot`, `e2e_latency` and mean/median/std/p95/p99 of `itl`, `concurrency`, `accept_length`.
* a later version (the one storing `/get_server_info` as `server_info`): adds `tag`, `server_info`,
  `total_throughput`, `p90_e2e_latency_ms`, `max_output_tokens_per_s`, `max_concurrent_requests`;
  `request_rate` may be the string "trace" (timestamps from a trace). `server_info` is the server's
  `dataclasses.asdict(ServerArgs)` plus scheduler info, `internal_states` and `version`
  (python/sglang/srt/entrypoints/http_server.py @0025436eab05); behind a PD router it holds
  `{"prefill": [...], "decode": [...]}` (bench_serving reads `server_info["decode"][0]`).
* docs/developer_guide/bench_serving.md @0229689b6730 ("JSONL output format") describes the same fields.

Meaning and units: `duration` seconds; every `*_ms` key milliseconds; `request_throughput` completed requests
per second, `input_throughput`/`output_throughput` tokens per second; `request_rate` requests per second of
a Poisson process (`np.random.exponential`), `Infinity` (json.dumps of float("inf")) for all at once;
`max_concurrency` requests in flight; totals count completed requests only. TPOT is per request
`(latency − ttft) / (output_len − 1)`; ITL pools every token gap of every request. An empty statistic is
written as 0 (`np.mean(values or 0)`), read here as not measured.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import simulator.calibration.bench_formats.flat as flat
from simulator.calibration.bench_fields import Doc
from simulator.calibration.bench_formats.format import Format, counts, per_request, place
from simulator.calibration.bench_run import BenchRun, Lengths, Load, Scalar, StatedConfig

EARLY = "bench_serving 2024 (medians only, no request_throughput)"
FULL = "bench_serving with max_concurrency and full statistics"
SERVER_INFO = "bench_serving with server_info"

TTFT = ("mean", "median", "p99")
TPOT = ("mean", "median", "p99")
ITL = ("mean", "median", "p95", "p99")
E2E = ("mean", "median", "p90", "p99")


def detect(d: dict[str, Any]) -> bool:
    return (
        "completed" in d
        and "duration" in d
        and any(
            k in d
            for k in ("random_input_len", "total_output_tokens_retokenized", "server_info", "sharegpt_output_len")
        )
    )


def read(doc: Doc, sha256: str) -> list[BenchRun]:
    completed = doc.need_int("completed", "count")
    if completed == 0:
        raise doc.error("completed", "0 requests completed: the run measured nothing")
    duration = doc.need_num("duration", "duration_s")
    variant = SERVER_INFO if "server_info" in doc.data else FULL if "request_throughput" in doc.data else EARLY
    dataset = doc.text("dataset_name")
    random = dataset is not None and dataset.startswith("random")
    rate_text = doc.data.get("request_rate") == "trace"
    rate = None if rate_text else doc.rate("request_rate")
    out_requested = doc.num("random_output_len", "tokens") if random else doc.num("sharegpt_output_len", "tokens")
    req_tput = doc.num("request_throughput", "req_s")
    in_tput = doc.num("input_throughput", "tok_s")
    return [
        BenchRun(
            tool="sglang",
            variant=variant,
            **place(doc, sha256),
            date=None,
            tool_version=None,
            load=Load(
                request_rate=rate,
                arrival="trace" if rate_text else "poisson" if rate is not None and rate < math.inf else None,
                max_concurrency=doc.integer("max_concurrency", "concurrency"),
            ),
            num_prompts=None,
            dataset=dataset,
            input_tokens=Lengths(
                mean=per_request(doc, "total_input_tokens", completed),
                requested=doc.num("random_input_len", "tokens") if random else None,
                range_ratio=doc.num("random_range_ratio", "ratio") if random else None,
            ),
            output_tokens=Lengths(
                mean=per_request(doc, "total_output_tokens", completed),
                requested=out_requested,
                range_ratio=doc.num("random_range_ratio", "ratio") if random else None,
            ),
            duration_s=duration,
            completed=completed,
            failed=None,
            request_throughput=req_tput if req_tput is not None else completed / duration,
            input_throughput=in_tput if in_tput is not None else _total(doc, "total_input_tokens") / duration,
            output_throughput=doc.need_num("output_throughput", "tok_s"),
            ttft=flat.latency(doc, "ttft", "latency_ms"),
            tpot=flat.latency(doc, "tpot", "step_ms"),
            itl=flat.latency(doc, "itl", "step_ms"),
            e2e=flat.latency(doc, "e2e_latency", "latency_ms"),
            accept_length=doc.num("accept_length", "accept_length"),
            config=_config(doc),
        )
    ]


def _total(doc: Doc, key: str) -> int:
    v = doc.need_int(key, "total_tokens")
    return v


def _config(doc: Doc) -> StatedConfig:
    servers: dict[str, dict[str, Scalar]] = {}
    info = doc.sub("server_info")
    if info is not None:
        if "decode" in info.data:  # behind a PD router: the first server of each role
            for role in ("prefill", "decode"):
                first = info.items(role)
                if first:
                    servers[role] = first[0].scalars()
        else:
            servers["server"] = info.scalars()
    main = servers.get("decode") or servers.get("server") or {}
    tag = doc.text("tag")
    model, tokenizer = main.get("model_path"), main.get("tokenizer_path")
    return StatedConfig(
        model=model if isinstance(model, str) else None,
        tokenizer=tokenizer if isinstance(tokenizer, str) else None,
        backend=doc.text("backend"),
        servers=servers,
        metadata={"tag": tag} if tag is not None else {},
    )


# --- writing ----------------------------------------------------------------------------------------------


def _doc(run: BenchRun) -> dict[str, Any]:
    """The newest variant's key order; statistics the run lacks are left out, std (not held) too."""
    c, duration = counts(run)
    d: dict[str, Any] = {
        "tag": run.config.metadata.get("tag"),
        "backend": run.config.backend,
        "dataset_name": run.dataset,
        "request_rate": "trace" if run.load.arrival == "trace" else _rate(run),
        "max_concurrency": run.load.max_concurrency,
        "sharegpt_output_len": None,
        "random_input_len": run.input_tokens.requested,
        "random_output_len": run.output_tokens.requested,
        "random_range_ratio": run.input_tokens.range_ratio,
        "server_info": _server_info(run),
        "duration": duration,
        "completed": c,
        "total_input_tokens": round((run.input_tokens.mean or 0) * c),
        "total_output_tokens": round((run.output_tokens.mean or 0) * c),
        "request_throughput": run.request_throughput,
        "input_throughput": run.input_throughput,
        "output_throughput": run.output_throughput,
    }
    d |= flat.keys("e2e_latency", run.e2e, E2E) | flat.keys("ttft", run.ttft, TTFT)
    d |= flat.keys("tpot", run.tpot, TPOT) | flat.keys("itl", run.itl, ITL)
    d["accept_length"] = run.accept_length
    return d


def _rate(run: BenchRun) -> float:
    return run.load.request_rate if run.load.request_rate is not None else math.inf  # the tool's default


def _server_info(run: BenchRun) -> dict[str, Any] | None:
    """None (the tool's null: no /get_server_info answer) when the run states no server or model."""
    s = run.config.servers
    if "prefill" in s or "decode" in s:
        return {role: [s[role]] for role in ("prefill", "decode") if role in s}
    return dict(s.get("server") or _model_args(run)) or None


def _model_args(run: BenchRun) -> dict[str, Scalar]:
    args: dict[str, Scalar] = {}
    if run.config.model is not None:
        args["model_path"] = run.config.model
    if run.config.tokenizer is not None:
        args["tokenizer_path"] = run.config.tokenizer
    return args


def render(runs: list[BenchRun]) -> str:
    return "".join(json.dumps(_doc(r)) + "\n" for r in runs)


def as_written(run: BenchRun) -> BenchRun:
    random = run.dataset is not None and run.dataset.startswith("random")
    servers = run.config.servers or ({"server": _model_args(run)} if _model_args(run) else {})
    main = servers.get("decode") or servers.get("server") or {}
    model, tokenizer = main.get("model_path"), main.get("tokenizer_path")
    rate = None if run.load.arrival == "trace" else _rate(run)
    arrival = "trace" if run.load.arrival == "trace" else "poisson" if rate is not None and rate < math.inf else None
    tag = run.config.metadata.get("tag")
    completed, duration = counts(run)
    return replace(
        run,
        tool="sglang",
        variant=SERVER_INFO,
        completed=completed,
        duration_s=duration,
        date=None,
        tool_version=None,
        load=Load(request_rate=rate, arrival=arrival, max_concurrency=run.load.max_concurrency),
        num_prompts=None,
        input_tokens=Lengths(
            mean=run.input_tokens.mean,
            requested=run.input_tokens.requested if random else None,
            range_ratio=run.input_tokens.range_ratio if random else None,
        ),
        output_tokens=Lengths(
            mean=run.output_tokens.mean,
            requested=run.output_tokens.requested if random else None,
            range_ratio=run.input_tokens.range_ratio if random else None,
        ),
        failed=None,
        ttft=flat.only(run.ttft, TTFT),
        tpot=flat.only(run.tpot, TPOT),
        itl=flat.only(run.itl, ITL),
        e2e=flat.only(run.e2e, E2E),
        config=StatedConfig(
            model=model if isinstance(model, str) else None,
            tokenizer=tokenizer if isinstance(tokenizer, str) else None,
            backend=run.config.backend,
            servers=servers,
            metadata={"tag": tag} if tag is not None else {},
        ),
    )


FORMAT = Format("sglang", detect, read, render, as_written, jsonl=True)
