"""A first scenario from a few answers (`phaseplan init`): model, GPU, traffic shape and SLO in, commented YAML out.

A new user should not have to read the schema to get a scenario that runs and means something, so the
deployment is chosen, not left at the schema's defaults: two pools (prefill and decode disaggregated, as large
MoE models are served), each instance on one node with the fewest GPUs and the first of the model preset's
weight formats whose weights fit with room for the KV cache of a batch of requests; for open-loop traffic, as
many instances per pool as keep the offered load under TARGET of each pool's analytic throughput bound
(`bounds.py`). The YAML says what was chosen and why, field by field, and is validated by the loader and the
work estimate before it is returned.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

from simulator.budget import check as check_work
from simulator.capacity import pool_capacity
from simulator.config import loader, presets, safe_yaml
from simulator.config.scenario import Scenario, closed_loop_requests
from simulator.console import printable
from simulator.errors import InputError
from simulator.planning.bounds import Bounds, Offered
from simulator.planning.slo import SLO
from simulator.results.steady import run_length

TARGET = 0.7  # the share of a pool's analytic bound the offered load may take (the bound leans optimistic)
MAX_INSTANCES = 64  # per pool; beyond this, `phaseplan plan` is the tool
KV_ROOM_REQUESTS = 16  # an instance must hold at least this many whole requests in its KV cache
KV_CACHE = "fp8_e4m3"  # half BF16's bytes; what large MLA deployments serve with
PROVISIONAL_S = 60.0  # the arrival window the deployment is sized on, before the run's own length is known
COMMENT_COLUMN = 28


@dataclass(frozen=True)
class Ask:
    """What `phaseplan init` was told; every field has the default a first question needs."""

    model: str = "kimi-k2.6"
    hardware: str = "h200"
    rate: float | None = None  # requests per second (open loop); None with concurrency None: 2 req/s
    concurrency: int | None = None  # closed loop: N clients
    prompt_tokens: int = 4096
    output_tokens: int = 512
    ttft_p95_ms: float = 2000.0
    tpot_p95_ms: float = 50.0
    duration_s: float | None = None  # open loop: seconds of arrivals; None: long enough for a steady state
    name: str | None = None

    @property
    def open_loop_rate(self) -> float | None:
        return None if self.concurrency is not None else (self.rate if self.rate is not None else 2.0)


@dataclass(frozen=True)
class Length:
    """How long the written run is (open loop: seconds of arrivals; closed loop: requests), and why."""

    value: float
    why: str


@dataclass(frozen=True)
class Layout:
    weights: str
    tp: int
    prefill: int = 1
    decode: int = 1


def _c(content: str, comment: str = "") -> str:
    """A YAML line with its comment at COMMENT_COLUMN."""
    return f"{content:<{COMMENT_COLUMN}}# {comment}" if comment else content


def _text(ask: Ask, layout: Layout, command: str, why: list[str], length: Length | None = None) -> str:
    rate = ask.open_loop_rate
    if rate is not None:
        seconds = length.value if length else (ask.duration_s or PROVISIONAL_S)
        said = length.why if length else "seconds of arrivals; the run ends when the last is served"
        load = [
            _c(f"  rate: {rate:g}", "requests per second, Poisson arrivals (open loop)"),
            _c(f"  duration_s: {seconds:g}", said),
        ]
    else:
        clients = ask.concurrency or 1
        count = int(length.value) if length else closed_loop_requests(clients)
        load = [
            _c(f"  concurrency: {clients}", "closed loop: each client sends its next request when its last one ends"),
            _c(f"  requests: {count}", length.why if length else "enough to measure a steady state"),
        ]
    pool = f"tp: {layout.tp}, weights: {layout.weights}, kv_cache: {KV_CACHE}"
    lines = [
        f"# Written by `{printable(command)}`:",
        "# a first scenario, every choice explained; edit freely.",
        "# Run it:  phaseplan run THIS.yaml  (--out DIR adds per-request records and charts)",
        "# Plan it: phaseplan plan THIS.yaml --rate R  (the fewest GPUs that meet the SLO at rate R)",
        "# Every field with its type, default and range: docs/schema.md (or: phaseplan schema).",
        _c(f"name: {safe_yaml.quoted(ask.name or f'{ask.model}-{ask.hardware}')}"),
        _c(f"model: {ask.model}", "a model preset (phaseplan presets lists them)"),
        _c(f"hardware: {ask.hardware}", "a GPU preset: memory, bandwidth, tensor-core rates, price"),
        _c("profile: roofline", "step times from the roofline model: MODELED (or a measured profile's path)"),
        "deployment:",
        "  # Prefill and decode on separate pools (disaggregated), the prompt's KV cache sent from one to the other",
        "  # over the scale-out network; one instance spans `tp` GPUs of one node.",
        *[f"  # {line}" for line in textwrap.wrap(" ".join(why), 106)],
        "  mode: disaggregated",
        f"  prefill: {{instances: {layout.prefill}, {pool}}}",
        f"  decode: {{instances: {layout.decode}, {pool}}}",
        "traffic:",
        *load,
        _c(
            f"  prompt_tokens: {ask.prompt_tokens}",
            f"fixed; or e.g. {{dist: lognormal, median: {ask.prompt_tokens}, sigma: 0.5}}",
        ),
        _c(f"  output_tokens: {ask.output_tokens}"),
        "# run's 'SLO attainment' is the share of requests within both limits; plan and max-rate judge the p95",
        f"slo: {{ttft_p95_ms: {ask.ttft_p95_ms:g}, tpot_p95_ms: {ask.tpot_p95_ms:g}}}",
        _c("seed: 0", "the same scenario and seed give the same result, bit for bit"),
    ]
    return "\n".join(lines) + "\n"


def _validate(text: str) -> Scenario:
    try:
        return loader.load_text(text, "init")[0]
    except InputError as e:
        raise InputError(f"init: these options make no valid scenario: {e}") from None


def _fitting_layouts(ask: Ask) -> list[tuple[str, int]]:
    """(weights, tp) in the order tried: the preset's formats (its release first), then BF16; fewest GPUs first."""
    for option, name, kind in (("--model", ask.model, "models"), ("--hardware", ask.hardware, "hardware")):
        if name not in presets.names(kind):  # a preset by name only: the name is written into the YAML
            raise InputError(f"{option} {name!r}: no such preset (known: {', '.join(presets.names(kind))})")
    model, hw = presets.model(ask.model), presets.hardware(ask.hardware)
    formats = list(dict.fromkeys([*model.get("formats", {}), "bf16"]))
    per_node = int(hw.get("gpus_per_node", 8))
    tps = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= per_node]
    return [(w, tp) for w in formats for tp in tps]


