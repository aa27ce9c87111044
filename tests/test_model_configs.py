"""Models from their published config.json: every preset is what its config builds, `--model CONFIG.json` works
where a preset name does, capacity is pinned against a figure an engine printed, and a config the simulator cannot
express is one line naming what."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator import capacity
from simulator.config import hf_config, presets
from simulator.config.scenario import Pool
from simulator.config.specs import HardwareSpec, ModelSpec
from simulator.errors import InputError
from tests.cli_helpers import invoke, run_cli

FIXTURES = Path(__file__).parent / "fixtures" / "models"
CONFIGS = sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").is_file())
OWN = {"tiny-gqa", "tiny-mla-moe"}  # phaseplan's own test models: no release, no config
NOT_ARCHITECTURE = {"name", "source", "formats", "schemes", "checkpoint"}
R1 = str(FIXTURES / "deepseek-r1" / "config.json")


def built(name: str) -> ModelSpec:
    return ModelSpec(**hf_config.read(FIXTURES / name / "config.json"))


def test_every_released_model_preset_has_its_config() -> None:
    assert set(presets.names("models")) - OWN == set(CONFIGS)


@pytest.mark.parametrize("name", CONFIGS)
def test_preset_is_what_its_config_builds(name: str) -> None:
    preset, spec = ModelSpec(**presets.model(name)), built(name)
    assert spec.model_dump(exclude=NOT_ARCHITECTURE) == preset.model_dump(exclude=NOT_ARCHITECTURE)
    if spec.release != "bf16":  # the released format quantizes what the config says; the preset lists it first
        assert spec.formats[spec.release].model_dump(exclude={"scheme"}) == preset.formats[preset.release].model_dump(
            exclude={"scheme"}
        )
        assert next(iter(preset.formats)) == preset.release
    assert "config" in preset.source and preset.checkpoint.count("/") == 1


def test_the_configs_read_as_their_families_say() -> None:
    """Spot checks of what each family's keys mean, against the published figures."""
    r1, k25, oss, qwen, glm52 = (
        built(n) for n in ("deepseek-r1", "kimi-k2.5", "gpt-oss-120b", "qwen3-30b-a3b", "glm-5.2")
    )
    assert (r1.dense_layers, r1.moe.routed_experts, r1.mtp_layers, r1.release) == (3, 256, 1, "fp8")
    assert r1.trust_remote_code and not built("deepseek-v3.2").trust_remote_code  # auto_map, or not
    # compressed-tensors INT4 g32 with self_attn, shared experts and the dense MLP ignored: the routed experts
    assert (k25.release, k25.formats["int4"].components, k25.formats["int4"].group_size) == (
        "int4",
        ["routed_experts"],
        32,
    )
    assert "vision tower is not counted" in k25.source
    assert oss.formats["mxfp4"].components == ["routed_experts"] and "sliding-window layers" in oss.source
    assert (qwen.dense_layers, qwen.moe.intermediate, qwen.moe.shared_experts) == (0, 768, 0)
    assert glm52.indexer is not None and glm52.indexer.share_layers == 4 and glm52.indexer.key_bytes == 132
    assert built("minimax-m2").attention.partial_rotary_factor == 0.5  # rotary_dim 64 of head_dim 128
    # an FP8 release of a model without dense layers or MTP quantizes what it has
    assert built("minimax-m2").formats["fp8"].components == ["attention", "routed_experts"]


MOE = {"model_type": "deepseek_v3", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4}
MOE |= {"q_lora_rank": 64, "kv_lora_rank": 64, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 32}
MOE |= {"intermediate_size": 512, "moe_intermediate_size": 128, "n_routed_experts": 8, "num_experts_per_tok": 2}
MOE |= {"n_shared_experts": 1, "first_k_dense_replace": 1, "vocab_size": 1000}


