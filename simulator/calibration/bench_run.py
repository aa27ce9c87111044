"""One measured benchmark run, as a benchmark tool's result file states it: the record the engine fit consumes.

Every tool names and scales the same quantities differently (SGLang and vLLM write milliseconds under `_ms`
keys, GenAI-Perf and AIPerf state a `unit` per metric, guidellm writes request latency in seconds beside
`time_to_first_token_ms`); the readers in `bench_formats` turn each into this one shape, in these units:
latencies in milliseconds, throughputs per second, lengths in tokens per request. A field is None when the
file does not state it (and it cannot be derived exactly from what it does state) — never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Tool = Literal["sglang", "vllm", "genai-perf", "aiperf", "guidellm"]
TOOLS: tuple[Tool, ...] = ("sglang", "vllm", "genai-perf", "aiperf", "guidellm")
Source = Tool | Literal["phaseplan"]  # "phaseplan": a run made from phaseplan's own Result, not read from a file

Scalar = str | int | float | bool | None


@dataclass(frozen=True)
class Latency:
    """One latency's distribution over the run's completed requests, in milliseconds (None: not stated)."""

    mean: float | None = None
    median: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None

    def stated(self) -> bool:
        return any(v is not None for v in (self.mean, self.median, self.p90, self.p95, self.p99))


@dataclass(frozen=True)
class Lengths:
    """Tokens per request: `mean` measured over completed requests; the rest is what the run asked for."""

    mean: float | None = None
    requested: float | None = None  # the configured length (SGLang/vLLM `random_*_len`, GenAI-Perf's mean)
    stddev: float | None = None  # the configured spread (GenAI-Perf, AIPerf)
    range_ratio: float | None = None  # SGLang/vLLM `--random-range-ratio`: lengths uniform in [ratio·L, L]


@dataclass(frozen=True)
class Load:
    """What drove the run: an arrival rate, a concurrency cap, or both (SGLang and vLLM allow the pair)."""

    request_rate: float | None = None  # requests per second; math.inf: every request sent at once
    arrival: str | None = None  # "poisson", "gamma" (vLLM burstiness ≠ 1), "constant", "trace", "ramp"
    burstiness: float | None = None  # vLLM's gamma shape of inter-arrival gaps (1: Poisson)
    max_concurrency: int | None = None  # requests in flight at most (guidellm's concurrent streams)


@dataclass(frozen=True)
class StatedConfig:
    """What the file says about the deployment it measured, for `bench_check` to compare with a scenario."""

    model: str | None = None  # model id or path as the tool recorded it
    tokenizer: str | None = None
    backend: str | None = None  # the tool's backend / endpoint type (e.g. "sglang", "openai-chat")
    # role ("server", or "prefill" and "decode" behind a PD router) -> the engine's own server arguments
    # (SGLang's /get_server_info, top-level scalars only)
    servers: dict[str, dict[str, Scalar]] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)  # vLLM `--metadata KEY=VALUE`, SGLang `tag`


@dataclass(frozen=True)
class BenchRun:
    """One benchmark run (one JSONL line, one JSON file, or one entry of a guidellm report)."""

    tool: Source
    variant: str  # which version of the tool's format the reader recognised (see the format module)
    path: str
    sha256: str  # of the whole file, for the fitted preset's provenance
    line: int | None  # JSONL line number
    index: int | None  # position in a file holding a list of runs (guidellm's `benchmarks`)
    date: str | None  # ISO 8601 when the file states when it ran
    tool_version: str | None
    load: Load
    num_prompts: int | None  # requests the run was asked to send
    dataset: str | None
    input_tokens: Lengths
    output_tokens: Lengths
    duration_s: float | None
    completed: int | None
    failed: int | None
    request_throughput: float  # completed requests per second
    input_throughput: float | None  # prompt tokens per second
    output_throughput: float  # generated tokens per second
    ttft: Latency
    tpot: Latency  # per request: (latency − TTFT) / (output tokens − 1), the decode step a request sees
    itl: Latency  # per token gap (token-weighted), where the tool measures it
    e2e: Latency
    accept_length: float | None  # measured speculative-decoding accept length (tokens per verify step)
    config: StatedConfig

    @property
    def where(self) -> str:
        """The file and place of this run, as error messages name it."""
        if self.line is not None:
            return f"{self.path}: line {self.line}"
        if self.index is not None:
            return f"{self.path}: run {self.index}"
        return self.path
