"""Hostile input, round two (issue 23): every number that enters through an option or a count field is checked
there, with the option or the file named; every place a run can start (the app's upload and knobs, replay and
compare, plan's search space) passes the work limits before it starts. Each case failed before the fix.
"""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path

import pytest
from cli_helpers import invoke

from simulator.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
FLEET = str(ROOT / "scenarios" / "fleet-disaggregated.yaml")
TINY = str(ROOT / "scenarios" / "tiny-cpu.yaml")
WIDE = str(ROOT / "scenarios" / "deepseek-v3-wide-ep.yaml")


def refused(monkeypatch, capsys, *args: str, seconds: float = 20) -> str:
    t0 = time.perf_counter()
    code, out, err = invoke(monkeypatch, capsys, *args)
    assert time.perf_counter() - t0 < seconds, "refused quickly, before any work"
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


# ------------------------------------------------------------------------------------- numbers at the door


def test_draft_tokens_have_a_bound(monkeypatch, capsys) -> None:
    """speculative.draft_tokens had none: 10^4 never finished (in the app too)."""
    err = refused(
        monkeypatch,
        capsys,
        "run",
        WIDE,
        "--set",
        "deployment.decode.speculative.draft_tokens=5000",
        "--set",
        "deployment.decode.speculative.acceptance=2.0",
    )
    assert (
        "--set deployment.decode.speculative.draft_tokens: 5,000 is out of range: draft tokens per verify step" in err
    )


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e300"])
def test_replay_budget_must_be_finite(monkeypatch, capsys, value: str) -> None:
    """--budget-s nan or inf was a traceback writing the Result's JSON."""
    err = refused(monkeypatch, capsys, "replay", TINY, "--device", "cpu", "--budget-s", value, "--json")
    assert "Invalid value for '--budget-s'" in err


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (("max-rate", FLEET, "--start", "1e300"), "Invalid value for '--start': 1e+300 is not in the range"),
        (("max-rate", FLEET, "--start", "nan"), "Invalid value for '--start': 'nan' is not a finite number"),
        (("plan", FLEET, "--rate", "1e300"), "Invalid value for '--rate': 1e+300 is not in the range"),
        (("max-rate", FLEET, "--slo", "ttft_p95_ms=1e300"), "--slo ttft_p95_ms: 1e+300 is out of range: ms must lie"),
        (("bench-sim", "--hours", "nan"), "Invalid value for '--hours': 'nan' is not a finite number"),
    ],
)
def test_an_options_number_is_blamed_on_the_option(monkeypatch, capsys, args, expect) -> None:
    """`--start 1e300` was blamed on the scenario file (its traffic.rate out of range)."""
    assert expect in refused(monkeypatch, capsys, *args)


def test_a_pool_that_does_not_fit_names_the_set_or_the_file(tmp_path, monkeypatch, capsys) -> None:
    """`mem_fraction` too small said only "deployment.decode: does not fit"."""
    err = refused(monkeypatch, capsys, "run", FLEET, "--set", "deployment.decode.mem_fraction=0.01")
    assert err.startswith("error: --set deployment.decode.mem_fraction: deployment.decode: does not fit: weights")
    text = Path(FLEET).read_text().replace("mem_fraction: 0.81, max_running", "mem_fraction: 0.01, max_running")
    (tmp_path / "f.yaml").write_text(text)
    err = refused(monkeypatch, capsys, "run", str(tmp_path / "f.yaml"))
    assert "f.yaml: line 12: deployment.decode: does not fit: weights 69.4 GiB > budget 1.4 GiB per GPU" in err
    err = refused(monkeypatch, capsys, "max-rate", FLEET, "--set", "hardware.hbm_gib=20")
    assert "fleet-disaggregated.yaml: line 11: deployment.prefill: does not fit" in err
    assert err.rstrip().endswith("(with --set hardware.hbm_gib)")


def test_max_rate_with_an_slo_no_rate_meets(monkeypatch, capsys) -> None:
    """It answered a rate at which no request arrived (0.0135 conversations/s: nothing to judge, so "met")."""
    err = refused(monkeypatch, capsys, "max-rate", FLEET, "--slo", "tpot_p95_ms=0.001", "--jobs", "1", seconds=60)
    assert "max-rate: no rate meets the SLO (p95 TTFT <= 2,000 ms, p95 TPOT <= 0.001 ms); even " in err
    assert "misses TPOT" in err


