"""How engines run a MoE layer and its small kernels (issue 11): experts touched under skewed routing, shared
experts beside routed ones, small kernels fused into their neighbours. Each rule is pinned by arithmetic done
by hand here, and on the committed AIConfigurator profile."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simulator.calibration import fit
from simulator.config import presets
from simulator.config.scenario import Pool
from simulator.config.specs import HardwareSpec, ModelSpec
from simulator.pricing import expert_routing, overlap, roofline
from simulator.pricing.costmodel import CostModel
from simulator.pricing.expert_routing import power_law_busiest, power_law_loads, uniform_experts
from simulator.pricing.ops import moe_streams, routed_parts, step_ops
from simulator.pricing.profile import Profile

ROOT = Path(__file__).resolve().parents[1]
H200 = HardwareSpec(**presets.hardware("h200"))
DSV3 = ModelSpec(**presets.model("deepseek-v3"))
LLAMA = ModelSpec(**presets.model("llama-3.1-70b"))


# -- experts touched ------------------------------------------------------------------------------------------


def test_power_law_loads_by_hand_many_tokens() -> None:
    """E = 4 experts, top-1, T = 8 tokens, alpha = 2. T·k = 8 > E, so loads are drawn on [1, 0.8·T = 6.4]; the
    inverse CDF at alpha 2 is x(u) = 1 / (1 − u·(1 − 1/6.4)) = 1 / (1 − 0.84375·u). At the quantiles u = 1/8,
    3/8, 5/8, 7/8: x = 1.1179, 1.4629, 2.1157, 3.8209 (sum 8.5174); scaled to 8 pairs: 1.050, 1.374, 1.987,
    3.589, rounded 1, 1, 2, 4 — they sum to 8, nothing to adjust."""
    assert power_law_loads(4, 1, 8, 2.0) == (4, 2, 1, 1)
    # busiest of ep = 2 ranks (2 experts each): the top expert's 4 pairs + 1 other at the others' mean,
    # (8 − 4) / 3; touched: 1 + 1 · (4 − 1) / 3 = 2
    pairs, touched = power_law_busiest(4, 1, 8, 2, 2.0)
    assert pairs == pytest.approx(4 + 4 / 3) and touched == pytest.approx(2.0)
    # one rank (ep = 1) holds every pair and every touched expert
    assert power_law_busiest(4, 1, 8, 1, 2.0) == (8.0, 4.0)


def test_power_law_loads_by_hand_few_tokens_and_the_remainder() -> None:
    """E = 8, top-1, T = 2, alpha 2: T·k = 2 <= E, so loads are drawn on [0.01, 2]: x(u) = 1 / (100 − 99.5·u).
    The largest quantile (u = 15/16) is 1 / 6.72 = 0.1488 of a sum 0.3106: 0.958 of the 2 pairs, the next 0.336;
    rounded 1, 0, ..., 0 — one pair short, added to the largest. One expert touched, where uniform routing
    touches 8 · (1 − (7/8)²) = 1.875."""
    assert power_law_loads(8, 1, 2, 2.0) == (2, 0, 0, 0, 0, 0, 0, 0)
    assert uniform_experts(8, 1, 2) == pytest.approx(1.875)


def test_skewed_routing_touches_fewer_experts_and_streams_fewer_weights() -> None:
    """DeepSeek-V3 (256 experts, top-8) at 64 tokens on one TP8 instance: 180 experts under AIConfigurator's
    power_law_1.01 against 222.4 uniformly; its routed GEMMs move that many experts' weights."""
    loads = power_law_loads(256, 8, 64, 1.01)
    assert sum(loads) == 64 * 8 and sum(v > 0 for v in loads) == 180
    assert uniform_experts(256, 8, 64) == pytest.approx(256 * (1 - (1 - 8 / 256) ** 64))
    # the power law is the default routing; uniform is named
    uniform, skewed = Pool(tp=8, weights="fp8", moe_routing="uniform"), Pool(tp=8, weights="fp8")
    experts = {
        p.moe_routing: {dict(op.shape)["experts"] for op in step_ops(DSV3, p, 64, 4096) if op.family == "moe_gemm"}
        for p in (uniform, skewed)
    }
    assert experts == {"uniform": {222}, "power_law": {180}}
    # arrays of row counts (a line priced for many counts at once) give each count's own answer
    pairs, touched = expert_routing.busiest_rank(256, 8, np.array([1, 64, 64]), 1, 1.01)
    assert touched.tolist() == [8.0, 180.0, 180.0] and pairs.tolist() == [8.0, 512.0, 512.0]
    # and each is the scalar's own answer (no rows priced as one), whatever the array's shape
    rows = np.array([[0, 3, 2], [4096, 17, 3]])
    pairs, touched = expert_routing.busiest_rank(384, 8, rows, 8, 1.01)
    scalar = [expert_routing.busiest_rank(384, 8, max(1, int(r)), 8, 1.01) for r in rows.ravel()]
    assert pairs.shape == touched.shape == rows.shape
    assert list(zip(pairs.ravel().tolist(), touched.ravel().tolist(), strict=True)) == scalar
    assert [a.shape for a in expert_routing.busiest_rank(384, 8, np.array([], dtype=np.int64), 8, 1.01)] == [(0,), (0,)]


