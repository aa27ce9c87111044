"""The real clock on the CPU: the tiny scenario replayed end to end with the torch reference ops, the modeled
clock through the executor equal to `run`, paged attention equal to dense attention over the same tokens, and
integrity faults caught on the device exactly as in the simulator."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kernels.executor.clock import ReplayClock  # noqa: E402
from kernels.executor.replay import replay  # noqa: E402
from kernels.executor.step import build  # noqa: E402
from simulator.config import loader  # noqa: E402
from simulator.engine.run import simulate  # noqa: E402

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "tiny-cpu.yaml"


def tiny(*sets: str) -> Any:
    sc, _ = loader.load(SCENARIO, ("traffic.requests=32", "traffic.concurrency=8", *sets))
    return sc


def timelines(sim: Any) -> list[tuple[Any, ...]]:
    return [(r.id, r.status, r.first_token, r.finish, r.cached_tokens) for r in sim.requests]


@pytest.mark.parametrize("model", ["tiny-mla-moe", "tiny-gqa"])
def test_replay_runs_both_tiny_models_end_to_end(model: str) -> None:
    result = replay(tiny(f"model={model}"), SCENARIO.parent, "cpu").result
    m, prov = result["metrics"], result["provenance"]["replay"]
    assert result["clock"] == "measured"
    assert m["completed"] == m["requests"] == 32
    assert m["output_tokens_per_s"] > 0 and m["tpot_ms"]["p50"] > 0
    steps = prov["steps"]
    assert steps["executed"] > 0 and steps["total"] == steps["executed"] + steps["reused"] + steps["priced"]
    assert prov["seconds"]["measured"] > 0 and prov["seconds"]["collectives_priced"] == 0  # tp 1
    assert set(prov["kv_pages"]) == {"prefill/0", "decode/0"}
    json.dumps(result, allow_nan=False)  # the Result schema stays JSON


SPEC = "deployment.decode.speculative={method: draft, draft_tokens: 2, draft_model: tiny-gqa, acceptance: [0.7, 0.5]}"


@pytest.mark.parametrize("sets", [(), (SPEC,)], ids=["plain", "speculative-draft"])
def test_modeled_clock_through_the_executor_equals_run(sets: tuple[str, ...]) -> None:
    sc = tiny(*sets)
    ran, sim = simulate(sc, SCENARIO.parent)
    rep = replay(sc, SCENARIO.parent, "cpu", clock="modeled")
    replayed, rsim = rep.result, rep.run
    assert replayed["metrics"] == ran["metrics"]
    assert replayed["integrity"] == ran["integrity"]
    assert timelines(rsim) == timelines(sim)
    assert replayed["provenance"]["replay"]["steps"]["executed"] > 0


def test_integrity_faults_are_caught_on_the_device_as_in_the_simulator() -> None:
    sc = tiny("integrity.fault_rate=0.02", "integrity.fault_kinds=[stale, foreign, out_of_range]")
    ran, sim = simulate(sc, SCENARIO.parent)
    rep = replay(sc, SCENARIO.parent, "cpu", clock="modeled")
    replayed, rsim = rep.result, rep.run
    assert ran["integrity"]["detected"] > 0
    assert replayed["integrity"] == ran["integrity"]  # same counts, same aborted requests and slots
    assert [r.id for r in rsim.requests if r.status == "aborted"] == [
        r.id for r in sim.requests if r.status == "aborted"
    ]
    trackers = rep.timer.trackers.values()
    assert sum(t.checks for t in trackers) > 0  # the checks ran through the device tracker


class _Shadow(ReplayClock):
    """Executes every step; records what each step wrote for each (request, position) in layer 0 right after
    writing it, and, at one decode step of at least three sequences, runs the paged decode attention."""

    def __init__(self, *a: Any, **k: Any) -> None:
        super().__init__(*a, samples=10**9, budget_s=1e9, **k)
        self.rows: dict[tuple[int, int], torch.Tensor] = {}
        self.sampled: tuple[Any, ...] | None = None

    def _execute(self, inst: Any, runner: Any, plan: Any, kv: Any) -> float:
        t = super()._execute(inst, runner, plan, kv)
        inp = build(plan, kv)
        written = kv.gather(0, inp.batch.slots)
        keys = [(s.req.id, s.computed) for s in plan.decode]
        keys += [(s.req.id, s.computed + i) for s, c in plan.prefill for i in range(c)]
        for key, row in zip(keys, written, strict=True):
            self.rows[key] = row.clone()
        if self.sampled is None and len(plan.decode) >= 3 and min(s.computed for s in plan.decode) > 20:
            attn = runner.layers[0][0]
            q = torch.randn(len(plan.decode), attn.heads, attn.latent, generator=torch.Generator().manual_seed(0))
            out = attn._decode(q, kv, 0, inp.batch)
            self.sampled = (q, out, [(s.req.id, s.computed) for s in plan.decode], attn.sm, attn.a.kv_lora_rank)
        return t


def test_paged_decode_attention_equals_dense_attention_over_the_same_tokens() -> None:
    sc = tiny("deployment.mode=colocated", "traffic.requests=12", "integrity.enabled=false")
    shadow = _Shadow(sc, torch.device("cpu"))
    simulate(sc, SCENARIO.parent, step_mode=True, timer=shadow)
    assert shadow.sampled is not None, "no decode step of three sequences was sampled"
    q, out, seqs, sm, kvl = shadow.sampled
    for b, (req, pos) in enumerate(seqs):
        k = torch.stack([shadow.rows[(req, p)] for p in range(pos + 1)]).float()  # every token, by position
        w = torch.softmax(q[b] @ k.T * sm, dim=-1)
        dense = w @ k[:, :kvl]
        assert torch.allclose(out[b], dense, atol=1e-4, rtol=1e-4), f"request {req}"
    assert not math.isnan(float(out.sum()))
    assert np.isfinite(out.numpy()).all()


@pytest.mark.parametrize("fmt, group", [("bf16", 0), ("fp8", 0), ("int4", 32)])
def test_weights_drawn_on_a_device_have_the_formats_layout(fmt: str, group: int) -> None:
    """The GPU path draws weights in their stored format; its layout is checked here on CPU tensors."""
    from kernels.executor.weights import Weight

    w = Weight._random_device(torch.Generator().manual_seed(0), (3, 256, 384), fmt, group, torch.device("cpu"))
    want = {
        "bf16": (torch.bfloat16, (3, 256, 384)),
        "fp8": (torch.float8_e4m3fn, (3, 256, 384)),
        "int4": (torch.int32, (3, 256, 48)),
    }[fmt]
    assert (w.data.dtype, tuple(w.data.shape)) == want
    scales = {"bf16": None, "fp8": (3, 2, 3), "int4": (3, 256, 12)}[fmt]
    assert (None if w.scales is None else tuple(w.scales.shape)) == scales


def test_a_rank_too_big_for_the_device_runs_a_subset_of_layers_and_shares_pages(monkeypatch: Any) -> None:
    """With room for less than the tiny dense model (a 2 MiB CPU budget), one of its two layers runs, its time
    is doubled, and the caches share physical pages; the Result says both."""
    import kernels.executor.footprint as footprint

    monkeypatch.setattr(footprint, "CPU_BUDGET_GIB", 2 / 1024)
    result = replay(tiny("model=tiny-gqa", "traffic.requests=8"), SCENARIO.parent, "cpu").result
    prov = result["provenance"]["replay"]
    rank = prov["ranks"]["decode"]
    assert rank["layers_run"] == {"dense": 1, "moe": 0} and rank["layers"] == {"dense": 2, "moe": 0}
    assert rank["time_scaled"]
    assert all(kv["shared_physical_pages"] and kv["physical"] < kv["allocator"] for kv in prov["kv_pages"].values())
    assert result["metrics"]["completed"] == 8


class _Rows(ReplayClock):
    """Records each forward pass of a decode step: the model, its rows' positions and what each row attends to."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.passes: list[tuple[str, list[int], list[int]]] = []

    def _forward(self, runner: Any, inp: Any, kv: Any) -> float:
        if inp.batch.decode:
            self.passes.append((runner.model.name, inp.batch.positions.tolist(), inp.batch.seq_lens.tolist()))
        return super()._forward(runner, inp, kv)


