"""The bodies of `phaseplan replay` and `phaseplan compare`: load, run on the device (torch is imported here
only, when a device verb runs), print or write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from phaseplan.preflight import check_fits
from simulator import budget
from simulator.atomic import check_target, write_atomic
from simulator.config import loader
from simulator.results import report


def check_device_work(sc: Any, device: str, budget_s: float, limits: budget.Limits | None) -> None:
    """A CPU replay's host memory and wall time, estimated before torch loads (`kernels.executor.footprint`); a
    GPU's memory is checked by the clock against the device's free memory before any weight is drawn."""
    from kernels.executor.footprint import check_cpu, check_formats

    check_formats(sc)
    if device == "cpu":
        check_cpu(sc, budget_s, (limits or budget.Limits()).max_replay_s)


def _dump(doc: Any) -> str:
    return json.dumps(doc, indent=2, allow_nan=False)


def replay_command(
    scenario: Path,
    sets: tuple[str, ...],
    device: str,
    clock: str,
    budget_s: float,
    out: Path | None,
    as_json: bool,
    console: Console,
    limits: budget.Limits | None = None,
) -> None:
    from kernels.executor.replay import replay

    sc, _ = loader.load(scenario, sets)
    if out is not None:
        check_target(out, ["result.json"])  # before any device time is spent
    check_fits(sc, scenario, sets)
    budget.check(sc, scenario.parent, limits)
    check_device_work(sc, device, budget_s, limits)
    result = replay(sc, scenario.parent, device, clock, budget_s).result
    if out is not None:
        write_atomic(out / "result.json", _dump(result) + "\n")
    if as_json:
        print(_dump(result))
        return
    report.print_run(console, result)
    r = result["provenance"]["replay"]
    s, sec = r["steps"], r["seconds"]
    console.print(
        f"replay on {r['device']} ({r['executed_with']}), clock {r['clock']}: {s['executed']} of "
        f"{s['total']} steps executed, {s['reused']} reused from {r['buckets']['count']} buckets, "
        f"{s['priced']} priced; {sec['measured']:.3f} s measured, {sec['collectives_priced']:.3f} s of "
        f"collectives priced; KV transfers priced by the link model"
    )


def compare_command(
    scenario: Path,
    sets: tuple[str, ...],
    device: str,
    profile: str | None,
    budget_s: float,
    as_json: bool,
    console: Console,
    limits: budget.Limits | None = None,
) -> None:
    from kernels.executor.compare import compare

    sc, _ = loader.load(scenario, sets)
    check_fits(sc, scenario, sets)
    budget.check(sc, scenario.parent, limits)
    check_device_work(sc, device, budget_s, limits)
    doc = compare(sc, scenario.parent, device, profile, budget_s)
    if as_json:
        print(_dump(doc))
        return
    prov = doc["profile"]
    t = Table(
        "metric",
        "sim",
        "replay",
        "rel_error",
        title=f"sim (profile {'timed here' if 'measured_here' in doc else prov['file'] or prov['profile_source']}) "
        f"vs replay on {doc['replay']['device']}",
    )
    for name, m in doc["metrics"].items():
        t.add_row(name, _num(m["sim"]), _num(m["replay"]), _pct(m["rel_error"]))
    console.print(t)
    f = Table(
        "op family",
        "priced ms",
        "measured ms",
        "rel_error",
        title=f"per op family, mean of {doc['sampled_steps']} sampled steps (one per bucket)",
    )
    for name, m in doc["families"].items():
        f.add_row(name, _num(m["priced_ms"]), _num(m["measured_ms"]), _pct(m["rel_error"]))
    console.print(f)
    console.print("rel_error = sim / replay − 1; collectives and the KV transfer link are priced on both sides")
    here = doc.get("measured_here")
    if here:
        n = here["noise"]
        console.print(
            f"op shapes timed here, in this run: {here['shapes']:,} shapes in {here['seconds']:.0f} s; timing noise "
            f"±{_share(n['timing_noise'])} (a shape's samples ±{_share(n['shape_spread'])}, re-timed after the replay "
            f"{_share(n['drift'])} off, the replay's repeated steps ±{_share(n['replay_spread'])})"
        )
        p = n["preemption"]
        if p["share"] is not None:
            console.print(
                f"load: the replay's executed steps were preempted {p['per_step']:.2f} times each, each costing "
                f"{p['ms_each']:.2f} ± {p['ms_each_se']:.2f} ms of CPU time on return (≈ {p['share']:+.0%} of a step; "
                "the op shapes' medians mostly escape it)"
            )
        o = here["step_overhead"]
        console.print(
            f"the executor's work beyond its kernels, on {o['probes']} probe steps of its own: {o['base_us']:.0f} µs a "
            f"step, {o['decode_us']:.0f} more with decode rows, {o['per_chunk_us']:.0f} a prefill chunk, "
            f"{o['per_token_us']:.1f} a row, {o['per_kv_token_us']:.3f} a cached token decode reads, and its kernels "
            f"{o['kernel_share']:+.1%} inside a step against timed alone; on the sampled steps {_num(o['priced_ms'])} "
            f"ms against {_num(o['measured_ms'])} ms measured there beyond the op list's price"
        )


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.4g}"


def _share(x: float | None) -> str:
    return "—" if x is None else f"{x:.1%}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:+.1%}"
