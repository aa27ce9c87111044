"""One module per benchmark tool's result format, each exposing a `Format`: detect, read, render, as_written.

Each module's docstring names the source version it follows, each field's meaning and unit, and how its
versions differ. A reader gets one parsed JSON object; `bench_files` does the file (size, JSON/JSONL, hash).
"""

from __future__ import annotations

from simulator.calibration.bench_formats import genai_perf, guidellm, sglang, vllm
from simulator.calibration.bench_formats.format import Format
from simulator.calibration.bench_run import Tool

# Detection order, the most specific first: guidellm's report and the NVIDIA tools' `input_config` are
# unmistakable; a vLLM result is told from an SGLang one by the keys only vLLM writes.
FORMATS: dict[Tool, Format] = {
    f.tool: f for f in (guidellm.FORMAT, genai_perf.AIPERF, genai_perf.GENAI_PERF, vllm.FORMAT, sglang.FORMAT)
}
