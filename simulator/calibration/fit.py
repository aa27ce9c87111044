"""Fitting one hardware's roofline factors to a measured profile: least squares on log time, family by family.

The roofline (`roofline.py`) is kept as the fallback for every op no table covers; fitting only replaces its
judged efficiency factors and launch floors by the values that make it reproduce measured tables best on the
shapes it is meant for. Each group below fits a few factors to one kind of kernel, in order (the INT4 MoE
group reads the GEMM and MoE factors fitted before it), and reports the residual — the root mean square of
log(roofline / measured) — before (documented defaults) and after. A factor that is engine-specific is
fitted but kept out of the preset: the FP8-cache read factor of the engine whose kernels were measured is a
pool's `fp8_kv_read_factor`, while the preset keeps the documented per-tile judgement.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simulator.calibration.device_match import same_device
from simulator.config.specs import HardwareSpec, RooflineFit
from simulator.errors import InputError
from simulator.pricing import profile_file, roofline
from simulator.pricing.expert_routing import UNIFORM, Routing, parse_distribution
from simulator.pricing.ops import FAMILIES
from simulator.pricing.profile import ANY, AXES, NUMERIC_KEYS

HW_FIELDS = frozenset({"allreduce_latency_us"})  # fitted values that live on HardwareSpec itself


@dataclass(frozen=True)
class Group:
    """Factors fitted together to the entries of some families that `keep` admits."""

    name: str
    families: tuple[str, ...]
    keep: Callable[[Mapping[str, Any]], bool]
    params: tuple[str, ...]  # empty: residuals reported, nothing fitted
    engine: bool = False  # engine-specific: fitted and reported, not written to the hardware preset


def _gemm(s: Mapping[str, Any]) -> bool:
    return (
        s["batch"] == 1
        and s["weights"] in ("bf16", "fp8")
        and 256 <= min(s["n"], s["k"])
        and max(s["n"], s["k"]) <= 32768
        and s["m"] <= 16384
    )


def _decode(kv: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda s: s["kv"] == kv and s["context"] >= 1024 and s["batch"] * s["context"] <= 2**23


GROUPS = (
    Group(
        "GEMM, BF16 and block FP8 (n, k 256-32K, m <= 16K)",
        ("gemm",),
        _gemm,
        ("mem_eff_gemm", "mma_eff_gemm", "floor_gemm_us"),
    ),
    Group(
        "decode attention, BF16 cache (MLA + GQA; context >= 1K)",
        ("decode_attention_mla", "decode_attention_gqa"),
        _decode("bf16"),
        ("mem_eff_decode_attn", "mma_eff_decode_attn", "floor_decode_attn_us"),
    ),
    Group(
        "prefill attention (no prefix, >= 512 tokens)",
        ("prefill_attention",),
        lambda s: s["tokens"] >= 512,
        ("mma_eff_prefill_attn", "floor_prefill_attn_us"),
    ),
    Group(
        "fused MoE, BF16 (8 GPUs: TP x EP = 8)",
        ("fused_moe",),
        lambda s: s["weights"] == "bf16" and s["tp"] * s["ep"] == 8,
        ("mem_eff_moe", "mma_eff_moe", "floor_moe_us"),
    ),
    Group(
        "fused MoE, block FP8 (8 GPUs: TP x EP = 8; the BF16 group's launch floor)",
        ("fused_moe",),
        lambda s: s["weights"] == "fp8" and s["tp"] * s["ep"] == 8,
        ("mem_eff_moe_fp8", "mma_eff_moe_fp8"),
    ),
    Group(
        "fused MoE, INT4 weight-only, Marlin (TP x EP = 8)",
        ("fused_moe",),
        lambda s: s["weights"] == "int4" and s["tp"] * s["ep"] == 8,
        ("mem_eff_int4", "mma_eff_int4_moe"),
    ),
    Group(
        "decode attention, SGLang's Triton split-KV kernel (BF16 cache; context >= 1K)",
        ("decode_attention_triton",),
        _decode("bf16"),
        ("triton_cta_gbs", "triton_ctas_per_sm", "floor_triton_decode_us"),
    ),
    Group(
        "prefill attention, SGLang's Triton extend kernel (no prefix, >= 512 tokens; the floor above)",
        ("prefill_attention_triton",),
        lambda s: s["tokens"] >= 512,
        ("mma_eff_prefill_attn_triton",),
    ),
    Group("all-reduce", ("allreduce",), lambda s: True, ("allreduce_latency_us", "nvlink_eff")),
    Group("all-gather", ("allgather",), lambda s: True, ("latency_allgather_us", "nvlink_eff_allgather")),
    Group(
        "MLA decode attention, FP8 cache (engine-specific: a pool's fp8_kv_read_factor, not the preset)",
        ("decode_attention_mla",),
        _decode("fp8_e4m3"),
        ("fp8_kv_dequant_factor",),
        engine=True,
    ),
)


@dataclass(frozen=True)
class Residual:
    group: str
    entries: int
    rms_before: float
    rms_after: float
    ratio_before: float  # median roofline / measured
    ratio_after: float


@dataclass(frozen=True)
class FitResult:
    factors: dict[str, float]  # roofline.Factors fields
    hardware: dict[str, float]  # HardwareSpec fields
    residuals: list[Residual]
    engine: dict[str, float]  # engine-specific factors (a pool's setting), fitted to this profile's engine


Batch = tuple[str, dict[str, Any], np.ndarray]  # family, shape (axis keys as arrays), measured µs


def _batches(doc: Mapping[str, Any], group: Group) -> list[Batch]:
    """The group's entries as few roofline calls: one per table form, its axis values as arrays."""
    out = []
    for family in group.families:
        t = doc["kernels"].get(family)
        if t is None:
            continue
        rows = (
            [dict(zip(t["columns"], r, strict=True)) for r in t["rows"]]
            if isinstance(t, dict)
            else [{**e["shape"], "median_us": e["median_us"]} for e in t]
        )
        ax = AXES[family]
        axis = [k for k in (ax.outer, *ax.inner_keys) if k]
        forms: dict[tuple, list[dict[str, Any]]] = {}
        for r in rows:
            if group.keep(r):
                forms.setdefault(tuple((k, r[k]) for k in FAMILIES[family] if k not in axis), []).append(r)
        for form, rs in forms.items():
            shape: dict[str, Any] = {
                k: (1 if k == "page_size" else "flat" if k == "layout" else v) if v == ANY else v for k, v in form
            }
            shape.update({k: np.array([r[k] for r in rs], dtype=float) for k in axis})
            if family == "fused_moe":  # its parts' shapes take integer token counts; experts touched as measured
                shape["tokens"] = shape["tokens"].astype(np.int64)
                shape["routing"] = _measured_routing(doc)
            out.append((family, shape, np.array([r["median_us"] for r in rs], dtype=float)))
    return out


