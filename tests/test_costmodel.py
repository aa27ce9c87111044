"""The pricing half: op lists, the roofline, profile interpolation and the cost model."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest

from simulator.calibration.modeled_profile import write_modeled_profile
from simulator.config import presets
from simulator.config.scenario import Pool
from simulator.config.specs import HardwareSpec, ModelSpec
from simulator.errors import InputError
from simulator.pricing import roofline
from simulator.pricing.costmodel import CostModel
from simulator.pricing.ops import (
    Op,
    chunk_ops,
    compiled_kernels,
    expected_experts,
    profile_shapes,
    step_lines,
    step_ops,
)
from simulator.pricing.profile import Profile
from simulator.pricing.usage import Usage

H200 = HardwareSpec(**presets.hardware("h200"))
KIMI = ModelSpec(**presets.model("kimi-k2.6"))
GLM5 = ModelSpec(**presets.model("glm-5.2"))
LLAMA = ModelSpec(**presets.model("llama-3.1-70b"))
ROOF = Profile.roofline(H200)


def counts(ops: list[Op]) -> Counter[str]:
    c: Counter[str] = Counter()
    for op in ops:
        c[op.family] += op.count
    return c


def only(ops: list[Op], family: str) -> Op:
    found = [op for op in ops if op.family == family]
    assert len(found) == 1, found
    return found[0]


# -- the op list ----------------------------------------------------------------------------------------------


def test_kimi_decode_ops() -> None:
    pool = Pool(tp=8, weights="int4", kv_cache="fp8_e4m3", moe_routing="uniform")  # its touched experts in closed form
    ops = step_ops(KIMI, pool, 32, 16384, (), 32 * 256)
    c = counts(ops)
    assert set(c) == {
        "elementwise",
        "gemm",
        "kv_write",
        "decode_attention_mla",
        "moe_gemm",
        "allreduce",
        "integrity_check",
        "allgather",
    }
    attn = only(ops, "decode_attention_mla").params
    assert attn == {"heads": 8, "batch": 32, "context": 16384, "kv": "fp8_e4m3", "layout": "flat", "page_size": 64}
    assert c["decode_attention_mla"] == 61 and c["kv_write"] == 61
    assert c["allreduce"] == 2 * 61 + 1  # two per layer + the vocab-parallel embedding
    assert only(ops, "integrity_check").params == {"pages": 32 * 256} and c["integrity_check"] == 1
    moe = [op for op in ops if op.family == "moe_gemm"]
    assert len(moe) == 2 and all(op.count == 60 for op in moe)
    touched = round(expected_experts(384, 8, 32))
    for op in moe:  # experts split by TP: every rank holds every expert's eighth
        assert op.params["weights"] == "int4" and op.params["group"] == 32
        assert op.params["experts"] == touched and op.params["tokens"] == 32 * 8
    # Only the routed experts are INT4 in Kimi's release; attention stays BF16.
    assert {op.params["weights"] for op in ops if op.family == "gemm"} == {"bf16"}
    assert "prefill_attention" not in c
    assert "integrity_check" not in counts(step_ops(KIMI, pool, 32, 16384, (), 0))


def test_kimi_prefill_ops_unabsorbed_mla() -> None:
    ops = step_ops(KIMI, Pool(tp=8, weights="int4"), 0, 0, [(4096, 8192)], 0)
    c = counts(ops)
    assert "decode_attention_mla" not in c and "integrity_check" not in c
    attn = only(ops, "prefill_attention").params
    assert attn == {"heads": 8, "kv_heads": 8, "qk_dim": 192, "v_dim": 128, "tokens": 4096, "context": 12288, "topk": 0}
    # kv_b expands the chunk's whole context into per-head K_nope and V.
    expand = [op for op in ops if op.family == "gemm" and op.params["k"] == 512 and op.params["batch"] == 1]
    assert [op.params["m"] for op in expand] == [12288] and expand[0].params["n"] == 8 * (128 + 128)
    assert all(op.params["m"] in (4096, 1, 12288) for op in ops if op.family == "gemm")


def test_expert_parallel_splits_experts() -> None:
    ops = step_ops(KIMI, Pool(tp=8, ep=8, weights="int4", moe_routing="uniform"), 64, 4096, (), 0)
    moe = [op.params for op in ops if op.family == "moe_gemm"]
    assert {p["tokens"] for p in moe} == {64}  # 64 × 8 pairs over 8 ranks (uniform routing: the mean)
    assert {p["experts"] for p in moe} == {round(expected_experts(384, 8, 64) / 8)}
    assert {p["n"] for p in moe} == {2 * 2048, 7168}  # whole experts (ep dividing tp is the scenario's rule)


def test_glm5_dsa_ops() -> None:
    pool = Pool(tp=8, weights="fp8", kv_cache="fp8_e4m3", kv_layout="tiled")
    ops = step_ops(GLM5, pool, 16, 10000, [(8192, 0)], 16 * 157)
    c = counts(ops)
    indexed = math.ceil(78 / 4)
    assert c["decode_indexer"] == indexed and c["prefill_indexer"] == indexed
    assert only(ops, "decode_indexer").params["context"] == 10000  # the indexer scores every key
    assert only(ops, "decode_attention_mla").params["context"] == 2048  # main attention reads top-k
    sparse = only(ops, "prefill_attention").params
    assert (sparse["kv_heads"], sparse["qk_dim"], sparse["v_dim"], sparse["topk"]) == (1, 576, 512, 2048)
    assert c["decode_attention_mla"] == 78 and c["prefill_attention"] == 78
    # FP8 linear layers quantize their activations first: one extra elementwise kernel each.
    fp8_gemms = sum(op.count for op in ops if op.family in ("gemm", "moe_gemm") and op.params["weights"] == "fp8")
    assert fp8_gemms > 0 and c["elementwise"] > fp8_gemms


def test_sparse_prefill_attention_runs_heads_in_the_kernels_blocks() -> None:
    """FlashMLA's sparse kernel computes a rank's heads in blocks of 64 on Hopper (128 on Blackwell): DeepSeek-V3.2
    at TP8 (16 heads a rank) pays for 64, the dense prefill kernel only for the heads it has."""
    sparse = {"kv_heads": 1, "qk_dim": 576, "v_dim": 512, "tokens": 2000, "context": 2000, "topk": 2048}
    b200 = HardwareSpec(**presets.hardware("b200"))

    def mma(heads: int, hw: HardwareSpec = H200, **over: int) -> float:
        return roofline.terms_us("prefill_attention", {**sparse, "heads": heads, **over}, hw)[1]

    assert mma(16) == pytest.approx(mma(64)) and mma(128) == pytest.approx(2 * mma(64))
    assert mma(16, b200) == pytest.approx(mma(128, b200))
    # The FLOPs the heads need stay the unpadded ones (what an ideal kernel would do).
    w16 = roofline.work("prefill_attention", {**sparse, "heads": 16})
    assert w16.padded_flops == pytest.approx(4 * w16.flops)
    dense = {"kv_heads": 16, "qk_dim": 192, "v_dim": 128, "tokens": 2000, "context": 2000, "topk": 0}
    assert roofline.work("prefill_attention", {**dense, "heads": 16}).padded_flops == pytest.approx(
        roofline.work("prefill_attention", {**dense, "heads": 16}).flops
    )


def test_trtllm_sparse_prefill_computes_only_a_ranks_heads_where_the_gpu_has_it() -> None:
    """SGLang from 0.5.10 runs a DSA prefill with an FP8 cache on Blackwell through TRT-LLM's sparse MLA, which takes a
    rank's heads unpadded; FlashMLA (a BF16 cache there, and every cache on Hopper) pays for its 128- or 64-head
    blocks. GLM-5.2 at TP8 has 8 heads a rank: FlashMLA on B200 computes 16x the heads' work."""
    b200 = HardwareSpec(**presets.hardware("b200"))
    chunk = [(8192, 0)]

    def attention_us(hw: HardwareSpec, kv: str, kernel: str) -> float:
        pool = Pool(tp=8, weights="fp8", kv_cache=kv, fp8_sparse_prefill=kernel)
        return CostModel(GLM5, hw, pool, Profile.roofline(hw), False).breakdown(0, 0, 0, chunk)["prefill_attention"]

    trtllm, flashmla = attention_us(b200, "fp8_e4m3", "trtllm"), attention_us(b200, "fp8_e4m3", "flashmla")
    assert 8 < flashmla / trtllm <= 16  # the same FLOPs but 8 of 128 heads; the launch floors stay
    assert attention_us(b200, "bf16", "trtllm") == pytest.approx(flashmla)  # a BF16 cache runs FlashMLA's
    # No TRT-LLM kernel on Hopper: the engine's FP8 prefill runs FlashMLA's 64-head blocks there.
    assert attention_us(H200, "fp8_e4m3", "trtllm") == pytest.approx(attention_us(H200, "fp8_e4m3", "flashmla"))
    assert presets.engine("sglang-0.5.10")["fp8_sparse_prefill"] == "trtllm"
    assert presets.engine("sglang-0.5").get("fp8_sparse_prefill", "flashmla") == "flashmla"


