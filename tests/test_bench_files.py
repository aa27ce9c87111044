"""Benchmark result files read into BenchRuns: one fixture per tool and format version, written here from the
field names each tool's source writes (simulator/calibration/bench_formats/*.py name the commits), never a
copied or fetched result; every hostile-file kind gets one line naming the file and field; runs written back
out as each tool's format read back equal; the stated configuration is checked against a scenario."""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

from simulator import input_files
from simulator.calibration import bench_files
from simulator.calibration.bench_check import check_config, same_model
from simulator.calibration.bench_run import TOOLS, BenchRun
from simulator.config import loader
from simulator.engine.run import simulate
from simulator.errors import InputError

ROOT = Path(__file__).resolve().parents[1]


def _write(tmp_path: Path, name: str, content: Any, jsonl: bool = False) -> Path:
    p = tmp_path / name
    if isinstance(content, bytes):
        p.write_bytes(content)
    elif isinstance(content, str):
        p.write_text(content)
    elif jsonl:
        p.write_text("".join(json.dumps(d) + "\n" for d in content))
    else:
        p.write_text(json.dumps(content, indent=2))
    return p


# --- fixtures: each tool's documented keys ----------------------------------------------------------------


def sglang_early() -> dict[str, Any]:
    """bench_serving.py @50a613687fe1: the 2024 key set, in its order."""
    return {
        "backend": "sglang",
        "dataset_name": "random",
        "request_rate": 4,
        "total_input_tokens": 200_000,
        "total_output_tokens": 50_000,
        "total_output_tokens_retokenized": 49_800,
        "mean_e2e_latency_ms": 9000.5,
        "median_e2e_latency_ms": 8800.0,
        "median_ttft_ms": 120.25,
        "median_itl_ms": 30.5,
        "output_throughput": 500.0,
        "sharegpt_output_len": None,
        "random_input_len": 1024,
        "random_output_len": 256,
        "random_range_ratio": 0.5,
        "duration": 100.0,
        "completed": 250,
    }


def sglang_full() -> dict[str, Any]:
    """bench_serving.py @0033168f0f58: closed loop (rate inf, max_concurrency), full statistics, non-streaming
    ITL written as 0 by `np.mean(itls or 0)`."""
    return {
        "backend": "sglang-oai",
        "dataset_name": "random",
        "request_rate": math.inf,  # json.dumps writes Infinity
        "max_concurrency": 64,
        "sharegpt_output_len": None,
        "random_input_len": 2048,
        "random_output_len": 512,
        "random_range_ratio": 1.0,
        "duration": 120.0,
        "completed": 600,
        "total_input_tokens": 1_228_800,
        "total_output_tokens": 307_200,
        "total_output_tokens_retokenized": 307_100,
        "request_throughput": 5.0,
        "input_throughput": 10240.0,
        "output_throughput": 2560.0,
        "mean_e2e_latency_ms": 12000.0,
        "median_e2e_latency_ms": 11800.0,
        "std_e2e_latency_ms": 900.0,
        "p99_e2e_latency_ms": 15000.0,
        "mean_ttft_ms": 800.0,
        "median_ttft_ms": 750.0,
        "std_ttft_ms": 100.0,
        "p99_ttft_ms": 2100.0,
        "mean_tpot_ms": 21.9,
        "median_tpot_ms": 21.5,
        "std_tpot_ms": 2.0,
        "p99_tpot_ms": 30.0,
        "mean_itl_ms": 0.0,
        "median_itl_ms": 0.0,
        "std_itl_ms": 0.0,
        "p95_itl_ms": 0.0,
        "p99_itl_ms": 0.0,
        "concurrency": 60.2,
        "accept_length": None,
    }


def sglang_server_info() -> dict[str, Any]:
    """The version storing /get_server_info: ServerArgs' fields, internal_states (nested, not kept), version."""
    d = sglang_full() | {"tag": "dsv3-tp8", "request_rate": 8.0, "max_concurrency": None}
    d["server_info"] = {
        "model_path": "deepseek-ai/DeepSeek-V3-0324",
        "tokenizer_path": "deepseek-ai/DeepSeek-V3-0324",
        "tp_size": 8,
        "dp_size": 1,
        "enable_dp_attention": False,
        "kv_cache_dtype": "fp8_e4m3",
        "speculative_algorithm": "NEXTN",
        "speculative_num_steps": 1,
        "speculative_num_draft_tokens": 2,
        "disaggregation_mode": "null",
        "internal_states": [{"avg_spec_accept_length": 1.8}],
        "version": "0.5.4",
    }
    d |= {"total_throughput": 12800.0, "p90_e2e_latency_ms": 14000.0, "accept_length": 1.8}
    d |= {"mean_itl_ms": 21.0, "median_itl_ms": 20.0, "p95_itl_ms": 27.0, "p99_itl_ms": 40.0}
    d |= {"max_output_tokens_per_s": 3000.0, "max_concurrent_requests": 70}
    return d


def vllm_script() -> dict[str, Any]:
    """benchmarks/benchmark_serving.py @0049e29c41fd --save-result --metadata tp=8 (default percentiles: 99)."""
    return {
        "date": "20250301-142530",
        "backend": "vllm",
        "model_id": "meta-llama/Llama-3.1-8B-Instruct",
        "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
        "num_prompts": 1000,
        "tp": "8",
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": 32,
        "duration": 50.0,
        "completed": 1000,
        "total_input_tokens": 512_000,
        "total_output_tokens": 128_000,
        "request_throughput": 20.0,
        "request_goodput:": None,
        "output_throughput": 2560.0,
        "total_token_throughput": 12800.0,
        "mean_ttft_ms": 45.0,
        "median_ttft_ms": 40.0,
        "std_ttft_ms": 8.0,
        "p99_ttft_ms": 110.0,
        "mean_tpot_ms": 11.5,
        "median_tpot_ms": 11.0,
        "std_tpot_ms": 1.0,
        "p99_tpot_ms": 15.0,
        "mean_itl_ms": 11.4,
        "median_itl_ms": 10.8,
        "std_itl_ms": 3.0,
        "p99_itl_ms": 25.0,
    }


