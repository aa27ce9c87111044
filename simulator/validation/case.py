"""One validation case: a published end-to-end measurement of a real deployment, and how to reproduce it.

A case file (`validation/cases/<id>.yaml`) holds the scenario the deployment ran (inline, or a scenario file and
dotted overrides), the engine and its version as published, the figure with its metric and unit, where it was
published and the sentence or table row it comes from (its source: `source_id`, derived from the URL unless the
file names one, `sources`), and *how* it was measured — which decides what the model computes
(`simulator.validation.measure`). Unknown keys are errors, every number must be finite, and every
failure is one `InputError` line naming the file, the YAML path and its line, as scenarios are read.

A case is a scenario with the same limits: its `base` is a file inside the suite's folder or the repository, its
`set:` and `over:` keys are scenario paths (checked as `--set` checks them), and what it measures is checked
against its scenario before anything runs (`check_work`): a batch measurement names a pool the scenario has and
fits that pool's KV cache, a served run passes `phaseplan run`'s work limits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, ValidationError, model_validator

from simulator import budget
from simulator.capacity import pool_capacity
from simulator.config import loader, paths, presets, safe_yaml
from simulator.config.bounds import BOUNDS
from simulator.config.scenario import Scenario, Strict
from simulator.errors import InputError
from simulator.validation import sources

REPO = Path(__file__).resolve().parents[2]  # the repo: the bundled suite (validation/) and its scenarios

Engine = Literal["sglang-0.5", "sglang-0.5.10", "vllm-0.x"]
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


# A batch measurement's numbers within the ranges of the scenario fields they stand for: sequences as a pool's
# `max_running`, a sequence's tokens as a model's `context_tokens`, a step's tokens as a pool's `max_batch_tokens`.
SEQUENCES = int(BOUNDS[("Pool", "max_running")][1])
CONTEXT = int(BOUNDS[("ModelSpec", "context_tokens")][1])
STEP_TOKENS = int(BOUNDS[("Pool", "max_batch_tokens")][1])


class DecodeBatch(Strict):
    """Steady decode at a filled batch: one decode step priced at `batch` sequences per DP rank (per instance
    without DP attention) of `context` tokens each; no queueing, no prefill interleaved."""

    kind: Literal["decode_batch"]
    pool: Literal["decode", "prefill"] = "decode"
    batch: PositiveInt = Field(le=SEQUENCES, description="Sequences per DP rank (per instance when dp = 1).")
    context: PositiveInt = Field(le=CONTEXT, description="Tokens each sequence holds (its mean over the measurement).")
    per: Per = "gpu"


class PrefillBatch(Strict):
    """Prefill alone: one step of `tokens` prompt tokens per DP rank, whole prompts of `prompt` tokens."""

    kind: Literal["prefill_batch"]
    pool: Literal["decode", "prefill"] = "prefill"
    tokens: PositiveInt = Field(
        le=STEP_TOKENS, description="Prompt tokens one DP rank (instance when dp = 1) computes per step."
    )
    prompt: PositiveInt = Field(le=CONTEXT, description="Tokens of each prompt (a step runs tokens // prompt of them).")
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
        self.requests = 0.0  # what one evaluation simulates (`check_work`)

    @property
    def engine(self) -> str:
        """The preset that prices it: the case's engine at the release it states (`presets.for_release`)."""
        return self.scenario.engine.name

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
    scenarios by their repo path (`validation/scenarios/...`), so a base not under `root` is looked up there. A base
    is read only inside the case's suite folder (the folder holding `cases/`) or the repository."""
    data, lines = loader.parse_text(safe_yaml.read_text(path), str(path), "validation case")
    try:
        spec = CaseFile.model_validate(data)
    except ValidationError as e:
        raise InputError(_message(path, e, lines)) from None
    if spec.id != path.stem:
        raise InputError(f"{path}: line {lines.get(('id',), 1)}: id: '{spec.id}' is not the file's name")
    for field, keys in (("set", spec.set), ("how.over", spec.how.over if isinstance(spec.how, Ratio) else {})):
        for key in keys:  # dotted scenario paths, checked as a --set is
            try:
                loader.check_depth(str(key))
                paths.check_path(str(key), short_names=False)
            except InputError as e:
                why = str(e).removeprefix("--set ")
                raise InputError(f"{path}: line {lines.get(tuple(field.split('.')), 1)}: {field}: {why}") from None
    if spec.scenario is not None:
        scenario = spec.scenario
        sub = {k[1:]: v for k, v in lines.items() if k[:1] == ("scenario",) and len(k) > 1}
    else:
        assert spec.base is not None
        scenario, sub = loader.read_yaml(_base(path, root, spec.base, lines.get(("base",), 1)))
        try:
            scenario = loader.apply_overrides(scenario, {str(k): v for k, v in spec.set.items()})
        except InputError as e:
            raise InputError(f"{path}: set: {str(e).removeprefix('--set ')}") from None
    named = scenario.get("engine", spec.engine) if isinstance(scenario, dict) else spec.engine
    if named != spec.engine:
        raise InputError(f"{path}: scenario: engine: '{named}' is not the case's engine '{spec.engine}'")
    case = Case(path, spec, {**scenario, "engine": presets.for_release(spec.engine, spec.engine_version)}, sub)
    case.requests = check_work(case, lines.get(("how",), 1))
    return case