def test_an_engines_fp8_gemm_factor_scales_only_block_fp8_tensor_core_time() -> None:
    """vLLM's block-FP8 kernels are not the ones the roofline was fitted to: a pool's `fp8_gemm_mma_factor` takes
    their tensor-core time times the factor (memory time and BF16 GEMMs untouched); in the fused MoE only its
    large-M part, not what a few rows per expert add on top (docs/calibration.md §2, fused MoE by rows per expert)."""
    slow = H200.model_copy(
        update={
            "roofline": H200.roofline.model_copy(
                update={"factors": {**H200.roofline.factors, "fp8_gemm_mma_factor": 2.0}}
            )
        }
    )
    gemm = {"m": 8192, "n": 4096, "k": 7168, "batch": 1, "group": 0}
    moe = {"tokens": 2048, "experts": 8, "n": 4096, "k": 7168, "group": 0}
    for family, shape in (("gemm", gemm), ("moe_gemm", moe)):
        mem, mma, floor = roofline.terms_us(family, {**shape, "weights": "fp8"}, H200)
        mem2, mma2, floor2 = roofline.terms_us(family, {**shape, "weights": "fp8"}, slow)
        assert (mem2, floor2) == (mem, floor)
        if family == "gemm":
            assert mma2 == pytest.approx(2 * mma)
        else:  # the large-M part is mma / g (g: the penalty at 256 rows an expert); the factor adds it once
            g = ((256 + roofline.MOE_ROWS_HALF) / 256) ** roofline.MOE_ROWS_EXP
            assert mma2 == pytest.approx(mma + mma / g)
        assert roofline.terms_us(family, {**shape, "weights": "bf16"}, slow) == roofline.terms_us(
            family, {**shape, "weights": "bf16"}, H200
        )
    # Through a pool: the cost model hands the engine's factor to the roofline.
    pool = Pool(tp=8, weights="fp8")
    base = CostModel(GLM5, H200, pool, Profile.roofline(H200), False)
    vllm = CostModel(GLM5, H200, pool.model_copy(update={"fp8_gemm_mma_factor": 2.0}), Profile.roofline(H200), False)
    b, v = base.breakdown(0, 0, 0, [(8192, 0)]), vllm.breakdown(0, 0, 0, [(8192, 0)])
    assert v["gemm"] > b["gemm"] and v["moe_gemm"] > b["moe_gemm"]
    assert v["prefill_attention"] == b["prefill_attention"] and v["allreduce"] == b["allreduce"]