def test_max_rate_from_a_rate_where_nothing_arrives_goes_up(monkeypatch, capsys) -> None:
    """At 10^-4 conversations/s for 300 s nothing arrives: that says nothing, so the search goes up first."""
    code, out, err = invoke(monkeypatch, capsys, "max-rate", FLEET, "--start", "1e-4", "--jobs", "1", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["metrics"]["requests"] > 0 and res["max_rate_rps"] > 1


def test_profile_fit_refuses_a_cpu_profile_for_a_gpu(monkeypatch, capsys) -> None:
    err = refused(monkeypatch, capsys, "profile", "fit", "--profile", str(ROOT / "profiles/cpu-tiny.json"))
    assert "cpu-tiny.json: was measured on 'x86_64', but the hardware fitted is 'h200'" in err
    assert "--allow-profile-mismatch" in err
    err = refused(
        monkeypatch, capsys, "profile", "fit", "--profile", str(ROOT / "profiles/cpu-tiny.json"), "--hardware", "tpu9"
    )
    assert err.startswith("error: --hardware tpu9: unknown hardware preset 'tpu9'")


# ------------------------------------------------------------------------- work limits where runs start


def test_a_search_space_is_counted_before_it_is_built(monkeypatch, capsys) -> None:
    """`--search …=1..50000000` allocated gigabytes before refusing."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    err = refused(monkeypatch, capsys, "plan", FLEET, "--rate", "3", "--search", "seed=1..20000000")
    assert "--search: 20,000,000 candidates, more than 100,000; narrow the ranges" in err
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB: no list of 20M ints


@pytest.mark.parametrize("value", ["bf16,[1]", "bf16,{a: 1}"])
def test_a_search_value_that_is_a_list_is_no_traceback(monkeypatch, capsys, value: str) -> None:
    """`--search 'path=bf16,[1]'` was "unhashable type: 'list'"; then its candidates ran as invalid ones; now a
    value that is not one value is refused before any candidate (round three)."""
    code, out, err = invoke(
        monkeypatch,
        capsys,
        "plan",
        FLEET,
        "--rate",
        "3",
        "--search",
        f"deployment.decode.kv_cache={value}",
        "--jobs",
        "1",
    )
    assert code == 2 and "is not one value" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("verb", ["replay", "compare"])
def test_a_cpu_replay_of_the_fleet_is_refused_before_it_starts(monkeypatch, capsys, verb: str) -> None:
    """The CPU replay of the 32-GPU Kimi fleet had no estimate: 17 GB and no end."""
    err = refused(monkeypatch, capsys, verb, FLEET, "--device", "cpu")
    assert "replay --device cpu: even 2 of the 61 layers of kimi-k2.6 per rank take about" in err
    assert "over the 4 GiB a CPU replay may take" in err


def test_a_replay_of_weights_the_executor_does_not_run(monkeypatch, capsys) -> None:
    err = refused(monkeypatch, capsys, "replay", str(ROOT / "scenarios" / "b200-nvfp4.yaml"), "--device", "cpu")
    assert "deployment.prefill.weights: the replay executes bf16, fp8, int4 weights, not nvfp4" in err


def test_a_cpu_replay_past_its_time_limit(monkeypatch, capsys) -> None:
    """Memory that fits is not enough: drawing the weights plus the budget plus one step must fit the time limit."""
    err = refused(monkeypatch, capsys, "replay", TINY, "--device", "cpu", "--budget-s", "1000000")
    assert "replay --device cpu: about 1,000,0" in err and "over the limit of 3,600 s" in err


def test_the_cpu_estimate_matches_the_clocks_plan() -> None:
    from kernels.executor import footprint
    from simulator.config import loader

    sc, _ = loader.load(TINY)
    est = footprint.cpu_estimate(sc)
    assert (est.dense, est.moe) == (1, 1)  # tiny-mla-moe whole: 1 dense and 1 MoE layer
    assert est.peak_bytes < footprint.CPU_BUDGET_GIB * footprint.GIB
    sc, _ = loader.load(FLEET)
    est = footprint.cpu_estimate(sc)
    assert (est.dense, est.moe) == (1, 1) and est.peak_bytes > 30 * footprint.GIB  # one MoE layer's expert stack


BIG = (
    "name: big\nmodel: llama-3.1-70b\nhardware: {name: big, hbm_gib: 4000, hbm_gbs: 4800, copy_gbs: 4300, "
    "bf16_tflops: 790, fp8_tflops: 1580, nvlink_gbs: 900}\n"
    "deployment: {decode: {instances: 4096, page_size: 1}}\ntraffic: {concurrency: 1, requests: 2}\n"
)


def test_an_upload_passes_the_work_limits(monkeypatch) -> None:
    """An upload skipped the CLI's work check: 4,096 instances of page size 1 took ~10 GB, then a traceback."""
    from app import runs, scenario_io

    study = scenario_io.from_upload("big.yaml", BIG.encode())
    with pytest.raises(InputError, match=r"deployment.decode.instances: the run would hold about [\d,.]+ GiB"):
        runs.check_work(study, {})
    with pytest.raises(InputError, match="deployment.decode.instances: the run would hold"):
        runs.run(study, {}, runs.RunCache())


def test_the_apps_knobs_pass_the_work_limits() -> None:
    from app import runs, scenario_io

    study = scenario_io.from_path(Path(WIDE))
    spec = {"deployment.decode.speculative.draft_tokens": 5000, "deployment.decode.speculative.acceptance": 2.0}
    with pytest.raises(InputError, match="--set deployment.decode.speculative.draft_tokens: 5,000 is out of range"):
        runs.run(study, spec)
    study = scenario_io.from_path(ROOT / "scenarios" / "kimi-k2.6-decode.yaml")
    big = {"deployment.decode.instances": 4096, "deployment.decode.page_size": 1, "hardware.hbm_gib": 4000}
    with pytest.raises(InputError, match="the run would hold about"):
        runs.run(study, big)


# ------------------------------------------------------------------ round three (issue 37): work of many runs


def test_repeats_are_runs_counted_before_they_start(monkeypatch, capsys) -> None:
    """10,000 repeats of a one-request run took 115 s: each run costs its set-up however few its requests."""
    err = refused(monkeypatch, capsys, "run", TINY, "--set", "traffic.requests=1", "--repeats", "10000")
    assert "--repeats 10000: 10,000 runs, over the limit of 1,000 runs per invocation" in err


CALIBRATE = ROOT / "docs/examples/gpustack-glm-5.2-h200"


def _runs(tmp_path: Path, n: int, name: str = "runs.jsonl") -> str:
    one = (CALIBRATE / "bench" / "optimized.jsonl").read_text().splitlines()[0]
    path = tmp_path / name
    path.write_text((one + "\n") * n)
    return str(path)


def test_calibrate_estimates_its_fit_before_it_starts(tmp_path, monkeypatch, capsys) -> None:
    """64 runs, each within the per-run limits, each simulated dozens of times by the fit: minutes, unannounced."""
    import simulator.calibration.engine_fit as engine_fit

    monkeypatch.setattr(engine_fit, "simulate", lambda *a, **k: pytest.fail("simulated before the estimate"))
    bench = _runs(tmp_path, 64)
    err = refused(monkeypatch, capsys, "calibrate", "--bench", bench, "--scenario", str(CALIBRATE / "deployment.yaml"))
    assert "calibrate: about 4,352,000 requests over the fit's simulations (64 runs of up to 1,000 requests" in err
    assert "over the limit of 4,000,000" in err


def test_a_benchmark_file_of_many_runs_is_refused_as_it_is_read(tmp_path, monkeypatch, capsys) -> None:
    """A JSONL of 100,000 runs was parsed whole (0.9 GB, 8 s) before the run count was refused."""
    from simulator.calibration import bench_files

    parsed = []
    real = bench_files._parse
    monkeypatch.setattr(bench_files, "_parse", lambda text, where: parsed.append(1) or real(text, where))
    bench = _runs(tmp_path, 100_000)
    err = refused(monkeypatch, capsys, "calibrate", "--bench", bench, "--scenario", str(CALIBRATE / "deployment.yaml"))
    assert "runs.jsonl: line 65: more than 64 benchmark runs, the most one calibration fits" in err
    assert len(parsed) == 65
    files = [_runs(tmp_path, 60, "a.jsonl"), _runs(tmp_path, 60, "b.jsonl")]  # the second passes 64 at its line 5
    with pytest.raises(InputError, match="b.jsonl: line 5: more than 64 benchmark runs with the files before it"):
        bench_files.read_all(files, None, 64)