def _measured_routing(doc: Mapping[str, Any]) -> Routing:
    """The token-to-expert routing a profile's fused-MoE rows were measured at (uniform when it does not say)."""
    name = (doc.get("measured_by") or {}).get("moe_distribution")
    return parse_distribution(name) if isinstance(name, str) else UNIFORM


def _with(hw: HardwareSpec, values: Mapping[str, float]) -> HardwareSpec:
    factors = {k: v for k, v in values.items() if k not in HW_FIELDS}
    return hw.model_copy(
        update={
            **{k: v for k, v in values.items() if k in HW_FIELDS},
            "roofline": RooflineFit(source="fit in progress", factors=factors),
        }
    )


def _log_residuals(batches: list[Batch], hw: HardwareSpec) -> np.ndarray:
    if not batches:
        return np.zeros(0)
    return np.concatenate([np.log(np.broadcast_to(roofline.op_us(f, s, hw), us.shape) / us) for f, s, us in batches])


# Where a factor whose default is another's (the all-reduce's, the BF16 kernel's) starts: that one's default.
_STARTS = {
    "latency_allgather_us": "allreduce_latency_us",
    "nvlink_eff_allgather": "nvlink_eff",
    "mem_eff_moe_fp8": "mem_eff_moe",
    "mma_eff_moe_fp8": "mma_eff_moe",
}


def _default(name: str, hw: HardwareSpec) -> float:
    """Where a fit starts: the documented default (not a value fitted before), so a re-run gives the same fit."""
    name = _STARTS.get(name, name)
    if name in HW_FIELDS:
        return float(HardwareSpec.model_fields[name].default)
    v = getattr(roofline.DEFAULT, name)
    return hw.kernel_floor_us if v is None else v


def fit(doc: Mapping[str, Any], hw: HardwareSpec) -> FitResult:
    """Fit every group's factors for `hw` to the profile document `doc` (a measured profile's JSON)."""
    from scipy.optimize import least_squares

    # "before" is the documented judgement, whatever the preset holds now
    base = hw.model_copy(update={"roofline": None, **{f: HardwareSpec.model_fields[f].default for f in HW_FIELDS}})
    values: dict[str, float] = {}
    engine: dict[str, float] = {}
    residuals = []
    for group in GROUPS:
        batches = _batches(doc, group)
        if not batches:
            continue
        before = _log_residuals(batches, base)
        if group.params:
            x0 = np.log([_default(p, base) for p in group.params])

            def fun(x: np.ndarray, group: Group = group, batches: list[Batch] = batches) -> np.ndarray:
                return _log_residuals(
                    batches, _with(base, {**values, **dict(zip(group.params, np.exp(x), strict=True))})
                )

            sol = least_squares(fun, x0, bounds=(np.log(1e-3), np.log(1e3)), x_scale=1.0)
            fitted = {p: float(f"{v:.4g}") for p, v in zip(group.params, np.exp(sol.x), strict=True)}
            (engine if group.engine else values).update(fitted)
        after = _log_residuals(batches, _with(base, {**values, **engine} if group.engine else values))
        residuals.append(
            Residual(
                group.name,
                before.size,
                _rms(before),
                _rms(after),
                math.exp(np.median(before)),
                math.exp(np.median(after)),
            )
        )
    return FitResult(
        {k: v for k, v in values.items() if k not in HW_FIELDS},
        {k: v for k, v in values.items() if k in HW_FIELDS},
        residuals,
        engine,
    )


