"""Serving-engine presets: what each names, how pools take and override its terms, and the engine behaviour each
term prices (the CPU work per step at the engine's seam, mixed chunked prefill, two-batch overlap's hidden share),
and the format directions the default engine must reproduce, each with its arithmetic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli

from simulator.config import loader, presets
from simulator.config.specs import EngineSpec
from simulator.engine.timer import CostTimer, HostTime
from simulator.errors import InputError
from simulator.pricing import roofline
from simulator.pricing.costmodel import CostModel
from simulator.pricing.profile import Profile

ROOT = Path(__file__).resolve().parents[1]
KIMI_KV = ROOT / "scenarios" / "kimi-k2.6-kv-formats.yaml"


def _load(path: Path, *sets: str):
    return loader.load(path, list(sets))[0]


def _cost(sc, pool_name: str = "decode") -> CostModel:
    pool = sc.deployment.pools()[pool_name]
    return CostModel(sc.model, sc.hardware, pool, Profile.for_scenario(sc, ROOT / "scenarios"), sc.integrity.enabled)


def test_every_engine_preset_is_valid_and_sources_each_term() -> None:
    names = presets.names("engines")
    assert {"sglang-0.5", "vllm-0.x"} <= set(names)
    for name in names:
        spec = EngineSpec(**presets.engine(name))
        assert spec.name == name
        # every value says where it comes from
        later = {"releases"} if spec.releases else set()  # a later releases' preset says why it is one
        assert set(spec.sources) == {*EngineSpec.TERMS, "prefill_a2a_node_dedup", "router", *later}, name


def test_a_scenario_runs_on_sglang_unless_it_names_another_engine_and_a_pool_still_overrides() -> None:
    sc = _load(KIMI_KV)
    assert sc.engine.name == "sglang-0.5.10"
    assert sc.deployment.decode.mixed_chunked_prefill is False  # SGLang: --enable-mixed-chunk off
    sc = _load(KIMI_KV, "engine=vllm-0.x", "deployment.decode.fuse_elementwise=false")
    assert sc.engine.name == "vllm-0.x"
    assert sc.deployment.decode.mixed_chunked_prefill is True
    assert sc.deployment.decode.fp8_kv_read_factor == pytest.approx(1.08)
    assert sc.deployment.decode.fuse_elementwise is False  # the pool's own value wins over the engine's


def test_an_unknown_engine_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(InputError, match="unknown engine preset 'trtllm'.*sglang-0.5"):
        _load(KIMI_KV, "engine=trtllm")


def test_presets_lists_the_engines_and_results_name_theirs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run_cli(monkeypatch, capsys, "presets")
    assert code == 0 and "sglang-0.5" in out and "vllm-0.x" in out
    code, out = run_cli(
        monkeypatch, capsys, "run", str(ROOT / "scenarios" / "tiny-cpu.yaml"), "--set", "engine=vllm-0.x"
    )
    assert code == 0 and "engine vllm-0.x" in out


class _Pool:
    def __init__(
        self, host_us: float, overlap: bool, spec: object = None, with_spec: bool = False, dp: int = 1, nodes: int = 1
    ) -> None:
        self.host_step_us, self.overlap_scheduler, self.speculative = host_us, overlap, spec
        self.overlap_with_speculation = with_spec
        self.dp, self.dp_sync_us, self.nodes = dp, 3000.0, nodes  # one rank: no DP sync


def test_host_time_is_hidden_behind_the_gpu_step_with_the_overlap_scheduler_and_adds_without() -> None:
    gpu_us = np.array([4000.0, 9000.0])
    hidden = HostTime(_Pool(6000.0, True))  # type: ignore[arg-type]
    assert hidden.ends(1.0, gpu_us) == pytest.approx([1.006, 1.015])  # max(4, 6) ms, then max(9, 6) ms
    added = HostTime(_Pool(6000.0, True, spec=object()))  # type: ignore[arg-type]  # SGLang: off under speculation
    assert added.ends(1.0, gpu_us) == pytest.approx([1.010, 1.025])  # 4 + 6, then 9 + 6 ms
    assert HostTime(_Pool(6000.0, True, spec=object(), with_spec=True)).step(0.004) == pytest.approx(0.006)  # type: ignore[arg-type]
    # a run of n steps ends where n runs of one do (the step mode the replay uses)
    t, ends = 1.0, []
    for us in gpu_us:
        t = added.ends(t, np.array([us]))[0]
        ends.append(t)
    assert ends == added.ends(1.0, gpu_us)


def test_a_dp_sync_across_nodes_stays_on_the_step_under_the_overlap_scheduler() -> None:
    """SGLang's overlap path gathers each step's batch sizes over the CPU group: within a node that is CPU work
    like the rest (hidden under a longer GPU step), across nodes it lands on the step; without overlap all adds."""
    one_node = HostTime(_Pool(2000.0, True, dp=8))  # type: ignore[arg-type]
    two_nodes = HostTime(_Pool(2000.0, True, dp=16, nodes=2))  # type: ignore[arg-type]
    serial = HostTime(_Pool(2000.0, False, dp=16, nodes=2))  # type: ignore[arg-type]
    assert one_node.step(0.010) == pytest.approx(0.010)  # max(10, 2 + 3) ms
    assert one_node.step(0.004) == pytest.approx(0.005)  # max(4, 2 + 3) ms
    assert two_nodes.step(0.010) == pytest.approx(0.013)  # max(10, 2) + 3 ms
    assert two_nodes.step(0.001) == pytest.approx(0.005)  # max(1, 2) + 3 ms
    assert serial.step(0.010) == pytest.approx(0.015)  # 10 + 2 + 3 ms
    gpu_us = np.array([10000.0, 1000.0])
    assert two_nodes.ends(1.0, gpu_us, [1.010, 1.011]) == pytest.approx([1.013, 1.018])  # not the GPU's ends


class _Mixed(CostTimer):
    """Counts the steps that carry prefill chunks and a decode batch together."""

    def __init__(self) -> None:
        super().__init__()
        self.mixed = self.steps = 0

    def time_run(self, inst, plans, n):  # type: ignore[no-untyped-def]
        self.steps += 1
        self.mixed += any(p.prefill and p.decode for p in plans)
        return super().time_run(inst, plans, n)


def test_without_mixed_chunked_prefill_a_step_with_chunks_runs_no_decode() -> None:
    from simulator.engine.run import simulate

    base = ["deployment.mode=colocated", "traffic.concurrency=4", "traffic.requests=12", "sweep={}", "focus={}"]
    for mixed in (True, False):
        sc = _load(KIMI_KV, *base, f"deployment.decode.mixed_chunked_prefill={str(mixed).lower()}")
        timer = _Mixed()
        simulate(sc, step_mode=True, timer=timer)
        assert timer.steps > 0
        assert (timer.mixed > 0) is mixed, (mixed, timer.mixed)


def test_two_batch_overlap_hides_the_engines_share_of_the_shorter_part() -> None:
    from simulator.pricing.dpstep import DPSteps

    sets = ["deployment.decode.two_batch_overlap=true", "sweep={}", "focus={}"]
    wide = ROOT / "scenarios" / "deepseek-v3-wide-ep.yaml"
    step = {}
    for h in (0.0, 0.44, 1.0):
        sc = _load(wide, *sets, f"deployment.decode.tbo_hidden_share={h}")
        dp = DPSteps(_cost(sc))
        ranks = [(64, np.array([64 * 2000]), np.array([64 * 32]))] * sc.deployment.decode.dp
        step[h] = float(dp.decode_run(ranks, 0.0)[0].us[0])
        a2a = float(np.atleast_1d(dp.alltoall(64 * sc.deployment.decode.dp).us)[0])
    compute = step[0.0] - a2a
    assert step[1.0] == pytest.approx(max(compute, a2a))  # h = 1: the perfect bound
    assert step[0.44] == pytest.approx(compute + a2a - 0.44 * min(compute, a2a))


def test_fp8_kv_is_a_few_percent_slower_per_step_at_matched_concurrency_on_the_default_engine() -> None:
    """SGLang's MLA decode converts each FP8 latent tile to BF16: 576 B × 2.3 is 1.15 × the BF16 1,152 B read, so
    the FP8 step is slower by that much of its attention time, and only that."""
    sc_b = _load(KIMI_KV, "deployment.decode.kv_cache=bf16", "sweep={}", "focus={}")
    sc_f = _load(KIMI_KV, "deployment.decode.kv_cache=fp8_e4m3", "sweep={}", "focus={}")
    ctx = 5000
    for batch in (1, 8, 16):
        fb = _cost(sc_b).breakdown(batch, batch * ctx, batch * 79)
        ff = _cost(sc_f).breakdown(batch, batch * ctx, batch * 79)
        slower = sum(ff.values()) / sum(fb.values())
        assert 1.0 < slower < 1.08, (batch, slower)  # a few percent
        attn_b, attn_f = fb["decode_attention_mla"], ff["decode_attention_mla"]
        assert attn_f > attn_b  # the cache read itself is what costs more
        assert sum(ff.values()) - sum(fb.values()) == pytest.approx(
            (attn_f - attn_b) + (ff.get("kv_write", 0) - fb.get("kv_write", 0)), rel=1e-6
        )


def test_int4_moe_gain_over_fp8_is_largest_at_few_tokens_and_reverses_in_prefill() -> None:
    """W4A16 reads half FP8's bytes (gain where the op is memory-bound) but runs BF16 tensor cores after the
    dequantization (half FP8's rate): so it loses once the routed experts are compute-bound."""
    hw = _load(KIMI_KV).hardware
    shape = {"experts": 384, "top_k": 8, "hidden": 7168, "inter": 2048, "tp": 8, "ep": 1, "group": 32}

    def gain(t: int) -> float:
        us = {w: float(roofline.op_us("fused_moe", {**shape, "tokens": t, "weights": w}, hw)) for w in ("fp8", "int4")}
        return us["fp8"] / us["int4"]

    assert gain(1) > 1.3
    assert gain(64) > gain(256) > gain(512) > gain(1024)  # shrinking once the experts are all read
    # AIConfigurator's measured SGLang rows (this shape, TP8; FP8 time over INT4 time): 1.01 at 512 tokens,
    # 0.70 at 1,024, 0.49 at 16,384
    assert gain(1024) <= 1.0
    assert gain(16384) < 0.6  # prefill: about half FP8's speed


def test_marlin_int4_grouped_gemm_adds_its_math_to_its_weight_stream() -> None:
    """Marlin's W4A16 grouped GEMM on Hopper: bytes at the fitted bandwidth plus the unpadded rows' FLOPs at its
    fitted rate, plus its launch floor, restated as plain arithmetic (an FP8 grouped GEMM takes the larger)."""
    hw = _load(KIMI_KV).hardware
    f = roofline.factors(hw)
    pairs, experts, n, k = 512, 200, 4096, 7168
    s = {"tokens": pairs, "experts": experts, "n": n, "k": k, "group": 32}
    weight_bytes = experts * n * k * (4 + 16 / 32) / 8 + pairs * (n + k) * 2
    mem = weight_bytes / (hw.copy_gbs * f.mem_eff_int4 * f.mem_eff_moe / f.mem_eff_gemm * 1e3)
    mma = 2.0 * pairs * n * k / (hw.bf16_tflops * f.mma_eff_int4_moe * 1e6)
    assert roofline.op_us("moe_gemm", {**s, "weights": "int4"}, hw) == pytest.approx(mem + mma + f.floor_moe_us)
    fp8_mem, fp8_mma, floor = roofline.terms_us("moe_gemm", {**s, "weights": "fp8", "group": 0}, hw)
    assert roofline.op_us("moe_gemm", {**s, "weights": "fp8", "group": 0}, hw) == max(fp8_mem, fp8_mma) + floor


def test_int4_prefill_is_slower_than_fp8_prefill_on_glm() -> None:
    glm = ROOT / "scenarios" / "glm-5.2-prefill.yaml"
    t = {}
    for w in ("fp8", "int4"):
        sc = _load(glm, f"deployment.prefill.weights={w}", "sweep={}", "focus={}")
        t[w] = _cost(sc, "prefill").step_s(0, 0, 0, [(8192, 0)])
    assert t["int4"] > t["fp8"]


def test_a_prefill_pool_sends_a_token_once_per_node_under_sglang() -> None:
    """DeepEP's normal mode: a token's 8 experts over 4 nodes reach 1 − (3/4)^8 = 0.90 of the nodes, 0.45 of
    the 2 cross-node pairs' worth a pair-by-pair dispatch sends; decode (low-latency mode) sends every pair."""
    from simulator.pricing.ops import node_dedup_share

    assert node_dedup_share(4, 8) == pytest.approx((1 - 0.75**8) / 2)
    assert node_dedup_share(1, 8) == 1.0
    sc = _load(ROOT / "scenarios" / "deepseek-v3-wide-ep.yaml", "sweep={}", "focus={}")
    assert sc.deployment.prefill.a2a_node_dedup and not sc.deployment.decode.a2a_node_dedup
    shape = {"bytes": 1e9, "ranks": 32, "nodes": 4}
    hw = sc.hardware
    per_pair = roofline.op_us("alltoall", {**shape, "remote": 1.0}, hw)
    per_node = roofline.op_us("alltoall", {**shape, "remote": node_dedup_share(4, 8)}, hw)
    assert per_node < per_pair


def test_a_graphed_decode_step_pays_the_engines_per_layer_cost_and_a_prefill_step_does_not() -> None:
    """`decode_layer_us` adds layers × its µs to a decode-only step, under a family of its own, and nothing else."""
    base = ("deployment.decode.kv_cache=bf16", "sweep={}", "focus={}")
    plain = _cost(_load(KIMI_KV, *base, "deployment.decode.decode_layer_us=0"))
    more = _cost(_load(KIMI_KV, *base, "deployment.decode.decode_layer_us=20"))
    layers = plain.model.layers
    fb, fm = plain.breakdown(4, 4 * 3000, 4 * 47), more.breakdown(4, 4 * 3000, 4 * 47)
    assert fm["decode_layers"] == pytest.approx(20 * layers * 1e-6)
    assert sum(fm.values()) - sum(fb.values()) == pytest.approx(20 * layers * 1e-6, rel=1e-9)
    assert "decode_layers" not in fb
    chunk = [(2048, 0)]
    assert more.step_s(0, 0, 0, chunk) == plain.step_s(0, 0, 0, chunk)


def test_an_fp8_cache_pays_the_engines_fixed_cost_once_per_decode_attention_call() -> None:
    """`fp8_kv_fixed_us` adds its µs to every FP8-cache decode attention call (one a layer), whatever the bytes;
    a BF16 cache never pays it."""
    base = ("sweep={}", "focus={}")
    for kv, paid in (("fp8_e4m3", 1), ("bf16", 0)):
        costs = [
            _cost(_load(KIMI_KV, *base, f"deployment.decode.kv_cache={kv}", f"deployment.decode.fp8_kv_fixed_us={us}"))
            for us in (0, 10)
        ]
        for batch in (1, 16):
            a, b = (c.breakdown(batch, batch * 4000, batch * 63)["decode_attention_mla"] for c in costs)
            assert b - a == pytest.approx(paid * 10 * costs[0].model.layers * 1e-6, rel=1e-6), (kv, batch)


def test_a_requests_time_outside_the_gpu_steps_lands_on_its_ttft_and_latency_not_its_tpot() -> None:
    """`request_latency_us` (the entry pool's): one request at a time, every TTFT and end-to-end latency grows by it
    exactly and the decode steps, so the TPOT, do not move."""
    from simulator.engine.run import simulate

    base = ["deployment.mode=colocated", "traffic.concurrency=1", "traffic.requests=3", "sweep={}", "focus={}"]
    runs = []
    for us in (0, 50000):
        sc = _load(KIMI_KV, *base, f"deployment.decode.request_latency_us={us}")
        runs.append([r for r in simulate(sc, ROOT)[1].requests if r.status == "completed"])
    assert len(runs[0]) == len(runs[1]) == 3
    for a, b in zip(*runs, strict=True):
        assert (b.first_token - b.arrival) - (a.first_token - a.arrival) == pytest.approx(0.05, abs=1e-9)
        assert (b.finish - b.first_token) == pytest.approx(a.finish - a.first_token, rel=1e-9)
