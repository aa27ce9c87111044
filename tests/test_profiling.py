"""`phaseplan profile`: the shapes it collects, the modeled profile, and a (tiny) measured one on the CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernels.profiler import BUDGET, QUICK_BUDGET, collect_shapes, count, scenario_pairs, write_profile
from phaseplan.cli import cli
from simulator.config import presets
from simulator.config.specs import HardwareSpec
from simulator.pricing import roofline
from simulator.pricing.costmodel import CostModel
from simulator.pricing.profile import AXES, Profile, categorical

H200 = HardwareSpec(**presets.hardware("h200"))
COMMITTED = Path(__file__).parent.parent / "profiles" / "h200-modeled.json"


def _shape_set(shapes: dict) -> set[tuple[str, str]]:
    return {(f, json.dumps(s, sort_keys=True)) for f, v in shapes.items() for s in v}


@pytest.fixture(scope="module")
def everything() -> dict:
    return collect_shapes(budget=None)


def test_pairs_include_every_swept_pool_variant() -> None:
    got = {(m.name, p.weights, p.kv_cache, p.page_size, p.tp) for m, p in scenario_pairs()}
    wide = {(p.dp, p.redundant_experts, p.expert_imbalance) for m, p in scenario_pairs() if m.name == "deepseek-v3"}
    assert wide == {(32, 0, 1.0), (32, 32, 1.2)}  # the wide-EP study's two pools (its B200 NVFP4 twin: no H200 shapes)
    assert all(p.speculative is None for _, p in scenario_pairs())  # verify/draft shapes stay on the roofline
    assert ("glm-5.2", "int4", "fp8_e4m3", 64, 8) in got  # only a sweep point of glm-5.2-*.yaml deploys it
    assert ("kimi-k2.6", "int4", "bf16", 64, 8) in got and ("kimi-k2.6", "int4", "fp8_e4m3", 64, 8) in got
    assert ("llama-3.1-70b", "fp8", "fp8_e4m3", 16, 4) in got
    assert len(got) + len(wide) - 1 == len(scenario_pairs())  # deduplicated


def test_thinned_shapes_fit_the_budget_and_span_every_table(everything: dict) -> None:
    full, quick = collect_shapes(), collect_shapes(quick=True)
    assert 1000 < count(full) <= BUDGET and count(quick) <= QUICK_BUDGET
    assert _shape_set(quick) <= _shape_set(everything) and _shape_set(full) <= _shape_set(everything)
    assert "allreduce" not in everything and set(full) == set(quick) == set(everything)
    for family, shapes in everything.items():
        ax = AXES[family]
        tables: dict = {}
        for s in shapes:
            tables.setdefault(categorical(family, s), []).append(s)
        for key, table in tables.items():
            kept = [s for s in full[family] if categorical(family, s) == key]
            for axis in filter(None, (ax.outer, ax.inner_keys[0])):  # every table keeps its extent
                assert min(s[axis] for s in kept) == min(s[axis] for s in table), (family, key, axis)
                assert max(s[axis] for s in kept) == max(s[axis] for s in table), (family, key, axis)


def test_roofline_profile_holds_modeled_times_with_provenance(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "h200.json"
    res = CliRunner().invoke(
        cli, ["profile", "--device", "roofline", "--hardware", "h200", "--out", str(out), "--quick"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["source"] == "modeled" and doc["device"] == "h200 (roofline model)"
    assert doc["git_commit"] and doc["date"].endswith("Z") and doc["ceilings"]["copy_gbs"] == H200.copy_gbs
    assert _shape_set({f: [e["shape"] for e in v] for f, v in doc["kernels"].items()}) == _shape_set(
        collect_shapes(quick=True)
    )
    for family, entries in doc["kernels"].items():
        for e in entries:
            assert e["median_us"] == e["p10_us"] == e["p90_us"] == roofline.op_us(family, e["shape"], H200)
    prof = Profile.load(out)
    assert prof.provenance()["profile_source"] == "modeled" and prof.provenance()["file"] == str(out)
    assert not list(tmp_path.rglob("*.tmp"))  # written atomically


def test_committed_modeled_profile_is_current_and_equals_the_roofline(everything: dict) -> None:
    """profiles/h200-modeled.json holds every shape the op lists produce today (else: `make profile-modeled`),
    and prices the studies' operating points exactly as the roofline does, without falling back (its entries are
    eager kernels: the comparison runs decode eagerly too, without the CUDA-graph floor, and reads an FP8 cache at
    the hardware's own factor, without the engine's cost per graphed layer or its eager launch floor: an engine's
    terms are not the hardware's)."""
    assert COMMITTED.stat().st_size < 2e6
    doc = json.loads(COMMITTED.read_text())
    assert _shape_set({f: [e["shape"] for e in v] for f, v in doc["kernels"].items()}) == _shape_set(everything)
    prof, roof = Profile.load(COMMITTED), Profile.roofline(H200)
    for model, graphed in scenario_pairs():
        eager = {"decode_graph_floor_us": None, "fp8_kv_read_factor": None, "decode_layer_us": 0.0}
        eager["eager_kernel_us"] = 0.0  # nor the engine's CPU launches
        pool = graphed.model_copy(update=eager)
        tables, model_only = CostModel(model, H200, pool, prof, True), CostModel(model, H200, pool, roof, True)
        steps = [(b, b * c, b * (c // pool.page_size), []) for b in (1, 64, 256) for c in (1024, 32768)]
        steps += [(0, 0, 0, [(chunk, before)]) for chunk in (512, 16384) for before in (0, 8192)]
        for args in steps:
            assert tables.step_s(*args) == pytest.approx(model_only.step_s(*args), rel=1e-9)
        assert tables.usage.seconds["fallback"] == 0 and not tables.usage.fallback_ops


TINY = {
    "gemm": [{"m": m, "n": 32, "k": 64, "batch": 1, "weights": "bf16", "group": 0} for m in (1, 16)]
    + [{"m": 4, "n": 32, "k": 64, "batch": 8, "weights": "bf16", "group": 0}],
    "elementwise": [{"bytes": 4096}],
    "decode_indexer": [{"heads": 4, "head_dim": 16, "key_bytes": 17, "topk": 8, "batch": 1, "context": 64}],
}


def test_cpu_profile_of_tiny_shapes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ops are timed for real; the ceilings are stubbed (a 1024³ BF16 matmul takes ~10 s on a CPU)."""
    torch = pytest.importorskip("torch")
    import kernels.measure

    monkeypatch.setattr(kernels.measure, "ceilings", lambda device: {"copy_gbs": 12.5, "bf16_tflops": 0.5})
    out = write_profile("cpu", "h200", tmp_path / "cpu.json", shapes=TINY)
    doc = json.loads(out.read_text())
    assert doc["source"] == "measured" and doc["device"]
    assert doc["versions"]["torch"] == torch.__version__ and doc["git_commit"]
    assert doc["ceilings"] == {"copy_gbs": 12.5, "bf16_tflops": 0.5}
    assert [(e["shape"]["m"], e["shape"]["batch"]) for e in doc["kernels"]["gemm"]] == [(1, 1), (16, 1), (4, 8)]
    assert all(0 < e["p10_us"] <= e["median_us"] <= e["p90_us"] for v in doc["kernels"].values() for e in v)
    assert "gemm" not in doc["skipped"] and doc["skipped"]["decode_indexer"]["shapes"] == 1
    assert "indexer" in doc["skipped"]["decode_indexer"]["why"][0]
    assert doc["failed"] == [] and doc["unmeasured"] == 0
    prof = Profile.load(out)
    e = doc["kernels"]["gemm"][1]
    assert prof.lookup("gemm", e["shape"]) == e["median_us"]
    assert prof.lookup("decode_indexer", TINY["decode_indexer"][0]) is None  # left to the roofline