def test_fit_prices_a_fused_moe_table_at_the_routing_it_was_measured_at() -> None:
    shape = dict(tokens=64, experts=256, top_k=8, hidden=7168, inter=2048, tp=8, ep=1, weights="fp8", group=0)
    parts = routed_parts(shape, ("power_law", 1.01))
    assert {p.params["experts"] for p in parts if p.family == "moe_gemm"} == {180}
    skewed = roofline.op_us("fused_moe", {**shape, "routing": ("power_law", 1.01)}, H200)
    assert skewed < roofline.op_us("fused_moe", shape, H200)  # uniform touches more experts
    assert fit._measured_routing({"measured_by": {"moe_distribution": "power_law_1.01"}}) == ("power_law", 1.01)
    assert fit._measured_routing({"measured_by": {}}) == expert_routing.UNIFORM


def test_h200_preset_holds_the_fused_moe_fit_of_the_committed_profile() -> None:
    doc = json.loads((ROOT / "profiles" / "h200-sglang.json").read_text())
    doc["kernels"] = {"fused_moe": doc["kernels"]["fused_moe"]}
    result = fit.fit(doc, H200)
    assert H200.roofline is not None
    # (the INT4 group's factors read the GEMM group's fit: checked by `phaseplan profile fit` as a whole)
    for name in ("mem_eff_moe", "mma_eff_moe", "floor_moe_us", "mem_eff_moe_fp8", "mma_eff_moe_fp8"):
        assert H200.roofline.factors[name] == result.factors[name], name


def test_the_fused_moe_tensor_core_share_grows_with_the_rows_each_expert_has() -> None:
    """At a handful of rows per expert the BF16 and block-FP8 Triton kernels reach a small share of the rate (the
    law fitted across GPUs); Marlin's INT4 path keeps its own form, which the law does not touch."""
    f = roofline.factors(H200)

    def mma_per_flop(weights: str, tokens: int) -> float:
        s = dict(tokens=tokens, experts=8, n=4096, k=7168, weights=weights, group=128)
        _, mma, _ = roofline.terms_us("moe_gemm", s, H200)
        return mma / roofline.work("moe_gemm", s, f).padded_flops

    for w in ("bf16", "fp8"):
        assert mma_per_flop(w, 16) > 3 * mma_per_flop(w, 16384)
    flat = H200.model_copy(
        update={"roofline": H200.roofline.model_copy(update={"factors": {**H200.roofline.factors, "moe_rows_exp": 0}})}
    )
    s = dict(tokens=16, experts=8, n=4096, k=7168, weights="int4", group=128)
    assert roofline.op_us("moe_gemm", s, H200) == roofline.op_us("moe_gemm", s, flat)
    fp8 = {**s, "weights": "fp8"}
    assert roofline.terms_us("moe_gemm", fp8, H200)[1] > roofline.terms_us("moe_gemm", fp8, flat)[1]


