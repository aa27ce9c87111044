"""From a finished run's record to the metrics of the Result document of ARCHITECTURE.md (either clock's)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from simulator.results import cost
from simulator.results.record import InstanceRun, PoolRun, RunRecord
from simulator.results.retries import retry_metrics
from simulator.results.service import service, windowed
from simulator.results.steady import METHOD

SERIES_POINTS = 120
EVENTS_KEPT = 200  # integrity aborts listed in a Result (all are counted)


def _occupancy(run: RunRecord, end: float) -> dict[str, Any]:
    """Time-weighted KV occupancy of the decode pool (the pool whose memory binds concurrency)."""
    insts = run.pools["decode"].instances
    if end <= 0:
        return {"mean": 0.0, "max": 0.0, "series": []}
    grid = np.linspace(0.0, end, SERIES_POINTS + 1)
    mean_total, peak, series = 0.0, 0.0, np.zeros(SERIES_POINTS + 1)
    for inst in insts:
        t, d = inst.log.t, inst.log.d
        times, sums = t, np.zeros(0, dtype=np.int64)
        if t.size:  # same-time changes are summed before any max
            order = np.argsort(t, kind="stable")
            ts = t[order]
            first = np.flatnonzero(np.concatenate(([True], ts[1:] != ts[:-1])))  # each time's first change
            times, sums = ts[first], np.add.reduceat(d[order], first)
        v = np.concatenate([[0], np.cumsum(sums)]) / inst.log.pages
        times = np.concatenate([[0.0], times, [end]])
        dt = np.diff(np.clip(times, 0, end))
        mean_total += float((v * dt).sum()) / end
        peak = max(peak, float(v.max()))
        series += v[np.clip(np.searchsorted(times, grid, side="right") - 1, 0, len(v) - 1)]
    n = len(insts)
    return {
        "mean": round(mean_total / n, 4),
        "max": round(peak, 4),
        "series": [[round(float(a), 3), round(float(b) / n, 4)] for a, b in zip(grid, series, strict=True)],
    }


FULL_RUN = (
    "duration_s",
    "output_tokens_per_s",
    "input_tokens_per_s",
    "output_tokens_per_s_per_gpu",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "slo_attainment",
    "cost_per_mtok_usd",
)


def build_metrics(run: RunRecord) -> dict[str, Any]:
    """The Result's metrics: the service figures over the steady-state window (`steady`), with their intervals,
    and under `full_run` the same figures over the whole run, fill and drain included, as a benchmark such as
    bench_serving measures it (what `phaseplan validate` compares). Counts are the whole run's."""
    sc = run.scenario
    recs = run.requests
    done = [r for r in recs if r.status == "completed"]
    arr = np.array([r.arrival for r in recs]) if recs else np.zeros(0)
    fin = np.array([r.finish for r in done]) if done else np.zeros(0)
    start = float(arr.min()) if arr.size else 0.0
    end = float(fin.max()) if fin.size else start
    span = max(end - start, 1e-12)
    out_tok = sum(r.output for r in done)
    in_tok = sum(r.prompt for r in done)
    ttft = np.array([(r.first_token - r.arrival) * 1e3 for r in done])
    e2e = np.array([(r.finish - r.arrival) * 1e3 for r in done])
    tpot = np.array([(r.finish - r.first_token) * 1e3 / (r.output - 1) for r in done if r.output > 1])
    gpus = sum(p.gpus for p in sc.deployment.pools().values())
    price = cost.gpu_hour_usd(sc)
    slo_ok = sum(
        1
        for r in done
        if (r.first_token - r.arrival) * 1e3 <= sc.slo.ttft_p95_ms
        and (r.output <= 1 or (r.finish - r.first_token) * 1e3 / (r.output - 1) <= sc.slo.tpot_p95_ms)
    )
    entry = run.pools[run.entry].instances
    lookups = sum(i.lookup_tokens for i in entry)
    hits = sum(i.hit_tokens for i in entry)
    counters = [i.counters for p in run.pools.values() for i in p.instances]
    decode = run.pools["decode"].instances
    full = {
        "duration_s": round(span, 6),
        **service(ttft, tpot, e2e, out_tok, in_tok, span, gpus, price, round(slo_ok / len(recs), 4) if recs else None),
    }
    window = windowed(run, end, gpus, price) if recs else _no_window(full)
    out = {
        "requests": len(recs),
        "completed": len(done),
        "rejected": sum(1 for r in recs if r.status == "rejected"),
        # prompt_over_prefill_kv: the prompt exceeds an empty prefill instance's KV (colocated: the instance's);
        # request_over_decode_kv: prompt + output exceed an empty decode instance's KV
        "rejected_by_reason": dict(sorted(Counter(r.reason for r in recs if r.status == "rejected").items())),
        "aborted": sum(1 for r in recs if r.status == "aborted"),
        "aborted_by_reason": dict(sorted(Counter(r.reason for r in recs if r.status == "aborted").items())),
        "unfinished": sum(1 for r in recs if r.status == "pending"),
        "preempted": sum(c.preempted for c in counters),
        "duration_s": round(span, 6),
        "output_tokens": out_tok,
        "input_tokens": in_tok,
        **window,
        "max_running": max(i.max_batch for i in decode),
        "kv_occupancy": _occupancy(run, end),
        "prefix_hit_rate": round(hits / lookups, 4) if lookups else 0.0,
        # prompt tokens a decode instance already held (session affinity): their KV was not transferred
        "transfer_tokens_saved": sum(r.cached_tokens for r in recs),
        "gpus": gpus,
        "utilization": {
            name: round(sum(i.busy_s for i in p.instances) / (len(p.instances) * span), 4)
            for name, p in run.pools.items()
        },
        "full_run": {k: full[k] for k in FULL_RUN},
    }
    if sc.traffic.retries.max:  # clients retry failed requests: what the retries cost
        out["retries"] = retry_metrics(recs, sc.traffic.retries.on)
    # DP attention: how unevenly the ranks were loaded (absent without it, so other Results keep their bytes)
    ranked = {name: rank_imbalance(p, end) for name, p in run.pools.items() if p.pool.dp > 1}
    if ranked:
        out["dp_ranks"] = ranked
    if sc.mixed_hardware:  # pools of different GPUs: what each pool's GPUs cost
        out["cost_by_pool"] = cost.by_pool(sc, out)
    return out


