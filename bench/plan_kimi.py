"""Benchmark: issue 24's question answered by `plan`'s default search, timed end to end.

"How many H200s for Kimi K2.6 at 5 req/s, 8K-token prompts, 1K-token answers, p95 TTFT < 2 s, p95 TPOT < 50 ms?"
(bench/kimi-5rps.yaml, no --search). Runs the CLI as a user would and prints the wall time, the answer and how
many candidates were pruned before simulating against how many were simulated. Every figure the plan gives is
modeled (the fitted H200 roofline); the seconds are this machine's.

    .venv/bin/python bench/plan_kimi.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    cmd = [str(Path(sys.executable).parent / "phaseplan"), "plan", str(ROOT / "bench" / "kimi-5rps.yaml")]
    cmd += ["--rate", "5", "--slo", "ttft_p95_ms=2000,tpot_p95_ms=50", "--json"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT).stdout
    wall = time.perf_counter() - t0
    p = json.loads(out)
    w = p["winner"]
    print(f"wall {wall:.1f} s for: {' '.join(cmd[1:])}")
    print(f"answer: {w['layout'] if w else 'none'}")
    if w:
        m = w["metrics"]
        print(
            f"  TTFT p95 {m['ttft_ms']['p95']:,.0f} ms, TPOT p95 {m['tpot_ms']['p95']:.1f} ms, "
            f"${w['cost_per_mtok_usd']} per M output tokens"
        )
    print(
        f"candidates {p['candidates']:,}: pruned before simulating {p['pruned_before_simulating']:,}, "
        f"simulated {p['simulated']} ({p['stopped_early']} stopped early), trials run {p['simulations_run']}, "
        f"not needed {p['not_simulated']:,}; widened: {p['widened'] or 'nothing'}"
    )


if __name__ == "__main__":
    main()
