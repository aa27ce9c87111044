"""The planner's answers for a person: what was asked, the answer, why the rest was rejected — folded at phrases
to the console's width (the terminal's, COLUMNS, or 80 when piped)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from simulator.console import styled
from simulator.folding import Folding
from simulator.planning.pareto import point
from simulator.planning.stopping import describe
from simulator.results.report import provenance_line

SHOWN_REJECTED = 8  # rejected candidates listed one by one, nearest the winner first (all are in the JSON)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"


def _usd(v: float | None) -> str:
    return "-" if v is None else f"${v:,.2f}"


def _slo(s: dict[str, Any]) -> str:
    text = f"p95 TTFT <= {s['ttft_p95_ms']:,g} ms, p95 TPOT <= {s['tpot_p95_ms']:,g} ms"
    return text + (f", >= {s['attainment']:.1%} of requests within both" if s.get("attainment") else "")


def _percentiles(m: dict[str, Any], key: str) -> str:
    p = m[key]
    return f"{_ms(p['p50'])} / {_ms(p['p95'])} / {_ms(p['p99'])} ms"


def _throughput(m: dict[str, Any], decode_gpus: int | None = None) -> str:
    """Tokens/s, and per GPU said per what: of the fleet, and of the decode pool where that is fewer GPUs."""
    tput = point("", m)
    basis = tput["token_basis"]
    total = m["output_tokens_per_s"] if basis == "output tokens" else m["input_tokens_per_s"] + m["output_tokens_per_s"]
    per = f"{tput['tokens_per_s_per_gpu']:,.1f} per GPU of the fleet"
    if decode_gpus and decode_gpus < m["gpus"] and basis == "output tokens":
        per += f", {total / decode_gpus:,.1f} per decode GPU"
    return f"{total:,.0f} {basis}/s ({per})"


def print_answer(console: Console, layout: str, e: dict[str, Any]) -> None:
    """A deployable answer: the layout in one line, its latency percentiles, throughput, cost, binding limit."""
    m = e["metrics"]
    console.print(styled("  ", (layout, "bold")))
    console.print(f"  TTFT p50/p95/p99 {_percentiles(m, 'ttft_ms')}; TPOT p50/p95/p99 {_percentiles(m, 'tpot_ms')}")
    console.print(
        f"  {_throughput(m, e.get('decode_gpus'))}, {_usd(e['cost_per_mtok_usd'])} per million {e['cost_basis']}"
    )
    if e.get("binding"):
        console.print(f"  binding limit: {e['binding']}")
    console.print(f"  {describe(e)}")


def print_max_rate(console: Console, r: dict[str, Any], name: str) -> None:
    console = _narrow(console)
    m = r["metrics"]
    per_request = "" if r["rate_unit"] == "requests/s" else f" ({r['requests_per_s']:,.2f} requests/s)"
    console.print(
        styled((name, "bold"), ": max rate ", (f"{r['max_rate_rps']:g}", "bold"), f" {r['rate_unit']}{per_request}")
    )
    console.print(f"  within {_slo(r['slo'])}")
    print_answer(console, r["layout"], r)
    console.print(f"  ({m['gpus']} GPUs at ${r['gpu_hour_usd']:g}/GPU-hour)")
    for rate, reason in r["above"].items():
        console.print(f"  at {rate}: {reason or 'meets the SLO'}")
    stopped = sum(t["stopped_early"] for t in r["trials"])
    console.print(f"  {len(r['trials'])} trials ({stopped} stopped early)")
    console.print(provenance_line(r))


def _narrow(console: Console) -> Folding:
    """The same console, its text lines folded at phrases (`simulator.folding`) to its width."""
    return Folding(console)


def question_gpus(q: dict[str, Any]) -> str:
    """The GPUs a plan's question runs on, from its scenario's hardware and any GPU the search varies (never the
    scenario's name: `init --hardware b200` then `--set hardware=b200` on a file named …-h200 plans B200s)."""
    kinds = [q.get("hardware", "?")]
    for branch in q.get("space", []):
        for path, values in branch["dims"].items():
            if path.endswith("hardware") and isinstance(values, list):
                kinds += [v for v in values if isinstance(v, str)]
    return " or ".join(k.upper() for k in dict.fromkeys(kinds))


def print_plan(console: Console, p: dict[str, Any]) -> None:
    console = _narrow(console)
    q = p["question"]
    goal = "fewest GPUs" if q["objective"] == "gpus" else "lowest cost per million tokens"
    console.print(
        styled(
            (q["scenario"], "bold"),
            f" on {question_gpus(q)} at {q['rate']:g} {q['rate_unit']}: {goal} within {_slo(q['slo'])}",
        )
    )
    w = p["winner"]
    if w is None:
        console.print(styled(("no candidate meets the SLO", "red")))
    else:
        console.print(styled(("winner", "bold green"), ":"))
        print_answer(console, w["layout"], w)
        console.print(f"  as overrides: {w['label']}", overflow="fold")
    if p["runners_up"]:
        t = Table("runner-up", "GPUs", "$/Mtok", "TTFT p95 ms", "TPOT p95 ms", title=None)
        for e in p["runners_up"]:
            t.add_row(
                e["layout"].rsplit(" = ", 1)[0],
                str(e["gpus"]),
                _usd(e["cost_per_mtok_usd"]),
                _ms(e["metrics"]["ttft_ms"]["p95"]),
                _ms(e["metrics"]["tpot_ms"]["p95"]),
            )
        console.print(t)
    kinds = p["rejected_by_reason"]
    if kinds:
        console.print("rejected: " + ", ".join(f"{n:,} {k}" for k, n in kinds.items()))
        shown = p["rejected"][:SHOWN_REJECTED]  # nearest the winner first
        for r in shown:
            if r.get("candidates") is not None:  # a pool layout the bounds rule out, whatever the rest
                what = f"{r['layout']} × {r['label'].rsplit('=', 1)[-1]} instances ({r['candidates']:,} candidates"
                fewest = r.get("fewest_instances")
                what += f"; passes the bounds from {fewest}), pruned" if fewest else "), pruned"
                console.print(f"  {what}: {r['reason']}", overflow="fold")
                continue
            how = "pruned" if r["pruned"] else "simulated"
            console.print(f"  {r.get('layout', r['label'])} ({r['gpus']} GPUs, {how}): {r['reason']}", overflow="fold")
        if p["rejected_entries"] > len(shown):
            console.print(
                f"  … {p['rejected_entries'] - len(shown):,} more ({min(p['rejected_entries'], 60)} in --json)"
            )
    for line in p.get("widened", []):
        console.print(f"searched again: {line}", overflow="fold")
    for line in p.get("edges", []):
        console.print(styled(("at the edge", "yellow"), f": {line}"), overflow="fold")
    for line in p.get("hints", []):
        console.print(f"  hint: {line}", overflow="fold")
    console.print(
        f"{p['candidates']:,} candidates: {p['pruned']:,} pruned ({p['pruned_before_simulating']:,} before "
        f"simulating), {p['simulated']:,} simulated ({p['stopped_early']:,} stopped early), "
        f"{p['not_simulated']:,} not needed (more GPUs than the winner and runners-up)"
        + (f"; {p['simulations_run']:,} trials run in all" if p.get("simulations_run") != p["simulated"] else "")
    )
    console.print(provenance_line(p))


LABELS = {
    "output_tokens_per_s": "out tok/s",
    "output_tokens_per_s_per_gpu": "out tok/s/GPU",
    "input_tokens_per_s": "in tok/s",
    "kv_occupancy_max_pct": "KV occ max %",
    "slo_attainment_pct": "SLO %",
    "cost_per_mtok_usd": "$/Mtok",
}
LABELS.update({f"{k}_{p}_ms": f"{k.upper()} {p} ms" for k in ("ttft", "tpot", "e2e") for p in ("p50", "p95", "p99")})


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.1f}" if abs(v) >= 10 else f"{v:.2f}"


def print_repeats(console: Console, r: dict[str, Any]) -> None:
    console = _narrow(console)
    console.print(
        styled(
            (r["scenario"], "bold"),
            f": {r['repeats']} repeats over seeds {r['seeds'][0]}..{r['seeds'][-1]}; varied: {r['varied']}",
        )
    )
    t = Table("metric", "mean", "95% CI", "range")
    for name, v in r["metrics"].items():
        ci = "-" if v["ci95"] is None else f"{_num(v['ci95'][0])} to {_num(v['ci95'][1])}"
        t.add_row(LABELS.get(name, name), _num(v["mean"]), ci, f"{_num(v['min'])} to {_num(v['max'])}")
    console.print(t)
    s = r["slo_met"]
    console.print(
        f"SLO ({_slo(r['slo'])}) met in {s['runs']} of {s['of']} runs: probability {s['probability']:.0%} "
        f"(95% CI {s['ci95'][0]:.0%}-{s['ci95'][1]:.0%})"
    )
    console.print(provenance_line(r))