def vllm_cli() -> dict[str, Any]:
    """vllm/benchmarks/serve.py @009e6d4a1cd6 (`vllm bench serve --save-result --label x --metric-percentiles
    50,90,95,99 --percentile-metrics ttft,tpot,itl,e2el --burstiness 0.5`), speculative decoding on."""
    d = {
        "date": "20251104-090000",
        "endpoint_type": "openai-chat",
        "backend": "openai-chat",
        "label": "h200-run",
        "model_id": "deepseek-ai/DeepSeek-V3",
        "tokenizer_id": "deepseek-ai/DeepSeek-V3",
        "num_prompts": 500,
        "request_rate": 2.5,
        "burstiness": 0.5,
        "max_concurrency": None,
        "duration": 200.0,
        "completed": 498,
        "failed": 2,
        "total_input_tokens": 996_000,
        "total_output_tokens": 249_000,
        "request_throughput": 2.49,
        "request_goodput": None,
        "output_throughput": 1245.0,
        "total_token_throughput": 6225.0,
        "max_output_tokens_per_s": 1500.0,
        "max_concurrent_requests": 90,
        "rtfx": 0.0,
        "spec_decode_acceptance_length": 1.85,
    }
    for metric, base in (("ttft", 300.0), ("tpot", 30.0), ("itl", 29.0), ("e2el", 15000.0)):
        d |= {f"mean_{metric}_ms": base, f"median_{metric}_ms": base * 0.9, f"std_{metric}_ms": base / 10}
        d |= {f"p50_{metric}_ms": base * 0.9, f"p90_{metric}_ms": base * 1.5}
        d |= {f"p95_{metric}_ms": base * 1.8, f"p99_{metric}_ms": base * 2.5}
    return d


def _nv(unit: str, avg: float, **pcts: float) -> dict[str, Any]:
    return {"unit": unit, "avg": avg} | pcts


def genai_perf_flat() -> dict[str, Any]:
    """genai-perf before the 2025-03 config rewrite: times in ms, ITL per request (since e366b35c), argparse
    `input_config` (output_tokens_mean -1: not set), no request_count statistic (added 2024-12)."""
    return {
        "request_throughput": _nv("requests/sec", 3.2),
        "request_latency": _nv("ms", 4100.0, p50=4000.0, p90=5000.0, p95=5500.0, p99=6500.0, min=900.0, std=600.0),
        "time_to_first_token": _nv("ms", 95.0, p25=70.0, p50=90.0, p75=110.0, p90=130.0, p95=150.0, p99=210.0),
        "inter_token_latency": _nv("ms", 15.5, p50=15.0, p90=18.0, p95=19.5, p99=24.0),
        "output_token_throughput": _nv("tokens/sec", 820.0),
        "output_sequence_length": _nv("tokens", 256.0, p50=256.0),
        "input_sequence_length": _nv("tokens", 550.0, p50=550.0),
        "input_config": {
            "model": ["llama-3.1-70b-instruct"],
            "backend": "tensorrtllm",
            "endpoint_type": "kserve",
            "service_kind": "triton",
            "concurrency": 16,
            "request_rate": None,
            "synthetic_input_tokens_mean": 550,
            "synthetic_input_tokens_stddev": 0,
            "output_tokens_mean": -1,
            "output_tokens_stddev": 0,
            "request_count": 0,
            "tokenizer": "hf-internal-testing/llama-tokenizer",
        },
    }


def genai_perf_ns() -> dict[str, Any]:
    """The first JSON export (c18c493e, 2024-05-16): times in nanoseconds, ITL pooled over tokens."""
    d = genai_perf_flat()
    d["time_to_first_token"] = _nv("ns", 95e6, p50=90e6, p90=130e6, p95=150e6, p99=210e6)
    d["inter_token_latency"] = _nv("ns", 15.5e6, p50=15e6, p90=18e6, p95=19.5e6, p99=24e6)
    d["request_latency"] = _nv("ns", 4.1e9, p50=4e9, p90=5e9, p95=5.5e9, p99=6.5e9)
    return d


def genai_perf_nested() -> dict[str, Any]:
    """genai-perf @263c5f6e0c7a: p1…p99, request_count, config-file `input_config`, a request-rate stimulus."""
    pcts = {"p1": 50.0, "p5": 55.0, "p10": 60.0, "p25": 70.0, "p50": 90.0, "p75": 110.0}
    return {
        "request_throughput": _nv("requests/sec", 4.0),
        "request_latency": _nv("ms", 4100.0, p50=4000.0, p90=5000.0, p95=5500.0, p99=6500.0),
        "request_count": _nv("count", 400.0),
        "time_to_first_token": _nv("ms", 95.0, **pcts, p90=130.0, p95=150.0, p99=210.0),
        "time_to_second_token": _nv("ms", 20.0),
        "inter_token_latency": _nv("ms", 15.5, p50=15.0, p90=18.0, p95=19.5, p99=24.0),
        "output_token_throughput": _nv("tokens/sec", 1024.0),
        "output_token_throughput_per_user": _nv("tokens/sec/user", 64.5),
        "output_sequence_length": _nv("tokens", 256.0),
        "input_sequence_length": _nv("tokens", 1000.0),
        "input_config": {
            "model_names": ["zai-org/GLM-5.2-FP8"],
            "endpoint": {"backend": "vllm", "type": "chat", "streaming": True, "url": "localhost:8000"},
            "perf_analyzer": {"stimulus": {"request_rate": 4.0}, "measurement": {"mode": "request_count", "num": 400}},
            "input": {"synthetic_tokens": {"mean": 1000, "stddev": 50}, "output_tokens": {"mean": 256, "stddev": 0}},
            "output": {"profile_export_file": "profile_export.json"},
            "tokenizer": {"name": "zai-org/GLM-5.2-FP8", "revision": "main", "trust_remote_code": False},
            "subcommand": "profile",
        },
    }


