"""One validation case: a published end-to-end measurement of a real deployment, and how to reproduce it.

A case file (`validation/cases/<id>.yaml`) holds the scenario the deployment ran (inline, or a scenario file and
dotted overrides), the engine and its version as published, the figure with its metric and unit, where it was
published and the sentence or table row it comes from (its source: `source_id`, derived from the URL unless the
file names one, `sources`), and *how* it was measured — which decides what the model computes
(`simulator.validation.measure`). Unknown keys are errors, every number must be finite, and every
failure is one `InputError` line naming the file, the YAML path and its line, as scenarios are read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, ValidationError, model_validator

from simulator.config import loader, safe_yaml
from simulator.config.scenario import Scenario, Strict
from simulator.errors import InputError
from simulator.validation import sources

REPO = Path(__file__).resolve().parents[2]  # the repo: the bundled suite (validation/) and its scenarios

Engine = Literal["sglang-0.5", "vllm-0.x"]
# Where a throughput is counted: per GPU, per node (8 GPUs on the presets), per DP rank, per instance, or over
# every instance of the pool (a cluster's total).
Per = Literal["gpu", "node", "rank", "instance", "pool"]
Metric = Literal[
    "output_tok_s",  # output tokens per second
    "input_tok_s",  # prompt tokens per second (prefill; served: a benchmark's "Input token throughput")
    "total_tok_s",  # prompt and output tokens per second (a serving benchmark's "Total Token throughput")
    "request_throughput",  # completed requests per second ("Request throughput (req/s)")
    "mean_tpot_ms",  # per request (finish - first token) / (output - 1), averaged over requests
    "median_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",  # every gap between two streamed tokens, pooled (one token a chunk: no speculation)
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_e2el_ms",  # arrival to last token ("Mean E2EL")
    "median_e2el_ms",
    "duration_s",  # first arrival to last completion (a benchmark's "Benchmark duration")
    "step_ms",  # one decode step (inter-token latency of a filled batch without speculation)
    "ratio",  # one measurement over the same measurement of another configuration
]
KIND_METRICS = {
    "decode_batch": ("output_tok_s", "step_ms"),
    "prefill_batch": ("input_tok_s",),
    "serve": (
        "output_tok_s",
        "input_tok_s",
        "total_tok_s",
        "request_throughput",
        "mean_tpot_ms",
        "median_tpot_ms",
        "p99_tpot_ms",
        "mean_itl_ms",
        "mean_ttft_ms",
        "median_ttft_ms",
        "p99_ttft_ms",
        "mean_e2el_ms",
        "median_e2el_ms",
        "duration_s",
    ),
    "ratio": ("ratio",),
}


class DecodeBatch(Strict):
    """Steady decode at a filled batch: one decode step priced at `batch` sequences per DP rank (per instance
    without DP attention) of `context` tokens each; no queueing, no prefill interleaved."""

    kind: Literal["decode_batch"]
    pool: Literal["decode", "prefill"] = "decode"
    batch: PositiveInt = Field(description="Sequences per DP rank (per instance when dp = 1).")
    context: PositiveInt = Field(description="Tokens each sequence holds (its mean over the measurement).")
    per: Per = "gpu"


class PrefillBatch(Strict):
    """Prefill alone: one step of `tokens` prompt tokens per DP rank, whole prompts of `prompt` tokens."""

    kind: Literal["prefill_batch"]
    pool: Literal["decode", "prefill"] = "prefill"
    tokens: PositiveInt = Field(description="Prompt tokens one DP rank (instance when dp = 1) computes per step.")
    prompt: PositiveInt = Field(description="Tokens of each prompt (the step runs tokens // prompt of them).")
    per: Per = "gpu"


class Serve(Strict):
    """The scenario's traffic run end to end on the modeled clock (closed loop at C clients; a burst of N is a
    closed loop of N clients and N requests; open loop at R req/s); the metric read from every completed request."""

    kind: Literal["serve"]


class Ratio(Strict):
    """A published ratio (a speedup): `of` measured on the case's scenario over the same measured with `over`'s
    dotted overrides (e.g. two-batch overlap off)."""

    kind: Literal["ratio"]
    of: DecodeBatch | PrefillBatch = Field(discriminator="kind")
    over: dict[str, Any] = Field(description="Dotted overrides of the denominator's scenario.")


How = Annotated[DecodeBatch | PrefillBatch | Serve | Ratio, Field(discriminator="kind")]


class Source(Strict):
    url: str = Field(min_length=1)
    repo: str = Field(min_length=1, description="owner/name path @ commit of the stored copy that was read.")


class CaseFile(Strict):
    """What a case file holds."""

    id: str = Field(min_length=1)
    engine: Engine
    engine_version: str = Field(min_length=1)
    metric: Metric
    unit: str = Field(min_length=1)
    published: PositiveFloat
    source: Source
    source_id: str | None = Field(
        None, min_length=1, description="Only where two URLs are truly one source: the id they share (sources.py)."
    )
    quote: str = Field(min_length=1)
    how: How
    notes: str = Field(min_length=1, description="What the source did not state and what the case assumes.")
    scenario: dict[str, Any] | None = None
    base: str | None = None
    set: dict[str, Any] = {}

    @model_validator(mode="after")
    def _consistent(self) -> CaseFile:
        if (self.scenario is None) == (self.base is None):
            raise ValueError("scenario: give the scenario inline or a base scenario file, exactly one")
        if self.set and self.base is None:
            raise ValueError("set: overrides apply to a base scenario file")
        if self.metric not in KIND_METRICS[self.how.kind]:
            raise ValueError(f"metric: how.kind {self.how.kind} measures {', '.join(KIND_METRICS[self.how.kind])}")
        return self


class Case:
    """A loaded case: its fields, and the scenario's raw mapping from which each evaluation validates its own."""

    def __init__(self, path: Path, spec: CaseFile, data: dict[str, Any], lines: dict[tuple[str, ...], int]) -> None:
        self.path, self.spec, self.data, self.lines = path, spec, data, lines
        self.id = spec.id
        self.source_id = spec.source_id or sources.source_id(spec.source.url)
        self.scenario = self.scenario_with({})  # validated once at load, so a bad scenario is a load error

    def scenario_with(self, overrides: dict[str, Any]) -> Scenario:
        """The case's scenario with dotted overrides set (a fitted parameter, a ratio's other configuration)."""
        try:
            return loader.validate(loader.apply_overrides(self.data, overrides), f"{self.path}: scenario", self.lines)
        except InputError as e:
            sets = f" (with {', '.join(f'{k}={v}' for k, v in overrides.items())})" if overrides else ""
            raise InputError(f"{e}{sets}") from None