def test_a_verify_step_runs_k_plus_one_rows_per_sequence_then_k_draft_passes() -> None:
    from kernels.executor.device import prepare

    sc = tiny("traffic.requests=12", SPEC)
    timer = _Rows(sc, prepare("cpu"), "measured", samples=1)
    simulate(sc, SCENARIO.parent, step_mode=True, timer=timer)
    assert timer.passes and len(timer.passes) % 3 == 0  # verify, then draft tokens 2 passes of the draft model
    for i in range(0, len(timer.passes), 3):
        (vm, vpos, vlens), (d0m, d0pos, _), (d1m, d1pos, d1lens) = timer.passes[i : i + 3]
        assert (vm, d0m, d1m) == ("tiny-mla-moe", "tiny-gqa", "tiny-gqa")
        starts = vpos[::3]  # each sequence's cached tokens: rows at computed, computed + 1, computed + 2
        assert vpos == [p + j for p in starts for j in range(3)] and vlens == [p + 1 for p in vpos]
        assert d0pos == starts and d1pos == [p + 1 for p in starts] and d1lens == [p + 2 for p in starts]


MTP = ("model.mtp_layers=1", "deployment.decode.speculative={method: mtp, draft_tokens: 2, acceptance: [0.8, 0.6]}")


def test_mtp_drafts_run_the_models_own_module() -> None:
    """MTP: the verify pass, then two passes of the model's one-layer MTP module over its own one-layer cache, with
    eh_proj ([embedding; hidden] 2·64 → 64 for the tiny model) measured as a GEMM; the modeled clock still
    equals `run`."""
    from kernels.executor.device import prepare
    from kernels.executor.runner import MTPModule

    sc = tiny("traffic.requests=12", *MTP)
    timer = _Rows(sc, prepare("cpu"), "measured", samples=1)
    simulate(sc, SCENARIO.parent, step_mode=True, timer=timer)
    mtp = timer.drafts["decode"]
    assert isinstance(mtp, MTPModule) and len(mtp.layers) == 1
    assert timer.draft_kv[("decode", 0)].data.shape[0] == 1  # one layer's cache
    assert tuple(mtp.eh_proj.data.shape) == (sc.model.hidden, 2 * sc.model.hidden)  # BF16 [N, K] under int4
    assert len(timer.passes) % 3 == 0
    for i in range(0, len(timer.passes), 3):
        (_, vpos, _), (_, d0pos, _), (_, d1pos, _) = timer.passes[i : i + 3]
        assert d0pos == vpos[::3] and d1pos == [p + 1 for p in vpos[::3]]
    ran, sim = simulate(sc, SCENARIO.parent)
    rep = replay(sc, SCENARIO.parent, "cpu", clock="modeled")
    replayed, rsim = rep.result, rep.run
    assert replayed["metrics"] == ran["metrics"] and timelines(rsim) == timelines(sim)
    assert replayed["provenance"]["replay"]["speculative"]["decode"]["draft"] == "mtp module"


