"""Human-readable reports of Results; every report says where its step times came from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from simulator.config.scenario import Scenario
from simulator.config.sweep import paired_deltas
from simulator.console import styled
from simulator.folding import Folding
from simulator.results.cost import generating, per_mtok, result_gpu_hour_usd
from simulator.results.numbers import figure
from simulator.results.retries import retry_line
from simulator.results.sweep_table import sweep_table

DELTA_AXES = ("integrity.enabled",)  # two-valued switches whose cost a sweep reports as a delta


def provenance_line(result: dict[str, Any]) -> str:
    p = result["provenance"]
    fitted = f" ({p['engine_fitted']})" if p.get("engine_fitted") else ""
    engine = f"engine {p['engine']}{fitted}; " if p.get("engine") else ""
    return engine + _step_times(p)


def _step_times(p: dict[str, Any]) -> str:
    r = p.get("replay")
    if r is not None and r.get("clock") == "measured":
        return (
            f"step times: EXECUTED on {r.get('device')} ({r.get('executed_with')}); the step anatomy above "
            f"is the cost model's ({p.get('file') or 'roofline'})"
        )
    if p.get("measured_by"):  # a third party's measurements: say whose, never as if phaseplan's kernels ran
        derived = p.get("derived_gemm_forms") or 0
        return (
            f"step times: {p['measured_by']} - not phaseplan's own kernels ({p.get('file')}, {p.get('date')}); "
            f"{derived} GEMM form(s) interpolated between measured (n, k) points (derived); "
            "ops without a table on the roofline"
        )
    if p.get("profile_source") == "measured":
        return f"step times: MEASURED kernel profile on {p.get('device')} ({p.get('file')}, {p.get('date')})"
    fitted = " with factors fitted to measured tables, docs/calibration.md" if p.get("roofline_fit") else ""
    return (
        f"step times: MODELED ({p.get('device')}; {p.get('file') or 'roofline'}{fitted}) - "
        "no kernel was measured for these numbers"
    )


def _fmt(v: Any) -> str:
    """A table cell: a float as the one formatter prints it (`numbers.figure`), a count grouped, nothing as '-'."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return figure(v)
    return f"{v:,}" if isinstance(v, int) else str(v)


def _pm(value: float | None, ci: list[float] | None) -> str:
    """` ± 3%`: an interval's half-width as a share of its figure ('' without either)."""
    if value is None or ci is None or value == 0:
        return ""
    return f" ± {(ci[1] - ci[0]) / 2 / abs(value):.0%}"


def _ms(v: float) -> str:
    return f"{v:,.0f} ms" if v >= 100 else f"{v:,.1f} ms"


def _headline(m: dict[str, Any], ci: dict[str, Any]) -> str:
    """Throughput, p95 TTFT and TPOT and cost of a set of figures, each with its interval where `ci` has one."""
    tput = m["output_tokens_per_s"]
    out = [f"output {tput:,.0f} tok/s{_pm(tput, ci.get('output_tokens_per_s'))}"]
    for label, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms")):
        v = m[key]["p95"]
        if v is not None:
            out.append(f"{label} p95 {_ms(v)}{_pm(v, (ci.get(key) or {}).get('p95'))}")
    cost = m["cost_per_mtok_usd"]
    if cost is not None:
        out.append(f"${cost:,.2f} per M output tokens{_pm(cost, ci.get('cost_per_mtok_usd'))}")
    return ", ".join(out)


