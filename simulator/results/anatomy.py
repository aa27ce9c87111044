"""Step anatomy: what one representative step of each pool spends its time on, and where the times came from.

Results carry it so a report can say *why* — e.g. an INT4 prefill chunk is slower than FP8 because its GEMMs
run BF16 tensor cores after dequantization while FP8 runs FP8 tensor cores at twice the rate.
"""

from __future__ import annotations

from typing import Any

from simulator.pricing.costmodel import CostModel
from simulator.results.record import PoolRun, RunRecord

TOP = 6  # families listed per step; the rest are summed as "other"


def _families(by_family: dict[str, float]) -> dict[str, float]:
    ranked = sorted(by_family.items(), key=lambda kv: -kv[1])
    out = {k: round(v * 1e3, 4) for k, v in ranked[:TOP]}
    rest = sum(v for _, v in ranked[TOP:])
    if rest:
        out["other"] = round(rest * 1e3, 4)
    return out


def step_anatomy(run: RunRecord) -> dict[str, Any]:
    """Per pool: a prefill chunk (chunk_size tokens, or the mean prompt if shorter) and, where the pool decodes,
    a decode step at the mean batch and mean context it actually ran — each as milliseconds by op family, priced
    by a cost model of the pool on the run's own profile."""
    out: dict[str, Any] = {}
    sc, recs = run.scenario, run.requests
    mean_prompt = int(sum(r.prompt for r in recs) / len(recs)) if recs else 1
    mean_output = int(sum(r.output for r in recs) / len(recs)) if recs else 1
    for name, pr in run.pools.items():
        insts, pool = pr.instances, pr.pool
        cost = CostModel(sc.model, sc.hardware_of(pool), pool, run.profile.for_pool(sc, pool), sc.integrity.enabled)
        entry: dict[str, Any] = {}
        if name == run.entry:  # the pool that prefills new requests (a disaggregated decode pool only recomputes)
            chunk = max(1, min(pool.chunk_size, pool.max_batch_tokens, mean_prompt))
            # Under DP attention: a step with one such chunk on every DP rank (the spread the pricing assumes)
            ranks = max(1, min(pool.dp, pool.max_batch_tokens // chunk))
            fam = cost.breakdown(0, 0, 0, [(chunk, 0)] * ranks)
            entry["prefill_chunk"] = {
                "tokens": chunk,
                "ms": round(sum(fam.values()) * 1e3, 4),
                "by_family": _families(fam),
            }
            if ranks > 1:
                entry["prefill_chunk"]["dp_ranks"] = ranks
            if "alltoall" in fam:
                entry["prefill_chunk"]["alltoall_ms"] = round(fam["alltoall"] * 1e3, 4)
                if pool.two_batch_overlap:  # the steps hid tbo_hidden_share of the shorter part, not shown here
                    entry["prefill_chunk"]["two_batch_overlap"] = True
        steps = sum(i.steps for i in insts)
        if name == "decode" and steps:
            batch = max(1, round(sum(i.decode_seq_steps for i in insts) / steps))
            ctx = batch * (mean_prompt + mean_output // 2)
            pages = batch * -(-(mean_prompt + mean_output // 2) // pool.page_size)
            fam = cost.breakdown(batch, ctx, pages)
            entry["decode_step"] = {
                "batch": batch,
                "context": mean_prompt + mean_output // 2,
                "ms": round(sum(fam.values()) * 1e3, 4),
                "by_family": _families(fam),
            }
            if "alltoall" in fam:  # DP attention + wide EP: the dispatch and combine of every MoE layer
                entry["decode_step"]["alltoall_ms"] = round(fam["alltoall"] * 1e3, 4)
                if pool.two_batch_overlap:
                    entry["decode_step"]["two_batch_overlap"] = True
            if pool.speculative is not None:
                entry["speculative"] = _speculative(pr, cost, batch, mean_prompt + mean_output // 2, pages)

        names = {"table": "profile_table", "fallback": "roofline", "collective": "collective_model"}
        entry["priced_from"] = {names[k]: round(v, 4) for k, v in pr.priced_from.items()}
        out[name] = entry
    first = out["prefill"] if "prefill" in out else out["decode"]
    chunk = first["prefill_chunk"]["by_family"]
    out["summary"] = {
        "prefill_chunk_ms": first["prefill_chunk"]["ms"],
        "prefill_chunk_gemm_ms": round(chunk.get("gemm", 0.0) + chunk.get("moe_gemm", 0.0), 4),
        "decode_step_ms": out["decode"].get("decode_step", {}).get("ms"),
    }
    return out


def _speculative(pr: PoolRun, cost: CostModel, batch: int, context: int, pages: int) -> dict[str, Any]:
    """One verify step and its k draft steps at the decode step's batch and context, apart (the decode step above is
    the pair), the tokens a verify step gave in the run (drawn per sequence and step; the acceptance's expectation
    beside it) and what that makes the price of a token."""
    spec = pr.pool.speculative
    assert spec is not None
    steps = pr.verify_seq_steps
    accepted = pr.accepted_tokens / steps if steps else spec.tokens_per_step
    verify_list, draft_list = cost.speculative_ops(batch, context, pages if cost.integrity else 0)
    verify, draft = cost.ops_breakdown(verify_list), cost.ops_breakdown(draft_list)
    v, d = sum(verify.values()), sum(draft.values())
    return {
        "method": spec.method,
        "draft_tokens": spec.draft_tokens,
        "tokens_per_step": round(spec.tokens_per_step, 4),
        "accepted_per_step": round(accepted, 4),
        "verify_ms": round(v * 1e3, 4),
        "verify_by_family": _families(verify),
        "draft_ms": round(d * 1e3, 4),
        "draft_by_family": _families(draft),
        "ms_per_accepted_token": round((v + d) / accepted * 1e3, 4),
    }