def _base(path: Path, root: Path, base: str, line: int) -> Path:
    """The base scenario file: under `root`, else the repository's; refused outside the suite's folder and the
    repository (a case file names no other file on the machine)."""
    suite = path.resolve().parent.parent
    for candidate in (root / base, REPO / base):
        resolved = candidate.resolve()
        if resolved.is_file() and (resolved.is_relative_to(suite) or resolved.is_relative_to(REPO)):
            return resolved
    raise InputError(
        f"{path}: line {line}: base: no scenario file {base} inside the suite's folder {suite} or the repository "
        f"{REPO} (looked in {root} and {REPO})"
    )


def check_work(case: Case, line: int) -> float:
    """The requests one evaluation of the case simulates (none for a batch measurement), after checking what it
    measures against its scenario: a served run within `phaseplan run`'s work limits; a batch on a pool the
    scenario has, which fits that pool's KV cache (a ratio's both scenarios)."""
    how, where = case.spec.how, f"{case.path}: line {line}: how"
    if isinstance(how, Serve):
        try:
            return budget.check(case.scenario, REPO).requests
        except InputError as e:
            raise InputError(f"{where}: {str(e).split('; pass --no-limits')[0]}") from None
    batch = how.of if isinstance(how, Ratio) else how
    for sc in (case.scenario, *([case.scenario_with(how.over)] if isinstance(how, Ratio) else [])):
        _check_batch(sc, batch, where)
    return 0.0


def _check_batch(sc: Scenario, how: DecodeBatch | PrefillBatch, where: str) -> None:
    pools = sc.deployment.pools()
    if how.pool not in pools:
        raise InputError(
            f"{where}.pool: the scenario ({sc.deployment.mode}) has no {how.pool} pool (its pools: {', '.join(pools)})"
        )
    pool = pools[how.pool]
    cap = pool_capacity(sc.model, sc.hardware, pool)
    if not cap.fits:
        raise InputError(f"{where}.pool: the {how.pool} pool does not fit: {cap.reason}")
    held = int(cap.per_rank["kv_tokens"]) if cap.per_rank else cap.kv_tokens
    if isinstance(how, DecodeBatch):
        field, need, what = "batch", how.batch * how.context, f"{how.batch:,} sequences of {how.context:,} tokens"
    else:
        prompts = how.tokens // how.prompt
        if prompts > pool.max_running:
            raise InputError(
                f"{where}.tokens: {prompts:,} prompts of {how.prompt:,} tokens in one step, more than the "
                f"{how.pool} pool's max_running {pool.max_running:,}"
            )
        field, need, what = "tokens", max(how.tokens, how.prompt), f"a step of {max(how.tokens, how.prompt):,} tokens"
    if need > held:
        raise InputError(
            f"{where}.{field}: {what} on one rank need {need:,} KV tokens; the {how.pool} pool holds {held:,} a rank"
        )


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