def window_lines(m: dict[str, Any]) -> list[str]:
    """What a Result's figures were read over, said once: the steady-state window with its warm-up cut and the
    headline figures' 95% intervals (or why the run shows no steady state), and the whole run's figures as a
    benchmark measures them. `steady state from 41 s to 600 s: …, TTFT p95 1,102 ms ± 3%, …`."""
    w, state = m["window_s"], m["steady_state"]
    where = f"from {w[0]:,.0f} s to {w[1]:,.0f} s"
    if state["reached"]:
        head = f"steady state {where} (warm-up cut by MSER-5; {state['batches']} batches of {state['batch_s']:,.0f} s)"
    else:
        head = f"NO STEADY STATE: {state['why']}; figures {where}, latency without an interval"
    tw = state.get("throughput_s", w)
    if tw != w:  # open-loop arrivals have no warm-up: throughput counts all of them (results/service.py)
        head += f"; throughput and cost over every arrival, {tw[0]:,.0f} s to {tw[1]:,.0f} s"
    return [
        f"{head}: {_headline(m, m.get('ci95') or {})}",
        f"whole run, fill and drain included (as a benchmark measures it): {_headline(m['full_run'], {})}",
    ]


def print_run(console: Console, result: dict[str, Any]) -> None:
    m, it = result["metrics"], result["integrity"]
    text = Folding(console)
    text.print(styled((result["scenario"]["name"], "bold"), f": {fleet(result)}, {m['duration_s']:,.1f} s simulated"))
    for line in window_lines(m):
        text.print(line)
    t = Table("metric", "value", show_header=False)
    rows = [
        ("output tokens/s", _fmt(m["output_tokens_per_s"])),
        *per_gpu_rows(result),
        ("input tokens/s", _fmt(m["input_tokens_per_s"])),
        ("TTFT p50/p95/p99 ms", " / ".join(_fmt(m["ttft_ms"][k]) for k in ("p50", "p95", "p99"))),
        ("TPOT p50/p95/p99 ms", " / ".join(_fmt(m["tpot_ms"][k]) for k in ("p50", "p95", "p99"))),
        ("E2E p50/p95/p99 ms", " / ".join(_fmt(m["e2e_ms"][k]) for k in ("p50", "p95", "p99"))),
        (
            "requests completed / rejected / aborted",
            f"{m['completed']:,} / {m['rejected']:,} / {m['aborted']:,} of {m['requests']:,}",
        ),
        ("preempted", _fmt(m["preempted"])),
        ("max running (decode instance)", _fmt(m["max_running"])),
        ("KV occupancy mean / max", f"{m['kv_occupancy']['mean']:.1%} / {m['kv_occupancy']['max']:.1%}"),
        ("prefix hit rate", f"{m['prefix_hit_rate']:.1%}"),
        (_slo_row(result["scenario"]["slo"]), "-" if m["slo_attainment"] is None else f"{m['slo_attainment']:.1%}"),
        ("cost per M output tokens", "-" if m["cost_per_mtok_usd"] is None else f"${m['cost_per_mtok_usd']:.3f}"),
        *_all_tokens_cost(result),
        (
            "integrity",
            f"{'on' if it['enabled'] else 'off'}: checked {it['checked_pages']:,} pages, injected "
            f"{it['injected']}, detected {it['detected']}, false positives {it['false_positives']}, "
            f"aborted {it['aborted_requests']}, tokens lost {it['tokens_lost']:,}",
        ),
    ]
    for name, d in m.get("dp_ranks", {}).items():  # DP attention: how unevenly its ranks were loaded
        batch = "-" if d["batch_max_over_mean"] is None else f"{d['batch_max_over_mean']:.2f}×"
        rows.append(
            (
                f"{name} DP ranks: busiest / mean",
                f"decode batch {batch}, KV "
                f"{d['kv_max_over_mean']:.2f}× over {d['ranks']} ranks (fullest rank peaked at "
                f"{d['kv_peak_rank_occupancy']:.1%})",
            )
        )
    rows += _tier_rows(m) + [
        (f"{name} pool: {p['gpus']:,} × {p['hardware'].upper()}", f"${p['usd_per_hour']:,.2f}/hour, {p['share']:.1%}")
        for name, p in m.get("cost_by_pool", {}).items()  # pools of different GPUs: what each costs
    ]
    if m.get("retries"):  # clients retried failed requests: the storm and what it cost
        rows.insert(6, ("  retries", retry_line(m["retries"])))
    if m.get("aborted_by_reason"):
        rows.insert(6, ("  aborted because", ", ".join(f"{k} {v:,}" for k, v in m["aborted_by_reason"].items())))
    if m.get("rejected_by_reason"):
        rows.insert(6, ("  rejected because", ", ".join(f"{k} {v:,}" for k, v in m["rejected_by_reason"].items())))
    for k, v in rows:
        t.add_row(k, v)
    console.print(t)
    print_anatomy(console, result)
    text.print(provenance_line(result))