@pytest.mark.parametrize(
    ("quant", "fmt", "components", "group"),
    [
        (  # W4A8: INT4 group-wise weights with FP8 activations, experts only
            {
                "quant_method": "compressed-tensors",
                "config_groups": {
                    "g": {
                        "targets": ["re:.*experts.*"],
                        "weights": {"num_bits": 4, "type": "int", "group_size": 128},
                        "input_activations": {"num_bits": 8, "type": "float"},
                    }
                },
                "ignore": ["lm_head"],
            },
            "w4a8",
            ["routed_experts", "shared_experts"],
            128,
        ),
        (  # NVIDIA's modelopt NVFP4: attention and shared experts left out by glob, per layer
            {
                "quant_method": "modelopt",
                "quant_algo": "NVFP4",
                "exclude_modules": ["lm_head", "model.layers.*.self_attn*", "model.layers.*.mlp.shared_experts*"],
            },
            "nvfp4",
            ["dense_ffn", "routed_experts"],
            None,
        ),
        (  # an FP8 checkpoint that keeps the dense layers' MLP in BF16 (a regular expression)
            {"quant_method": "fp8", "modules_to_not_convert": ["re:.*layers\\.0\\.mlp.*"]},
            "fp8",
            ["attention", "routed_experts", "shared_experts"],
            None,
        ),
    ],
)
def test_the_release_format_and_what_it_quantizes(
    tmp_path: Path, quant: dict, fmt: str, components: list[str], group: int | None
) -> None:
    spec = ModelSpec(**hf_config.read(write(tmp_path, {**MOE, "quantization_config": quant})))
    assert spec.release == fmt
    assert spec.formats[fmt].components == components and spec.formats[fmt].group_size == group


def test_capacity_of_a_config_is_the_presets(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    code, by_config, err = invoke(monkeypatch, capsys, "capacity", "--model", R1, "--json")
    assert code == 0 and "one TP8 instance, fp8 weights" in err
    code, by_name, _ = invoke(monkeypatch, capsys, "capacity", "--model", "deepseek-r1", "--json")
    assert code == 0 and by_config == by_name
    assert json.loads(by_name)["pools"]["decode"]["kv_bytes_per_token"] == (61 + 1) * 576 * 2  # MLA latent + MTP


def test_a_scenario_may_name_a_config(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "s.yaml").write_text(
        f"model: {R1}\ndeployment:\n  mode: colocated\n  decode: {{tp: 8, weights: fp8}}\n"
    )
    code, out, _ = invoke(monkeypatch, capsys, "capacity", str(tmp_path / "s.yaml"), "--json")
    assert code == 0
    code, other, _ = invoke(
        monkeypatch, capsys, "capacity", str(tmp_path / "s.yaml"), "--model", "deepseek-r1", "--json"
    )
    assert code == 0 and out == other


def test_kv_tokens_against_what_sglang_printed() -> None:
    """vLLM issue #21348 (2025-07-22): `python3 -m sglang.launch_server --model /path/to/Qwen3-235B-A22B-FP8 --tp 4
    ... --mem-fraction-static 0.93` on 4xH100 printed "KV Cache is allocated. #tokens: 367404, K size: 8.23 GB,
    V size: 8.23 GB". The bytes a token costs are the engine's exactly (SGLang's GB is GiB); the tokens are 15% more
    here, because the capacity model holds back nothing for the CUDA context and communication buffers unless a
    pool's reserve_gib says so: the gap is 2.5 GiB a GPU."""
    model = ModelSpec(**presets.model("qwen3-235b-a22b"))
    h100 = HardwareSpec(**presets.hardware("h100"))
    cap = capacity.pool_capacity(model, h100, Pool(tp=4, weights="fp8", kv_cache="bf16", mem_fraction=0.93))
    published_tokens, k_gib = 367_404, 8.23
    assert cap.kv_bytes_per_token == 2 * 94 * 128 * 2  # one KV head of 128 a GPU, K and V, BF16, 94 layers
    assert k_gib * 2**30 / published_tokens == pytest.approx(cap.kv_bytes_per_token / 2, rel=1e-3)
    gap_gib = cap.kv_budget_gib_per_gpu - published_tokens * cap.kv_bytes_per_token / 2**30
    assert 2.0 < gap_gib < 3.0
    assert cap.kv_tokens / published_tokens == pytest.approx(1.15, abs=0.01)


def write(tmp_path: Path, data: object) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(path)


DENSE = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4}
DENSE |= {"intermediate_size": 128, "vocab_size": 100}