def test_an_engines_blackwell_fp8_factor_replaces_its_hopper_one_on_gpus_with_fp4_tensor_cores() -> None:
    """vLLM runs other block-FP8 kernels on Blackwell than the Hopper ones its factor was fitted on: a pool's
    `fp8_gemm_mma_factor_blackwell` takes the factor's place on a GPU with FP4 tensor cores, and on Hopper the factor
    stays; unset, the one factor holds on every GPU."""
    b200 = HardwareSpec(**presets.hardware("b200"))
    pool = Pool(tp=8, weights="fp8", fp8_gemm_mma_factor=2.0)

    def gemm_us(hw: HardwareSpec, **over: float) -> float:
        cm = CostModel(GLM5, hw, pool.model_copy(update=over), Profile.roofline(hw), False)
        return cm.breakdown(0, 0, 0, [(8192, 0)])["gemm"]

    plain = {"fp8_gemm_mma_factor": None}
    assert gemm_us(b200, fp8_gemm_mma_factor_blackwell=1.0) == pytest.approx(gemm_us(b200, **plain))
    assert gemm_us(b200) > gemm_us(b200, **plain)  # no Blackwell factor: the one factor everywhere
    assert gemm_us(H200, fp8_gemm_mma_factor_blackwell=1.0) == pytest.approx(gemm_us(H200))
    assert presets.engine("vllm-0.x")["fp8_gemm_mma_factor_blackwell"] == 1.0


def test_gqa_replicates_kv_heads_beyond_tp() -> None:
    ops = step_ops(LLAMA, Pool(tp=16), 4, 1000, (), 0)
    attn = only(ops, "decode_attention_gqa").params
    assert (attn["q_heads"], attn["kv_heads"]) == (4, 1)
    assert "moe_gemm" not in counts(ops)


def test_minimax_all_reduces_its_qk_norm_across_tp_ranks_every_layer() -> None:
    """MiniMax-M2 normalizes queries and keys over all heads: with the heads split by TP a layer sums the squares
    (one kernel), all-reduces those two floats a row, and applies them (one kernel); on one GPU no all-reduce.
    A norm per head (Qwen3) is not priced (ops._qk_norm says why)."""
    minimax = ModelSpec(**presets.model("minimax-m2"))
    plain = minimax.model_copy(update={"attention": minimax.attention.model_copy(update={"qk_norm": "none"})})
    tp8, tp1 = Pool(tp=8, ep=8, weights="fp8"), Pool(tp=1, weights="fp8")
    more = counts(step_ops(minimax, tp8, 4, 1000, (), 0)) - counts(step_ops(plain, tp8, 4, 1000, (), 0))
    assert more == Counter({"elementwise": 2 * 62, "allreduce": 62})
    reduce = [op for op in step_ops(minimax, tp8, 4, 1000, (), 0) if op.family == "allreduce"]
    assert any(op.params["bytes"] == 4 * 2 * 4 and op.count == 62 for op in reduce)  # 4 rows, 2 floats of 4 bytes
    assert "allreduce" not in counts(step_ops(minimax, tp1, 4, 1000, (), 0)) - counts(
        step_ops(plain, tp1, 4, 1000, (), 0)
    )
    qwen = ModelSpec(**presets.model("qwen3-8b"))
    bare = qwen.model_copy(update={"attention": qwen.attention.model_copy(update={"qk_norm": "none"})})
    assert qwen.attention.qk_norm == "per_head"
    assert counts(step_ops(qwen, Pool(tp=1), 4, 1000, (), 0)) == counts(step_ops(bare, Pool(tp=1), 4, 1000, (), 0))


@pytest.mark.parametrize(
    "model, chained",
    [("glm-4.6", True), ("deepseek-r1", False), ("kimi-k2.6", False), ("glm-5.2", False), ("qwen3-235b-a22b", False)],
)
def test_a_grouped_router_the_engines_gate_cannot_take_runs_as_a_chain(model: str, chained: bool) -> None:
    """SGLang fuses a grouped router for power-of-two expert counts and Kimi's 384: GLM-4.6's 160 experts run the
    chain (the engine's `router_chain_kernels` per MoE layer), DeepSeek's 256 and Kimi's 384 one kernel; a router
    that is not grouped (Qwen3's softmax top-k) never chains; an engine with no chain (0) adds nothing."""
    spec = ModelSpec(**presets.model(model))
    assert spec.moe is not None
    extra = counts(step_ops(spec, Pool(tp=8, router_chain_kernels=8), 4, 1000, (), 0)) - counts(
        step_ops(spec, Pool(tp=8), 4, 1000, (), 0)
    )
    assert extra == (Counter({"elementwise": 8 * spec.moe_layers}) if chained else Counter())
    # launched eagerly, the chain is one torch.compile'd call a layer, not eight launches
    assert compiled_kernels(spec, Pool(tp=8, router_chain_kernels=8)) == (7 * spec.moe_layers if chained else 0)