def fleet(result: dict[str, Any]) -> str:
    """The GPUs a Result ran on, by kind: `32 H200`, `16 H100 + 16 H200` (its hardware, whatever its name says)."""
    m = result["metrics"]
    by_pool = m.get("cost_by_pool")
    if by_pool:
        kinds: dict[str, int] = {}
        for p in by_pool.values():
            kinds[p["hardware"].upper()] = kinds.get(p["hardware"].upper(), 0) + p["gpus"]
        return " + ".join(f"{n:,} {k}" for k, n in kinds.items())
    return f"{m['gpus']:,} {result['scenario']['hardware']['name'].upper()}"


def per_gpu_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """Output tokens/s per GPU, said per what: per GPU of the whole fleet, and (disaggregated) per decode GPU,
    the GPUs that generate them (GLM-5.2 INT4 reads 72.9 the one way and 218 the other)."""
    m = result["metrics"]
    rows = [(f"  per GPU of the fleet ({m['gpus']:,})", _fmt(m["output_tokens_per_s_per_gpu"]))]
    decode = decode_gpus(result["scenario"])
    if decode and decode != m["gpus"]:
        rows.append((f"  per decode GPU ({decode:,})", _fmt(m["output_tokens_per_s"] / decode)))
    return rows


def decode_gpus(scenario: dict[str, Any]) -> int | None:
    """The GPUs of a Result's decode pool (its scenario's dump); None where it names none."""
    pool = (scenario.get("deployment") or {}).get("decode")
    if not pool:
        return None
    return int(pool.get("instances", 1)) * int(pool.get("tp", 1))


def _tier_rows(m: dict[str, Any]) -> list[tuple[str, str]]:
    """KV tiers below HBM: each pool's prefix hits by tier and what it loaded back, and the load-back time."""
    t = m.get("kv_tiers")
    if t is None:
        return []
    rows = [
        (
            f"  {pool} hits by tier",
            ", ".join(f"{tier} {rate:.1%}" for tier, rate in p["hit_rate"].items())
            + "; loaded back "
            + ", ".join(f"{tier} {g:,.1f} GiB" for tier, g in p["gib_loaded"].items()),
        )
        for pool, p in t["pools"].items()
    ]
    lb = t["load_back_ms"]
    when = "-" if lb["p50"] is None else f"p50 {_fmt(lb['p50'])} / p95 {_fmt(lb['p95'])} ms"
    return [*rows, ("  load-back (in TTFT)", f"{t['requests_loading']:,} requests, {when}")]


def _slo_row(slo: dict[str, Any]) -> str:
    """The SLO row names its limits: the share of requests within both, each request judged on its own."""
    return f"SLO attainment (TTFT ≤ {slo['ttft_p95_ms']:,g} ms, TPOT ≤ {slo['tpot_p95_ms']:,g} ms per request)"


def _all_tokens_cost(result: dict[str, Any]) -> list[tuple[str, str]]:
    """A prefill study's row priced per million input + output tokens (its output price means nothing)."""
    m, sc = result["metrics"], result["scenario"]
    if generating(m) or not m["completed"]:
        return []
    c = per_mtok(m, result_gpu_hour_usd(sc))
    return [("cost per M input+output tokens", f"${c['cost_per_m_total_tok_usd']:.3f} (requests generate no answer)")]