def aiperf() -> dict[str, Any]:
    """aiperf @db4f6397d11e: JsonExportData (benchmark_duration in sec, ISO start_time, UserConfig)."""
    return {
        "request_throughput": _nv("requests/sec", 5.0),
        "request_latency": _nv("ms", 2000.0, p50=1900.0, p90=2600.0, p95=2900.0, p99=3500.0),
        "request_count": _nv("requests", 1000.0),
        "time_to_first_token": _nv("ms", 60.0, p50=55.0, p90=80.0, p95=90.0, p99=120.0),
        "inter_token_latency": _nv("ms", 7.5, p50=7.4, p90=8.5, p95=9.0, p99=11.0),
        "output_token_throughput": _nv("tokens/sec", 1280.0),
        "output_sequence_length": _nv("tokens", 256.0),
        "input_sequence_length": _nv("tokens", 550.0),
        "benchmark_duration": _nv("sec", 200.0),
        "total_isl": _nv("tokens", 550_000.0),
        "error_request_count": _nv("requests", 3.0),
        "input_config": {
            "endpoint": {"model_names": ["moonshotai/Kimi-K2.6"], "type": "chat", "streaming": True},
            "loadgen": {"request_rate": 5.0, "request_rate_mode": "poisson", "request_count": 1003},
            "input": {"prompt": {"input_tokens": {"mean": 550, "stddev": 0}, "output_tokens": {"mean": 256}}},
            "tokenizer": {"name": "moonshotai/Kimi-K2.6"},
        },
        "was_cancelled": False,
        "error_summary": [],
        "start_time": "2025-10-07T12:00:00.500000",
        "end_time": "2025-10-07T12:03:20.500000",
    }


def _dist(mean: float, median: float | None = None, **pcts: float) -> dict[str, Any]:
    summary = {"mean": mean, "median": median if median is not None else mean, "std_dev": 1.0, "count": 10}
    return {"successful": summary | {"percentiles": {"p50": summary["median"]} | pcts}, "errored": None}


def guidellm_v03() -> dict[str, Any]:
    """guidellm v0.3.0 benchmarks.json: args.strategy, worker, start/end times, request_latency in SECONDS."""
    return {
        "benchmarks": [
            {
                "type_": "generative_benchmark",
                "id_": "b1",
                "args": {"strategy": {"type_": "concurrent", "streams": 8}, "max_number": None},
                "worker": {
                    "type_": "generative_requests_worker",
                    "backend_type": "openai_http",
                    "backend_target": "http://localhost:8000",
                    "backend_model": "meta-llama/Llama-3.1-70B-Instruct",
                },
                "start_time": 1_757_000_000.0,
                "end_time": 1_757_000_060.0,
                "request_totals": {"successful": 120, "incomplete": 2, "errored": 1, "total": 123},
                "metrics": {
                    "requests_per_second": _dist(2.0),
                    "request_concurrency": _dist(7.9),
                    "request_latency": _dist(3.9, 3.8, p90=4.5, p95=4.8, p99=5.5),
                    "prompt_token_count": _dist(512.0),
                    "output_token_count": _dist(128.0),
                    "time_to_first_token_ms": _dist(150.0, 140.0, p90=200.0, p95=230.0, p99=300.0),
                    "time_per_output_token_ms": _dist(30.0),
                    "inter_token_latency_ms": _dist(29.5, 29.0, p90=33.0, p95=35.0, p99=40.0),
                    "output_tokens_per_second": _dist(256.0),
                    "tokens_per_second": _dist(1280.0),
                },
            }
        ]
    }


def guidellm_v04() -> dict[str, Any]:
    """guidellm v0.4+ report: metadata, config.strategy/backend, duration, metrics.request_totals; a sweep's
    two benchmarks (a poisson rate, then throughput)."""

    def bench(strategy: dict[str, Any], rps: float, start: float) -> dict[str, Any]:
        return {
            "type_": "generative_benchmark",
            "config": {
                "strategy": strategy,
                "backend": {"target": "http://localhost:30000", "model": "deepseek-ai/DeepSeek-V3", "timeout": 60},
            },
            "start_time": start,
            "end_time": start + 100.0,
            "duration": 100.0,
            "metrics": {
                "request_totals": {
                    "successful": int(rps * 100),
                    "incomplete": 0,
                    "errored": 0,
                    "total": int(rps * 100),
                },
                "requests_per_second": _dist(rps),
                "request_latency": _dist(10.0, 9.5, p90=12.0, p95=13.0, p99=15.0),
                "prompt_token_count": _dist(2000.0),
                "output_token_count": _dist(400.0),
                "time_to_first_token_ms": _dist(500.0, 450.0, p90=800.0, p95=900.0, p99=1200.0),
                "time_per_output_token_ms": _dist(24.0),
                "inter_token_latency_ms": _dist(23.0, 22.0, p90=26.0, p95=28.0, p99=33.0),
                "prompt_tokens_per_second": _dist(rps * 2000.0),
                "output_tokens_per_second": _dist(rps * 400.0),
            },
        }

    return {
        "metadata": {"version": 2, "guidellm_version": "0.7.3", "python_version": "3.12.1", "platform": "Linux"},
        "benchmarks": [
            bench({"type_": "poisson", "rate": 3.0, "max_concurrency": None}, 3.0, 1_780_000_000.0),
            bench({"type_": "throughput", "max_concurrency": 512}, 6.0, 1_780_000_200.0),
        ],
    }


FIXTURES = {
    "sglang_early": ("sglang", [sglang_early()]),
    "sglang_full": ("sglang", [sglang_full()]),
    "sglang_server_info": ("sglang", [sglang_server_info()]),
    "vllm_script": ("vllm", vllm_script()),
    "vllm_cli": ("vllm", vllm_cli()),
    "genai_perf_flat": ("genai-perf", genai_perf_flat()),
    "genai_perf_ns": ("genai-perf", genai_perf_ns()),
    "genai_perf_nested": ("genai-perf", genai_perf_nested()),
    "aiperf": ("aiperf", aiperf()),
    "guidellm_v03": ("guidellm", guidellm_v03()),
    "guidellm_v04": ("guidellm", guidellm_v04()),
}


