"""`python -m kernels.executor.gpu_replay` (`make gpu-replay` on an H200): the kernel tests and the measured
profile (`kernels.gpu_check`, its budget cut to GPU_CHECK_BUDGET_S, default 150 s), then `phaseplan compare` of
the Kimi K2.6 KV-format study at concurrency 1, 8, 16, 32, 64 for BF16 and FP8 caches, priced by that profile,
each point replayed within REPLAY_BUDGET_S (default 12 s) of device time with 2 × concurrency requests. One
process builds the TP8 rank (~70 GiB with INT4 experts) once and keeps it for every point. Writes
`h200.json`, `gpu_check.log`, `replay-compare.json` and `gpu_replay.log` under $OUT (default out/); aims at
8 minutes in all.

Prepared, not yet run: no GPU was lent while it was written.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

STUDY = Path(__file__).resolve().parents[2] / "scenarios" / "kimi-k2.6-kv-formats.yaml"
CONCURRENCY = (1, 8, 16, 32, 64)
KV = ("bf16", "fp8_e4m3")


def main() -> int:
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    log = open(out / "gpu_replay.log", "w")  # noqa: SIM115 - closed at the end; everything is mirrored there

    def say(line: str) -> None:
        print(line, flush=True)
        log.write(line + "\n")
        log.flush()

    env = {**os.environ, "OUT": str(out), "GPU_CHECK_BUDGET_S": os.environ.get("GPU_CHECK_BUDGET_S", "150")}
    check = subprocess.run([sys.executable, "-m", "kernels.gpu_check"], env=env, timeout=420)
    say(f"gpu_check: exit {check.returncode} ({time.monotonic() - start:.0f} s); profile {out / 'h200.json'}")

    import torch

    from kernels.executor.compare import compare
    from simulator.config import loader

    budget = float(os.environ.get("REPLAY_BUDGET_S", "12"))
    shared: dict = {}
    points = []
    for kv in KV:
        for conc in CONCURRENCY:
            sets = (
                f"deployment.decode.kv_cache={kv}",
                f"traffic.concurrency={conc}",
                f"traffic.requests={max(4, 2 * conc)}",
            )
            sc, _ = loader.load(STUDY, sets)
            t0 = time.monotonic()
            try:
                doc = compare(sc, STUDY.parent, "cuda", str((out / "h200.json").resolve()), budget, shared=shared)
            except Exception as exc:  # noqa: BLE001 - one failing point must not lose the others
                say(f"kv={kv} concurrency={conc}: FAILED {exc!r}"[:400])
                continue
            finally:
                gc.collect()
                torch.cuda.empty_cache()
            m = doc["metrics"]
            say(
                f"kv={kv:9} conc={conc:3}: throughput sim {m['output_tokens_per_s']['sim']:.1f} replay "
                f"{m['output_tokens_per_s']['replay']:.1f} ({m['output_tokens_per_s']['rel_error']:+.1%}), "
                f"tpot p50 sim {m['tpot_ms.p50']['sim']} replay {m['tpot_ms.p50']['replay']} "
                f"({time.monotonic() - t0:.0f} s)"
            )
            points.append({"kv_cache": kv, "concurrency": conc, **doc})
    (out / "replay-compare.json").write_text(json.dumps(points, indent=1) + "\n")
    say(f"{len(points)}/{len(KV) * len(CONCURRENCY)} points compared; {time.monotonic() - start:.0f} s in all")
    log.close()
    return 0 if check.returncode == 0 and len(points) == len(KV) * len(CONCURRENCY) else 1


if __name__ == "__main__":
    sys.exit(main())
