"""Large-MoE deployments pinned against hand arithmetic: FP4 and W4A8 formats, DP attention and wide EP across
nodes (per-rank memory, all-to-all bytes), speculative decoding (tokens per step, price per accepted token).

Each expected value is written out as the product it is, from the public configs (reference/models.md) and
DeepEP's published link figures, so a reader can check it without reading the code.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from phaseplan.cli import main
from simulator import capacity
from simulator.config import formats, loader, presets
from simulator.config.parallel import Speculative
from simulator.config.scenario import Pool, Scenario
from simulator.config.specs import HardwareSpec, ModelSpec
from simulator.errors import InputError
from simulator.pricing import roofline
from simulator.pricing.costmodel import CostModel
from simulator.pricing.ops import Op, moe_streams, step_ops
from simulator.pricing.profile import Profile
from simulator.pricing.speculative import draft_ops, verify_ops

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30
H = 7168
FP8 = 1 + 4 / (128 * 128)  # bytes per weight: e4m3 + one fp32 scale per 128×128 block
H200 = HardwareSpec(**presets.hardware("h200"))
B200 = HardwareSpec(**presets.hardware("b200"))
DSV3 = ModelSpec(**presets.model("deepseek-v3"))


def scenario(model: str = "deepseek-v3", hardware: str = "h200", **pool: Any) -> Scenario:
    data = {
        "name": "t",
        "model": model,
        "hardware": hardware,
        "deployment": {"mode": "colocated", "decode": pool},
        "traffic": {"concurrency": 1},
    }
    return loader.validate(data, "test")


def only(ops: list[Op], family: str) -> list[Op]:
    return [op for op in ops if op.family == family]


# -- formats --------------------------------------------------------------------------------------------------


def test_fp4_and_w4a8_bytes_per_weight_with_their_scales() -> None:
    nvfp4 = (4 + 8 / 16) / 8  # e2m1 + one FP8 e4m3 scale per 16 weights = 4.5 bits (per-tensor fp32: not counted)
    mxfp4 = (4 + 8 / 32) / 8  # e2m1 + one E8M0 scale per 32 weights = 4.25 bits
    w4a8 = (4 + 16 / 128) / 8  # INT4 + a BF16 scale per group of 128 = 4.125 bits (activations FP8: no weight bytes)
    assert (nvfp4, mxfp4, w4a8) == (0.5625, 0.53125, 0.515625)
    for fmt, want in (("nvfp4", nvfp4), ("mxfp4", mxfp4), ("w4a8", w4a8)):
        assert capacity.bytes_per_weight(fmt) == formats.bytes_per_weight(fmt) == want
        assert roofline.weight_bytes(fmt, 128 if fmt == "w4a8" else 0) == want
    # One routed expert of DeepSeek-V3 (gate, up, down: 3 × 7168 × 2048) in NVFP4: 44,040,192 weights × 0.5625 B.
    assert 3 * H * 2048 * nvfp4 == 24_772_608


def test_fp4_gemm_runs_fp4_tensor_cores_on_b200() -> None:
    """A large NVFP4 GEMM is compute-bound at the FP4 rate (7,180 TFLOP/s achievable on B200 × its fitted GEMM
    share, 0.7386)."""
    s = {"m": 8192, "n": 7168, "k": 7168, "batch": 1, "weights": "nvfp4", "group": 0}
    mem, mma, _ = roofline.terms_us("gemm", s, B200)
    assert mma == pytest.approx(2 * 8192 * 7168 * 7168 / (7180 * 0.7386 * 1e6))
    assert mma > mem
    fp8 = roofline.terms_us("gemm", {**s, "weights": "fp8"}, B200)[1]
    assert fp8 == pytest.approx(2 * mma)  # FP4 tensor cores run twice the FP8 rate
    w4a8 = roofline.terms_us("gemm", {**s, "weights": "w4a8", "group": 128}, H200)[1]
    f = roofline.factors(H200)  # FP8 cores after INT4 → FP8, at the INT4 share of the GEMM share
    assert w4a8 == pytest.approx(2 * 8192 * 7168 * 7168 / (1580 * f.mma_eff_gemm * f.int4_mma_factor * 1e6))


def test_fp4_on_hopper_is_a_one_line_error() -> None:
    with pytest.raises(
        InputError,
        match=r"deployment\.decode\.weights: nvfp4 needs FP4 tensor cores; hardware "
        r"'h200' has none",
    ):
        scenario(tp=8, weights="nvfp4")
    scenario(tp=8, weights="w4a8")  # INT4 weights with FP8 activations: Hopper has FP8 tensor cores
    assert capacity.capacity_report(scenario(hardware="b200", tp=8, weights="mxfp4"))["pools"]["decode"]["fits"]


def test_fp4_on_hopper_from_the_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(
        sys, "argv", ["phaseplan", "capacity", str(ROOT / "scenarios" / "b200-nvfp4.yaml"), "--set", "hardware=h200"]
    )
    with pytest.raises(SystemExit) as e:
        main()
    out = capsys.readouterr()
    assert e.value.code == 2 and out.out == ""
    assert len(out.err.strip().splitlines()) == 1
    assert "deployment.prefill.weights: nvfp4 needs FP4 tensor cores; hardware 'h200' has none" in out.err


# -- DP attention and wide EP: memory per rank -----------------------------------------------------------------

# DeepSeek-V3 parts that sit on the attention side (split over the attention TP group, replicated per DP rank),
# in the FP8 checkpoint: MLA projections of 61 layers + the MTP layer, 3 dense FFNs, 58 + 1 shared experts and the
# MTP eh_proj in FP8; embedding and lm_head in BF16.
MLA_LAYER = H * 1536 + 1536 * 128 * (128 + 64) + H * (512 + 64) + 512 * 128 * (128 + 128) + 128 * 128 * H
ATTENTION_SIDE = (
    (61 + 1) * MLA_LAYER + 3 * 3 * H * 18432 + (58 + 1) * 3 * H * 2048 + 2 * H * H
) * FP8 + 2 * 129280 * H * 2
EXPERT = 3 * H * 2048  # one routed expert's gate, up, down


def test_kv_tokens_per_instance_dp_attention_vs_tp_for_mla() -> None:
    """8 H200s, DeepSeek-V3 FP8, FP8 flat latent cache: TP attention replicates the latent on all 8 GPUs, so the
    instance holds what one GPU holds; DP attention holds 8 disjoint sets."""
    kw: dict[str, Any] = dict(tp=8, ep=8, weights="fp8", kv_cache="fp8_e4m3", mem_fraction=0.85)
    tp, dp = scenario(**kw), scenario(**kw, dp=8)
    per_token = (61 + 1) * (512 + 64)  # latent of every layer incl. MTP, 1 B each = 35,712 B
    w_tp = capacity.weights_bytes_per_gpu(DSV3, tp.deployment.decode)
    w_dp = capacity.weights_bytes_per_gpu(DSV3, dp.deployment.decode)
    assert w_dp - w_tp == pytest.approx(ATTENTION_SIDE * (1 - 1 / 8), rel=1e-12)  # replicated instead of split
    budget = 140.4 * 0.85 * GIB
    c_tp, c_dp = (capacity.capacity_report(s)["pools"]["decode"] for s in (tp, dp))
    assert c_tp["kv_bytes_per_token"] == c_dp["kv_bytes_per_token"] == per_token
    assert c_tp["kv_tokens"] == int((budget - w_tp) // per_token)
    assert c_dp["kv_tokens"] == 8 * int((budget - w_dp) // per_token)
    assert c_dp["per_rank"]["kv_tokens"] == c_dp["kv_tokens"] // 8
    assert "per_rank" not in c_tp  # a pool without DP attention or wide EP keeps its JSON
    assert 4.8 < c_dp["kv_tokens"] / c_tp["kv_tokens"] < 4.9  # 8× the ranks, less the replicated weights


def test_weights_per_rank_under_wide_ep_with_and_without_redundant_experts() -> None:
    """32 ranks over 4 nodes, EP 32: 256 experts are 8 per rank; 32 EPLB replicas make it 9 (288 / 32), each
    in all 58 MoE layers + the MTP layer."""
    kw: dict[str, Any] = dict(tp=32, dp=32, ep=32, nodes=4, weights="fp8", kv_cache="fp8_e4m3")
    plain = scenario(**kw).deployment.decode
    eplb = scenario(**kw, redundant_experts=32).deployment.decode
    assert (capacity.experts_per_rank(DSV3, plain), capacity.experts_per_rank(DSV3, eplb)) == (8, 9)
    w0, w1 = capacity.weights_bytes_per_gpu(DSV3, plain), capacity.weights_bytes_per_gpu(DSV3, eplb)
    assert w1 - w0 == pytest.approx(1 * (58 + 1) * EXPERT * FP8, rel=1e-12)
    routed = 8 * (58 + 1) * EXPERT * FP8  # 8 whole experts per rank, FP8
    router = (58 + 1) * (256 * H + 256) * 2  # BF16 router and its score-correction bias, on every rank
    norms = ((61 * 2 + 1 + 5) * H + (61 + 1) * (1536 + 512)) * 2  # layer, final, MTP and MLA LoRA-rank norms
    # attention TP 1: each rank holds the whole attention side
    assert w0 == pytest.approx(routed + ATTENTION_SIDE + router + norms, rel=1e-12)
    with pytest.raises(InputError, match=r"deployment\.decode\.ep: behind DP attention the experts are spread"):
        scenario(tp=32, dp=32, ep=8, nodes=4)
    with pytest.raises(InputError, match=r"deployment\.decode\.nodes: tp 32 over 2 node\(s\) does not fit 8 GPUs"):
        scenario(tp=32, dp=32, ep=32, nodes=2)
    with pytest.raises(InputError, match=r"deployment\.decode\.dp: attention TP tp / dp = 16 would span nodes"):
        scenario(tp=16, ep=16, nodes=2)  # TP attention across nodes: its all-reduces would cross the scale-out links


# -- DP attention and wide EP: the step -----------------------------------------------------------------------


def test_all_to_all_bytes_per_decode_step() -> None:
    """Batch 256 over 32 DP ranks, EP 32 over 4 nodes: each rank receives 256 × 8 / 32 = 64 token-expert pairs
    per MoE layer; dispatch moves FP8 (7168 B + one fp32 scale per 128 values = 7,392 B a pair), combine BF16
    (14,336 B a pair); 58 MoE layers each way."""
    pool = Pool(tp=32, dp=32, ep=32, nodes=4, weights="fp8", kv_cache="fp8_e4m3", moe_routing="uniform")
    ops = step_ops(DSV3, pool, 256, 4096)
    a2a = {op.params["bytes"]: op for op in only(ops, "alltoall")}
    assert set(a2a) == {64 * 7392, 64 * 14336}
    assert all(op.count == 58 and op.params["ranks"] == 32 and op.params["nodes"] == 4 for op in a2a.values())
    assert sum(op.params["bytes"] * op.count for op in a2a.values()) == 58 * 64 * (7392 + 14336)  # 80.6 MB a step
    # Destinations spread evenly: 7 of 32 peers in the node (NVLink, 0.40 × 900 GB/s), 24 in other nodes (RDMA,
    # 0.80 × 50 GB/s); both move at once, the slower sets the time, plus the hardware's collective latency.
    b = 64 * 7392
    assert roofline.op_us("alltoall", a2a[b].params, H200) == pytest.approx(
        H200.allreduce_latency_us + max(b * 7 / 32 / (900 * 0.40 * 1e3), b * 24 / 32 / (50 * 0.80 * 1e3))
    )
    # Each rank runs attention for its own 256 / 32 = 8 sequences with all 128 heads; no TP all-reduce.
    (attn,) = only(ops, "decode_attention_mla")
    assert (attn.params["batch"], attn.params["heads"]) == (8, 128)
    assert not only(ops, "allreduce")
    # The busiest rank under imbalance 1.2: round(256 × 8 × 1.2 / 32) = round(76.8) = 77 pairs.
    hot = step_ops(DSV3, pool.model_copy(update={"expert_imbalance": 1.2}), 256, 4096)
    assert {op.params["bytes"] for op in only(hot, "alltoall")} == {77 * 7392, 77 * 14336}


def test_moe_tp_behind_dp_attention_gathers_and_reduces_every_row() -> None:
    """SGLang's --enable-dp-attention without EP (docs.sglang.io dp_dpa_smg_guide: "DPA does not require EP"): each
    of 8 DP ranks runs attention over its own 64 / 8 = 8 sequences; every MoE layer gathers all 64 rows to every
    GPU and reduces the TP-split experts' output back, two all-reduce-sized collectives of 64 × 7168 × 2 bytes;
    the routed experts (each split 8 ways, 2048 / 8 = 256 columns) and the shared expert see all 64 rows; no
    all-to-all."""
    pool = Pool(tp=8, dp=8, ep=1, weights="fp8", kv_cache="fp8_e4m3")
    ops = step_ops(DSV3, pool, 64, 4096)
    assert not only(ops, "alltoall")
    moe_ar = [op for op in only(ops, "allreduce") if op.params["bytes"] == 64 * H * 2]
    assert sum(op.count for op in moe_ar) == 2 * 58 and all(op.params["ranks"] == 8 for op in moe_ar)
    (attn,) = only(ops, "decode_attention_mla")
    assert (attn.params["batch"], attn.params["heads"]) == (8, 128)
    shared = [op for op in only(ops, "gemm") if op.params.get("n") == 2 * 2048 // 8 and op.params.get("m") == 64]
    assert shared, "the shared expert runs over all 64 gathered rows, split over the 8 GPUs"
    # memory: the shared expert is split over all 8 GPUs as the routed experts are; wide EP keeps it per rank
    tp_moe = capacity.weights_bytes_per_gpu(DSV3, pool)
    wide = capacity.weights_bytes_per_gpu(DSV3, pool.model_copy(update={"ep": 8}))
    shared_expert = (58 + 1) * 3 * H * 2048 * FP8
    assert wide - tp_moe == pytest.approx(shared_expert * (1 - 1 / 8), rel=1e-9)
    with pytest.raises(InputError, match=r"two_batch_overlap: .* needs dp > 1 and ep = tp"):
        scenario(tp=8, dp=8, ep=1, two_batch_overlap=True)


def test_a_pool_without_the_new_fields_prices_as_before() -> None:
    pool = Pool(tp=8, ep=8, weights="fp8", kv_cache="fp8_e4m3")
    assert step_ops(DSV3, pool, 64, 4096) == step_ops(DSV3, Pool(**pool.model_dump()), 64, 4096)
    assert "alltoall" not in {op.family for op in step_ops(DSV3, pool, 64, 4096)}
    assert pool.model_dump().keys() == Pool().model_dump().keys() and "dp" not in pool.model_dump()


# -- speculative decoding --------------------------------------------------------------------------------------


def test_expected_tokens_per_step_for_an_acceptance_vector() -> None:
    spec = Speculative(method="mtp", draft_tokens=3, acceptance=[0.9, 0.7, 0.5])
    assert spec.tokens_per_step == pytest.approx(1 + 0.9 + 0.9 * 0.7 + 0.9 * 0.7 * 0.5)  # = 2.845
    assert Speculative(method="mtp", draft_tokens=1, acceptance=[0.85]).tokens_per_step == pytest.approx(1.85)
    assert Speculative(method="mtp", draft_tokens=2, acceptance=2.4).tokens_per_step == 2.4
    for bad, msg in (
        ({"draft_tokens": 2, "acceptance": 3.5}, "lies in"),
        ({"draft_tokens": 2, "acceptance": [0.9]}, "one per position"),
        ({"draft_tokens": 1, "acceptance": [1.2]}, r"\[0, 1\]"),
    ):
        with pytest.raises(ValueError, match=msg):
            Speculative(method="mtp", **bad)
    with pytest.raises(InputError, match=r"speculative\.method: 'mtp' needs a model with MTP layers"):
        scenario("kimi-k2.6", tp=8, speculative={"method": "mtp", "acceptance": 1.8})


def test_verify_step_reads_the_cache_once_for_k_plus_one_queries() -> None:
    pool = Pool(
        tp=8,
        ep=8,
        weights="fp8",
        kv_cache="fp8_e4m3",
        speculative=Speculative(method="mtp", draft_tokens=2, acceptance=[0.8, 0.6]),
    )
    verify = verify_ops(DSV3, pool, 64, 4096)
    (attn,) = only(verify, "decode_attention_mla")
    assert (attn.params["batch"], attn.params["heads"]) == (64, 16 * 3)  # 128 / 8 heads × 3 query positions
    plain = step_ops(DSV3, pool, 64 * 3, 4096)
    lm = lambda ops: [op for op in only(ops, "gemm") if op.params["n"] == -(-129280 // 8)]  # noqa: E731
    assert lm(verify) == lm(plain)  # logits at every verified position: 192 rows
    draft = draft_ops(DSV3, pool, 64, 4096)
    (d_attn,) = only(draft, "decode_attention_mla")
    assert d_attn.count == 2 * 1 and d_attn.params["heads"] == 16  # one MTP layer, run once per draft token
    eh = [op for op in only(draft, "gemm") if op.params["k"] == 2 * H]
    assert eh and eh[0].count == 2 and eh[0].params["n"] == H // 8


def test_a_speculative_decode_step_costs_one_verify_step_plus_its_drafts() -> None:
    spec = Speculative(method="mtp", draft_tokens=1, acceptance=[0.85])
    pool = Pool(tp=8, ep=8, weights="fp8", kv_cache="fp8_e4m3", speculative=spec)
    cost = CostModel(DSV3, H200, pool, Profile.roofline(H200), integrity=False)
    batch, ctx = 32, 3000
    step = float(cost.decode_step_s(batch, np.array([batch * ctx]), np.array([0]))[0])
    whole = cost.ops_breakdown(verify_ops(DSV3, pool, batch, ctx) + draft_ops(DSV3, pool, batch, ctx))
    # The verify step's 64 rows run the shared experts beside the routed ones (SGLang's dual stream, up to 1,024
    # rows): the shorter stream, priced alone, is left out of the step.
    routed, shared = (sum(cost.ops_breakdown(ops).values()) for ops in moe_streams(DSV3, pool, 2 * batch))
    assert step == pytest.approx(sum(whole.values()) - min(routed, shared), rel=1e-9)
    serial = CostModel(
        DSV3, H200, pool.model_copy(update={"shared_expert_overlap": False}), Profile.roofline(H200), False
    )
    assert float(serial.decode_step_s(batch, np.array([batch * ctx]), np.array([0]))[0]) == pytest.approx(
        sum(whole.values()), rel=1e-9
    )  # the tokens it gives are drawn by the scheduler
    plain = CostModel(DSV3, H200, pool.model_copy(update={"speculative": None}), Profile.roofline(H200), False)
    one = float(plain.decode_step_s(batch, np.array([batch * ctx]), np.array([0]))[0])
    assert one < step < 1.85 * one  # verifying two positions and drafting one costs more than a step, less than τ


def test_a_draft_model_adds_its_weights_and_kv() -> None:
    sc = scenario(
        "llama-3.1-70b",
        tp=8,
        weights="fp8",
        kv_cache="fp8_e4m3",
        speculative={
            "method": "draft",
            "draft_tokens": 4,
            "draft_model": "llama-3.1-8b",
            "acceptance": [0.8, 0.7, 0.6, 0.5],
        },
    )
    pool = sc.deployment.decode
    plain = pool.model_copy(update={"speculative": None})
    draft = presets.model("llama-3.1-8b")
    assert draft["layers"] == 32
    # 8B draft on TP8: 32 layers × 2 × ceil(8 / 8) KV heads × 128 × 1 B (FP8) = 8,192 B per token per GPU extra.
    assert (
        capacity.kv_bytes_per_token(sc.model, plain) + 32 * 2 * 1 * 128
        == capacity.capacity_report(sc)["pools"]["decode"]["kv_bytes_per_token"]
    )
    assert capacity.draft_weights_bytes_per_gpu(pool) > 0.9 * GIB
    ops = draft_ops(sc.model, pool, 16, 2048)
    assert {op.count for op in only(ops, "decode_attention_gqa")} == {32 * 4}  # 32 draft layers × 4 draft tokens
    assert math.isclose(pool.speculative.tokens_per_step, 1 + 0.8 + 0.56 + 0.336 + 0.168)


def test_a_dp_prefill_step_prices_the_busiest_ranks_chunks() -> None:
    """Five chunks over 2 DP ranks: dealt one per rank, the busiest holds ceil(5 / 2) = 3, priced as the 3 largest."""
    from simulator.pricing.costmodel import busiest_rank

    chunks = ((512, 0), (2048, 0), (1024, 4096), (2048, 1024), (256, 0))
    assert busiest_rank(chunks, 2) == ((2048, 1024), (2048, 0), (1024, 4096))
    assert busiest_rank(chunks, 8) == ((2048, 1024),) and busiest_rank(((7, 0),), 4) == ((7, 0),)
    pool = Pool(tp=8, dp=8, ep=8, weights="fp8", kv_cache="fp8_e4m3")
    cost = CostModel(DSV3, H200, pool, Profile.roofline(H200), integrity=False)
    two, eight = cost.step_s(0, 0, 0, [(2048, 0)] * 2), cost.step_s(0, 0, 0, [(2048, 0)] * 8)
    assert eight < 4 * two  # 4× the prompts: the lines grow with ceil(rows / 8), the busiest rank's attention not
    attn = [cost.breakdown(0, 0, 0, [(2048, 0)] * n)["prefill_attention"] for n in (1, 2, 8)]
    assert attn[0] == attn[1] == attn[2]  # one chunk on the busiest rank each time


def test_a_request_must_fit_one_dp_ranks_share_of_the_pages() -> None:
    from simulator.engine.run import simulate

    data = {
        "name": "t",
        "model": "deepseek-v3",
        "hardware": "h200",
        "deployment": {
            "mode": "colocated",
            "decode": {"tp": 8, "dp": 8, "ep": 8, "weights": "fp8", "kv_cache": "fp8_e4m3", "mem_fraction": 0.69},
        },
        "traffic": {"concurrency": 1, "requests": 2, "prompt_tokens": 64, "output_tokens": 4},
    }
    sc = loader.validate(data, "test")
    per_rank = capacity.capacity_report(sc)["pools"]["decode"]["per_rank"]["kv_tokens"]
    big = loader.validate({**data, "traffic": {**data["traffic"], "prompt_tokens": per_rank + 64}}, "test")
    result, _ = simulate(big)
    assert result["metrics"]["rejected"] == 2  # it would fit the instance's pooled pages, not any one rank
    assert result["capacity"]["decode"]["per_rank"]["dp"] == 8
    ok, _ = simulate(sc)
    assert ok["metrics"]["completed"] == 2 and "hardware" in ok["scenario"]
    assert ok["scenario"]["hardware"]["scaleout_gbs"] == 50 and "fp4_tflops" not in ok["scenario"]["hardware"]


@pytest.mark.parametrize(
    ("setting", "expect"),
    [
        (
            "deployment.decode.speculative.acceptance=3.5",
            "--set deployment.decode.speculative.acceptance: a mean accepted length lies in [1, draft_tokens + 1 = 2]",
        ),
        (
            "deployment.decode.speculative={method: draft, draft_model: nope, acceptance: 1.5}",
            "--set deployment.decode.speculative.draft_model: unknown model preset 'nope'",
        ),
        ("deployment.decode.dp=3", "--set deployment.decode.dp: 3 must divide tp 32"),
    ],
)
def test_bad_large_moe_settings_are_one_line_errors(
    setting: str, expect: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        sys, "argv", ["phaseplan", "capacity", str(ROOT / "scenarios" / "deepseek-v3-wide-ep.yaml"), "--set", setting]
    )
    with pytest.raises(SystemExit) as e:
        main()
    out = capsys.readouterr()
    assert e.value.code == 2 and out.out == "" and len(out.err.strip().splitlines()) == 1
    assert expect in out.err