def print_anatomy(console: Console, result: dict[str, Any]) -> None:
    """One line per representative step: its time and the op families that take most of it."""
    text = Folding(console)
    for pool, entry in result.get("step_anatomy", {}).items():
        if pool == "summary":
            continue
        for kind, label in (("prefill_chunk", "tokens"), ("decode_step", "batch")):
            step = entry.get(kind)
            if step is None:
                continue
            fams = ", ".join(f"{k} {v:,.1f}" for k, v in step["by_family"].items())
            if "dp_ranks" in step:
                fams += f" (one chunk on each of {step['dp_ranks']} DP ranks)"
            text.print(f"{step_name(pool, kind)} ({label} {step[label]:,}): {step['ms']:,.1f} ms = {fams}")
        spec = entry.get("speculative")
        if spec is not None:  # the decode step above is this pair; its tokens were drawn per sequence and step
            drafts = f"{spec['draft_tokens']} draft token{'s' if spec['draft_tokens'] > 1 else ''}"
            text.print(
                f"{pool} speculative ({spec['method'].upper()}, {drafts}): verify "
                f"{spec['verify_ms']:,.1f} ms + draft {spec['draft_ms']:,.1f} ms a step, "
                f"{figure(spec['accepted_per_step'])} tokens accepted per step (expected "
                f"{figure(spec['tokens_per_step'])}) = {spec['ms_per_accepted_token']:,.1f} ms per token"
            )


def step_name(pool: str, kind: str) -> str:
    """`prefill chunk` on the prefill pool, `decode step` on the decode pool, `decode pool: prefill chunk` where
    the pool's name is not the step's (colocated): each name said once."""
    words = kind.replace("_", " ")
    return words if words.startswith(pool + " ") else f"{pool} pool: {words}"


def print_sweep(console: Console, sc: Scenario, results: list[dict[str, Any]], csv_path: Path | None) -> None:
    """The sweep's table with as many metrics as the console's width holds; text lines folded at phrases; where
    its CSV went (None: `--out` was not given, and nothing was written)."""
    paths = list(sc.sweep)
    t, left = sweep_table(sc.name, paths, results, console.width)
    console.print(t)
    text = Folding(console)
    for r in (r for r in results if "error" in r):
        where = " ".join(f"{p.split('.')[-1]}={v}" for p, v in r["point"].items())
        text.print(f"failed {where}: {r['error']}")
    if "tok/s/GPU" not in left:
        text.print("tok/s/GPU: output tokens/s per GPU of the fleet (prefill GPUs included)")
    if left:
        text.print(f"in the CSV (--out) also: {', '.join(left)}")
    for axis in (a for a in DELTA_AXES if a in sc.sweep):
        rows = paired_deltas(results, axis)
        values = list(dict.fromkeys(r["point"][axis] for r in results))
        if not rows:
            continue
        rest = list(rows[0]["point"])
        t = Table(
            *[p.split(".")[-1] for p in rest],
            "throughput change",
            "TPOT p95 ms",
            "TPOT p95 change",
            title=f"{axis}: {values[0]} vs {values[1]}",
        )
        for r in rows:
            tput, tpot = r["throughput_change"], r["tpot_p95_change"]
            a, b = r["tpot_p95_ms"]
            t.add_row(
                *[str(v) for v in r["point"].values()],
                "-" if tput is None else f"{tput:+.2%}",
                f"{_fmt(a)} vs {_fmt(b)}",
                "-" if tpot is None else f"{tpot:+.2%}",
            )
        console.print(t)
    ran = [r for r in results if "provenance" in r]  # a failed point carries its error, not a provenance
    if ran:
        text.print(provenance_line(ran[0]))
    if csv_path is None:
        text.print("no files written: --out DIR writes the CSV, the JSON and a chart per metric")
    else:
        console.print(f"csv: {csv_path}")