def _no_window(full: dict[str, Any]) -> dict[str, Any]:
    """A run no request arrived in: its (empty) figures, and no window."""
    figures = {k: v for k, v in full.items() if k != "duration_s"}
    state = {"reached": False, "why": "no request arrived", "warmup_cut_s": 0.0, "method": METHOD}
    return {"window_s": [0.0, 0.0], "steady_state": state, **figures, "ci95": None}


def build_integrity(run: RunRecord) -> dict[str, Any]:
    counters = [i.counters for p in run.pools.values() for i in p.instances]
    injected = run.injected
    return {
        "enabled": run.scenario.integrity.enabled,
        "checked_pages": sum(c.checked_pages for c in counters),
        "injected": sum(injected.values()) if injected else 0,
        "injected_by_kind": dict(sorted(injected.items())) if injected else {},
        "detected": sum(c.detected for c in counters),
        "false_positives": sum(c.false_positives for c in counters),
        "aborted_requests": sum(c.aborted for c in counters),
        "tokens_lost": sum(c.tokens_lost for c in counters),
        # each abort: which request, which table slot and page failed, how, and the fault planted there
        "events": sorted(
            (
                {"request": e.request, "slot": e.slot, "page": e.page, "kind": e.kind, "injected": e.injected}
                for c in counters
                for e in c.aborts
            ),
            key=lambda e: e["request"],
        )[:EVENTS_KEPT],
    }


def rank_imbalance(pool: PoolRun, end: float) -> dict[str, float | None]:
    """How unevenly a DP pool's ranks were loaded: the busiest rank's decode batch over the mean rank's (summed
    over steps), and the fullest rank's KV pages over the mean rank's (integrated over time); 1.0 is even."""
    insts: tuple[InstanceRun, ...] = pool.instances
    busiest = sum(i.busiest_seq_steps for i in insts)
    total = sum(i.decode_seq_steps for i in insts)
    dp = pool.pool.dp
    kv_max = kv_mean = 0.0
    peak = 0.0
    for inst in insts:
        t = np.concatenate([r.log.t for r in inst.ranks])
        d = np.concatenate([r.log.d for r in inst.ranks])
        rank = np.concatenate([np.full(len(r.log.t), j) for j, r in enumerate(inst.ranks)])
        if not t.size:
            continue
        order = np.argsort(t, kind="stable")
        ts = t[order]
        onehot = np.zeros((t.size, dp), dtype=np.int64)
        np.add.at(onehot, (np.arange(t.size), rank[order]), d[order])
        last = np.flatnonzero(np.append(ts[1:] != ts[:-1], True))  # each time's last change: same-time changes
        held = np.cumsum(onehot, axis=0)[last]  # summed first; pages per rank from each time on
        dt = np.diff(np.clip(np.append(ts[last], end), 0.0, end))
        kv_max += float((held.max(axis=1) * dt).sum())
        kv_mean += float((held.mean(axis=1) * dt).sum())
        peak = max(peak, float(held.max()) / inst.ranks[0].log.pages)
    return {
        "ranks": dp,
        "batch_max_over_mean": round(busiest * dp / total, 4) if total else None,  # None: no decode steps
        "kv_max_over_mean": round(kv_max / kv_mean, 4) if kv_mean else 1.0,
        "kv_peak_rank_occupancy": round(peak, 4),
    }