def test_an_engines_fp8_rate_factor_scales_the_large_m_part_of_the_fused_moe_not_the_tiles_fixed_work() -> None:
    """vLLM's block-FP8 factor is a tensor-core rate: at thousands of rows per expert it scales the whole tensor-core
    time; at one tile of rows most of that time is each tile's fixed work, which a faster or slower rate leaves."""
    slow = H200.model_copy(
        update={
            "roofline": H200.roofline.model_copy(
                update={"factors": {**H200.roofline.factors, "fp8_gemm_mma_factor": 2}}
            )
        }
    )

    def ratio(tokens: int) -> float:
        s = dict(tokens=tokens, experts=8, n=4096, k=7168, weights="fp8", group=128)
        return roofline.terms_us("moe_gemm", s, slow)[1] / roofline.terms_us("moe_gemm", s, H200)[1]

    assert 1.0 < ratio(16) < 1.3 < 1.8 < ratio(8 * 100_000) < 2.0


def test_the_rows_law_is_the_joint_fit_of_the_committed_h200_and_b200_tables() -> None:
    """One law for both GPUs, each with its own shares, fits their fused-MoE rows better than a flat share."""
    profiles = []
    for name in ("h200", "b200"):
        doc = json.loads((ROOT / "profiles" / f"{name}-sglang.json").read_text())
        doc["kernels"] = {"fused_moe": doc["kernels"]["fused_moe"]}
        profiles.append((doc, HardwareSpec(**presets.hardware(name))))
    result = fit.fit_moe_rows(profiles)
    assert result.law == {"moe_rows_half": roofline.MOE_ROWS_HALF, "moe_rows_exp": roofline.MOE_ROWS_EXP}
    assert all(law < flat for law, flat in zip(result.rms_law, result.rms_flat, strict=True))


def test_power_law_and_expert_imbalance_are_not_both_set() -> None:
    with pytest.raises(ValueError, match="leave expert_imbalance"):
        Pool(moe_routing="power_law", expert_imbalance=1.3)


# -- shared experts beside routed experts ---------------------------------------------------------------------


def _stream_us(cost: CostModel, ops: list) -> float:
    return sum(cost.price(op)[0] * op.count for op in ops)


@pytest.mark.parametrize("profile", ["roofline", "h200-sglang.json"])
def test_decode_takes_the_longer_moe_stream(profile: str) -> None:
    """DeepSeek-V3 at batch 1: the shared experts' stream (two GEMMs, their activation and quantize kernels) is
    shorter than the router + routed experts', so it runs entirely under it: the step is the sequential step
    less the shared stream, priced by the roofline or by SGLang's measured tables alike."""
    prof = Profile.roofline(H200) if profile == "roofline" else Profile.load(ROOT / "profiles" / profile)
    on = CostModel(DSV3, H200, Pool(tp=8, weights="fp8"), prof, integrity=False)
    off = CostModel(DSV3, H200, Pool(tp=8, weights="fp8", shared_expert_overlap=False), prof, integrity=False)
    routed, shared = moe_streams(DSV3, on.pool, 1, on.fused_moe)
    r, s = _stream_us(on, routed), _stream_us(on, shared)
    assert 0 < s < r
    ctx = np.array([4096.0])
    assert off.decode_step_s(1, ctx, ctx * 0)[0] - on.decode_step_s(1, ctx, ctx * 0)[0] == pytest.approx(s * 1e-6)
    # a step with a prefill chunk runs them in sequence (AIConfigurator's prefill does; SGLang above 1,024 rows)
    assert on.step_s(1, 4096, 0, [(512, 0)]) == off.step_s(1, 4096, 0, [(512, 0)])


def test_overlap_applies_where_the_engine_runs_two_streams() -> None:
    pool = Pool(tp=8, weights="fp8")
    assert overlap.applies(DSV3, pool, 1024) and not overlap.applies(DSV3, pool, 1025)  # SGLang's threshold
    assert not overlap.applies(DSV3, pool.model_copy(update={"dp": 8, "ep": 8}), 64)  # DeepEP: no dual stream
    assert not overlap.applies(LLAMA, pool, 64)  # no shared experts
    assert not overlap.applies(DSV3, Pool(tp=8, shared_expert_overlap=False), 64)


