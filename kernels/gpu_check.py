"""`python -m kernels.gpu_check` (`make gpu-check` on an H200): test, measure ceilings, profile, report.

Runs the kernel tests on the GPU, then profiles exactly the shapes `phaseplan profile` does (the bundled
scenarios' op lists, `kernels.profiler.collect_shapes`), coarse points first so a run cut off by its time
budget still spans every table, prints achieved GB/s and TFLOP/s as shares of the measured ceilings, and writes
`h200.json` (docs/ops.md format) and `gpu_check.log` to $OUT (default out/). The whole run stops measuring at
GPU_CHECK_BUDGET_S seconds (default 280; shapes left are counted as `unmeasured`); GPU_CHECK_QUICK=1 profiles
only the quick set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from kernels.measure import work
from kernels.profiler import collect_shapes, flat, measured_profile
from simulator.atomic import write_atomic


def _shapes(quick: bool) -> list[tuple[str, dict]]:
    """The quick set (every table's end points) first, then the rest of the full set."""
    order = flat(collect_shapes(quick=True)) + ([] if quick else flat(collect_shapes()))
    seen: set[tuple[str, str]] = set()
    out = []
    for family, shape in order:
        key = (family, json.dumps(shape, sort_keys=True))
        if key not in seen:
            seen.add(key)
            out.append((family, shape))
    return out


def main() -> int:
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "gpu_check.log", "w")  # noqa: SIM115 - closed at the end; everything is mirrored there

    def say(line: str) -> None:
        print(line, flush=True)
        log.write(line + "\n")

    start = time.monotonic()
    budget_s = float(os.environ.get("GPU_CHECK_BUDGET_S", "280"))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tests = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *sorted(map(str, Path("tests").glob("test_kernel*.py"))),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    say(tests.stdout[-4000:] + tests.stderr[-2000:])
    say(f"kernel tests: {'passed' if tests.returncode == 0 else 'FAILED'} ({time.monotonic() - start:.0f} s)")
    shapes = _shapes(os.environ.get("GPU_CHECK_QUICK") == "1")
    say(f"profiling {len(shapes)} shapes until {budget_s:.0f} s")
    profile = measured_profile(device, shapes, deadline=start + budget_s)
    write_atomic(out / "h200.json", json.dumps(profile, indent=1) + "\n")
    ceil = profile["ceilings"]
    say(f"device {profile['device']}: copy {ceil['copy_gbs']:.0f} GB/s, bf16 matmul {ceil['bf16_tflops']:.1f} TFLOP/s")
    say(
        f"skipped {json.dumps(profile['skipped'])}; failed {len(profile['failed'])}; "
        f"left unmeasured {profile['unmeasured']}; {time.monotonic() - start:.0f} s in all"
    )
    for f in profile["failed"]:
        say(f"{f['family']} {f['shape']}: FAILED {f['error']}")
    rows = []
    for family, entries in profile["kernels"].items():
        for e in entries:
            shape, us = e["shape"], e["median_us"]
            nbytes, flops = work(family, shape)
            gbs, tflops = nbytes / us / 1e3, flops / us / 1e6
            rows.append((family, shape, us, gbs, gbs / ceil["copy_gbs"], tflops, tflops / ceil["bf16_tflops"]))
    say(f"{'family':22} {'shape':70} {'us':>9} {'GB/s':>7} {'%copy':>6} {'TFLOP/s':>8} {'%bf16':>6}")
    for family, shape, us, gbs, bw_share, tflops, mm_share in rows:
        short = ",".join(f"{k}={v}" for k, v in shape.items())
        say(
            f"{family:22} {short[:70]:70} {us:9.1f} {gbs:7.0f} {100 * bw_share:5.0f}% {tflops:8.1f} "
            f"{100 * mm_share:5.0f}%"
        )
    log.close()
    return 0 if tests.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