def test_profile_shapes_hold_every_study_shape() -> None:
    pool = Pool(tp=8, weights="int4", kv_cache="fp8_e4m3")
    shapes = profile_shapes([(GLM5, pool)])
    assert "allreduce" not in shapes and "allgather" not in shapes
    have = {f: {tuple(sorted(s.items())) for s in v} for f, v in shapes.items()}
    for ops in (step_ops(GLM5, pool, 256, 32768, (), 256 * 512), step_ops(GLM5, pool, 0, 0, [(16384, 32768)], 0)):
        for op in ops:
            if op.family not in ("allreduce", "allgather"):
                assert op.shape in have[op.family], op


# -- the roofline ------------------------------------------------------------------------------------------------


def ideal_ms(ops: list[Op]) -> float:
    return sum(op.count * float(roofline.ideal_us(op.family, op.params, H200)) for op in ops) / 1e3


def test_floors_dominate_batch_one_decode() -> None:
    """A batch-1 decode step is ~1,500 small kernels and ~120 all-reduces: with the preset's 4 µs per launch
    and 8 µs per all-reduce, the floors alone are ~7 ms against ~1.5 ms of weight bytes at datasheet
    bandwidth. We require ≥ 4× (5.9× today). The design card warns that a pure bound is ~10× too optimistic
    at batch 1; whether the floors should be higher is for a measured profile to say. At batch 64 bytes
    dominate again."""
    pool = Pool(tp=8, weights="int4", kv_cache="bf16")
    cm = CostModel(KIMI, H200, pool, ROOF, integrity=True)
    ratios = []
    for batch in (1, 64):
        ms = cm.step_s(batch, batch * 16384, batch * 256, []) * 1e3
        ratios.append(ms / ideal_ms(step_ops(KIMI, pool, batch, 16384, (), batch * 256)))
    assert ratios[0] >= 4.0
    assert ratios[1] < ratios[0] / 2


def test_int4_wins_decode_and_loses_prefill_to_fp8() -> None:
    """GLM-5.2 at TP8: INT4 reads ~half the weight bytes of FP8 (decode), but runs BF16 tensor cores after
    dequantizing where FP8 runs FP8 tensor cores at twice the rate (prefill)."""
    int4 = CostModel(GLM5, H200, Pool(tp=8, weights="int4"), ROOF, integrity=True)
    fp8 = CostModel(GLM5, H200, Pool(tp=8, weights="fp8"), ROOF, integrity=True)
    assert int4.step_s(1, 4096, 64, []) < fp8.step_s(1, 4096, 64, [])
    assert int4.step_s(0, 0, 0, [(8192, 0)]) > fp8.step_s(0, 0, 0, [(8192, 0)])
    b4, b8 = int4.breakdown(0, 0, 0, [(8192, 0)]), fp8.breakdown(0, 0, 0, [(8192, 0)])
    assert b4["gemm"] + b4["moe_gemm"] > 1.5 * (b8["gemm"] + b8["moe_gemm"])
    assert b4["prefill_attention"] == b8["prefill_attention"]


def test_fp8_kv_reads_half_the_bytes() -> None:
    shape = {"heads": 8, "batch": 64, "context": 16384, "layout": "flat", "page_size": 64}
    bf16 = roofline.work("decode_attention_mla", {**shape, "kv": "bf16"})
    flat = roofline.work("decode_attention_mla", {**shape, "kv": "fp8_e4m3"})
    tiled = roofline.work("decode_attention_mla", {**shape, "kv": "fp8_e4m3", "layout": "tiled"})
    assert flat.bytes < tiled.bytes < bf16.bytes
    assert flat.bytes / bf16.bytes == pytest.approx(0.5, rel=0.01)
    t = {kv: roofline.op_us("decode_attention_mla", {**shape, "kv": kv}, H200) for kv in ("bf16", "fp8_e4m3")}
    assert 0.5 * t["bf16"] < t["fp8_e4m3"] < 0.75 * t["bf16"]  # half the bytes, plus the dequant
    gqa = {"q_heads": 8, "kv_heads": 1, "head_dim": 128, "batch": 8, "context": 8192, "page_size": 16}
    assert (
        roofline.work("decode_attention_gqa", {**gqa, "kv": "fp8_e4m3"}).bytes
        < roofline.work("decode_attention_gqa", {**gqa, "kv": "bf16"}).bytes
    )


def test_collective_is_latency_plus_ring_bytes() -> None:
    us = roofline.op_us("allreduce", {"bytes": 10**8, "ranks": 8}, H200)
    eff = roofline.factors(H200).nvlink_eff
    assert us == pytest.approx(H200.allreduce_latency_us + 2 * 7 / 8 * 1e8 / (900e3 * eff))


# -- profiles ---------------------------------------------------------------------------------------------------

GEMM = {"n": 4096, "k": 7168, "batch": 1, "weights": "bf16", "group": 0}
ATTN = {"heads": 8, "kv": "bf16", "layout": "flat", "page_size": 64}


def write_profile(path, kernels) -> None:
    path.write_text(
        json.dumps({"device": "NVIDIA H200", "source": "measured", "date": "2026-01-01", "kernels": kernels})
    )