def starter(ask: Ask, command: str = "phaseplan init") -> str:
    """The commented YAML of a scenario that validates and passes the work estimate."""
    need = KV_ROOM_REQUESTS * (ask.prompt_tokens + ask.output_tokens)
    tried = []
    for weights, tp in _fitting_layouts(ask):
        try:
            sc = loader.load_text(_text(ask, Layout(weights, tp), command, []), "init")[0]
        except InputError:
            continue  # this format or TP is not allowed here (FP4 without FP4 tensor cores, heads that do not divide)
        cap = pool_capacity(sc.model, sc.hardware, sc.deployment.decode)
        tried.append(f"{weights} TP{tp}")
        if cap.fits and cap.kv_tokens >= need:
            break
    else:
        raise InputError(
            f"--model {ask.model} --hardware {ask.hardware}: no instance on one node holds its weights and "
            f"{KV_ROOM_REQUESTS} requests of {ask.prompt_tokens + ask.output_tokens:,} tokens (tried "
            f"{', '.join(tried) or 'nothing valid'}); write the deployment by hand (docs/schema.md)"
        )
    why = [
        f"TP{tp} with {weights} weights: the fewest GPUs, in the first of the model preset's formats, whose weights "
        f"fit with a KV cache of {cap.kv_tokens:,} tokens per instance ({KV_CACHE}: half the bytes of bf16), at "
        f"least {KV_ROOM_REQUESTS} requests' worth."
    ]
    _check_work(sc)
    layout = Layout(weights, tp)
    if ask.open_loop_rate is not None:
        layout, sized = _sized(ask, layout, sc)
        why.append(sized)
    else:
        why.append("One instance per pool: a closed loop's clients wait for their answers, it cannot overload.")
    sized = _validate(_text(ask, layout, command, why))
    text = _text(ask, layout, command, why, _length(ask, sized))
    _check_work(_validate(text))
    return text


