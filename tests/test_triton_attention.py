"""SGLang's Triton attention backend (`Pool.attention_backend: triton`): its split-KV decode gives each sequence
at most 8 CTAs per block of 16 query heads, so at a few sequences its time follows the context at a few CTAs'
rate, not at HBM bandwidth; its prefill is a slower flash-attention forward. Priced apart from the engine's
default kernels, with factors fitted to AIConfigurator's measured Triton rows."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from simulator.config import loader, presets
from simulator.config.specs import HardwareSpec, ModelSpec
from simulator.deploy import sglang, vllm
from simulator.engine.run import simulate
from simulator.errors import InputError
from simulator.pricing import roofline
from simulator.pricing.ops import step_ops

B200 = HardwareSpec(**presets.hardware("b200"))


def scenario(**over: Any) -> Any:
    base: dict[str, Any] = {
        "name": "t",
        "model": "deepseek-v3",
        "hardware": "b200",
        "deployment": {"mode": "colocated", "decode": {"tp": 8, "weights": "fp8", "attention_backend": "triton"}},
        "traffic": {"concurrency": 2, "requests": 4, "prompt_tokens": 2000, "output_tokens": 40},
        "integrity": {"enabled": False},
        "prefix_cache": {"enabled": False},
        "seed": 3,
    }
    return loader.validate(loader.apply_overrides(base, over), "test")


def mla_shape(batch: Any, context: Any, heads: int = 20) -> dict[str, Any]:
    return {
        "q_heads": heads,
        "kv_heads": 1,
        "k_dim": 576,
        "v_dim": 512,
        "batch": batch,
        "context": context,
        "kv": "bf16",
        "page_size": 64,
    }


def test_the_decode_is_the_bytes_its_ctas_stream_at_their_rate_restated_as_plain_arithmetic() -> None:
    """floor × 2 kernels + the bytes every head block loads / (one CTA's rate × the CTAs that run at once)."""
    f = roofline.factors(B200)
    for batch, ctx in ((1, 1000), (1, 8000), (16, 4000), (64, 4000), (256, 2000)):
        blocks = 2  # 20 heads sharing one latent: blocks of 16
        ctas = min(8 * batch * blocks, B200.sm_count * f.triton_ctas_per_sm)
        streamed = batch * blocks * ctx * (576 + 512) * 2
        want = 2 * f.floor_triton_decode_us + streamed / (f.triton_cta_gbs * 1e3 * ctas)
        assert roofline.op_us("decode_attention_triton", mla_shape(batch, ctx), B200) == pytest.approx(want)


def test_a_few_sequences_pay_for_their_context_at_a_few_ctas_rate() -> None:
    """At one sequence the Triton decode's time grows with the context ~20x faster than the default MLA kernel's
    (16 CTAs stream it, not the GPU); at a full batch its CTAs fill the GPU and a sequence costs the same more."""

    def triton(b: int, c: int) -> float:
        return float(roofline.op_us("decode_attention_triton", mla_shape(b, c), B200))

    def default(b: int, c: int) -> float:
        s = {"heads": 20, "batch": b, "context": c, "kv": "bf16", "layout": "flat", "page_size": 64}
        return float(roofline.op_us("decode_attention_mla", s, B200))

    assert (triton(1, 8000) - triton(1, 1000)) > 10 * (default(1, 8000) - default(1, 1000))
    # beyond the GPU's CTAs the time is linear in the sequences: doubling them doubles the streaming part
    floor = triton(256, 0)
    assert triton(512, 4000) - floor == pytest.approx(2 * (triton(256, 4000) - floor))


def test_a_triton_pool_runs_the_triton_families_and_no_default_attention() -> None:
    model = ModelSpec(**presets.model("deepseek-v3"))
    pool = scenario().deployment.pools()["decode"]
    families = {op.family for op in step_ops(model, pool, 8, 3000, [(512, 1024)])}
    assert {"decode_attention_triton", "prefill_attention_triton"} <= families
    assert not families & {"decode_attention_mla", "decode_attention_gqa", "prefill_attention"}


def test_a_prefill_chunk_after_a_prefix_is_attended_in_the_absorbed_form_on_triton() -> None:
    """SGLang's Triton backend runs MLA's MHA form only for chunks without a prefix: one after cached tokens
    attends over the 576-wide latents with one KV head, and no expansion GEMM runs for it."""
    model = ModelSpec(**presets.model("deepseek-v3"))
    pool = scenario().deployment.pools()["decode"]

    def attention(before: int) -> dict[str, Any]:
        (op,) = [o for o in step_ops(model, pool, 0, 0, [(512, before)]) if o.family == "prefill_attention_triton"]
        return dict(op.shape)

    fresh, after = attention(0), attention(4096)
    assert (fresh["kv_heads"], fresh["qk_dim"], fresh["v_dim"]) == (16, 192, 128)
    assert (after["kv_heads"], after["qk_dim"], after["v_dim"]) == (1, 576, 512)


def test_the_triton_backend_slows_long_context_decode_at_one_client() -> None:
    """The same run on the default kernels and on Triton: the same tokens, a slower TPOT on Triton."""
    tri, ran_tri = simulate(scenario(**{"traffic.concurrency": 1}))
    dflt, ran_dflt = simulate(scenario(**{"traffic.concurrency": 1, "deployment.decode.attention_backend": "default"}))
    assert [r.output for r in ran_tri.requests] == [r.output for r in ran_dflt.requests]
    assert tri["metrics"]["tpot_ms"]["p50"] > dflt["metrics"]["tpot_ms"]["p50"]


def test_a_result_lists_the_gpus_sms_and_triton_factors_only_where_a_pool_runs_triton() -> None:
    with_triton = json.loads(scenario().model_dump_json())["hardware"]
    without = json.loads(scenario(**{"deployment.decode.attention_backend": "default"}).model_dump_json())["hardware"]
    assert with_triton["sm_count"] == 148 and "triton_cta_gbs" in with_triton["roofline"]["factors"]
    assert "sm_count" not in without and not any("triton" in k for k in without["roofline"]["factors"])


def test_bad_backends_are_refused_with_the_field_named() -> None:
    with pytest.raises(InputError, match="attention_backend"):
        scenario(**{"deployment.decode.attention_backend": "flash"})
    with pytest.raises(InputError, match="attention_backend: 'triton' with model deepseek-v3.2"):
        scenario(**{"model": "deepseek-v3.2"})


def test_deploy_passes_the_backend_to_sglang_and_notes_it_for_vllm() -> None:
    sc = scenario()
    argv = sglang.launch(sc).commands[0].argv
    assert argv[argv.index("--attention-backend") + 1] == "triton"
    default = scenario(**{"deployment.decode.attention_backend": "default"})
    assert "--attention-backend" not in sglang.launch(default).commands[0].argv
    assert any("attention_backend triton" in n for n in vllm.launch(sc).notes)


def test_fitted_factors_describe_the_measured_rows() -> None:
    """The presets' Triton factors reproduce AIConfigurator's B200 Triton decode rows within the fit's spread."""
    doc = json.loads((Path(__file__).resolve().parents[1] / "profiles/b200-sglang.json").read_text())
    t = doc["kernels"]["decode_attention_triton"]
    rows = [dict(zip(t["columns"], r, strict=True)) for r in t["rows"]]
    errs = [
        math.log(float(roofline.op_us("decode_attention_triton", r, B200)) / r["median_us"])
        for r in rows
        if r["kv"] == "bf16" and r["context"] >= 1024 and r["batch"] * r["context"] <= 2**23
    ]
    assert len(errs) > 500
    assert math.sqrt(sum(e * e for e in errs) / len(errs)) < 0.35
    assert abs(sorted(errs)[len(errs) // 2]) < 0.1


def test_the_profiler_names_why_it_does_not_time_the_triton_families() -> None:
    from kernels.profiler import unmeasurable

    for family in ("decode_attention_triton", "prefill_attention_triton"):
        assert "AIConfigurator" in (unmeasurable(family, {}) or "")
