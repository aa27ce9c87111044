"""A deployment in one line, the way operators say it: `4 × TP8 prefill (INT4, BF16 KV) + 3 × TP8 decode
(INT4, FP8 KV) = 56 H200`. The plan's winner, runners-up and max-rate's configuration are all printed this way,
so a person can compare them at a glance and type them into an engine's launch flags."""

from __future__ import annotations

from simulator.config.scenario import Pool, Scenario

WEIGHTS = {"bf16": "BF16", "fp8": "FP8", "int4": "INT4", "w4a8": "W4A8", "nvfp4": "NVFP4", "mxfp4": "MXFP4"}
KV = {"bf16": "BF16 KV", "fp8_e4m3": "FP8 KV"}


def parallel(pool: Pool) -> str:
    """One instance's GPUs and how they split: `TP8`, `TP8 EP8`, `TP16 DP16 EP16 over 2 nodes`."""
    parts = [f"TP{pool.tp}"]
    if pool.dp > 1:
        parts.append(f"DP{pool.dp}")
    if pool.ep > 1:
        parts.append(f"EP{pool.ep}")
    text = " ".join(parts)
    return f"{text} over {pool.nodes} nodes" if pool.nodes > 1 else text


def formats(pool: Pool) -> str:
    """What the instance computes in: `INT4, FP8 KV` (and speculative decoding where it drafts)."""
    out = [WEIGHTS[pool.weights], KV[pool.kv_cache]]
    spec = pool.speculative
    if spec is not None:
        out.append(f"{spec.method.upper()} {spec.draft_tokens} draft token{'s' if spec.draft_tokens > 1 else ''}")
    return ", ".join(out)


def pool_line(role: str, pool: Pool) -> str:
    return f"{pool.instances} × {parallel(pool)} {role} ({formats(pool)})"


def one_line(sc: Scenario) -> str:
    """The whole deployment: each pool, then the GPU count of each kind (`= 16 H100 + 16 H200` where pools run on
    different GPUs)."""
    pools = sc.deployment.pools()
    kinds: dict[str, int] = {}
    for pool in pools.values():
        name = sc.hardware_of(pool).name.upper()
        kinds[name] = kinds.get(name, 0) + pool.gpus
    if sc.deployment.mode == "colocated":
        text = pool_line("colocated", pools["decode"])
    else:
        text = " + ".join(pool_line(name, pool) for name, pool in pools.items())
    return f"{text} = " + " + ".join(f"{n} {kind}" for kind, n in kinds.items())
