"""Cost per million tokens on an honest basis: output tokens where requests generate, all tokens where they don't.

A prefill study's requests produce one output token each, so its cost per million *output* tokens is a
thousand times what serving its prompts costs; such a study is priced per million input + output tokens.
Every figure carries its basis.
"""

from __future__ import annotations

from typing import Any

OUTPUT = "output tokens"
ALL = "input+output tokens"
GENERATING = 2.0  # mean output tokens per completed request from which a study counts as generating


def generating(metrics: dict[str, Any]) -> bool:
    """True when the requests generate answers (mean output of at least two tokens), not only prefill."""
    return bool(metrics["completed"]) and metrics["output_tokens"] / metrics["completed"] >= GENERATING


def per_mtok(metrics: dict[str, Any], gpu_hour_usd: float) -> dict[str, Any]:
    """`{"cost_per_mtok_usd", "cost_basis", "cost_per_m_output_tok_usd", "cost_per_m_total_tok_usd"}`: the fleet's
    price per second over the tokens it serves per second, as the Result reads them (its steady-state window)."""
    usd_per_s = metrics["gpus"] * gpu_hour_usd / 3600.0
    out = metrics["output_tokens_per_s"]
    total = out + metrics["input_tokens_per_s"]
    per_out = round(usd_per_s / (out / 1e6), 4) if out else None
    per_all = round(usd_per_s / (total / 1e6), 4) if total else None
    gen = generating(metrics)
    return {
        "cost_per_mtok_usd": per_out if gen else per_all,
        "cost_basis": OUTPUT if gen else ALL,
        "cost_per_m_output_tok_usd": per_out,
        "cost_per_m_total_tok_usd": per_all,
    }