def _fixture(tmp_path: Path, key: str) -> Path:
    tool, content = FIXTURES[key]
    return _write(tmp_path, f"{key}.{'jsonl' if tool == 'sglang' else 'json'}", content, jsonl=tool == "sglang")


@pytest.mark.parametrize("key", sorted(FIXTURES))
def test_every_fixture_is_detected_and_reads_the_same_with_its_format_named(tmp_path: Path, key: str) -> None:
    path = _fixture(tmp_path, key)
    auto = bench_files.read(path)
    assert [r.tool for r in auto] == [FIXTURES[key][0]] * len(auto)
    assert bench_files.read(path, FIXTURES[key][0]) == auto
    assert {r.sha256 for r in auto} == {hashlib.sha256(path.read_bytes()).hexdigest()}


def test_several_files_read_in_order(tmp_path: Path) -> None:
    paths = [_fixture(tmp_path, "guidellm_v04"), _fixture(tmp_path, "sglang_early"), _fixture(tmp_path, "aiperf")]
    runs = bench_files.read_all(paths)
    assert [(r.tool, r.path) for r in runs] == [
        ("guidellm", str(paths[0])),
        ("guidellm", str(paths[0])),
        ("sglang", str(paths[1])),
        ("aiperf", str(paths[2])),
    ]


# --- parsed values, per format and version ------------------------------------------------------------------


def test_sglang_early_derives_throughputs_as_the_tool_computes_them(tmp_path: Path) -> None:
    (r,) = bench_files.read(_fixture(tmp_path, "sglang_early"))
    assert r.variant.startswith("bench_serving 2024")
    assert (r.line, r.completed, r.duration_s) == (1, 250, 100.0)
    assert r.request_throughput == 2.5 and r.input_throughput == 2000.0 and r.output_throughput == 500.0
    assert r.load.request_rate == 4.0 and r.load.arrival == "poisson" and r.load.max_concurrency is None
    assert (r.input_tokens.mean, r.input_tokens.requested, r.input_tokens.range_ratio) == (800.0, 1024.0, 0.5)
    assert (r.output_tokens.mean, r.output_tokens.requested) == (200.0, 256.0)
    assert r.ttft.median == 120.25 and r.ttft.mean is None and r.ttft.p99 is None
    assert r.itl.median == 30.5 and not r.tpot.stated()
    assert (r.e2e.mean, r.e2e.median) == (9000.5, 8800.0)
    assert r.config.backend == "sglang" and r.config.model is None and r.config.servers == {}


def test_sglang_full_reads_infinity_as_all_at_once_and_zero_as_not_measured(tmp_path: Path) -> None:
    path = _fixture(tmp_path, "sglang_full")
    assert "Infinity" in path.read_text()  # what json.dumps(float("inf")) writes
    (r,) = bench_files.read(path)
    assert r.load.request_rate == math.inf and r.load.arrival is None and r.load.max_concurrency == 64
    assert r.request_throughput == 5.0 and r.input_throughput == 10240.0
    assert r.ttft.mean == 800.0 and r.ttft.median == 750.0 and r.ttft.p99 == 2100.0 and r.ttft.p95 is None
    assert r.tpot.mean == 21.9 and r.tpot.p99 == 30.0
    assert not r.itl.stated()  # non-streaming: every ITL statistic written as 0
    assert r.e2e.p99 == 15000.0 and r.accept_length is None


def test_sglang_server_info_gives_model_and_server_args(tmp_path: Path) -> None:
    (r,) = bench_files.read(_fixture(tmp_path, "sglang_server_info"))
    assert r.variant == "bench_serving with server_info"
    assert r.config.model == "deepseek-ai/DeepSeek-V3-0324" and r.config.tokenizer == r.config.model
    args = r.config.servers["server"]
    assert args["tp_size"] == 8 and args["kv_cache_dtype"] == "fp8_e4m3" and args["version"] == "0.5.4"
    assert "internal_states" not in args  # nested: not a server argument
    assert r.config.metadata == {"tag": "dsv3-tp8"}
    assert r.e2e.p90 == 14000.0 and r.itl.p95 == 27.0 and r.accept_length == 1.8
    assert r.load.request_rate == 8.0 and r.load.arrival == "poisson"


def test_sglang_jsonl_lines_are_runs_and_a_pd_router_gives_both_roles(tmp_path: Path) -> None:
    pd = sglang_server_info()
    decode = dict(pd["server_info"], disaggregation_mode="decode", tp_size=16)
    prefill = dict(pd["server_info"], disaggregation_mode="prefill")
    pd["server_info"] = {"prefill": [prefill], "decode": [decode]}
    trace = sglang_server_info() | {"request_rate": "trace"}
    path = _write(tmp_path, "runs.jsonl", [sglang_early(), pd, trace], jsonl=True)
    runs = bench_files.read(path)
    assert [r.line for r in runs] == [1, 2, 3]
    assert runs[1].config.servers["decode"]["tp_size"] == 16 and runs[1].config.servers["prefill"]["tp_size"] == 8
    assert runs[2].load.arrival == "trace" and runs[2].load.request_rate is None


def test_vllm_script_converts_date_and_derives_input_throughput(tmp_path: Path) -> None:
    (r,) = bench_files.read(_fixture(tmp_path, "vllm_script"))
    assert r.variant == "benchmarks/benchmark_serving.py"
    assert r.date == "2025-03-01T14:25:30" and r.line is None
    assert r.load.request_rate == math.inf and r.load.burstiness == 1.0 and r.load.max_concurrency == 32
    assert r.num_prompts == 1000 and r.completed == 1000 and r.failed is None
    assert r.input_throughput == 512_000 / 50.0 and r.request_throughput == 20.0
    assert (r.input_tokens.mean, r.output_tokens.mean) == (512.0, 128.0)
    assert r.ttft.p99 == 110.0 and r.tpot.median == 11.0 and r.itl.mean == 11.4 and not r.e2e.stated()
    assert r.config.model == "meta-llama/Llama-3.1-8B-Instruct" and r.config.metadata == {"tp": "8"}