def _rms(r: np.ndarray) -> float:
    return float(np.sqrt(np.mean(r**2)))


def fit_file(path: str | Path, hw: HardwareSpec, allow_mismatch: bool = False) -> FitResult:
    """`fit` on a profile file that a third party or the device profiler measured (a modeled one is refused); the
    file is read and checked as any profile is (`profile_file`). A profile measured on another device than `hw`
    (a CPU profile fitted to the H200's roofline gives factors of no GPU) is refused unless `allow_mismatch`."""
    doc = profile_file.parse(path)
    checked = profile_file.check(doc, path, NUMERIC_KEYS)
    if doc["source"] != "measured":
        raise InputError(f"{path}: fitting needs a measured profile (source: measured, with kernels)")
    if not allow_mismatch and not same_device(checked.device, hw.name):
        raise InputError(
            f"{path}: was measured on '{checked.device}', but the hardware fitted is '{hw.name}'; fit it to that "
            "device's preset (--hardware), or pass --allow-profile-mismatch"
        )
    return fit(doc, hw)


# The fused MoE's rows-per-expert law (`roofline.MOE_ROWS_HALF`, `MOE_ROWS_EXP`) is one for every GPU: it is fitted
# to several profiles at once, each GPU with its own BF16 and block-FP8 shares and launch floor.
MOE_GROUPS = tuple(g for g in GROUPS if g.name.startswith("fused MoE, BF16") or g.name.startswith("fused MoE, block"))
MOE_SHARES = ("mem_eff_moe", "mma_eff_moe", "floor_moe_us", "mem_eff_moe_fp8", "mma_eff_moe_fp8")
MOE_LAW = ("moe_rows_half", "moe_rows_exp")
FLAT = {"moe_rows_exp": 0.0}  # the law off: one share at every row count


@dataclass(frozen=True)
class MoeRowsFit:
    law: dict[str, float]  # moe_rows_half, moe_rows_exp: shared
    shares: list[dict[str, float]]  # per profile, in the order given
    rms_flat: list[float]  # per profile: its MoE rows' rms log error with the law off, its shares refitted
    rms_law: list[float]  # likewise with the fitted law


def fit_moe_rows(profiles: list[tuple[Mapping[str, Any], HardwareSpec]]) -> MoeRowsFit:
    """Fit the rows-per-expert law jointly to the BF16 and block-FP8 fused-MoE rows of `profiles` (profile
    document, hardware), and report each profile's residual with the law off and on (its shares refitted both times)."""
    from scipy.optimize import least_squares

    sets = []
    for doc, hw in profiles:
        base = hw.model_copy(update={"roofline": None})
        sets.append((base, [b for g in MOE_GROUPS for b in _batches(doc, g)]))
    starts = [_default(p, sets[0][0]) for p in MOE_SHARES]

    def residuals(x: np.ndarray, law: Mapping[str, float]) -> np.ndarray:
        shares = np.exp(x).reshape(len(sets), len(MOE_SHARES))
        return np.concatenate(
            [
                _log_residuals(batches, _with(base, {**dict(zip(MOE_SHARES, row, strict=True)), **law}))
                for row, (base, batches) in zip(shares, sets, strict=True)
            ]
        )

    def solve(law_free: bool) -> tuple[np.ndarray, dict[str, float]]:
        x0 = np.log(starts * len(sets) + ([256.0, 0.3] if law_free else []))
        n = len(MOE_SHARES) * len(sets)

        def fun(x: np.ndarray) -> np.ndarray:
            law = dict(zip(MOE_LAW, np.exp(x[n:]), strict=True)) if law_free else FLAT
            return residuals(x[:n], law)

        sol = least_squares(fun, x0, bounds=(np.log(1e-3), np.log(1e4)), x_scale=1.0)
        return sol.x[:n], {p: float(f"{v:.3g}") for p, v in zip(MOE_LAW, np.exp(sol.x[n:]), strict=False)}

    def per_profile(x: np.ndarray, law: Mapping[str, float]) -> list[float]:
        r = residuals(x, law)
        sizes = [sum(us.size for _, _, us in batches) for _, batches in sets]
        return [_rms(part) for part in np.split(r, np.cumsum(sizes)[:-1])]

    x_flat, _ = solve(False)
    x_law, law = solve(True)
    k = len(MOE_SHARES)
    shares = [
        {p: float(f"{v:.4g}") for p, v in zip(MOE_SHARES, np.exp(x_law[i * k : (i + 1) * k]), strict=True)}
        for i in range(len(sets))
    ]
    return MoeRowsFit(law, shares, per_profile(x_flat, FLAT), per_profile(x_law, law))
