"""`bench.sh`: the benchmark that checks a plan once it is deployed, and feeds `phaseplan calibrate`.

It replays the planned traffic against the deployed endpoint with the engine's own client (SGLang's
`bench_serving`, `vllm bench serve`): the planned load (a rate with its arrival process, or a number of clients),
the planned lengths through the clients' random dataset (a fixed length, or uniform in [ratio x L, L]), and the
planned request count, into a result file of its own to hold against the plan's figures. Then the runs
calibrate fits: closed loops at the clients the planned load keeps busy (Little's law on the plan's own latency)
and at a half and a quarter of them. Closed loops hold a batch steady, which is what the fit needs: an open-loop
run's medians jump with each arrival's timing, and a fit to them stops short (three Poisson runs of a Qwen3-8B
plan recovered 6,024 of a true 7,500 µs of CPU work a step; three closed loops 7,387). The script ends with the
calibrate command and the plan to run again on the fitted engine.

What the clients cannot replay (multi-turn sessions, a shared system prompt, lognormal or trace lengths, diurnal
arrivals) is said at the top of the script; calibrate reads each run's actual load and lengths from its result
file, so the fit is made against what was sent, not what was planned.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import Any

from simulator.budget import mean_length
from simulator.config import presets
from simulator.config.scenario import Length, Scenario, Traffic
from simulator.deploy import flags
from simulator.deploy.command import comment, default_var

FIT_SHARES = (1, 2, 4)  # the busy clients divided by these: the closed loops calibrate fits across
FIT_REQUESTS = (64, 1000)  # requests a fit run sends: 8 a client, within these (calibrate simulates 1,000 at most)
# The engine preset a calibration of each client's runs starts from (simulator/config/presets/engines).
BASE_ENGINE = {"sglang": "sglang-0.5", "vllm": "vllm-0.x"}
ROUTER_PORT, SGLANG_PORT, VLLM_PORT = 8000, 30000, 8000


@dataclass(frozen=True)
class Load:
    """One benchmark run: its name (the result file's), its rate or clients, and how many requests it sends."""

    label: str
    rate: float | None
    concurrency: int | None
    requests: int


def planned_requests(t: Traffic) -> int:
    """Requests the planned traffic sends: its count, else rate x duration (x turns), else 4 per client."""
    if t.requests is not None:
        return t.requests
    if t.rate is not None and t.duration_s is not None:
        return max(1, math.ceil(t.rate * t.sessions.turns * t.duration_s))
    return 4 * (t.concurrency or 1)


def busy_clients(sc: Scenario, answer: dict[str, Any] | None) -> int:
    """Clients the planned load keeps in flight: a closed loop's own; an open loop's rate x the plan's median
    end-to-end latency (Little's law), from the answer's figures (8 where the answer has none)."""
    t = sc.traffic
    if t.concurrency is not None:
        return t.concurrency
    metrics = (answer or {}).get("winner", answer or {}) or {}
    e2e = ((metrics.get("metrics") or {}).get("e2e_ms") or {}).get("p50")
    if not isinstance(e2e, int | float) or not math.isfinite(e2e) or t.rate is None:
        return 8
    return max(1, round(t.rate * t.sessions.turns * e2e / 1000))


def loads(sc: Scenario, clients: int) -> tuple[Load, list[Load]]:
    """The planned load, and the closed loops calibrate fits (duplicates dropped)."""
    t = sc.traffic
    rate = t.rate * t.sessions.turns if t.rate is not None else None  # requests per second the clients send
    planned = Load("planned", rate, t.concurrency, planned_requests(t))
    fit: list[Load] = []
    for k in FIT_SHARES:
        c = max(1, clients // k)
        if all(f.concurrency != c for f in fit):
            fit.append(Load(f"clients-{c}", None, c, min(max(8 * c, FIT_REQUESTS[0]), FIT_REQUESTS[1])))
    return planned, fit


def _length(spec: Length, what: str, notes: list[str]) -> tuple[int, float]:
    """(L, range ratio) of the random dataset for a planned length; approximations go to `notes`."""
    if spec.dist == "fixed" and spec.value is not None:
        return spec.value, 1.0
    if spec.dist == "uniform" and spec.low is not None and spec.high is not None:
        return spec.high, spec.low / spec.high
    if spec.dist == "lognormal" and spec.median is not None:
        mean = mean_length(spec)
        notes.append(f"{what}: lognormal lengths sent at their mean, {round(mean)} tokens (the clients draw uniform)")
        return max(1, round(mean)), 1.0
    notes.append(f"{what}: {spec.dist} lengths (a file of lengths) are not replayed: 1,024 tokens sent instead")
    return 1024, 1.0


def lengths(sc: Scenario, notes: list[str]) -> tuple[int, int, float]:
    """Prompt length, output length and the one range ratio both clients apply to both."""
    t = sc.traffic
    prompt, r_in = _length(t.prompt_tokens, "prompt_tokens", notes)
    output, r_out = _length(t.output_tokens, "output_tokens", notes)
    if r_in != r_out:
        notes.append(
            f"the clients draw prompts and outputs with one range ratio: {r_in:g} (the prompts'), not the "
            f"outputs' {r_out:g}"
        )
    return prompt, output, r_in


def _approximations(sc: Scenario) -> list[str]:
    t = sc.traffic
    notes = []
    if t.trace is not None:
        notes.append("a trace is replayed as its mean lengths at the planned rate, not request by request")
    if t.sessions.turns > 1:
        notes.append(
            f"sessions of {t.sessions.turns} turns are sent as independent requests at {t.sessions.turns}x the "
            "conversation rate (no turn reuses an earlier one's prefix, so the cache hits the plan counted are absent)"
        )
    if t.shared_prefix_tokens:
        notes.append(f"the {t.shared_prefix_tokens}-token shared system prompt is not sent")
    if t.rate is not None and t.arrival == "diurnal":
        notes.append("diurnal arrivals are sent as Poisson at the mean rate")
    return notes


def _sglang(sc: Scenario, r: flags.Release, load: Load, lens: tuple[int, int, float]) -> list[str]:
    argv = ["python", "-m", r.module or "sglang.bench_serving", "--backend", "sglang", "--base-url", "${BASE_URL}"]
    argv += _common(sc, r, load, lens)
    out = "results/sglang-planned.jsonl" if load.label == "planned" else "results/sglang.jsonl"
    return argv + ["--output-file", out]  # SGLang's client ignores EOS on random prompts


def _vllm(sc: Scenario, r: flags.Release, load: Load, lens: tuple[int, int, float]) -> list[str]:
    argv = ["vllm", "bench", "serve", "--backend", "vllm", "--base-url", "${BASE_URL}", "--model", "${MODEL_PATH}"]
    argv += _common(sc, r, load, lens)
    argv += ["--ignore-eos"]  # every request generates its planned output length, as the plan simulated
    return argv + ["--save-result", "--result-dir", "results", "--result-filename", f"vllm-{load.label}.json"]


def _common(sc: Scenario, r: flags.Release, load: Load, lens: tuple[int, int, float]) -> list[str]:
    prompt, output, ratio = lens
    argv = ["--dataset-name", "random", "--random-input-len", str(prompt), "--random-output-len", str(output)]
    argv += ["--random-range-ratio", f"{ratio:.6g}", "--num-prompts", str(load.requests)]
    if load.rate is not None:
        argv += ["--request-rate", f"{load.rate:.6g}"]
        if sc.traffic.arrival == "bursty" and r.has("--burstiness"):  # gamma gaps of shape 1/cv^2
            argv += ["--burstiness", f"{1 / sc.traffic.burst_cv**2:.6g}"]
    else:
        argv += ["--request-rate", "inf", "--max-concurrency", str(load.concurrency)]
    return argv + ["--seed", str(sc.seed)]


def script(
    sc: Scenario, scenario_file: str, sglang: flags.Release, vllm: flags.Release, answer: dict[str, Any] | None = None
) -> str:
    """The script: `bench.sh sglang|vllm [BASE_URL]` runs that engine's client at every load, then calibrates."""
    notes = _approximations(sc)
    lens = lengths(sc, notes)
    planned, fit = loads(sc, busy_clients(sc, answer))
    default_url = {
        "sglang": f"http://localhost:{ROUTER_PORT if _has_router(sc) else SGLANG_PORT}",
        "vllm": f"http://localhost:{VLLM_PORT}",
    }
    blocks: dict[str, list[list[str]]] = {}
    for engine, release in (("sglang", sglang), ("vllm", vllm)):
        make = _sglang if engine == "sglang" else _vllm
        blocks[engine] = [make(sc, release, load, lens) for load in (planned, *fit)]
        if sc.traffic.rate is not None and sc.traffic.arrival == "bursty" and not release.has("--burstiness"):
            notes.append(f"{engine}: {release.label} sends Poisson arrivals, not the planned bursty ones")
        notes += [f"{engine}: {p}" for argv in blocks[engine] for p in release.problems(argv)]
    lines = [
        "#!/usr/bin/env bash",
        f"# The benchmark of {comment(sc.name)}'s plan once deployed: the planned traffic ({_describe(planned)}),",
        f"# into results/<engine>-planned.*, then closed loops of {', '.join(str(f.concurrency) for f in fit)} "
        "clients for `phaseplan calibrate`.",
        f"# Clients: {sglang.label} ({sglang.file}), {vllm.label} ({vllm.file}).",
        "# Usage: bench.sh sglang|vllm [BASE_URL]   (BASE_URL: the router or server the clients send to)",
        *(f"# not replayed as planned: {comment(n)}" for n in notes),
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        'engine="${1:?usage: bench.sh sglang|vllm [BASE_URL]}"',
        "mkdir -p results engines",
        'case "$engine" in',
    ]
    for engine, release in (("sglang", sglang), ("vllm", vllm)):
        lines.append(f"  {engine})")
        lines.append(f'    BASE_URL="${{2:-{default_url[engine]}}}"')
        if engine == "vllm":
            lines.append("    " + default_var("MODEL_PATH", sc.model.checkpoint or sc.model.name))
        else:  # SGLang's client appends to its output file: a new benchmark starts new ones
            lines.append("    rm -f results/sglang-planned.jsonl results/sglang.jsonl")
        lines += ["    " + " ".join(_word(a) for a in argv) for argv in blocks[engine]]
        files = "results/sglang.jsonl" if engine == "sglang" else " ".join(f"results/vllm-{x.label}.json" for x in fit)
        lines.append(f'    files="{files}"')
        # the fit starts from the scenario's own engine where it is this one's, else from this engine's preset at
        # the release the commands are written for
        same = sc.engine.name.split("-")[0] == engine
        base = presets.for_release(BASE_ENGINE[engine], release.version)
        lines.append("    base=()" + (" ;;" if same else f"\n    base=(--engine {base}) ;;"))
    lines += [
        '  *) echo "usage: bench.sh sglang|vllm [BASE_URL]" >&2; exit 2 ;;',
        "esac",
        "# Fit the engine to the closed loops, then plan again on the fitted engine (docs/deploy.md: the loop).",
        'bench=(); for f in $files; do bench+=(--bench "$f"); done',
        f'phaseplan calibrate --scenario {shlex.quote(scenario_file)} "${{base[@]}}" "${{bench[@]}}" \\',
        '    --out "engines/$engine-fitted.yaml"',
        f'echo "next: phaseplan run {shlex.quote(scenario_file)} --set engine=engines/$engine-fitted.yaml"',
    ]
    return "\n".join(lines) + "\n"


def _has_router(sc: Scenario) -> bool:
    pools = sc.deployment.pools().values()
    return sc.deployment.mode == "disaggregated" or sum(p.instances for p in pools) > 1


def _describe(load: Load) -> str:
    if load.rate is not None:
        return f"{load.rate:g} requests/s, {load.requests} requests"
    return f"{load.concurrency} clients, {load.requests} requests"


def _word(word: str) -> str:
    """A shell word; `${VAR}` placeholders stay expansions (they are set above)."""
    return f'"{word}"' if word in ("${BASE_URL}", "${MODEL_PATH}") else shlex.quote(word)
