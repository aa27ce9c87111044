"""What speculative decoding buys a decode pool, by how full it is: simulated, not a test.

The wide-EP DeepSeek-V3 study (`scenarios/deepseek-v3-wide-ep.yaml`) run closed loop at a fixed number of
clients per DP rank, with MTP at each acceptance and without speculation. Every verify step's accepted tokens
are drawn per sequence from the seed, so a row is what the simulated pool produced, not τ times a step's price.
The prefill pool is widened (`--prefill-instances`) so that decode, not prefill, sets the pace; the table prints
output tokens/s, TPOT p50 and the ratio to no speculation at the same load.

    .venv/bin/python bench/speculation.py [--per-rank 4 32 128] [--acceptance 0.85 0.6] [--seconds 30]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.config import loader  # noqa: E402
from simulator.engine.run import simulate  # noqa: E402

SCENARIO = ROOT / "scenarios" / "deepseek-v3-wide-ep.yaml"


def run(per_rank: int, acceptance: float | None, seconds: float, prefill: int) -> dict[str, float]:
    spec = "null" if acceptance is None else f"{{method: mtp, draft_tokens: 1, acceptance: [{acceptance}]}}"
    sc, _ = loader.load(
        SCENARIO,
        (
            f"deployment.decode.speculative={spec}",
            "traffic.rate=null",
            f"traffic.concurrency={per_rank * 32}",
            f"traffic.duration_s={seconds}",
            f"deployment.prefill.instances={prefill}",
            "sweep={}",
        ),
    )
    m = simulate(sc, SCENARIO.parent)[0]["metrics"]
    return {"tok_s": m["output_tokens_per_s"], "tpot_p50": m["tpot_ms"]["p50"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-rank", type=int, nargs="+", default=[4, 32, 128], help="clients per DP rank (32 ranks)")
    ap.add_argument("--acceptance", type=float, nargs="+", default=[0.85, 0.6], help="MTP's second-token rate")
    ap.add_argument("--seconds", type=float, default=30.0, help="simulated seconds of traffic per run")
    ap.add_argument("--prefill-instances", type=int, default=4, help="32-GPU prefill instances")
    a = ap.parse_args()
    print(f"{'clients/rank':>12} {'speculation':>16} {'output tok/s':>12} {'TPOT p50 ms':>12} {'vs none':>8}")
    for c in a.per_rank:
        base = run(c, None, a.seconds, a.prefill_instances)
        print(f"{c:>12} {'none':>16} {base['tok_s']:>12,.1f} {base['tpot_p50']:>12,.1f} {'1.00x':>8}")
        for p in a.acceptance:
            r = run(c, p, a.seconds, a.prefill_instances)
            print(
                f"{c:>12} {f'MTP k=1 p={p:g}':>16} {r['tok_s']:>12,.1f} {r['tpot_p50']:>12,.1f} "
                f"{r['tok_s'] / base['tok_s']:>7.2f}x"
            )
    print("MODELED: the scenario's profile (see its `profile`); accepted tokens drawn per sequence and step")


if __name__ == "__main__":
    main()