def test_vllm_2024_spelling_of_request_throughput_and_its_input_throughput(tmp_path: Path) -> None:
    doc = vllm_script()
    for k in ("burstiness", "request_goodput:", "total_token_throughput", "tp"):
        del doc[k]
    doc["request_inthroughput"] = doc.pop("request_throughput")
    doc["input_throughput"] = 10000.0
    (r,) = bench_files.read(_write(tmp_path, "old.json", doc))
    assert r.request_throughput == 20.0 and r.input_throughput == 10000.0 and r.load.arrival is None


def test_vllm_cli_reads_percentiles_burstiness_and_acceptance(tmp_path: Path) -> None:
    (r,) = bench_files.read(_fixture(tmp_path, "vllm_cli"))
    assert r.variant == "vllm bench serve" and r.failed == 2 and r.completed == 498
    assert r.load.request_rate == 2.5 and r.load.burstiness == 0.5 and r.load.arrival == "gamma"
    assert r.ttft.median == 270.0 and r.ttft.p90 == 450.0 and r.ttft.p95 == 540.0 and r.ttft.p99 == 750.0
    assert r.e2e.mean == 15000.0 and r.e2e.p99 == 37500.0
    assert r.accept_length == 1.85 and r.config.backend == "openai-chat"
    assert r.config.metadata == {"label": "h200-run"}


def test_vllm_append_result_lines_are_runs(tmp_path: Path) -> None:
    path = _write(tmp_path, "appended.json", json.dumps(vllm_script()) + "\n" + json.dumps(vllm_cli()))
    assert [(r.tool, r.line) for r in bench_files.read(path)] == [("vllm", 1), ("vllm", 2)]


def test_genai_perf_flat_config_and_itl_as_tpot(tmp_path: Path) -> None:
    (r,) = bench_files.read(_fixture(tmp_path, "genai_perf_flat"))
    assert r.variant.startswith("genai-perf with the flat")
    assert r.load.max_concurrency == 16 and r.load.request_rate is None
    assert r.completed is None and r.duration_s is None and r.num_prompts is None  # not stated before 2024-12
    assert r.input_throughput == pytest.approx(3.2 * 550.0)
    assert (r.input_tokens.mean, r.input_tokens.requested, r.output_tokens.requested) == (550.0, 550.0, None)
    assert r.tpot == type(r.tpot)(mean=15.5, median=15.0, p90=18.0, p95=19.5, p99=24.0) and not r.itl.stated()
    assert r.ttft.median == 90.0 and r.e2e.p99 == 6500.0
    assert r.config.model == "llama-3.1-70b-instruct" and r.config.backend == "tensorrtllm"


def test_genai_perf_nanoseconds_are_converted_and_its_early_itl_is_per_token(tmp_path: Path) -> None:
    (r,) = bench_files.read(_fixture(tmp_path, "genai_perf_ns"))
    assert r.ttft.mean == pytest.approx(95.0) and r.e2e.p99 == pytest.approx(6500.0)
    assert r.itl.median == pytest.approx(15.0) and not r.tpot.stated()


def test_genai_perf_nested_config_and_derived_duration(tmp_path: Path) -> None:
    (r,) = bench_files.read(_fixture(tmp_path, "genai_perf_nested"))
    assert r.variant.startswith("genai-perf with the config-file")
    assert r.load.request_rate == 4.0 and r.load.max_concurrency is None and r.num_prompts == 400
    assert r.completed == 400 and r.duration_s == 100.0
    assert (r.input_tokens.requested, r.input_tokens.stddev, r.output_tokens.requested) == (1000.0, 50.0, 256.0)
    assert r.config.model == "zai-org/GLM-5.2-FP8" and r.config.tokenizer == "zai-org/GLM-5.2-FP8"


def test_aiperf_duration_date_and_errors(tmp_path: Path) -> None:
    (r,) = bench_files.read(_fixture(tmp_path, "aiperf"))
    assert r.tool == "aiperf" and r.duration_s == 200.0 and r.completed == 1000 and r.failed == 3
    assert r.date == "2025-10-07T12:00:00.500000"
    assert r.load.request_rate == 5.0 and r.load.arrival == "poisson" and r.num_prompts == 1003
    assert r.input_throughput == 550_000 / 200.0 and r.tpot.p99 == 11.0
    assert r.config.model == "moonshotai/Kimi-K2.6" and r.config.backend == "chat"


def test_guidellm_v03_seconds_to_ms_and_strategy(tmp_path: Path) -> None:
    (r,) = bench_files.read(_fixture(tmp_path, "guidellm_v03"))
    assert r.variant.startswith("guidellm v0.2-v0.3") and r.index == 0
    assert r.load.max_concurrency == 8 and r.load.request_rate is None
    assert r.duration_s == 60.0 and r.completed == 120 and r.failed == 1
    assert r.date == "2025-09-04T15:33:20+00:00"
    assert r.e2e.mean == pytest.approx(3900.0) and r.e2e.p99 == pytest.approx(5500.0)
    assert r.itl.median == 29.0 and not r.tpot.stated()  # time_per_output_token_ms counts the first token
    assert r.input_throughput == 2.0 * 512.0 and r.output_throughput == 256.0
    assert r.config.model == "meta-llama/Llama-3.1-70B-Instruct" and r.config.backend == "openai_http"


def test_guidellm_v04_sweep_gives_one_run_per_benchmark(tmp_path: Path) -> None:
    runs = bench_files.read(_fixture(tmp_path, "guidellm_v04"))
    assert [r.index for r in runs] == [0, 1] and {r.tool_version for r in runs} == {"0.7.3"}
    assert runs[0].load.request_rate == 3.0 and runs[0].load.arrival == "poisson"
    assert runs[1].load.request_rate == math.inf and runs[1].load.max_concurrency == 512
    assert runs[1].input_throughput == 12000.0 and runs[1].completed == 600
    assert runs[0].config.model == "deepseek-ai/DeepSeek-V3" and runs[0].where.endswith("run 0")


