"""The work a scenario implies, estimated before anything runs, and the limits it must stay under.

A scenario is a few lines of YAML, but `rate: 1e12` for a minute, `instances: 1e9` or a sweep of a million
points would take all the machine's memory or run for days. So the requests, output tokens (an upper bound
on decode steps) and memory a run implies are estimated from the scenario alone (rate × duration, a trace's
line count, instances × KV pages, sweep points) and refused past a documented limit, with one line naming the
field and the estimate. `Limits.none()` (the CLI's `--no-limits`) is for people with bigger machines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from statistics import NormalDist

from simulator import input_files
from simulator.capacity import pool_capacity
from simulator.config.consistency import largest
from simulator.config.scenario import Length, Scenario, closed_loop_requests
from simulator.errors import InputError
from simulator.workload.lengths import resolve, stats
from simulator.workload.traces import summary
from simulator.workload.traffic import BLOCK_TOKENS

# What one live object costs (CPython 3.11, 64-bit): a request with its record and sequence, one block of its
# content key (a Python int in a tuple), one KV page's state arrays, one instance. Checked against peak RSS on
# this 2-core machine (bench-sim's scenario): 18,075 more requests took 3.8 KB each (estimate 4.5 KB); 512 more
# Kimi decode instances of 21,142 pages took 2.43 MB each (estimate 2.84 MB).
REQUEST_BYTES = 3_000
BLOCK_BYTES = 40
PAGE_BYTES = 120
TIER_SLOT_BYTES = 72  # a tier slot: 4 int64 columns, its tag, an index entry of two int64 at a load of one half
INSTANCE_BYTES = 300_000
STEP_BYTES = 150  # one step of a run of identical decode steps, priced at once (its times, growth and pages)
# a content block of a trace row while the trace is read: its id as read, the chained values, the tuple kept
# (a Mooncake trace of 100,000 rows with 10,000,000 hash ids peaked at 1.31 GB: 86 B per block besides the rows)
TRACE_BLOCK_BYTES = 100
LENGTH_BYTES = 24  # one value of an empirical length file: the 8-byte array read once, and a draw's copies
# per byte of a profile file, loaded: profiles/h200-sglang.json (5.3 MB) took 77 MB (14.6 per byte); a compact
# table of 1,000,000 GEMM rows (31.6 MB) took 890 MB (28 per byte), the worst measured
PROFILE_BYTES_FACTOR = 32
GIB = 1 << 30


@dataclass(frozen=True)
class Limits:
    """What one invocation may take on. The defaults fit a laptop: 1M requests run in minutes."""

    max_requests: float = 1_000_000  # per run, or per sweep point
    max_output_tokens: float = 1e9  # per run: each decode step makes at least one token
    max_memory_gib: float = 2.0  # estimated memory of one run
    max_points: float = 1_000  # sweep points, or runs of one invocation (`run --repeats`)
    max_sweep_requests: float = 4_000_000  # over all of a sweep's points
    max_replay_s: float = 3600.0  # wall time of a CPU replay: drawing its weights, its device budget, its longest step

    @classmethod
    def none(cls) -> Limits:
        inf = math.inf
        return cls(inf, inf, inf, inf, inf, inf)

    def with_max_requests(self, n: int | None) -> Limits:
        return self if n is None else replace(self, max_requests=n, max_sweep_requests=max(n, self.max_sweep_requests))


@dataclass(frozen=True)
class Estimate:
    requests: float
    output_tokens: float
    memory_bytes: float
    source: str  # the field the request count comes from, for the message
    # what holds the memory: (field to name, what it is in words) -> bytes; a refusal names the largest
    memory_parts: dict[tuple[str, str], float] = field(default_factory=dict)


def mean_length(length: Length) -> float:
    """The mean a distribution draws (the `max` clip lowers a lognormal's; an empirical file counts as 1)."""
    if length.dist == "fixed":
        return float(length.value)  # type: ignore[arg-type]
    if length.dist == "uniform":
        return (length.low + length.high) / 2  # type: ignore[operator]
    if length.dist == "lognormal":
        return clipped_lognormal_mean(length.median, length.sigma, length.max)  # type: ignore[arg-type]
    return 1.0


def clipped_lognormal_mean(median: float, sigma: float, cap: float | None) -> float:
    """E[min(X, cap)] of a lognormal X about `median`: what lengths drawn and clipped at `cap` average. Not
    min(E[X], cap), which overstates it wherever the tail past the clip is drawn (ShareGPT's spread at its
    benchmark's clips: 249 against 233 tokens)."""
    if cap is None:
        return median * math.exp(min(sigma**2 / 2, 700))
    if sigma == 0:
        return min(median, cap)
    z = math.log(cap / median) / sigma
    phi = NormalDist().cdf
    return median * math.exp(sigma**2 / 2) * phi(z - sigma) + cap * (1 - phi(z))


def _length_file(length: Length, base_dir: Path | None) -> tuple[float, float]:
    """(mean length, bytes it holds) of an empirical length file; (mean of the distribution, 0) otherwise."""
    if length.dist != "empirical" or length.file is None:
        return mean_length(length), 0.0
    path = resolve(length.file, base_dir)
    if not input_files.size(path, input_files.LENGTHS):
        return 1.0, 0.0  # missing: the reader names it when the run starts
    count, mean = stats(path)
    return mean, count * LENGTH_BYTES


def _profile_bytes(sc: Scenario, base_dir: Path | None) -> float:
    """What holding the scenario's profile costs (its tables as Python objects), from its size."""
    if sc.profile == "roofline":
        return 0.0
    path = Path(sc.profile)
    if not path.is_absolute() and base_dir is not None and (base_dir / path).is_file():
        path = base_dir / path
    return input_files.size(path, input_files.PROFILE) * PROFILE_BYTES_FACTOR


def estimate(sc: Scenario, base_dir: Path | None = None, limits: Limits | None = None) -> Estimate:
    """Requests, output tokens and memory of one run of `sc` (upper-end estimates, not predictions). Every file
    the run reads is checked here first (a regular file within its size) and what it holds enters the estimate:
    a trace's rows and their content blocks, an empirical length file's values, a profile's tables. A trace is
    read only as far as the memory limit of `limits` allows rows."""
    t = sc.traffic
    lim = limits or Limits()
    parts: dict[tuple[str, str], float] = {}
    if sc.profile != "roofline":
        parts[("profile", f"the tables of {sc.profile}")] = _profile_bytes(sc, base_dir)
    prompt_mean, prompt_bytes = _length_file(t.prompt_tokens, base_dir)
    output_mean, output_bytes = _length_file(t.output_tokens, base_dir)
    for name, n in (("prompt_tokens", prompt_bytes), ("output_tokens", output_bytes)):
        if n:
            parts[(f"traffic.{name}.file", f"the lengths of {getattr(t, name).file}")] = n
    if t.trace is not None:
        cap = None if math.isinf(lim.max_memory_gib) else int(lim.max_memory_gib * GIB // REQUEST_BYTES)
        trace = summary(t, base_dir, cap)
        requests: float = trace.rows
        source = f"traffic.trace ({t.trace})"
        # every row is read and held (the cut to duration_s or requests comes after), each with its blocks
        rows = f"{trace.rows:,}" if trace.complete else f"more than {cap:,}"
        blocks = (
            f" with {'at least ' if not trace.complete else ''}{trace.blocks:,} content blocks" if trace.blocks else ""
        )
        what = f"{rows} rows of {t.trace}{blocks}"
        parts[(f"traffic.trace ({t.trace})", what)] = trace.rows * REQUEST_BYTES + trace.blocks * TRACE_BLOCK_BYTES
        output_mean = trace.output_tokens / trace.rows if trace.rows else 0.0
    elif t.rate is not None:
        per_conversation = t.per_session
        mult = sum(t.diurnal.multipliers) / len(t.diurnal.multipliers) if t.arrival == "diurnal" else 1.0
        requests = math.inf if t.duration_s is None else t.rate * mult * t.duration_s * per_conversation
        source = "traffic.rate × traffic.duration_s"
    else:
        assert t.concurrency is not None
        # A request takes at least one step per output token, and a step at least one kernel per layer.
        step_s = sc.model.layers * sc.hardware.kernel_floor_us * 1e-6
        per_client = math.inf if t.duration_s is None else t.duration_s / (output_mean * step_s)
        requests = t.concurrency * max(1.0, per_client)
        source = "traffic.concurrency × traffic.duration_s"
    if t.requests is not None and t.requests <= requests:
        requests, source = float(t.requests), "traffic.requests"
        if t.concurrency is not None and t.requests == closed_loop_requests(t.concurrency):
            source = "traffic.requests (when not given, enough for a steady state at traffic.concurrency)"
    output = requests * output_mean
    if t.trace is None:
        prompt = t.shared_prefix_tokens + prompt_mean * (t.per_session + 1) / 2
        parts[(source, f"{_n(requests)} requests")] = requests * (REQUEST_BYTES + BLOCK_BYTES * prompt / BLOCK_TOKENS)
    pools = sc.deployment.pools()
    for name, pool in pools.items():
        cap = pool_capacity(sc.model, sc.hardware_of(pool), pool)
        what = f"{sum(p.instances for p in pools.values()):,} instances with their KV pages"
        parts[(f"deployment.{name}.instances", what)] = pool.instances * (INSTANCE_BYTES + PAGE_BYTES * cap.pages)
        if cap.tiers:  # every rank keeps its tiers' slots
            slots = pool.instances * pool.dp * sum(cap.tiers.values())
            parts[(f"deployment.{name}.host_tier_gib", f"{slots:,} KV page slots below HBM")] = TIER_SLOT_BYTES * slots
    # A run of decode steps lasts until a request ends or pages run out: at most the longest output, or what
    # an instance's KV holds (a longer request is rejected on arrival).
    decode = sc.deployment.decode
    kv_tokens = pool_capacity(sc.model, sc.hardware_of(decode), decode).kv_tokens
    longest = largest(t.output_tokens) if t.trace is None else trace.longest_output
    steps = kv_tokens if longest is None else min(kv_tokens, longest)
    parts[("traffic.output_tokens", f"a run of up to {steps:,} decode steps priced at once")] = STEP_BYTES * steps
    return Estimate(requests, output, sum(parts.values()), source, parts)


def check(sc: Scenario, base_dir: Path | None = None, limits: Limits | None = None, where: str = "") -> Estimate:
    """Refuse a run past `limits`, naming the field and the estimate; returns the estimate (a progress bar's
    total). `where` prefixes the message (a sweep point)."""
    lim = limits or Limits()
    est = estimate(sc, base_dir, lim)
    hint = "; pass --no-limits (or a higher --max-requests) to run it anyway"
    if est.requests > lim.max_requests:
        raise InputError(
            f"{where}{est.source}: about {_n(est.requests)} requests, over the limit of "
            f"{_n(lim.max_requests)} per run{hint}"
        )
    if est.output_tokens > lim.max_output_tokens:
        raise InputError(
            f"{where}traffic.output_tokens: about {_n(est.output_tokens)} output tokens (each at least "
            f"a model step), over the limit of {_n(lim.max_output_tokens)} per run{hint}"
        )
    if est.memory_bytes > lim.max_memory_gib * GIB:
        (name, what), most = max(est.memory_parts.items(), key=lambda kv: kv[1])
        raise InputError(
            f"{where}{name}: the run would hold about {est.memory_bytes / GIB:,.1f} GiB, {most / GIB:,.1f} GiB "
            f"of it for {what}, over the limit of {lim.max_memory_gib:g} GiB{hint}"
        )
    return est


def check_points(sc: Scenario, limits: Limits | None = None) -> int:
    """A sweep's point count, refused past the limit before any point is built."""
    lim = limits or Limits()
    n = math.prod(len(v) for v in sc.sweep.values()) if sc.sweep else 1
    if n > lim.max_points:
        sizes = " × ".join(str(len(v)) for v in sc.sweep.values())
        raise InputError(
            f"sweep: {sizes} = {_n(n)} points, over the limit of {_n(lim.max_points)}; pass "
            "--no-limits to run it anyway"
        )
    return n


def check_sweep_total(estimates: list[Estimate], limits: Limits | None = None, what: str = "sweep") -> None:
    """The runs an invocation makes (a sweep's points, or `--repeats`: each run costs its set-up however few its
    requests: issue 37 timed 10,000 repeats of a one-request run at 115 s) and their requests together."""
    lim = limits or Limits()
    if len(estimates) > lim.max_points:
        raise InputError(
            f"{what}: {len(estimates):,} runs, over the limit of {_n(lim.max_points)} runs per invocation; pass "
            "--no-limits to run them anyway"
        )
    total = sum(e.requests for e in estimates)
    if total > lim.max_sweep_requests:
        raise InputError(
            f"{what}: about {_n(total)} requests over {len(estimates):,} runs, over the limit of "
            f"{_n(lim.max_sweep_requests)}; pass --no-limits (or a higher --max-requests) to run it "
            "anyway"
        )


def _n(x: float) -> str:
    if math.isinf(x):
        return "unbounded"
    return f"{x:,.0f}" if x < 1e12 else f"{x:.2g}"


def why_nothing_arrived(sc: Scenario) -> str:
    """The reason a run saw no request, for a one-line warning (exit 0: the scenario was valid, just empty)."""
    t = sc.traffic
    if t.trace is not None:
        cut = f" before traffic.duration_s {t.duration_s:g} s" if t.duration_s is not None else ""
        return f"no request of {t.trace} arrives{cut} (at trace_speedup {t.trace_speedup:g})"
    if t.rate is not None and t.arrival == "diurnal" and max(t.diurnal.multipliers) == 0:
        return "traffic.diurnal.multipliers are all zero"
    if t.rate is not None and t.duration_s is not None:
        mult = sum(t.diurnal.multipliers) / len(t.diurnal.multipliers) if t.arrival == "diurnal" else 1.0
        return (
            f"traffic.rate {t.rate:g}/s over traffic.duration_s {t.duration_s:g} s expects "
            f"{t.rate * mult * t.duration_s:.3g} arrivals, and none fell inside the duration"
        )
    return "the traffic produced no request"