def test_the_longer_stream_is_the_one_kept() -> None:
    """Whichever stream is longer stays: with routed experts made free, the routed stream is the one left out."""
    ops = step_ops(DSV3, Pool(tp=8, weights="fp8"), 1, 1)
    routed, shared = moe_streams(DSV3, Pool(tp=8, weights="fp8"), 1)
    kept = overlap.overlapped(ops, DSV3, Pool(tp=8, weights="fp8"), 1, False, lambda op: 0.0 if op in routed else 1.0)
    n = sum(op.count for op in ops)
    assert sum(op.count for op in kept) == n - sum(op.count for op in routed)


# -- small kernels fused into their neighbours ----------------------------------------------------------------


def _kernels(ops: list) -> dict[str, int]:
    out: dict[str, int] = {}
    for op in ops:
        if op.family in ("elementwise", "kv_write"):
            out[op.family] = out.get(op.family, 0) + op.count
    return out


def _bytes(ops: list) -> int:
    return sum(op.count * dict(op.shape)["bytes"] for op in ops if op.family == "elementwise")


def test_fusion_by_hand_llama_fp8_decode_row() -> None:
    """Llama-3.1-70B, block FP8, TP8, one decode row: h = 8192, 8 query and 1 KV head of 128 per rank, FFN 3584
    per rank, 80 layers. Unfused, each layer runs 2 norms, 4 FP8 quantizes (qkv, o_proj, gate_up, down inputs),
    RoPE, SiLU×up and a KV write. Fused: the input norm writes the qkv input's FP8 copy (65,536 + 8,192 bytes),
    the post-attention norm gate_up's (likewise), SiLU×up down's (21,504 + 3,584), RoPE writes the KV rows
    (4,608 + 256·(2 + 2) = 5,632); o_proj's input comes from attention, not an elementwise kernel: its
    quantize stays (3,072)."""
    plain = step_ops(LLAMA, Pool(tp=8, weights="fp8"), 1, 8192)
    fused = step_ops(LLAMA, Pool(tp=8, weights="fp8", fuse_elementwise=True), 1, 8192)
    assert _kernels(plain) == {"elementwise": 80 * 8 + 3, "kv_write": 80}  # + embedding, final norm, sampling
    assert _kernels(fused) == {"elementwise": 80 * 5 + 3}
    per_layer = {dict(op.shape)["bytes"] for op in fused if op.family == "elementwise" and op.count in (80, 160)}
    assert per_layer == {65536 + 8192, 21504 + 3584, 4608 + 1024, 3072}
    # quantize bytes (3 a value) leave, FP8 copies (1 a value) and the KV write (4 a value) join
    quantized = 8192 + 8192 + 3584  # qkv, gate_up, down inputs
    assert _bytes(plain) - _bytes(fused) == 80 * (3 * quantized - quantized - 256 * 4)
    # the GEMMs are the same
    assert [op for op in plain if op.family == "gemm"] == [op for op in fused if op.family == "gemm"]


def test_fusion_keeps_an_fp8_cache_write_its_own_kernel_and_bf16_weights_unquantized() -> None:
    """SGLang fuses RoPE into the KV write for BF16 caches only; BF16 weights have no quantize to fuse."""
    fp8_cache = step_ops(LLAMA, Pool(tp=8, weights="fp8", kv_cache="fp8_e4m3", fuse_elementwise=True), 1, 8192)
    assert _kernels(fp8_cache)["kv_write"] == 80
    bf16 = Pool(tp=8, weights="bf16")
    assert step_ops(LLAMA, bf16, 1, 8192, fused_moe=False) != step_ops(
        LLAMA, bf16.model_copy(update={"fuse_elementwise": True}), 1, 8192
    )  # RoPE + KV write still fuse
    assert _bytes(step_ops(LLAMA, bf16, 4, 8192)) + 80 * 4 * 256 * 4 == _bytes(
        step_ops(LLAMA, bf16.model_copy(update={"fuse_elementwise": True}), 4, 8192)
    )


def test_engine_defaults_leave_a_pools_json_as_before() -> None:
    dumped = Pool().model_dump()
    assert not {"shared_expert_overlap", "moe_routing", "moe_routing_alpha", "fuse_elementwise"} & dumped.keys()
    assert Pool(fuse_elementwise=True).model_dump()["fuse_elementwise"] is True