# --- hostile and partial files: one line naming file (and line) and field -------------------------------


def _error(path: Path, tool: str | None = None) -> str:
    with pytest.raises(InputError) as e:
        bench_files.read(path, tool)  # type: ignore[arg-type]
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(path)), msg
    return msg


def test_a_folder_and_a_fifo_are_refused_before_opening(tmp_path: Path) -> None:
    assert "not a regular file (a folder)" in _error(tmp_path)
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)  # opening a FIFO without a writer would block for ever
    assert "not a regular file (a FIFO)" in _error(fifo)
    assert "cannot read benchmark file (No such file or directory)" in _error(tmp_path / "missing.json")


def test_a_file_over_the_cap_is_refused_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "huge.json"
    with open(big, "wb") as f:
        f.truncate(input_files.BENCH.max_bytes + 1)  # sparse: no disk, and read() would take 64 MiB
    assert "benchmark file is 64 MiB, over the 64 MiB a benchmark file may have" in _error(big)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("", "empty benchmark file"),
        ("  \n\n ", "empty benchmark file"),
        ("this is not json", "not valid JSON"),
        (b"\xff\xfe{}", "not UTF-8"),
        ("[1, 2, 3]", "expected a JSON object, got list"),
        ('{"a": ' * 5000 + "1" + "}" * 5000, "nested too deeply"),
        ('{"completed": 1, "completed": 2, "duration": 3}', "duplicate key 'completed'"),
        ('{"hello": "world"}', "not a result file of sglang, vllm, genai-perf, aiperf, guidellm"),
        ("\ufeff" + json.dumps({"hello": "world"}), "not a result file of"),  # a BOM is not the error
    ],
)
def test_not_a_result_file(tmp_path: Path, content: str | bytes, expected: str) -> None:
    assert expected in _error(_write(tmp_path, "bad.json", content))


def _bad(tmp_path: Path, doc: dict[str, Any], tool: str | None = None, jsonl: bool = False) -> str:
    name = "bad.jsonl" if jsonl else "bad.json"
    return _error(_write(tmp_path, name, [doc] if jsonl else doc, jsonl=jsonl), tool)


@pytest.mark.parametrize(
    ("change", "field", "why"),
    [
        ({"completed": None}, "completed", "missing (required)"),
        ({"total_input_tokens": None}, "total_input_tokens", "missing (required)"),
        ({"duration": "100"}, "duration", "expected a number, got str"),
        ({"completed": 12.5}, "completed", "expected a whole number"),
        ({"completed": True}, "completed", "expected a number, got bool"),
        ({"completed": 0}, "completed", "measured nothing"),
        ({"mean_ttft_ms": math.nan}, "mean_ttft_ms", "nan is not a finite number"),
        ({"duration": math.inf}, "duration", "inf is not a finite number"),
        ({"mean_tpot_ms": -5.0}, "mean_tpot_ms", "out of range"),
        ({"p99_tpot_ms": 1e7}, "p99_tpot_ms", "ms per output token"),
        ({"output_throughput": 1e12}, "output_throughput", "tokens per second must lie in"),
        ({"request_rate": -1}, "request_rate", "out of range"),
        ({"random_range_ratio": 3}, "random_range_ratio", "range ratio"),
        ({"total_output_tokens": 0}, "total_output_tokens", "0 over 600 completed requests"),
        ({"backend": ["sglang"]}, "backend", "expected a string"),
        ({"server_info": "tp=8"}, "server_info", "expected an object"),
    ],
)
def test_sglang_bad_fields_name_line_and_field(tmp_path: Path, change: dict[str, Any], field: str, why: str) -> None:
    doc = sglang_full() | change
    msg = _bad(tmp_path, {k: v for k, v in doc.items() if v is not None}, "sglang", jsonl=True)
    assert f": line 1: {field}: " in msg and why in msg, msg


@pytest.mark.parametrize("number", ["1e400", "-1e400", "1" + "0" * 400, "1" + "0" * 5000])
def test_a_number_too_large_for_a_float_is_not_finite(tmp_path: Path, number: str) -> None:
    text = json.dumps(sglang_full())[:-1] + f', "p99_ttft_ms": {number}}}'
    path = _write(tmp_path, "huge.jsonl", text.replace('"p99_ttft_ms": 2100.0, ', "") + "\n")
    assert ": line 1: p99_ttft_ms: " in _error(path) and "is not a finite number" in _error(path)


def test_one_bad_line_among_good_ones_is_named(tmp_path: Path) -> None:
    good = json.dumps(sglang_full())
    path = _write(tmp_path, "runs.jsonl", f"{good}\n{good}\n{{not json\n{good}\n")
    assert ": line 3: not valid JSON" in _error(path)
    bad = json.dumps(sglang_full() | {"mean_ttft_ms": math.nan})
    path = _write(tmp_path, "runs2.jsonl", f"{good}\n\n{bad}\n")
    assert ": line 3: mean_ttft_ms: nan is not a finite number" in _error(path)