@pytest.mark.parametrize(
    ("data", "expect"),
    [
        ("{not json", "model config is not JSON"),
        ([1, 2], "must be a JSON object"),
        ("[" * 100_000 + "]" * 100_000, "nests too deep"),
        ({"hidden_size": 64}, "no model_type"),
        ({**DENSE, "model_type": "gemma3"}, "model_type 'gemma3' is not one phaseplan reads"),
        ({k: v for k, v in DENSE.items() if k != "hidden_size"}, "no hidden_size"),
        ({**DENSE, "hidden_size": 1e300}, "hidden_size: expected an integer"),
        ({**DENSE, "layer_types": ["linear_attention", "full_attention"]}, "layer_types linear_attention"),
        (
            {**DENSE, "model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 2},
            "experts every other layer",
        ),
        ({**DENSE, "quantization_config": {"quant_method": "bitsandbytes"}}, "quant_method 'bitsandbytes'"),
        (
            {**DENSE, "quantization_config": {"quant_method": "fp8", "modules_to_not_convert": ["re:(a+)+$"]}},
            "repeats too much",
        ),
        (
            {**DENSE, "quantization_config": {"quant_method": "fp8", "modules_to_not_convert": ["re:[unclosed"]}},
            "unterminated character set",
        ),
        (
            {**DENSE, "quantization_config": {"quant_method": "fp8", "modules_to_not_convert": ["re:a*a*a*b"]}},
            "repeats too much",
        ),
        (
            {**DENSE, "quantization_config": {"quant_method": "fp8", "modules_to_not_convert": ["x"] * 20_001}},
            "more than 20,000 module names",
        ),
        ({**DENSE, "use_qk_norm": True, "qk_norm_type": "per_token"}, "qk_norm_type 'per_token'"),
        ({**DENSE, "use_qk_norm": True, "qk_norm_type": ["per_layer"]}, "qk_norm_type ['per_layer']"),
    ],
)
def test_a_config_that_cannot_be_read_is_one_line(
    tmp_path: Path, monkeypatch, capsys, data: object, expect: str
) -> None:
    code, out = run_cli(monkeypatch, capsys, "capacity", "--model", write(tmp_path, data))
    assert code == 2 and expect in out and len(out.strip().splitlines()) == 1, out


def test_a_config_is_read_within_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**DENSE, "pad": "x" * (4 << 20)}))
    with pytest.raises(InputError, match="over the 4 MiB a model config may have"):
        presets.model(str(path))
    (tmp_path / "folder.json").mkdir()
    with pytest.raises(InputError, match="model config '.*folder.json' not found"):
        presets.model(str(tmp_path / "folder.json"))


def test_qk_norm_and_the_grouped_router_are_read_from_the_config() -> None:
    """use_qk_norm with qk_norm_type per_layer (MiniMax-M2) normalizes across heads; Qwen3 per head without saying
    so; a config naming n_group (or noaux_tc) routes by groups, as DeepSeek-V3's and GLM-4's families always do."""
    from simulator.config import hf_config

    qwen = hf_config.build({**DENSE, "model_type": "qwen3"}, "cfg", "q")
    llama = hf_config.build(DENSE, "cfg", "l")
    minimax = hf_config.build({**DENSE, "use_qk_norm": True, "qk_norm_type": "per_layer"}, "cfg", "m")
    assert (qwen["attention"]["qk_norm"], minimax["attention"]["qk_norm"]) == ("per_head", "across_heads")
    assert "qk_norm" not in llama["attention"]
    moe = {
        **DENSE,
        "model_type": "qwen3_moe",
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 768,
    }
    assert "grouped_router" not in hf_config.build(moe, "cfg", "x")["moe"]
    assert hf_config.build({**moe, "n_group": 8, "topk_group": 4}, "cfg", "x")["moe"]["grouped_router"] is True