def load(path: Path, root: Path) -> Case:
    """Read and check one case file; `root` is the folder a `base` scenario path is relative to (the suite's
    parent: the repo for the bundled suite). A suite kept elsewhere (held-out cases) may also build on the bundled
    scenarios by their repo path (`validation/scenarios/...`), so a base not under `root` is looked up there."""
    data, lines = loader.parse_text(safe_yaml.read_text(path), str(path), "validation case")
    try:
        spec = CaseFile.model_validate(data)
    except ValidationError as e:
        raise InputError(_message(path, e, lines)) from None
    if spec.id != path.stem:
        raise InputError(f"{path}: line {lines.get(('id',), 1)}: id: '{spec.id}' is not the file's name")
    if spec.scenario is not None:
        scenario = spec.scenario
        sub = {k[1:]: v for k, v in lines.items() if k[:1] == ("scenario",) and len(k) > 1}
    else:
        assert spec.base is not None
        base = next((b for b in (root / spec.base, REPO / spec.base) if b.is_file()), None)
        if base is None:
            raise InputError(
                f"{path}: line {lines.get(('base',), 1)}: base: no scenario file {spec.base} (looked in {root} "
                f"and {REPO})"
            )
        scenario, sub = loader.read_yaml(base)
        try:
            scenario = loader.apply_overrides(scenario, {str(k): v for k, v in spec.set.items()})
        except InputError as e:
            raise InputError(f"{path}: set: {str(e).removeprefix('--set ')}") from None
    named = scenario.get("engine", spec.engine) if isinstance(scenario, dict) else spec.engine
    if named != spec.engine:
        raise InputError(f"{path}: scenario: engine: '{named}' is not the case's engine '{spec.engine}'")
    return Case(path, spec, {**scenario, "engine": spec.engine}, sub)


def _message(path: Path, e: ValidationError, lines: dict[tuple[str, ...], int]) -> str:
    """The first error as the loader words a scenario's: file, line, dotted path, what was expected."""
    err = e.errors()[0]
    loc = tuple(str(x) for x in err["loc"] if x not in ("decode_batch", "prefill_batch", "serve", "ratio"))
    msg = err["msg"].removeprefix("Value error, ")
    if not loc and ": " in msg:
        field, msg = msg.split(": ", 1)
        loc = (field,)
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    elif "input" in err and err["type"] != "missing" and not isinstance(err["input"], dict | list):
        msg += f" (got {err['input']!r:.60})"
    line = next((lines[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in lines), None)
    return f"{path}:{f' line {line}:' if line else ''} {'.'.join(loc) or '(top level)'}: {msg}"
