"""Side by side: AIConfigurator's own static estimate against phaseplan's step times on the same cases.

Not a test: a benchmark of the cost model's bias (issue 11). For each case (one TP8 instance on 8×H200) it
prints, per decode batch at the case's context and for one 8,192-token prefill:

* AIConfigurator 0.12.0's `cli estimate --estimate-mode static` (SGLang backend): TPOT, or TTFT for the
  prefill. Its TPOT averages decode steps over contexts ISL+1 … ISL+OSL, so phaseplan is priced at
  ISL + OSL/2. Run with `--aiconfigurator BIN` (the `aiconfigurator` package's CLI) to (re)compute them; each
  answer is kept in bench/aiconfigurator-estimates.json with its command line, so the table can be redrawn
  without the tool. Those are AIConfigurator's modeled numbers from its measured tables, not measurements.
* phaseplan priced with each `--profile` (default: the imported profiles/h200-sglang.json and the roofline),
  and the ratio to AIConfigurator.

    .venv/bin/python bench/calibration.py [--aiconfigurator PATH] [--profile P ...] [--detail]
                                          [--fp8-kv-read-factor F] [--fuse-elementwise]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.config import presets  # noqa: E402
from simulator.config.scenario import Pool  # noqa: E402
from simulator.config.specs import HardwareSpec, ModelSpec  # noqa: E402
from simulator.pricing.costmodel import CostModel  # noqa: E402
from simulator.pricing.profile import Profile  # noqa: E402

CACHE = ROOT / "bench" / "aiconfigurator-estimates.json"
BATCHES = (1, 8, 16, 32, 64)
OSL = 1024
PREFILL = 8192
COMMON = (
    "cli estimate --system h200_sxm --estimate-mode static --tp 8 --fmha-quant-mode bfloat16 --detail time "
    "--no-color --backend sglang --moe-tp-size 8 --moe-ep-size 1"
)
KV_AIC = {"bf16": "bfloat16", "fp8_e4m3": "fp8"}


@dataclass(frozen=True)
class Case:
    label: str
    preset: str
    weights: str
    kv: str
    isl: int
    aic_model: str  # AIConfigurator's model and quantization arguments

    def pool(self, fp8_kv_read_factor: float | None = None, fuse_elementwise: bool = False) -> Pool:
        # SGLang's FP8 MLA cache is the flat e4m3 latent; page size does not key either side's tables. Experts
        # are touched as AIConfigurator routes them for DeepSeek-family models (power law, alpha 1.01).
        return Pool(
            tp=8,
            weights=self.weights,
            kv_cache=self.kv,
            kv_layout="flat",
            fp8_kv_read_factor=fp8_kv_read_factor,
            moe_routing="power_law",
            moe_routing_alpha=1.01,
            fuse_elementwise=fuse_elementwise,
        )


DSV3 = "--model deepseek-ai/DeepSeek-V3 --gemm-quant-mode fp8_block --moe-quant-mode fp8_block"
KIMI = "--model moonshotai/Kimi-K2.5 --gemm-quant-mode bfloat16 --moe-quant-mode int4_wo"
LLAMA = "--model meta-llama/Meta-Llama-3.1-70B --gemm-quant-mode fp8"
CASES = (
    Case("DeepSeek-V3 FP8-block, KV bf16", "deepseek-v3", "fp8", "bf16", 16384, DSV3),
    Case("DeepSeek-V3 FP8-block, KV fp8", "deepseek-v3", "fp8", "fp8_e4m3", 16384, DSV3),
    Case("Kimi K2.6 INT4 experts, KV bf16", "kimi-k2.6", "int4", "bf16", 16384, KIMI),
    Case("Kimi K2.6 INT4 experts, KV fp8", "kimi-k2.6", "int4", "fp8_e4m3", 16384, KIMI),
    Case("Llama-3.1-70B FP8, KV bf16", "llama-3.1-70b", "fp8", "bf16", 8192, LLAMA),
)


def aic_command(case: Case, batch: int, isl: int, osl: int, kv: str) -> str:
    return f"{COMMON} {case.aic_model} --kvcache-quant-mode {KV_AIC[kv]} --batch-size {batch} --isl {isl} --osl {osl}"


def aic_estimate(binary: str | None, cache: dict[str, dict[str, float]], command: str) -> dict[str, float] | None:
    """TTFT and TPOT (ms) of one static estimate: computed when a binary is given, else from the cache."""
    if binary:
        out = subprocess.run([binary, *command.split()], capture_output=True, text=True, timeout=600).stdout
        found = {k: float(v.replace(",", "")) for k, v in re.findall(r"^\s+(TTFT|TPOT):\s+([\d.,]+) ms", out, re.M)}
        if {"TTFT", "TPOT"} <= found.keys():
            cache[command] = found
            CACHE.write_text(json.dumps(dict(sorted(cache.items())), indent=1) + "\n")
    return cache.get(command)


def phaseplan_ms(cost: CostModel, batch: int, context: int, page_size: int) -> float:
    """One decode step of `batch` sequences at `context` tokens each, or (batch 0) one prefill of `context`."""
    if batch == 0:
        return cost.step_s(0, 0, 0, [(context, 0)]) * 1e3
    return cost.step_s(batch, batch * context, batch * -(-context // page_size), []) * 1e3


def top(breakdown: dict[str, float], n: int = 4) -> str:
    return ", ".join(f"{f} {s * 1e3:.2f}" for f, s in list(breakdown.items())[:n])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aiconfigurator", help="the aiconfigurator CLI (re-runs its estimates into the cache)")
    ap.add_argument("--profile", action="append", help="profile JSON or 'roofline' (repeatable)")
    ap.add_argument("--detail", action="store_true", help="phaseplan's largest op families per row (ms)")
    ap.add_argument("--fp8-kv-read-factor", type=float, help="the pools' fp8_kv_read_factor (default: the roofline's)")
    ap.add_argument(
        "--fuse-elementwise",
        action="store_true",
        help="fuse_elementwise on the pools: small kernels counted as AIConfigurator counts them",
    )
    args = ap.parse_args()
    profiles = args.profile or [str(ROOT / "profiles" / "h200-sglang.json"), "roofline"]
    hw = HardwareSpec(**presets.hardware("h200"))
    loaded = [(p, Profile.roofline(hw) if p == "roofline" else Profile.load(p)) for p in profiles]
    cache = json.loads(CACHE.read_text()) if CACHE.is_file() else {}
    names = [p if p == "roofline" else Path(p).name for p in profiles]
    print("| case | step | AIC sglang ms | " + " | ".join(f"{n} ms | ratio" for n in names) + " |")
    print("|---|---|---:|" + "---:|---:|" * len(names))
    for case in CASES:
        model = ModelSpec(**presets.model(case.preset))
        pool = case.pool(args.fp8_kv_read_factor, args.fuse_elementwise)
        costs = [CostModel(model, hw, pool, prof, integrity=False) for _, prof in loaded]
        rows = [
            (f"decode b{b}", b, case.isl + OSL // 2, aic_command(case, b, case.isl, OSL, case.kv), "TPOT")
            for b in BATCHES
        ]
        if case.kv == "bf16":
            rows.append((f"prefill {PREFILL}", 0, PREFILL, aic_command(case, 1, PREFILL, 2, "bf16"), "TTFT"))
        for step, batch, context, command, metric in rows:
            est = aic_estimate(args.aiconfigurator, cache, command)
            aic = est[metric] if est else None
            cells = [f"{aic:.2f}" if aic else "—"]
            details = []
            for cost in costs:
                ms = phaseplan_ms(cost, batch, context, case.pool().page_size)
                cells += [f"{ms:.2f}", f"{ms / aic:.2f}" if aic else "—"]
                if args.detail:
                    bd = cost.breakdown(
                        batch, batch * context, batch * -(-context // 64), [(context, 0)] if batch == 0 else []
                    )
                    details.append(top(bd))
            print(f"| {case.label} | {step} | " + " | ".join(cells) + " |")
            for name, d in zip(names, details, strict=False):
                print(f"|  | ↳ {name} | {d} |" + " |" * (2 * len(names) - 1))


if __name__ == "__main__":
    main()