def entry(shape, us):
    return {"shape": shape, "median_us": us, "p10_us": us, "p90_us": us}


@pytest.fixture
def measured(tmp_path) -> Profile:
    path = tmp_path / "p.json"
    gemm = [entry({**GEMM, "m": m}, us) for m, us in ((1, 20.0), (16, 22.0), (256, 60.0))]
    attn = [entry({**ATTN, "batch": b, "context": c}, 5.0 + b * c / 1000) for b in (1, 4) for c in (1024, 4096)]
    write_profile(path, {"gemm": gemm, "decode_attention_mla": attn})
    return Profile.load(path)


def test_profile_reproduces_points_and_interpolates(measured: Profile) -> None:
    assert measured.lookup("gemm", {**GEMM, "m": 16}) == 22.0
    assert measured.lookup("gemm", {**GEMM, "m": 136}) == pytest.approx(41.0)
    assert measured.lookup("gemm", {**GEMM, "m": 512}) is None  # beyond the table
    assert measured.lookup("gemm", {**GEMM, "m": 16, "weights": "fp8"}) is None  # no table for FP8
    for b in (1, 4):
        for c in (1024, 4096):
            assert measured.lookup("decode_attention_mla", {**ATTN, "batch": b, "context": c}) == 5.0 + b * c / 1000
    # Bilinear between the profiled corners: the table's own affine law comes back.
    assert measured.lookup("decode_attention_mla", {**ATTN, "batch": 2, "context": 2048}) == pytest.approx(5 + 4.096)
    assert measured.provenance() == {
        "profile_source": "measured",
        "device": "NVIDIA H200",
        "file": measured.file,
        "date": "2026-01-01",
    }


def test_cost_model_counts_roofline_fallback(measured: Profile) -> None:
    pool = Pool(tp=8, weights="int4")
    cm = CostModel(KIMI, H200, pool, measured, integrity=False)
    cm.decode_step_s(2, np.array([2 * 2048.0, 2 * 100000.0]), np.array([64.0, 3200.0]))
    assert cm.usage.fallback_ops["decode_attention_mla"] == 61  # the step at 100K context only
    assert cm.usage.seconds["table"] > 0 and cm.usage.seconds["fallback"] > cm.usage.seconds["table"]
    shares = cm.usage.shares()
    assert sum(shares.values()) == pytest.approx(1.0) and shares["collective"] > 0


