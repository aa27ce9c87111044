"""`python -m kernels.gpu_check` (`make gpu-check` on an H200): test, measure ceilings, time, report.

Runs the kernel tests on the GPU, measures copy bandwidth and the BF16 matmul rate, times a representative set
of op shapes, prints achieved GB/s and TFLOP/s as shares of those ceilings, and writes `gpu_check.log` and
`profile.json` (docs/ops.md format) to $OUT (default out/). Sized to finish well under 8 minutes.
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
import triton

from kernels.measure import ceilings, time_op, work

_DEFAULT_SHAPES: list[tuple[str, dict]] = [
    *[
        ("decode_attention_mla", dict(heads=h, batch=b, context=4096, kv=kv, layout=lay, page_size=64))
        for h, b in ((8, 16), (8, 64), (64, 16))
        for kv, lay in (("bf16", "flat"), ("fp8_e4m3", "flat"), ("fp8_e4m3", "tiled"))
    ],
    *[
        ("decode_attention_gqa", dict(q_heads=12, kv_heads=1, head_dim=128, batch=b, context=4096, kv=kv, page_size=16))
        for b in (16, 64)
        for kv in ("bf16", "fp8_e4m3")
    ],
    ("prefill_attention", dict(heads=16, qk_dim=192, v_dim=128, tokens=4096, context=4096)),
    *[
        ("gemm", dict(m=m, n=4096, k=7168, weights=w, group=32 if w == "int4" else 0))
        for m in (1, 16, 2048)
        for w in ("bf16", "fp8", "int4")
    ],
    *[
        ("moe_gemm", dict(tokens=t, experts=e, n=4096, k=7168, weights=w, group=32 if w == "int4" else 0))
        for t, e in ((512, 256),)
        for w in ("bf16", "int4")
    ],
    ("kv_write", dict(tokens=64, width=576, kv="fp8_e4m3")),
    ("integrity_check", dict(pages=64 * 64)),
    ("elementwise", dict(bytes=256 << 20)),
]


def _shapes() -> list[tuple[str, dict]]:
    """`kernels.profile_shapes.default_shapes()` when the lead's op-list module exists, else a fixed set."""
    try:
        return list(importlib.import_module("kernels.profile_shapes").default_shapes())
    except ModuleNotFoundError:
        return _DEFAULT_SHAPES


def _git_commit() -> str:
    res = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)
    return res.stdout.strip() or "unknown"


def main() -> int:
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "gpu_check.log", "w")  # noqa: SIM115 - closed at the end; everything is mirrored there

    def say(line: str) -> None:
        print(line, flush=True)
        log.write(line + "\n")

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
    say(f"kernel tests: {'passed' if tests.returncode == 0 else 'FAILED'}")
    ceil = ceilings(device)
    say(f"device {device}: copy {ceil['copy_gbs']:.0f} GB/s, bf16 matmul {ceil['bf16_tflops']:.1f} TFLOP/s")
    kernels: dict[str, list[dict]] = {}
    rows = []
    for family, shape in _shapes():
        try:
            t = time_op(family, shape, device)
        except Exception as exc:  # noqa: BLE001 - one failing shape must not hide the others' numbers
            say(f"{family} {shape}: FAILED {exc!r}")
            continue
        kernels.setdefault(family, []).append({"shape": shape, **t})
        nbytes, flops = work(family, shape)
        gbs, tflops = nbytes / t["median_us"] / 1e3, flops / t["median_us"] / 1e6
        rows.append((family, shape, t["median_us"], gbs, gbs / ceil["copy_gbs"], tflops, tflops / ceil["bf16_tflops"]))
    profile = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "source": "measured",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "git_commit": _git_commit(),
        "versions": {"torch": torch.__version__, "triton": triton.__version__, "driver": torch.version.cuda or "none"},
        "ceilings": ceil,
        "kernels": kernels,
    }
    (out / "profile.json").write_text(json.dumps(profile, indent=1))
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