@pytest.mark.parametrize("model", ["tiny-mla-moe", "tiny-gqa"])
def test_a_folded_verify_reads_each_cache_once_and_its_last_rows_equal_plain_decode(model: str) -> None:
    """Two sequences, three verify rows each, folded into the heads: each window's last row sees exactly what a
    plain decode row at that position sees (the earlier rows see the whole window: what a verify kernel masks)."""
    from kernels.executor.attention import Batch
    from kernels.executor.paged_kv import PagedKV
    from kernels.executor.runner import LayerPlan, RankModel

    sc = tiny(f"model={model}")
    pool = sc.deployment.decode
    dev = torch.device("cpu")
    attn = RankModel(sc.model, pool, LayerPlan(0, 1) if sc.model.moe else LayerPlan(1, 0), dev, 0).layers[0][0]
    kv = PagedKV(sc.model, pool, 1, 8, 8, dev)
    kv.data.normal_(generator=torch.Generator().manual_seed(1))
    q_rows = 3
    tables = np.array([[0, 1, 2, -1], [4, 5, 6, 7]])
    cached = [21, 40]  # rows at 21..23 and 40..42
    lens = [c + j + 1 for c in cached for j in range(q_rows)]
    table = torch.tensor(np.repeat(tables, q_rows, axis=0), dtype=torch.int32)
    heads = attn.heads
    width = attn.latent if hasattr(attn, "latent") else attn.d
    q = torch.randn(len(lens), heads, width, generator=torch.Generator().manual_seed(2))
    pos = torch.tensor([c + j for c in cached for j in range(q_rows)])
    plain = Batch(pos, pos, len(lens), table, torch.tensor(lens, dtype=torch.int32), [])
    verify = Batch(pos, pos, len(lens), table, torch.tensor(lens, dtype=torch.int32), [], queries=q_rows)
    rows = attn._decode(q, kv, 0, plain)
    folded = attn._verify(q, kv, 0, verify)
    assert folded.shape == rows.shape
    last = [i * q_rows + q_rows - 1 for i in range(len(cached))]
    assert torch.allclose(folded[last], rows[last], atol=1e-5, rtol=1e-5)