def _length(ask: Ask, sc: Scenario) -> Length | None:
    """The run's length: the one asked for (`--duration-s`), else one long enough to show a steady state — a
    closed loop's count (`config.scenario.closed_loop_requests`, the scenario's own default), an open loop's
    seconds (`results.steady.run_length`) from a request's lifetime as the bounds estimate it (a prompt's prefill,
    then its answer at the decode step of the batch the load keeps), rounded up to a whole minute."""
    if ask.duration_s is not None and ask.open_loop_rate is not None:
        return None
    rate = ask.open_loop_rate
    if rate is None:  # a client sends one request a lifetime: the count does not depend on the lifetime
        clients = ask.concurrency or 1
        count = closed_loop_requests(clients)
        return Length(count, f"{count // clients} per client: enough to measure a steady state")
    load = Offered(rate, ask.prompt_tokens, ask.prompt_tokens, ask.output_tokens)
    bounds = Bounds(SLO.parse(None, sc))
    life = bounds.prefill_s(sc, load, None) + ask.output_tokens * bounds.decode_step_s(sc, load, None, None)
    seconds = 60 * math.ceil(run_length(life, rate) / 60)
    return Length(seconds, f"seconds of arrivals, enough to measure a steady state (a request lives ~{life:,.0f} s)")


def _check_work(sc: Scenario) -> None:
    """The work estimate `run` checks first (requests, tokens, memory), so that what init writes runs."""
    try:
        check_work(sc, Path.cwd())
    except InputError as e:
        why = str(e).split("; pass --no-limits")[0]  # init has no such option: what it writes must run as it is
        raise InputError(f"init: {why} (lower --rate, --duration-s or --concurrency)") from None


def _sized(ask: Ask, layout: Layout, sc: Scenario) -> tuple[Layout, str]:
    """Instances per pool: the fewest keeping the offered load under TARGET of each pool's analytic bound."""
    rate = ask.open_loop_rate
    assert rate is not None
    load = Offered(rate, ask.prompt_tokens, ask.prompt_tokens, ask.output_tokens)  # fixed lengths, no shared prefix
    bounds = {b.pool: b for b in Bounds(SLO.parse(None, sc)).throughput(sc, load, None)}
    counts = {}
    for pool, b in bounds.items():
        n = max(1, math.ceil(b.offered / (TARGET * b.per_instance)))
        if n > MAX_INSTANCES:
            raise InputError(
                f"--rate {ask.open_loop_rate:g}: the {pool} pool would need {n:,} instances of TP{layout.tp} "
                f"(more than {MAX_INSTANCES}); use phaseplan plan, or a lower rate"
            )
        counts[pool] = n
    sized = Layout(layout.weights, layout.tp, counts["prefill"], counts["decode"])
    p, d = bounds["prefill"], bounds["decode"]
    text = (
        f"Instances: the fewest per pool keeping the offered load under {TARGET:.0%} of each pool's analytic "
        f"throughput bound (one prefill instance: {p.per_instance:,.0f} prompt tok/s, one decode instance: "
        f"{d.per_instance:,.0f} output tok/s, at most; offered {p.offered:,.0f} and {d.offered:,.0f}) - "
        "`phaseplan plan` finds the fewest that meet the SLO."
    )
    return sized, text
