"""Weight quantization schemes as deployed: GLM-5.2's INT4 default is its FP8 release converted (routed experts INT4
group 32 as Kimi K2 releases them, the rest FP8 as released); Kimi K2's own scheme (the rest BF16) and "every linear
layer INT4" are named alternatives; capacity names each."""

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


def test_glm_int4_default_is_the_fp8_release_converted_and_the_alternatives_are_named() -> None:
    converted, kimi = format_rule(GLM5, "int4"), format_rule(KIMI, "int4")
    assert converted.components == kimi.components == ["routed_experts"]
    assert converted.group_size == kimi.group_size == 32
    assert (converted.rest, kimi.rest) == ("fp8", "bf16")
    bf16_rest = format_rule(GLM5, "int4", "int4-bf16-rest")
    assert (bf16_rest.components, bf16_rest.group_size, bf16_rest.rest) == (["routed_experts"], 32, "bf16")
    every = format_rule(GLM5, "int4", "int4-all-linear")
    assert set(every.components) == {"attention", "dense_ffn", "routed_experts", "shared_experts", "mtp"}
    assert every.group_size == 128
    default = Pool(tp=8, weights="int4")
    bf16 = Pool(tp=8, weights="int4", weights_scheme="int4-bf16-rest")
    alt = Pool(tp=8, weights="int4", weights_scheme="int4-all-linear")
    fp8 = Pool(tp=8, weights="fp8")
    # what the conversion leaves is FP8: fewer bytes than the BF16 rest, more than every linear layer in INT4
    assert weights_bytes_per_gpu(GLM5, bf16) > weights_bytes_per_gpu(GLM5, default) > weights_bytes_per_gpu(GLM5, alt)
    assert weights_bytes_per_gpu(GLM5, default) < weights_bytes_per_gpu(GLM5, fp8)
    assert component_format(GLM5, default, "attention") == component_format(GLM5, fp8, "attention") == ("fp8", 0)
    assert component_format(GLM5, default, "lm_head") == ("bf16", 0)  # the release's head is BF16
    gemms = {op.params["weights"] for op in step_ops(GLM5, default, 4, 4096) if op.family == "gemm"}
    assert gemms == {op.params["weights"] for op in step_ops(GLM5, fp8, 4, 4096) if op.family == "gemm"}
    ops = step_ops(GLM5, default, 4, 4096)
    assert {(op.params["weights"], op.params["group"]) for op in ops if op.family == "moe_gemm"} == {("int4", 32)}
    assert {op.params["weights"] for op in step_ops(GLM5, bf16, 4, 4096) if op.family == "gemm"} == {"bf16"}
    ops = step_ops(GLM5, alt, 4, 4096)
    assert ("int4", 128) in {(op.params["weights"], op.params["group"]) for op in ops if op.family == "gemm"}


def test_capacity_names_the_scheme(monkeypatch, capsys) -> None:
    glm = str(ROOT / "scenarios" / "glm-5.2-weight-formats.yaml")
    code, text = run_cli(monkeypatch, capsys, "capacity", glm, "--json", "--set", "deployment.decode.weights=int4")
    assert code == 0, text
    assert json.loads(text)["pools"]["decode"]["weights_scheme"].startswith("the FP8 release converted")
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
