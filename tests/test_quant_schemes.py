"""Weight quantization schemes as released: GLM-5.2's INT4 default follows Kimi K2's released scheme (routed experts
INT4 group 32, BF16 scales, the rest BF16); "every linear layer INT4" is a named alternative; capacity names it."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import run_cli

from simulator.capacity import component_format, format_rule, weights_bytes_per_gpu
from simulator.config import presets
from simulator.config.scenario import Pool
from simulator.config.specs import ModelSpec
from simulator.pricing.ops import step_ops

ROOT = Path(__file__).resolve().parents[1]
GLM5 = ModelSpec(**presets.model("glm-5.2"))
KIMI = ModelSpec(**presets.model("kimi-k2.6"))


def test_glm_int4_default_is_the_released_moe_scheme_and_all_linear_is_named() -> None:
    released, kimi = format_rule(GLM5, "int4"), format_rule(KIMI, "int4")
    assert released.components == kimi.components == ["routed_experts"]
    assert released.group_size == kimi.group_size == 32
    every = format_rule(GLM5, "int4", "int4-all-linear")
    assert set(every.components) == {"attention", "dense_ffn", "routed_experts", "shared_experts", "mtp"}
    assert every.group_size == 128
    # attention, shared experts and the dense layers stay BF16 in the released scheme: more bytes per GPU
    default, alt = Pool(tp=8, weights="int4"), Pool(tp=8, weights="int4", weights_scheme="int4-all-linear")
    assert weights_bytes_per_gpu(GLM5, default) > weights_bytes_per_gpu(GLM5, alt)
    ops = step_ops(GLM5, default, 4, 4096)
    assert {op.params["weights"] for op in ops if op.family == "gemm"} == {"bf16"}
    assert {(op.params["weights"], op.params["group"]) for op in ops if op.family == "moe_gemm"} == {("int4", 32)}
    ops = step_ops(GLM5, alt, 4, 4096)
    assert ("int4", 128) in {(op.params["weights"], op.params["group"]) for op in ops if op.family == "gemm"}


def test_capacity_names_the_scheme(monkeypatch, capsys) -> None:
    glm = str(ROOT / "scenarios" / "glm-5.2-weight-formats.yaml")
    code, text = run_cli(monkeypatch, capsys, "capacity", glm, "--json", "--set", "deployment.decode.weights=int4")
    assert code == 0, text
    assert json.loads(text)["pools"]["decode"]["weights_scheme"].startswith("Kimi K2-style INT4")
    code, text = run_cli(
        monkeypatch,
        capsys,
        "capacity",
        glm,
        "--set",
        "deployment.decode.weights=int4",
        "--set",
        "deployment.decode.weights_scheme=int4-all-linear",
    )
    assert code == 0 and "int4-all-linear: int4 g128 in every linear layer" in " ".join(text.split()), text
    kimi = str(ROOT / "scenarios" / "kimi-k2.6-decode.yaml")
    code, text = run_cli(monkeypatch, capsys, "capacity", kimi, "--json")
    assert json.loads(text)["pools"]["decode"]["weights_scheme"].startswith("as released (INT4 QAT)")


def test_an_unknown_scheme_is_one_line_naming_the_pool(monkeypatch, capsys) -> None:
    glm = str(ROOT / "scenarios" / "glm-5.2-weight-formats.yaml")
    code, text = run_cli(monkeypatch, capsys, "capacity", glm, "--set", "deployment.decode.weights_scheme=nope")
    assert code == 2 and len(text.strip().splitlines()) == 1
    assert "deployment.decode.weights_scheme" in text and "int4-all-linear" in text


def test_the_executor_draws_each_component_in_the_pricings_format() -> None:
    """The replay's rank model stores every matrix in the (format, group) the op list prices it in: one rule,
    `capacity.component_format`, for every format the executor runs and every scheme (the preset's own, a
    named alternative)."""
    import torch

    from kernels.executor.runner import LayerPlan, RankModel
    from simulator.config.specs import FormatRule

    tiny = ModelSpec(**presets.model("tiny-mla-moe"))
    tiny = tiny.model_copy(
        update={"schemes": {"experts-only": FormatRule(components=["routed_experts"], group_size=64)}}
    )
    for weights, scheme in [
        ("bf16", None),
        ("fp8", None),
        ("int4", None),
        ("int4", "experts-only"),
        ("fp8", "experts-only"),
    ]:
        pool = Pool(tp=1, weights=weights, weights_scheme=scheme)
        rank = RankModel(tiny, pool, LayerPlan.whole(tiny), torch.device("cpu"), seed=0)
        attn, dense = rank.layers[0]
        _, moe = rank.layers[1]
        drawn = {
            "attention": attn.w_o,
            "dense_ffn": dense.up,
            "routed_experts": moe.up,
            "shared_experts": moe.shared.up,
            "lm_head": rank.lm_head,
        }
        for component, w in drawn.items():
            assert (w.fmt, w.group) == component_format(tiny, pool, component), (weights, scheme, component)
        ops = step_ops(tiny, pool, 4, 512)
        priced = {(op.params["weights"], op.params["group"]) for op in ops if op.family == "moe_gemm"}
        assert priced == {component_format(tiny, pool, "routed_experts")}