@pytest.mark.parametrize(
    ("key", "mutate", "field", "why"),
    [
        ("vllm_cli", lambda d: d.pop("request_throughput"), "request_throughput", "missing (required)"),
        ("vllm_cli", lambda d: d.update(date="yesterday"), "date", "YYYYMMDD-HHMMSS"),
        ("vllm_cli", lambda d: d.update(burstiness=0), "burstiness", "out of range"),
        ("vllm_cli", lambda d: d.update(p99_e2el_ms=1e300), "p99_e2el_ms", "out of range"),
        ("genai_perf_nested", lambda d: d.pop("request_throughput"), "request_throughput", "missing (required)"),
        (
            "genai_perf_nested",
            lambda d: d["time_to_first_token"].update(unit="fortnights"),
            "time_to_first_token.unit",
            "not a time unit",
        ),
        (
            "genai_perf_nested",
            lambda d: d["time_to_first_token"].update(p99=-3.0),
            "time_to_first_token.p99",
            "out of range",
        ),
        (
            "genai_perf_nested",
            lambda d: d["output_token_throughput"].update(unit="requests/sec"),
            "output_token_throughput.unit",
            "not a unit of tok_s",
        ),
        ("genai_perf_nested", lambda d: d["request_count"].update(avg=2.5), "request_count.avg", "whole number"),
        ("aiperf", lambda d: d.update(start_time="soon"), "start_time", "ISO 8601"),
        ("aiperf", lambda d: d["benchmark_duration"].update(avg=-1), "benchmark_duration.avg", "out of range"),
        (
            "guidellm_v04",
            lambda d: d["benchmarks"][1]["config"]["strategy"].update(type_="warp"),
            "benchmarks[1].config.strategy.type_",
            "not a guidellm strategy",
        ),
        (
            "guidellm_v04",
            lambda d: d["benchmarks"][0]["metrics"]["time_to_first_token_ms"]["successful"].update(mean=math.nan),
            "benchmarks[0].metrics.time_to_first_token_ms.successful.mean",
            "not a finite number",
        ),
        (
            "guidellm_v03",
            lambda d: d["benchmarks"][0]["metrics"].pop("requests_per_second"),
            "benchmarks[0].metrics.requests_per_second",
            "missing (required)",
        ),
        (
            "guidellm_v03",
            lambda d: d["benchmarks"][0].update(end_time=1_756_999_000.0),
            "benchmarks[0].end_time",
            "out of range",
        ),
    ],
)
def test_other_formats_bad_fields(tmp_path: Path, key: str, mutate: Any, field: str, why: str) -> None:
    tool, doc = FIXTURES[key]
    doc = json.loads(json.dumps(doc))
    mutate(doc)
    msg = _bad(tmp_path, doc, tool)
    assert f": {field}: " in msg and why in msg, msg


def test_the_wrong_format_named_is_a_missing_field(tmp_path: Path) -> None:
    msg = _error(_fixture(tmp_path, "guidellm_v03"), "vllm")
    assert ": completed: missing (required)" in msg
    assert "unknown benchmark format 'locust'" in _error(_fixture(tmp_path, "aiperf"), "locust")


# --- the stated configuration against a scenario -------------------------------------------------------------

DSV3 = """model: deepseek-v3
hardware: h200
deployment:
  mode: colocated
  decode: {tp: 8, weights: fp8, kv_cache: fp8_e4m3, speculative: {method: mtp, draft_tokens: 1, acceptance: 1.8}}
traffic: {concurrency: 8, requests: 16}
"""


def _scenario(text: str = DSV3, sets: tuple[str, ...] = ()) -> Any:
    return loader.load_text(text, "scenario.yaml", sets)[0]


@pytest.mark.parametrize(
    ("stated", "preset", "same"),
    [
        ("deepseek-ai/DeepSeek-V3-0324", "deepseek-v3", True),
        ("/models/DeepSeekV3", "deepseek-v3", True),
        ("deepseek-ai/DeepSeek-V3.2-Exp", "deepseek-v3", False),
        ("moonshotai/Kimi-K2.6", "kimi-k2.6", True),
        ("moonshotai/Kimi-K2-Instruct", "kimi-k2.6", False),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b", True),
        ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-8b", False),
        ("zai-org/GLM-5.2-FP8", "glm-5.2", True),
    ],
)
def test_same_model_is_loose_but_not_blind(stated: str, preset: str, same: bool) -> None:
    assert same_model(stated, preset) is same


def test_a_run_stating_the_scenarios_configuration_passes(tmp_path: Path) -> None:
    check_config(bench_files.read(_fixture(tmp_path, "sglang_server_info")), _scenario())
    check_config(bench_files.read(_fixture(tmp_path, "guidellm_v04")), _scenario())
    check_config(bench_files.read(_fixture(tmp_path, "sglang_early")), _scenario())  # states nothing to check


SCENARIO_S = "but the scenario's"


@pytest.mark.parametrize(
    ("change", "field", "values"),
    [
        ({"model_path": "Qwen/Qwen3-235B"}, "model_path", f"'Qwen/Qwen3-235B', {SCENARIO_S} model is 'deepseek-v3'"),
        ({"tp_size": 16}, "tp_size", f"16, {SCENARIO_S} deployment.decode.tp is 8"),
        (
            {"kv_cache_dtype": "fp8_e5m2"},
            "kv_cache_dtype",
            f"'fp8_e5m2', {SCENARIO_S} deployment.decode.kv_cache is 'fp8_e4m3'",
        ),
        (
            {"speculative_algorithm": None},
            "speculative_algorithm",
            f"None, {SCENARIO_S} deployment.decode.speculative is 'mtp'",
        ),
        (
            {"speculative_num_steps": 3},
            "speculative_num_steps",
            f"3, {SCENARIO_S} deployment.decode.speculative.draft_tokens is 1",
        ),
        ({"enable_dp_attention": True, "dp_size": 8}, "dp_size", f"8, {SCENARIO_S} deployment.decode.dp is 1"),
    ],
)
def test_a_contradiction_names_file_field_and_both_values(
    tmp_path: Path, change: dict[str, Any], field: str, values: str
) -> None:
    doc = sglang_server_info()
    doc["server_info"] |= change
    runs = bench_files.read(_write(tmp_path, "run.jsonl", [doc], jsonl=True))
    with pytest.raises(InputError) as e:
        check_config(runs, _scenario())
    assert str(e.value) == f"{tmp_path / 'run.jsonl'}: line 1: server_info.{field}: states {values}"


def test_each_tools_model_field_is_named_on_a_mismatch(tmp_path: Path) -> None:
    llama = _scenario("model: llama-3.1-8b\nhardware: h200\ndeployment: {decode: {tp: 8}}\n")
    with pytest.raises(InputError) as e:
        check_config(bench_files.read(_fixture(tmp_path, "guidellm_v04")), llama)
    assert str(e.value) == (
        f"{tmp_path / 'guidellm_v04.json'}: run 0: config.backend.model: states 'deepseek-ai/DeepSeek-V3', "
        "but the scenario's model is 'llama-3.1-8b'"
    )
    with pytest.raises(InputError, match="input_config.endpoint.model_names: states 'moonshotai/Kimi-K2.6'"):
        check_config(bench_files.read(_fixture(tmp_path, "aiperf")), llama)