@pytest.mark.parametrize(
    "text, message",
    [
        ("{", "not JSON"),
        ('{"device": "x", "kernels": {}}', "lacks source"),
        ('{"device": "x", "source": "guessed", "kernels": {}}', "source must be"),
        ('{"device": "x", "source": "measured", "kernels": {"gemmm": []}}', "unknown or unmeasurable op family"),
        (
            '{"device": "x", "source": "measured", "kernels": {"gemm": [{"shape": {"m": 1}, "median_us": 3}]}}',
            "shape must have exactly the keys",
        ),
    ],
)
def test_bad_profile_is_one_line_input_error(tmp_path, text: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as e:
        Profile.load(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_modeled_profile_round_trip(tmp_path) -> None:
    pool = Pool(tp=8, weights="int4", kv_cache="fp8_e4m3", decode_graph_floor_us=None)  # entries are eager kernels
    path = write_modeled_profile(H200, profile_shapes([(GLM5, pool)]), tmp_path / "h200-modeled.json")
    doc = json.loads(path.read_text())
    assert doc["source"] == "modeled" and doc["device"] == "h200 (roofline model)" and doc["git_commit"]
    e = doc["kernels"]["gemm"][0]
    assert e["median_us"] == e["p10_us"] == e["p90_us"]
    prof = Profile.load(path)
    tables, roof = CostModel(GLM5, H200, pool, prof, True), CostModel(GLM5, H200, pool, ROOF, True)
    for args in [(1, 16384, 256, []), (64, 64 * 16384, 64 * 256, []), (0, 0, 0, [(8192, 0)])]:
        assert tables.step_s(*args) == pytest.approx(roof.step_s(*args), rel=1e-9)
    assert tables.usage.seconds["fallback"] == 0 and not tables.usage.fallback_ops
    # Between profiled points the table is interpolated, and stays close to the model it was drawn from.
    assert tables.step_s(37, 37 * 5000, 37 * 80, [(3000, 1000)]) == pytest.approx(
        roof.step_s(37, 37 * 5000, 37 * 80, [(3000, 1000)]), rel=0.01
    )


# -- the cost model ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", [KIMI, GLM5, LLAMA])
@pytest.mark.parametrize("tables", [False, True])
def test_vectorised_decode_equals_step_by_step(model: ModelSpec, tables: bool, measured: Profile) -> None:
    pool = Pool(tp=8, weights="int4", kv_cache="bf16")
    cm = CostModel(model, H200, pool, measured if tables else ROOF, integrity=True)
    batch = 4
    ctx = 4 * 1000 + batch * np.arange(1, 400, dtype=np.int64) * 10  # into and out of the 1K–4K table
    pages = ctx // 64 + batch
    many = cm.decode_step_s(batch, ctx, pages)
    one = np.array([cm.step_s(batch, int(c), int(p), []) for c, p in zip(ctx, pages, strict=True)])
    assert np.array_equal(many, one)
    if not tables:
        assert np.all(np.diff(many) > 0)  # (a made-up table need not join the roofline smoothly)
    if tables and model is KIMI:
        assert cm.usage.seconds["table"] > 0 and cm.usage.fallback_ops["decode_attention_mla"] > 0


def test_mixed_step_and_breakdown() -> None:
    cm = CostModel(KIMI, H200, Pool(tp=8, weights="int4"), ROOF, integrity=True)
    decode = cm.step_s(16, 16 * 8000, 16 * 125, [])
    mixed = cm.step_s(16, 16 * 8000, 16 * 125, [(2048, 0)])
    assert mixed > decode
    parts = cm.breakdown(16, 16 * 8000, 16 * 125, [(2048, 0)])
    assert sum(parts.values()) == pytest.approx(mixed, rel=1e-12)
    assert {"prefill_attention", "decode_attention_mla", "integrity_check", "moe_gemm"} <= set(parts)
    assert cm.step_s(0, 0, 0, [(2048, 0)]) < mixed


def kernels(model: ModelSpec, pool: Pool, decode: int, chunks: int) -> int:
    """Launches of an eager step: its op list's kernels, a compiled chain's as one call a layer."""
    return sum(op.count for op in step_ops(model, pool, decode, 1, [(1, 0)] * chunks)) - compiled_kernels(model, pool)


def test_an_eager_step_lasts_at_least_its_kernels_launches() -> None:
    """A step with prefill rows launched eagerly cannot end before the CPU has launched its kernels: short prompts
    are bound by kernels × `eager_kernel_us`, long ones by the GPU; decode-only (graphed) steps never."""
    pool = Pool(tp=8, weights="fp8", eager_kernel_us=50.0)
    cm, gpu = CostModel(KIMI, H200, pool, ROOF, True), CostModel(KIMI, H200, Pool(tp=8, weights="fp8"), ROOF, True)
    short = cm.step_s(0, 0, 0, [(64, 0)])
    assert short == pytest.approx(kernels(KIMI, pool, 0, 1) * 50.0 * 1e-6, rel=1e-12)
    assert short > gpu.step_s(0, 0, 0, [(64, 0)])
    assert cm.usage.seconds["fallback"] - gpu.usage.seconds["fallback"] == pytest.approx(
        short - gpu.step_s(0, 0, 0, [(64, 0)]), rel=1e-9
    )  # the launch time beyond the kernels is booked as modeled
    mixed = cm.step_s(8, 8 * 1000, 8 * 16, [(64, 0), (32, 500)])
    launches = sum(op.count for op in step_ops(KIMI, pool, 8, 1000, [(64, 0), (32, 500)], 8 * 16))  # checked pages
    assert mixed == pytest.approx(launches * 50.0 * 1e-6, rel=1e-12)
    assert cm.breakdown(8, 8 * 1000, 8 * 16, [(64, 0), (32, 500)])["eager_launch"] > 0
    assert sum(cm.breakdown(0, 0, 0, [(64, 0)]).values()) == pytest.approx(short, rel=1e-12)
    assert cm.step_s(0, 0, 0, [(16_384, 0)]) == gpu.step_s(0, 0, 0, [(16_384, 0)])  # the GPU's own time bounds it
    assert cm.step_s(8, 8 * 1000, 8 * 16, []) == gpu.step_s(8, 8 * 1000, 8 * 16, [])
    glm = ModelSpec(**presets.model("glm-4.6"))
    chained = Pool(tp=8, router_chain_kernels=8, eager_kernel_us=50.0)
    floor = CostModel(glm, H200, chained, ROOF, True).eager_floor_us(0, ((64, 0),))
    assert floor == 50.0 * (kernels(glm, chained, 0, 1)) == 50.0 * (kernels(glm, Pool(tp=8), 0, 1) + glm.moe_layers)


def test_the_prompts_of_one_step_share_their_launches() -> None:
    """A step's prompts run through one varlen attention kernel (and under MLA one expansion GEMM) per layer:
    many short prompts launch what one does and pay their own work, not a launch each."""
    pool = Pool(tp=8, weights="fp8", eager_kernel_us=50.0)
    cm = CostModel(KIMI, H200, pool, ROOF, True)
    one, many = cm.eager_floor_us(0, ((128, 0),)), cm.eager_floor_us(0, ((128, 0),) * 128)
    assert many == one == 50.0 * kernels(KIMI, pool, 0, 1)
    assert cm.eager_floor_us(0, ((128, 0), (64, 900))) == cm.eager_floor_us(0, ((128, 0), (64, 900)) * 5)
    gpu = CostModel(KIMI, H200, Pool(tp=8, weights="fp8"), ROOF, True)
    lines = sum(gpu.line_us(line, x, Usage()) for line, x in step_lines(KIMI, 0, [(128, 0)] * 128).items() if x)
    own, launch = gpu.chunk_us((128, 0), Usage()), gpu.prompt_launch_us()
    assert launch == pytest.approx(sum(op_list_us(gpu, chunk_ops(KIMI, gpu.pool, 1, 0)).values()), rel=1e-12)
    assert gpu.step_s(0, 0, 0, [(128, 0)] * 128) == pytest.approx((lines + 128 * own - 127 * launch) * 1e-6, rel=1e-12)
    assert 0 < launch < own
    # never below the dearest prompt's own ops: a long prompt beside one-token ones
    assert gpu.chunks_us([(4096, 0), (1, 0), (1, 0)], Usage()) == pytest.approx(gpu.chunk_us((4096, 0), Usage()))


@pytest.mark.parametrize(
    ("model", "tokens", "pool", "graphed"),
    [
        (LLAMA, 8192, {}, True),  # GQA: up to the chunk size
        (LLAMA, 8193, {"chunk_size": 8192}, False),
        (KIMI, 2048, {}, True),  # MLA: up to 2,048 tokens
        (KIMI, 2049, {}, False),
        (KIMI, 64, {"dp": 8}, False),  # DP attention
        (GLM5, 64, {}, False),  # a DSA model
        # vLLM's rule: up to min(cap, 2 x max_running x (1 + k)) tokens, whatever the deployment
        (LLAMA, 512, {"prefill_graph_tokens": 512}, True),
        (LLAMA, 513, {"prefill_graph_tokens": 512}, False),
        (LLAMA, 33, {"prefill_graph_tokens": 512, "max_running": 16}, False),
        (LLAMA, 32, {"prefill_graph_tokens": 512, "max_running": 16}, True),
        (KIMI, 512, {"prefill_graph_tokens": 512, "dp": 8}, True),
        (GLM5, 512, {"prefill_graph_tokens": 512}, True),
    ],
)
def test_piecewise_graphs_capture_prefill_steps_where_the_engine_allows(
    model: ModelSpec, tokens: int, pool: dict[str, int], graphed: bool
) -> None:
    p = Pool(tp=8, weights="fp8", eager_kernel_us=50.0, prefill_graphs=True, **pool)
    cm = CostModel(model, H200, p, ROOF, True)
    assert cm.prefill_graphed(tokens) is graphed
    assert (cm.eager_floor_us(0, ((tokens, 0),)) == 0.0) is graphed


def op_list_us(cm: CostModel, ops: list[Op]) -> dict[str, float]:
    """An op list priced from scratch, by source."""
    out = dict.fromkeys(("table", "fallback", "collective"), 0.0)
    for op in ops:
        if op.family in ("allreduce", "allgather"):
            out["collective"] += op.count * float(roofline.op_us(op.family, op.params, H200))
            continue
        t = cm.profile.lookup(op.family, op.params)
        src = "fallback" if t is None else "table"
        out[src] += op.count * (float(roofline.op_us(op.family, op.params, H200)) if t is None else t)
    return out


def whole_list_us(cm: CostModel, batch: int, ctx: int, pages: int, chunks: list[tuple[int, int]]) -> dict[str, float]:
    """A step priced from scratch, by source (what `step_s` must equal): every op of `step_ops`, less the launches
    its prompts share — each prompt beyond the first does not pay a one-token prompt's own ops again, down to no
    less than the dearest prompt's own ops alone."""
    out = op_list_us(cm, step_ops(cm.model, cm.pool, batch, ctx, chunks, pages if cm.integrity else 0))
    own = [sum(op_list_us(cm, chunk_ops(cm.model, cm.pool, t, b)).values()) for t, b in chunks]
    launch = op_list_us(cm, chunk_ops(cm.model, cm.pool, 1, 0))
    share = min(len(own) - 1, (sum(own) - max(own)) / sum(launch.values()))
    return {src: us - share * launch[src] for src, us in out.items()}


@pytest.mark.parametrize("model", [KIMI, GLM5, LLAMA])
@pytest.mark.parametrize("tables", [False, True])
def test_mixed_step_equals_whole_list_pricing(model: ModelSpec, tables: bool, measured: Profile) -> None:
    """Parts priced once per count or chunk add up to the whole op list, and charge the same seconds."""
    pool = Pool(tp=8, weights="int4", kv_cache="bf16")
    rng = np.random.default_rng(3)
    steps = []
    for _ in range(60):
        batch = int(rng.choice([0, 1, 3, 4, 37, 256]))  # 1 and 4 are profiled batches, 3 lies between
        chunks = [
            (int(rng.integers(1, 3000)), int(rng.choice([0, int(rng.integers(0, 9000))])))
            for _ in range(int(rng.integers(1, 5)))
        ]
        steps.append((batch, batch * int(rng.integers(500, 6000)), chunks))
    for batch, ctx_total, chunks in steps:
        cm = CostModel(model, H200, pool, measured if tables else ROOF, integrity=True)
        pages = ctx_total // 64 + batch
        fast = cm.step_s(batch, ctx_total, pages, chunks)
        # A decode batch's attention reads its mean context: exact when the total divides by the batch.
        ref = whole_list_us(cm, batch, ctx_total // max(batch, 1), pages, chunks)
        assert fast == pytest.approx(sum(ref.values()) * 1e-6, rel=1e-12)
        for src, us in ref.items():
            assert cm.usage.seconds[src] == pytest.approx(us * 1e-6, rel=1e-9, abs=1e-15)
        assert cm.step_s(batch, ctx_total, pages, chunks) == fast  # remembered parts: the same number
        assert cm.breakdown(batch, ctx_total, pages, chunks) == pytest.approx(
            CostModel(model, H200, pool, measured if tables else ROOF, True).breakdown(batch, ctx_total, pages, chunks)
        )
        assert sum(cm.breakdown(batch, ctx_total, pages, chunks).values()) == pytest.approx(fast, rel=1e-12)
    if tables and model is not LLAMA:  # the made-up tables hold MLA decode attention at 8 heads
        cm = CostModel(model, H200, pool, measured, integrity=True)
        cm.step_s(3, 3 * 2000, 3 * 32, [(100, 0)])  # batch 3: blended between the profiled batches 1 and 4
        assert cm.usage.seconds["table"] > 0


def test_mixed_step_counts_fallbacks_per_call(measured: Profile) -> None:
    pool = Pool(tp=8, weights="int4", kv_cache="bf16")
    cm = CostModel(KIMI, H200, pool, measured, integrity=False)
    ref = CostModel(KIMI, H200, pool, measured, integrity=False)
    for _ in range(2):  # the second call is served from remembered parts and must charge the same again
        cm.step_s(2, 2 * 100000, 3200, [(700, 0)])
    for op in step_ops(KIMI, pool, 2, 100000, [(700, 0)], 0):
        if op.family not in ("allreduce", "allgather") and ref.profile.lookup(op.family, op.params) is None:
            ref.usage.fallback_ops[op.family] += 2 * op.count
    assert cm.usage.fallback_ops == ref.usage.fallback_ops and cm.usage.fallback_ops["decode_attention_mla"] == 122


@pytest.mark.parametrize("tables", [False, True])
def test_a_cut_run_charges_only_the_steps_that_ran(tables: bool, measured: Profile) -> None:
    """A run priced for n steps and stopped after m charges what pricing those m steps alone would."""
    pool = Pool(tp=8, weights="int4", kv_cache="bf16")
    batch, n, m = 4, 400, 350
    ctx = 4 * 1000 + batch * np.arange(1, n + 1, dtype=np.int64) * 10  # leaves the 1K–4K table after ~300
    pages = ctx // 64 + batch
    run = CostModel(KIMI, H200, pool, measured if tables else ROOF, integrity=True)
    alone = CostModel(KIMI, H200, pool, measured if tables else ROOF, integrity=True)
    steps = run.decode_steps(batch, ctx, pages)
    steps.charge(m, run.usage)
    assert np.array_equal(steps.us[:m] * 1e-6, alone.decode_step_s(batch, ctx[:m], pages[:m]))
    assert run.usage.fallback_ops == alone.usage.fallback_ops
    for src, s in alone.usage.seconds.items():
        assert run.usage.seconds[src] == pytest.approx(s, rel=1e-12, abs=1e-15)
    if tables:
        assert 0 < run.usage.fallback_ops["decode_attention_mla"] < 61 * (m - 250)  # only steps past the table


@pytest.mark.parametrize("tables", [False, True])
def test_a_decode_run_prices_each_step_as_one_step_alone(tables: bool, measured: Profile) -> None:
    """The fused run (roofline lines) and the array path (profile tables) give each step the bits of pricing
    it alone, and end times that are the running sum a one-step-at-a-time clock computes."""
    pool = Pool(tp=8, weights="int4", kv_cache="bf16")  # the profile's attention tables are BF16
    cm = CostModel(KIMI, H200, pool, measured if tables else ROOF, integrity=True)
    batch, ctx0, pages0, clock = 4, 4 * 1500, 4 * 24, 12.345  # batch 4, 1.5K context: in the tables
    growth = np.add.accumulate(np.array([0, 2, 0, 0, 1, 0, 3, 0] * 5, dtype=np.int64))
    steps, ends = cm.decode_run(batch, ctx0, pages0, growth, clock)
    t = clock
    for i, end in enumerate(ends):
        one = cm.step_s(batch, ctx0 + batch * (i + 1), pages0 + int(growth[i]), [])
        assert steps.us[i] * 1e-6 == one
        t += one
        assert end == t
    assert cm._pricing(batch).parts if tables else not cm._pricing(batch).parts  # both paths were taken


def test_a_prompt_alone_is_priced_once_per_length_and_charges_each_time() -> None:
    cm = CostModel(KIMI, H200, Pool(tp=8, weights="int4"), ROOF, integrity=True)
    first = cm.step_s(0, 0, 0, [(3000, 0)])
    once = dict(cm.usage.seconds)
    again = cm.step_s(0, 0, 0, [(3000, 0)])  # from the cache of whole-prompt steps
    assert again == first
    assert all(cm.usage.seconds[k] == pytest.approx(2 * v) for k, v in once.items())
    assert first == pytest.approx(sum(cm.breakdown(0, 0, 0, [(3000, 0)]).values()), rel=1e-12)


@pytest.mark.parametrize("model", [KIMI, GLM5, LLAMA])
@pytest.mark.parametrize("tables", [False, True])
def test_a_prompt_alone_has_the_bits_of_its_parts(model: ModelSpec, tables: bool, measured: Profile) -> None:
    """Whole-prompt steps are priced a block of lengths at a time; each must equal its lines and its first chunk
    added one by one, in time and in the seconds it charges."""
    pool = Pool(tp=8, weights="int4", kv_cache="bf16")
    profile = measured if tables else ROOF
    for tokens in (1, 63, 1023, 1024, 1025, 3000, 20_000):
        cm, parts = CostModel(model, H200, pool, profile, True), CostModel(model, H200, pool, profile, True)
        scratch = Usage()
        us = 0.0
        for line, x in step_lines(model, 0, ((tokens, 0),)).items():
            if x:
                us += parts._lines[line].charge(x, scratch)
        us += parts._first_chunks.charge(tokens, scratch)
        assert cm.step_s(0, 0, 0, [(tokens, 0)]) == us * 1e-6
        assert cm.usage.seconds == {src: v * 1e6 * 1e-6 for src, v in scratch.seconds.items()}
        assert cm.usage.fallback_ops == scratch.fallback_ops
