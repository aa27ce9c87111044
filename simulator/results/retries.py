"""What clients' retries of failed requests cost (`traffic.retries`): the retry storm an operator sees before enabling
a check that aborts requests everywhere.

A retried request is one record from its first send: it counts once in requests, completions and goodput (SLO
attainment), and its latencies run from that first send. Its failed attempts are counted here, with the work they
did that is done again: prompt tokens prefilled, output tokens generated, and the prefill seconds of those prompts
priced on an idle instance of the entry pool.
"""

from __future__ import annotations

from typing import Any

from simulator.results.record import RequestRecord


def retry_metrics(recs: list[RequestRecord], on: list[str]) -> dict[str, Any]:
    retried = [r for r in recs if r.retries]
    failed = [r for r in recs if r.status in ("aborted", "rejected")]
    return {
        "retries": sum(r.retries for r in retried),
        "retried_requests": len(retried),
        "recovered": sum(1 for r in retried if r.status == "completed"),
        # failed for good: out of retries, or failed in a way not retried (`on`)
        "failed": len(failed),
        "retried_on": list(on),
        "tokens_recomputed": {
            "prompt": sum(r.retry_prompt for r in retried),
            "output": sum(r.retry_output for r in retried),
        },
        "prefill_s": round(sum(r.retry_prefill_s for r in retried), 6),
    }


def retry_line(r: dict[str, Any]) -> str:
    """The report's line: how many retries, what became of them, the work done again."""
    tok = r["tokens_recomputed"]
    return (
        f"{r['retries']:,} of {r['retried_requests']:,} requests ({r['recovered']:,} then completed, {r['failed']:,} "
        f"failed for good); done again: {tok['prompt']:,} prompt + {tok['output']:,} output tokens, "
        f"{r['prefill_s']:,.2f} s of prefill"
    )