def test_a_stated_count_that_is_not_a_number_is_named(tmp_path: Path) -> None:
    doc = sglang_server_info()
    doc["server_info"]["tp_size"] = "eight"
    runs = bench_files.read(_write(tmp_path, "run.jsonl", [doc], jsonl=True))
    with pytest.raises(InputError, match=r"run.jsonl: line 1: server_info.tp_size: 'eight' is not a whole number"):
        check_config(runs, _scenario())


def test_a_pd_router_against_a_colocated_scenario_and_vllm_metadata(tmp_path: Path) -> None:
    doc = sglang_server_info()
    doc["server_info"] = {"prefill": [doc["server_info"]], "decode": [doc["server_info"]]}
    runs = bench_files.read(_write(tmp_path, "pd.jsonl", [doc], jsonl=True))
    with pytest.raises(
        InputError, match="a PD router's prefill and decode servers, but the scenario's deployment.mode"
    ):
        check_config(runs, _scenario())
    wide = loader.load(ROOT / "scenarios/deepseek-v3-wide-ep.yaml")[0]
    with pytest.raises(
        InputError, match=r"server_info.prefill\[0\].tp_size: states 8, but the scenario's deployment.prefill.tp is 32"
    ):
        check_config(runs, wide)
    vllm = bench_files.read(_fixture(tmp_path, "vllm_script"))  # llama-3.1-8b with --metadata tp=8
    check_config(vllm, _scenario("model: llama-3.1-8b\nhardware: h200\ndeployment: {decode: {tp: 8}}\n"))
    with pytest.raises(
        InputError, match=r"vllm_script.json: tp: states 8, but the scenario's deployment.decode.tp is 2"
    ):
        check_config(vllm, _scenario("model: llama-3.1-8b\nhardware: h200\ndeployment: {decode: {tp: 2}}\n"))


# --- writing each tool's format, and reading it back ------------------------------------------------------------


def _close(a: Any, b: Any, where: str = "") -> None:
    """Equal, floats within 1e-9 relative (a unit conversion or a derived rate rounds in the last bits)."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, float) and isinstance(b, float) and math.isfinite(a):
        assert b == pytest.approx(a, rel=1e-9), where
    else:
        assert a == b, where


def _comparable(run: BenchRun) -> dict[str, Any]:
    return asdict(replace(run, path="", sha256="", line=None, index=None))


def _round_trip(tmp_path: Path, tool: str, run: BenchRun) -> BenchRun:
    path = tmp_path / f"written-{tool}.{'jsonl' if tool == 'sglang' else 'json'}"
    bench_files.write_as(tool, [run], path)  # type: ignore[arg-type]
    (back,) = bench_files.read(path)
    assert back.tool == tool
    return back


@pytest.mark.parametrize("key", sorted(FIXTURES))
def test_every_read_run_written_as_every_tool_reads_back_as_that_tool_states_it(tmp_path: Path, key: str) -> None:
    for run in bench_files.read(_fixture(tmp_path, key)):
        if run.completed is None:  # GenAI-Perf before request_count: neither count nor duration to write
            with pytest.raises(ValueError, match="neither completed requests nor duration"):
                bench_files.render("sglang", [run])
            continue
        for tool in TOOLS:
            back = _round_trip(tmp_path, tool, run)
            _close(_comparable(bench_files.as_written(tool, run)), _comparable(back), f"{key}->{tool}")


@pytest.fixture(scope="module")
def simulated() -> tuple[dict[str, Any], Any]:
    sc = loader.load(ROOT / "scenarios/tiny-cpu.yaml", ["traffic.requests=24"])[0]
    return simulate(sc, ROOT / "scenarios")[0], sc


def test_simulated_result_written_as_each_tool_reads_back_equal(tmp_path: Path, simulated: Any) -> None:
    result, sc = simulated
    run = bench_files.run_from_result(result)
    m = result["metrics"]
    whole = m["full_run"]  # a benchmark measures the whole run, fill and drain included
    assert run.completed == m["completed"] == 24 and run.duration_s == m["duration_s"]
    assert run.ttft.median == whole["ttft_ms"]["p50"] and run.tpot.p99 == whole["tpot_ms"]["p99"]
    assert run.output_throughput == pytest.approx(whole["output_tokens_per_s"], rel=1e-5)
    assert run.load.request_rate == math.inf and run.load.max_concurrency == 16
    assert run.input_tokens.requested == 192.0 and run.input_tokens.range_ratio == 32 / 192
    for tool in TOOLS:
        back = _round_trip(tmp_path, tool, run)
        _close(_comparable(bench_files.as_written(tool, run)), _comparable(back), tool)
        check_config([back], sc)  # what the writer stated from the scenario agrees with it
    sglang = _round_trip(tmp_path, "sglang", run)
    assert sglang.config.servers["decode"]["tp_size"] == 1 and sglang.ttft.p95 is None  # SGLang states no p95
    assert _round_trip(tmp_path, "vllm", run).ttft.p95 == whole["ttft_ms"]["p95"]


def test_two_runs_write_one_file_where_the_tool_does_and_refuse_where_it_does_not(
    tmp_path: Path, simulated: Any
) -> None:
    run = bench_files.run_from_result(simulated[0])
    other = replace(run, request_throughput=run.request_throughput * 2)
    for tool in ("sglang", "vllm", "guidellm"):
        path = tmp_path / f"two-{tool}.json"
        bench_files.write_as(tool, [run, other], path)  # type: ignore[arg-type]
        assert [r.request_throughput for r in bench_files.read(path)] == [
            run.request_throughput,
            other.request_throughput,
        ]
    for tool in ("genai-perf", "aiperf"):
        with pytest.raises(ValueError, match="holds one run"):
            bench_files.render(tool, [run, other])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no runs"):
        bench_files.render("vllm", [])
