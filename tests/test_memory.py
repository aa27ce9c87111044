"""Memory accounting pinned against arithmetic done by hand from the public configs (reference/models.md).

Each expected value is written out as the product it is, so a reader can check it against a model card
without reading `simulator/capacity.py`.
"""

from __future__ import annotations

import io
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from simulator import capacity as memory
from simulator.config import loader, presets
from simulator.config.scenario import Pool, Scenario
from simulator.config.specs import MLA, HardwareSpec, ModelSpec
from simulator.errors import InputError

GIB = 2**30
FP8 = 1 + 4 / (128 * 128)  # bytes per weight: e4m3 + one fp32 scale per 128×128 block
BF16 = 2


def scenario(model: str, hardware: Any = "h200", **pool: Any) -> Scenario:
    """A colocated one-pool scenario, validated the way a YAML file is."""
    data = {
        "name": "test",
        "model": model,
        "hardware": hardware,
        "deployment": {"mode": "colocated", "decode": pool},
        "traffic": {"concurrency": 1},
    }
    return loader.validate(data, "test")


def decode(s: Scenario) -> dict[str, Any]:
    return memory.capacity_report(s)["pools"]["decode"]


def spec(name: str) -> ModelSpec:
    return ModelSpec.model_validate(presets.model(name))


def tokens(hbm_gib: float, mem_fraction: float, weights_bytes: float, kv_bytes: int) -> int:
    return int((hbm_gib * mem_fraction * GIB - weights_bytes) // kv_bytes)


# ---------------------------------------------------------------- Kimi K2.6 (the acceptance reference point)

H = 7168
KIMI_MLA_LAYER = (
    H * 1536
    + 1536  # q_a_proj + q_a_layernorm
    + 1536 * 64 * (128 + 64)  # q_b_proj: q_lora → 64 heads × (nope + rope)
    + H * (512 + 64)
    + 512  # kv_a_proj_with_mqa + kv_a_layernorm
    + 512 * 64 * (128 + 128)  # kv_b_proj: kv_lora → 64 heads × (nope + v)
    + 64 * 128 * H  # o_proj
)
KIMI = {
    "attention": 61 * KIMI_MLA_LAYER,
    "routed_experts": 60 * 384 * 3 * H * 2048,  # 60 MoE layers × 384 experts × gate/up/down
    "shared_experts": 60 * 1 * 3 * H * 2048,
    "dense_ffn": 1 * 3 * H * 18432,
    "router": 60 * (384 * H + 384),  # gate + score-correction bias
    "embedding": 163840 * H,
    "lm_head": 163840 * H,
    "norms": 61 * 2 * H + H,  # input + post-attention per layer, final norm
}


def test_kimi_param_counts() -> None:
    m = spec("kimi-k2.6")
    assert KIMI["routed_experts"] == 1_014_686_023_680
    assert memory.param_counts(m) == KIMI
    total = sum(KIMI.values())
    assert memory.total_params(m) == total
    assert abs(total / 1.03e12 - 1) < 0.01  # ~1.03T published
    # Active: all but 376 of 384 routed experts per MoE layer; published "32B" (this count has embeddings).
    active = total - KIMI["routed_experts"] + KIMI["routed_experts"] * 8 // 384
    assert memory.active_params(m) == active
    assert abs(active / 32e9 - 1) < 0.03


def test_kimi_int4_checkpoint_is_the_released_594_gb() -> None:
    m = spec("kimi-k2.6")
    int4 = (4 + 16 / 32) / 8  # group 32, BF16 scales: 4.5 bits
    rest = sum(KIMI.values()) - KIMI["routed_experts"]
    expected = KIMI["routed_experts"] * int4 + rest * BF16
    assert memory.checkpoint_bytes(m, "int4") == pytest.approx(expected)
    assert expected / 1e9 == pytest.approx(594.2, abs=0.1)
    assert memory.checkpoint_bytes(m, "bf16") == pytest.approx(sum(KIMI.values()) * BF16)


def kimi_int4_tp8_weights() -> float:
    """Routed experts over 8 GPUs in INT4; other matrices split 8 ways in BF16; vectors, router replicated."""
    lora_norms = 61 * (1536 + 512)
    split_bf16 = (
        KIMI["attention"]
        - lora_norms
        + KIMI["shared_experts"]
        + KIMI["dense_ffn"]
        + KIMI["embedding"]
        + KIMI["lm_head"]
    )
    replicated = lora_norms + KIMI["router"] + KIMI["norms"]
    return KIMI["routed_experts"] * 0.5625 / 8 + split_bf16 * BF16 / 8 + replicated * BF16


@pytest.mark.parametrize(
    ("kv", "layout", "per_token", "published"),
    [
        ("bf16", "flat", 61 * 576 * 2, 686_000),  # 61 layers × (512 + 64) latent × 2 B
        ("fp8_e4m3", "flat", 61 * 576 * 1, 1_370_000),
        ("fp8_e4m3", "tiled", 61 * (512 + 4 * 4 + 64 * 2), None),  # 656 B/layer: e4m3 + 4 fp32 scales + BF16 rope
    ],
)
def test_kimi_tp8_h200_capacity(kv: str, layout: str, per_token: int, published: int | None) -> None:
    c = decode(scenario("kimi-k2.6", tp=8, weights="int4", kv_cache=kv, kv_layout=layout, mem_fraction=0.81))
    weights = kimi_int4_tp8_weights()
    assert c["weights_gib_per_gpu"] == pytest.approx(weights / GIB)
    assert c["weights_gib_per_gpu"] == pytest.approx(69.45, abs=0.01)
    assert c["kv_bytes_per_token"] == per_token
    assert c["kv_budget_gib_per_gpu"] == pytest.approx(140.4 * 0.81 - weights / GIB)
    assert c["kv_tokens"] == tokens(140.4, 0.81, weights, per_token)
    assert c["pages"] == c["kv_tokens"] // 64
    assert c["fits"] and c["reason"] == ""
    if published:
        assert abs(c["kv_tokens"] / published - 1) <= 0.02


def test_kimi_scenario_file() -> None:
    s, _ = loader.load("scenarios/kimi-k2.6-decode.yaml")
    c = decode(s)
    assert c["kv_bytes_per_token"] == 61 * 576
    assert abs(c["kv_tokens"] / 1_370_000 - 1) <= 0.02


def test_kimi_group_size_and_ep_overrides() -> None:
    g128 = decode(scenario("kimi-k2.6", weights="int4", int4_group_size=128, mem_fraction=0.81))
    saved = KIMI["routed_experts"] * ((4 + 16 / 32) - (4 + 16 / 128)) / 8 / 8  # bytes per GPU
    assert g128["weights_gib_per_gpu"] == pytest.approx(kimi_int4_tp8_weights() / GIB - saved / GIB)
    ep8 = decode(scenario("kimi-k2.6", weights="int4", ep=8, mem_fraction=0.81))  # 48 whole experts per GPU
    assert ep8["weights_gib_per_gpu"] == pytest.approx(kimi_int4_tp8_weights() / GIB)
    with pytest.raises(InputError, match="must divide"):
        decode(scenario("kimi-k2.6", weights="int4", ep=3))


def test_bf16_kimi_does_not_fit_one_h100_node() -> None:
    s = scenario("kimi-k2.6", "h100", tp=8, weights="bf16", mem_fraction=0.85)
    c = decode(s)
    replicated = 61 * 2048 + KIMI["router"] + KIMI["norms"]  # held whole, not 1/8, on each GPU
    weights_gib = (sum(KIMI.values()) * BF16 / 8 + replicated * BF16 * 7 / 8) / GIB
    budget = 79.65 * 0.85
    assert weights_gib == pytest.approx(c["weights_gib_per_gpu"])
    assert not c["fits"] and c["kv_tokens"] == 0 and c["pages"] == 0 and c["kv_budget_gib_per_gpu"] == 0
    assert c["reason"] == f"does not fit: weights {weights_gib:.1f} GiB > budget {budget:.1f} GiB per GPU"
    assert c["reason"] == "does not fit: weights 239.3 GiB > budget 67.7 GiB per GPU"
    out = Console(width=300, file=io.StringIO(), record=True)
    out.print(memory.render_capacity(memory.capacity_report(s)))
    assert c["reason"] in out.export_text()


def test_no_room_for_a_page_does_not_fit() -> None:
    reserve = 140.4 * 0.81 - kimi_int4_tp8_weights() / GIB - 0.001  # ~1 MiB left: 15 tokens, not a 64-page
    c = decode(scenario("kimi-k2.6", weights="int4", mem_fraction=0.81, reserve_gib=reserve))
    assert not c["fits"] and c["kv_tokens"] == 0 and c["pages"] == 0
    assert c["reason"] == "does not fit: KV budget 0.00 GiB per GPU holds no page of 64 tokens"


# ---------------------------------------------------------------- DeepSeek-V3

DSV3_MLA_LAYER = (
    H * 1536
    + 1536
    + 1536 * 128 * 192  # q_a, q_a_layernorm, q_b (128 heads)
    + H * 576
    + 512
    + 512 * 128 * 256  # kv_a_proj_with_mqa, kv_a_layernorm, kv_b
    + 128 * 128 * H  # o_proj
)
DSV3_MOE_LAYER = 256 * 3 * H * 2048 + 3 * H * 2048 + 256 * H + 256  # routed, shared, router + bias
DSV3 = {
    "attention": 61 * DSV3_MLA_LAYER,
    "routed_experts": 58 * 256 * 3 * H * 2048,
    "shared_experts": 58 * 3 * H * 2048,
    "dense_ffn": 3 * 3 * H * 18432,
    "router": 58 * (256 * H + 256),
    "embedding": 129280 * H,
    "lm_head": 129280 * H,
    "norms": 61 * 2 * H + H,
    # MTP: eh_proj [2h → h], enorm/hnorm/2 layer norms/shared-head norm, one MLA + MoE layer; embedding and
    # head are shared with the main model.
    "mtp": 2 * H * H + 5 * H + DSV3_MLA_LAYER + DSV3_MOE_LAYER,
}


def test_deepseek_v3_params() -> None:
    m = spec("deepseek-v3")
    assert memory.param_counts(m) == DSV3
    main = sum(DSV3.values()) - DSV3["mtp"]
    assert abs(memory.total_params(m, mtp=False) / 671e9 - 1) < 0.002
    # Published 685B also counts the MTP module's own embedding and head copies (2 × 0.93B); shared here.
    assert abs(memory.total_params(m) / 685e9 - 1) < 0.005
    assert memory.total_params(m) + 2 * DSV3["embedding"] == pytest.approx(685e9, rel=0.001)
    active = main - DSV3["routed_experts"] + DSV3["routed_experts"] * 8 // 256
    assert memory.active_params(m) == active
    assert abs(active / 37e9 - 1) < 0.02


def test_deepseek_v3_fp8_tp8_h200() -> None:
    c = decode(scenario("deepseek-v3", tp=8, weights="fp8", kv_cache="bf16", mem_fraction=0.85))
    # BF16 on every GPU: norms (incl. the q/kv LoRA-rank norms) and routers, of 61 layers and the MTP layer.
    mtp_replicated = 5 * H + (1536 + 512) + 256 * H + 256
    replicated = 61 * (1536 + 512) + DSV3["norms"] + DSV3["router"] + mtp_replicated
    fp8_split = sum(DSV3.values()) - DSV3["embedding"] - DSV3["lm_head"] - replicated
    weights = fp8_split * FP8 / 8 + (DSV3["embedding"] + DSV3["lm_head"]) * BF16 / 8 + replicated * BF16
    assert c["weights_gib_per_gpu"] == pytest.approx(weights / GIB)
    assert c["kv_bytes_per_token"] == (61 + 1) * 576 * 2  # the MTP layer caches too
    assert c["kv_tokens"] == tokens(140.4, 0.85, weights, 62 * 1152)


# ---------------------------------------------------------------- GLM-5.2 (MLA + DSA indexer, IndexShare)

G = 6144
GLM5_MLA_LAYER = (
    G * 2048
    + 2048
    + 2048 * 64 * (192 + 64)  # q_a, q_a_layernorm, q_b
    + G * 576
    + 512
    + 512 * 64 * (192 + 256)  # kv_a, kv_a_layernorm, kv_b
    + 64 * 256 * G  # o_proj (v_head 256)
)
GLM5_INDEXER = 2048 * 32 * 128 + G * 128 + G * 32 + 2 * 128  # wq_b, wk, head weights, k LayerNorm (w + b)
GLM5 = {
    "attention": 78 * GLM5_MLA_LAYER,
    "indexer": math.ceil(78 / 4) * GLM5_INDEXER,  # IndexShare: one indexer per 4 layers → 20
    "routed_experts": 75 * 256 * 3 * G * 2048,
    "shared_experts": 75 * 3 * G * 2048,
    "dense_ffn": 3 * 3 * G * 12288,
    "router": 75 * (256 * G + 256),
    "embedding": 154880 * G,
    "lm_head": 154880 * G,
    "norms": 78 * 2 * G + G,
    "mtp": 2 * G * G
    + 5 * G
    + GLM5_MLA_LAYER
    + GLM5_INDEXER  # eh_proj, norms, MLA, its own indexer
    + 256 * 3 * G * 2048
    + 3 * G * 2048
    + 256 * G
    + 256,  # routed, shared, router + bias
}


def test_glm_5_2_params() -> None:
    m = spec("glm-5.2")
    assert memory.param_counts(m) == GLM5
    assert abs(memory.total_params(m, mtp=False) / 744e9 - 1) < 0.005
    assert abs(memory.total_params(m) / 754e9 - 1) < 0.005
    # Published 40B active; this count (with embeddings) is 41.2B, without embedding/head 39.3B.
    assert abs(memory.active_params(m) / 40e9 - 1) < 0.04


def test_glm_5_2_kv_and_weights_fp8_tp8() -> None:
    s = scenario("glm-5.2", tp=8, weights="fp8", kv_cache="fp8_e4m3", kv_layout="flat", mem_fraction=0.85)
    c = decode(s)
    indexed = 20 + 1  # IndexShare layers + the MTP layer's own indexer
    per_token = (78 + 1) * 576 + indexed * 132  # latent in e4m3 + indexer keys (FP8 + fp32 scale)
    assert c["kv_bytes_per_token"] == per_token
    # BF16 on every GPU: norms (incl. LoRA-rank norms), routers and the whole indexer, main and MTP layers.
    mtp_replicated = 5 * G + (2048 + 512) + 256 * G + 256 + GLM5_INDEXER
    replicated = 78 * (2048 + 512) + GLM5["norms"] + GLM5["router"] + GLM5["indexer"] + mtp_replicated
    fp8_split = sum(GLM5.values()) - GLM5["embedding"] - GLM5["lm_head"] - replicated
    weights = fp8_split * FP8 / 8 + (GLM5["embedding"] + GLM5["lm_head"]) * BF16 / 8 + replicated * BF16
    assert c["weights_gib_per_gpu"] == pytest.approx(weights / GIB)
    assert c["kv_tokens"] == tokens(140.4, 0.85, weights, per_token)
    bf16 = decode(scenario("glm-5.2", tp=8, weights="fp8", kv_cache="bf16", mem_fraction=0.85))
    assert bf16["kv_bytes_per_token"] == 79 * 1152 + indexed * 132  # indexer keys: same in either cache


# ---------------------------------------------------------------- GLM-4.6 (GQA with biases)

F = 5120
GLM46_ATTN_LAYER = F * 96 * 128 + F * 2 * 8 * 128 + 96 * 128 * F + 96 * 128 + 2 * 8 * 128  # q, kv, o, biases
GLM46 = {
    "attention": 92 * GLM46_ATTN_LAYER,
    "routed_experts": 89 * 160 * 3 * F * 1536,
    "shared_experts": 89 * 3 * F * 1536,
    "dense_ffn": 3 * 3 * F * 12288,
    "router": 89 * (160 * F + 160),
    "embedding": 151552 * F,
    "lm_head": 151552 * F,
    "norms": 92 * 2 * F + F,
    "mtp": 2 * F * F + 5 * F + GLM46_ATTN_LAYER + 160 * 3 * F * 1536 + 3 * F * 1536 + 160 * F + 160,
}


def test_glm_4_6_params() -> None:
    m = spec("glm-4.6")
    assert memory.param_counts(m) == GLM46
    assert abs(memory.total_params(m, mtp=False) / 355e9 - 1) < 0.01
    # Z.ai's "32B active" leaves out embedding and head.
    non_embedding_active = memory.active_params(m) - GLM46["embedding"] - GLM46["lm_head"]
    assert abs(non_embedding_active / 32e9 - 1) < 0.01


def test_glm_4_6_fp8_tp8_h100() -> None:
    c = decode(scenario("glm-4.6", "h100", tp=8, weights="fp8", kv_cache="bf16", mem_fraction=0.85))
    biases = 93 * (96 * 128 + 2 * 8 * 128)  # BF16 but split with their heads
    replicated = GLM46["router"] + 160 * F + 160 + GLM46["norms"] + 5 * F
    fp8_split = sum(GLM46.values()) - GLM46["embedding"] - GLM46["lm_head"] - biases - replicated
    split_bf16 = GLM46["embedding"] + GLM46["lm_head"] + biases
    weights = fp8_split * FP8 / 8 + split_bf16 * BF16 / 8 + replicated * BF16
    assert c["weights_gib_per_gpu"] == pytest.approx(weights / GIB)
    per_token = (92 + 1) * 2 * (8 // 8) * 128 * 2  # K and V, one KV head per GPU, BF16, MTP layer included
    assert c["kv_bytes_per_token"] == per_token
    assert c["kv_tokens"] == tokens(79.65, 0.85, weights, per_token)


# ---------------------------------------------------------------- Llama 3.1 70B (dense GQA control)

L = 8192
LLAMA = {
    "attention": 80 * (L * 64 * 128 + L * 2 * 8 * 128 + 64 * 128 * L),
    "dense_ffn": 80 * 3 * L * 28672,
    "embedding": 128256 * L,
    "lm_head": 128256 * L,
    "norms": 80 * 2 * L + L,
}


def test_llama_params() -> None:
    m = spec("llama-3.1-70b")
    assert memory.param_counts(m) == LLAMA
    assert abs(memory.total_params(m) / 70.6e9 - 1) < 0.002
    assert memory.active_params(m) == memory.total_params(m)


@pytest.mark.parametrize(("tp", "kv_heads_per_gpu"), [(1, 8), (4, 2), (8, 1), (16, 1)])
def test_llama_bf16_h100(tp: int, kv_heads_per_gpu: int) -> None:
    hw: Any = "h100" if tp <= 8 else {**presets.hardware("h100"), "gpus_per_node": tp}  # TP16: a 16-GPU domain
    c = decode(scenario("llama-3.1-70b", hw, tp=tp, weights="bf16", kv_cache="bf16", mem_fraction=0.9))
    kv_proj = 80 * L * 2 * 8 * 128
    split = sum(LLAMA.values()) - LLAMA["norms"] - kv_proj
    weights = (split / tp + kv_proj * kv_heads_per_gpu / 8 + LLAMA["norms"]) * BF16
    assert c["weights_gib_per_gpu"] == pytest.approx(weights / GIB)
    per_token = 80 * 2 * kv_heads_per_gpu * 128 * 2  # 320 KiB/token on one GPU
    assert c["kv_bytes_per_token"] == per_token
    assert c["kv_tokens"] == max(0, tokens(79.65, 0.9, weights, per_token))
    assert c["fits"] == (tp > 1)  # 131 GiB of BF16 weights cannot fit one H100


def test_gqa_has_no_tiled_layout() -> None:
    with pytest.raises(InputError, match="MLA cache layout"):
        decode(scenario("llama-3.1-70b", kv_cache="fp8_e4m3", kv_layout="tiled"))


# ---------------------------------------------------------------- the report and the hardware presets


def test_report_shape() -> None:
    r = memory.capacity_report(scenario("kimi-k2.6", weights="int4", mem_fraction=0.81))
    assert set(r) == {"pools", "checkpoint_gib", "params"}
    assert set(r["checkpoint_gib"]) == {"bf16", "fp8", "int4"} and set(r["params"]) == {"total", "active"}
    assert {
        "weights_gib_per_gpu",
        "kv_bytes_per_token",
        "kv_budget_gib_per_gpu",
        "kv_tokens",
        "pages",
        "fits",
        "reason",
    } <= set(r["pools"]["decode"])


def test_hardware_presets() -> None:
    hbm = {n: HardwareSpec.model_validate(presets.hardware(n)).hbm_gib for n in presets.names("hardware")}
    assert hbm == {"a100": 79.15, "b200": 179.06, "cpu": 4.0, "h100": 79.65, "h200": 140.4}  # cpu: the CPU replay's
    assert hbm["h200"] == pytest.approx(143_771 / 1024, abs=0.01)
    assert hbm["h100"] == pytest.approx(81_559 / 1024, abs=0.01)


# ---------------------------------------------------------------- properties

MODELS = presets.names("models")
pools = st.fixed_dictionaries(
    {
        "tp": st.sampled_from([1, 2, 4, 8, 16]),
        "weights": st.sampled_from(["bf16", "fp8", "int4"]),
        "kv_cache": st.sampled_from(["bf16", "fp8_e4m3"]),
        "mem_fraction": st.floats(0.05, 1.0),
        "reserve_gib": st.floats(0.0, 40.0),
        "page_size": st.sampled_from([1, 16, 64]),
    }
)


@settings(max_examples=150, deadline=None)
@given(
    model=st.sampled_from(MODELS), hw=st.sampled_from(["h100", "h200", "b200"]), pool=pools, other=st.floats(0.05, 1.0)
)
def test_tokens_never_negative_and_monotone_in_mem_fraction(
    model: str,
    hw: str,
    pool: dict[str, Any],
    other: float,
) -> None:
    m, h = spec(model), HardwareSpec.model_validate(presets.hardware(hw))
    lo, hi = sorted([pool["mem_fraction"], other])
    a = memory.pool_capacity(m, h, Pool(**{**pool, "mem_fraction": lo}))
    b = memory.pool_capacity(m, h, Pool(**{**pool, "mem_fraction": hi}))
    for c in (a, b):
        assert c.kv_tokens >= 0 and c.pages >= 0 and c.kv_budget_gib_per_gpu >= 0
        assert c.fits == (c.kv_tokens > 0) and c.fits == (c.reason == "")
        assert c.pages == c.kv_tokens // pool["page_size"]
    assert a.kv_tokens <= b.kv_tokens


@settings(max_examples=100, deadline=None)
@given(
    layers=st.integers(1, 128),
    mtp=st.integers(0, 2),
    kv_lora=st.integers(64, 1024),
    rope=st.integers(16, 128),
    tp=st.sampled_from([1, 2, 4, 8, 16]),
)
def test_mla_fp8_flat_is_exactly_half_bf16(layers: int, mtp: int, kv_lora: int, rope: int, tp: int) -> None:
    m = spec("kimi-k2.6").model_copy(
        update={
            "layers": layers,
            "dense_layers": 0,
            "mtp_layers": mtp,
            "attention": MLA(
                heads=64,
                q_lora_rank=1536,
                kv_lora_rank=kv_lora,
                qk_rope_head_dim=rope,
                qk_nope_head_dim=128,
                v_head_dim=128,
            ),
        }
    )
    bf16 = memory.kv_bytes_per_token(m, Pool(tp=tp, kv_cache="bf16"))
    fp8 = memory.kv_bytes_per_token(m, Pool(tp=tp, kv_cache="fp8_e4m3", kv_layout="flat"))
    assert bf16 == 2 * fp8 == (layers + mtp) * (kv_lora + rope) * 2  # replicated: independent of tp
