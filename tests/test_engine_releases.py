"""An engine's later releases (issue 42): a preset of them states only the terms that changed, and a published run
is priced by the preset of the release it states, so a held-out case saying `sglang-0.5` at `v0.5.12` runs the
later kernels' terms without naming them."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.config import loader, presets
from simulator.config.specs import EngineSpec
from simulator.validation import suite


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("v0.5.12 (lmsysorg/sglang:v0.5.12-cu130)", "sglang-0.5.10"),
        ("0.5.13.post1", "sglang-0.5.10"),
        ("0.5.10", "sglang-0.5.10"),
        ("0.5.9", "sglang-0.5"),
        ("0.5.6.post1", "sglang-0.5"),
        ("commit 947927bdb", "sglang-0.5"),  # no release stated: the named preset
        ("SGLang main, blog date", "sglang-0.5"),
    ],
)
def test_a_stated_release_picks_the_preset_that_prices_it(version: str, expected: str) -> None:
    assert presets.for_release("sglang-0.5", version) == expected


def test_an_engine_without_later_presets_is_its_own_at_every_release() -> None:
    assert presets.for_release("vllm-0.x", "v0.17.0") == "vllm-0.x"
    assert presets.for_release("engines/sglang-cookbook-dsr1-b200.yaml", "0.5.12") == (
        "engines/sglang-cookbook-dsr1-b200.yaml"
    )


def test_a_later_releases_preset_holds_the_earlier_terms_but_its_own() -> None:
    earlier, later = presets.engine("sglang-0.5"), presets.engine("sglang-0.5.10")
    own = set(presets._read("engines", "sglang-0.5.10")) & set(EngineSpec.TERMS)
    assert own == {"host_step_us", "decode_layer_us", "fp8_sparse_prefill", "prefill_graphs", "request_latency_us"}
    for term in EngineSpec.TERMS:
        if term not in own:
            assert later.get(term) == earlier.get(term), term
    assert set(earlier["sources"]) <= set(later["sources"])
    assert later["sources"]["host_step_us"] != earlier["sources"]["host_step_us"]
    spec = EngineSpec.model_validate(later)
    assert spec.releases is not None and spec.releases.of == "sglang-0.5" and spec.releases.since == "0.5.10"
    assert "releases" not in EngineSpec.model_validate(earlier).model_dump()  # Results of sglang-0.5 keep their bytes


def test_the_corpus_cases_are_priced_by_their_releases_preset() -> None:
    cases = {c.id: c for c in suite.load_cases()}
    assert cases["dsr1-b200-sglang-ix-fp8kv-tp8-1k1k-c1"].engine == "sglang-0.5.10"  # v0.5.12
    assert cases["dsr1-b200-sglang-ix-fp8kv-tp8-1k1k-c1"].scenario.engine.name == "sglang-0.5.10"
    assert cases["dsr1-b200-sglang-tp8-1k1k-c1"].engine == "sglang-0.5"  # 0.5.6.post1
    assert cases["dsr1-b200-sglang-tp8-1k1k-c1"].spec.engine == "sglang-0.5"


def test_piecewise_prefill_graphs_are_the_later_releases_and_off_under_disaggregation() -> None:
    """SGLang captures steps with prefill rows in piecewise CUDA graphs from 0.5.10 on, but not in a PD-
    disaggregated deployment (server_args.py `_handle_piecewise_cuda_graph`): the scenario resolves it per pool."""
    scenario = Path(__file__).resolve().parent.parent / "scenarios" / "glm-5.2-weight-formats.yaml"
    split = loader.load(scenario, ("engine=sglang-0.5.10",))[0]
    assert split.deployment.mode == "disaggregated"
    assert not any(p.prefill_graphs for p in split.deployment.pools().values())
    one = loader.load(scenario, ("engine=sglang-0.5.10", "deployment.mode=colocated"))[0]
    assert one.deployment.decode.prefill_graphs
    earlier = loader.load(scenario, ("engine=sglang-0.5", "deployment.mode=colocated"))[0]
    assert not earlier.deployment.decode.prefill_graphs
    kept = loader.load(scenario, ("engine=sglang-0.5.10", "deployment.prefill.prefill_graphs=true"))[0]
    assert kept.deployment.prefill.prefill_graphs  # a pool that says so keeps them