def test_compare_on_the_cpu_times_the_scenarios_op_shapes_in_the_same_run(monkeypatch: Any) -> None:
    """`compare --device cpu` prices the simulation by the scenario's op shapes timed between the replay's steps,
    and reports its timing noise: each shape's own spread and how far a re-timed fifth moved by the end."""
    import kernels.executor.compare as cmp
    from kernels.executor.overhead import PROBES
    from kernels.profiler import flat
    from kernels.scenario_profile import scenario_shapes
    from simulator.pricing.step_overhead import TERMS

    total = len(flat(scenario_shapes(tiny(), SCENARIO.parent)))
    timed: list[int] = []  # at each shape timed, how many times the replay had handed over between its steps
    steps = [0]

    def time_op(family: str, shape: Any, device: str) -> dict[str, float]:  # 100 µs ± 10%, then 10% slower
        us = 100.0 if len(timed) < total else 110.0
        timed.append(steps[0])
        return {"median_us": us, "p10_us": us * 0.9, "p90_us": us * 1.1}

    between = cmp.ShapeTimer.between

    def counted(self: Any, clock: Any) -> None:
        steps[0] += 1
        between(self, clock)

    monkeypatch.setattr(cmp, "time_op", time_op)
    monkeypatch.setattr(cmp.ShapeTimer, "between", counted)
    doc = cmp.compare(tiny(), SCENARIO.parent, "cpu")
    here = doc["measured_here"]
    assert here["shapes"] == total and len(timed) == total + len(range(0, total, cmp.PROBE_EVERY))
    assert timed[: cmp.PER_STEP * 2] == [1] * cmp.PER_STEP + [2] * cmp.PER_STEP  # a few after each executed step
    assert math.isclose(here["noise"]["drift"], 0.1) and math.isclose(here["noise"]["shape_spread"], 0.1)
    assert here["noise"]["timing_noise"] >= 0.1
    assert doc["profile"]["file"] is None and doc["profile"]["profile_source"] == "measured"  # timed here
    assert doc["metrics"]["output_tokens_per_s"]["rel_error"] is not None
    assert doc["families"]["gemm"]["priced_ms"] > 0  # the sampled steps priced by the shapes timed here
    # the executor's work beyond its kernels, measured on probe steps, is a term of the profile the sim ran on
    term = here["step_overhead"]
    pools = tiny().deployment.pools().values()  # each probe on each pool whose limits admit it (16 > prefill's 8)
    assert term["probes"] == sum(b <= p.max_running for p in pools for b, _, _ in PROBES) == 2 * len(PROBES) - 2
    assert doc["profile"]["step_overhead"]["tiny-mla-moe"] == {k: term[k] for k in (*TERMS, "kernel_share", "probes")}
    assert term["kernel_share"] >= 0.0  # the kernels' in-step slowdown, from the probes' own executions
    assert term["priced_ms"] >= 0 and isinstance(term["measured_ms"], float)  # on the sampled steps, beside glue
    assert set(here["noise"]["preemption"]) == {
        "per_step",
        "ms_each",
        "ms_each_se",
        "share",
    }  # what load cost the replay's steps
    # a profile named is priced by, and nothing is timed
    doc = cmp.compare(tiny(), SCENARIO.parent, "cpu", profile=str(SCENARIO.parent / "../profiles/cpu-tiny.json"))
    assert "measured_here" not in doc and doc["profile"]["file"].endswith("cpu-tiny.json")


def test_compare_says_what_preemption_cost_the_replays_steps() -> None:
    """Within a bucket the samples are one step: its time's slope on the preemptions during it is the CPU time each
    took back. Bucket a: 10, 12.5, 13.5 ms with 0, 1, 2 preemptions; bucket b varies none and adds none."""
    from types import SimpleNamespace

    from kernels.executor.buckets import Bucket
    from kernels.executor.compare import _preemption

    a = Bucket(samples=[0.010, 0.0125, 0.0135], preempted=[0, 1, 2])
    b = Bucket(samples=[0.005, 0.005], preempted=[1, 1])
    got = _preemption(SimpleNamespace(sampler=SimpleNamespace(buckets={"a": a, "b": b})))
    # about a's means (12 ms, 1): (-1, -2), (0, 0.5), (1, 1.5) ms: slope 3.5 / 2 = 1.75 ms; residuals -0.25, 0.5,
    # -0.25 ms: 0.375 over 5 samples - 2 buckets - 1 = 2 degrees of freedom, / 2: se √0.09375 = 0.3062 ms;
    # 5 preemptions over 5 samples, a mean step of 46 / 5 = 9.2 ms: 1.75 / 9.2 of it
    assert got == {"per_step": 1.0, "ms_each": 1.75, "ms_each_se": 0.3062, "share": pytest.approx(0.1902, abs=1e-4)}
    none = _preemption(SimpleNamespace(sampler=SimpleNamespace(buckets={"b": b})))
    assert none == {"per_step": 1.0, "ms_each": None, "ms_each_se": None, "share": None}  # none varied
