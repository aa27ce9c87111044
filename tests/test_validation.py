"""The validation suite (issue 21): its case files load, bad ones are one line, its figures are deterministic and
its summary agrees with its cases, the fit recovers a parameter it is given, and the suite's bounds on the model."""

from __future__ import annotations

import csv
import json
import re
import shutil
import statistics
from pathlib import Path

import pytest

from simulator.results.record import RequestRecord
from simulator.validation import case, fit, measure, suite
from tests.cli_helpers import invoke

CASES = sorted((suite.SUITE / "cases").glob("*.yaml"))
ROOT = suite.SUITE.parent


@pytest.fixture(scope="module")
def result() -> dict:
    return suite.run()


def test_every_case_file_loads_with_its_source_and_quote() -> None:
    assert len(CASES) >= 14
    for path in CASES:
        c = case.load(path, ROOT)
        assert c.spec.source.url.startswith("https://") and "@" in c.spec.source.repo, c.id
        assert c.spec.quote.strip() and c.spec.notes.strip(), c.id
    assert {case.load(p, ROOT).spec.engine for p in CASES} == {"sglang-0.5", "vllm-0.x"}


BAD = {
    "unknown key": ("published: 7.38\nvenue: blog\n", "line 7: venue: unknown key"),
    "wrong type": ("published: fast\n", "published: Input should be a valid number"),
    "non-finite": ("published: .inf\n", "published: Input should be a finite number"),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_a_bad_case_file_is_one_line_and_exit_2(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    line, expected = BAD[kind]
    good = suite.SUITE / "cases" / "qwen3-8b-h100-vllm-bf16-c4.yaml"
    (tmp_path / "cases").mkdir()
    text = good.read_text().replace("published: 7.38\n", "")
    lines = text.splitlines(keepends=True)
    (tmp_path / "cases" / good.name).write_text("".join(lines[:5] + [line] + lines[5:]))
    shutil.copytree(suite.SUITE / "scenarios", tmp_path / "scenarios")
    code, out, err = invoke(monkeypatch, capsys, "validate", "--suite", str(tmp_path), "--json")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and expected in err, err


def test_bad_yaml_and_a_missing_case_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "x.yaml").write_text("id: x\nhow: [unclosed\n")
    code, _, err = invoke(monkeypatch, capsys, "validate", "--suite", str(tmp_path))
    assert code == 2 and "YAML syntax error" in err and err.count("\n") == 1
    code, _, err = invoke(monkeypatch, capsys, "validate", "--case", "no-such-case")
    assert code == 2 and "--case no-such-case: no such case" in err and err.count("\n") == 1


def test_a_suite_kept_elsewhere_builds_on_the_bundled_scenarios(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], result: dict
) -> None:
    """Held-out cases outside the repo name a bundled scenario by its repo path; with no fit.yaml nothing is
    fitted, so the case predicts what it predicts in the bundled suite's whole fit (the presets hold the fitted
    values; `--case` alone would refit the terms to that one case)."""
    name = "qwen3-8b-h100-vllm-bf16-c4"
    held = tmp_path / "held-out"
    (held / "cases").mkdir(parents=True)
    shutil.copy(suite.SUITE / "cases" / f"{name}.yaml", held / "cases")
    code, out, err = invoke(monkeypatch, capsys, "validate", "--suite", str(held), "--json")
    assert code == 0, err
    got = json.loads(out)["cases"][0]
    bundled = next(r for r in result["cases"] if r["id"] == name)
    assert got["predicted"] == pytest.approx(bundled["predicted"], rel=1e-5)  # --json rounds to 6 digits
    (held / "cases" / f"{name}.yaml").write_text(
        (suite.SUITE / "cases" / f"{name}.yaml").read_text().replace("base: validation/", "base: nowhere/")
    )
    code, _, err = invoke(monkeypatch, capsys, "validate", "--suite", str(held))
    assert code == 2 and err.count("\n") == 1 and "base: no scenario file nowhere/" in err, err


def test_served_figures_are_bench_serves_arithmetic() -> None:
    """Each serving figure restated by hand on three requests (arrival, first token, finish in s)."""
    done = [
        RequestRecord(0, 0.0, 100, 11, first_token=0.5, finish=1.5, status="completed"),
        RequestRecord(1, 0.5, 200, 21, first_token=1.0, finish=3.0, status="completed"),
        RequestRecord(2, 1.0, 300, 5, first_token=2.0, finish=2.4, status="completed"),
    ]
    span = 3.0 - 0.0
    tpot = [1.0 / 10 * 1e3, 2.0 / 20 * 1e3, 0.4 / 4 * 1e3]
    ttft, e2el = [500.0, 500.0, 1000.0], [1500.0, 2500.0, 1400.0]
    want = {
        "output_tok_s": 37 / span,
        "input_tok_s": 600 / span,
        "total_tok_s": 637 / span,
        "request_throughput": 3 / span,
        "mean_tpot_ms": sum(tpot) / 3,
        "median_tpot_ms": sorted(tpot)[1],
        "p99_tpot_ms": sorted(tpot)[1] + 0.98 * (sorted(tpot)[2] - sorted(tpot)[1]),
        "mean_itl_ms": (1.0 + 2.0 + 0.4) * 1e3 / (10 + 20 + 4),
        "mean_ttft_ms": sum(ttft) / 3,
        "median_ttft_ms": 500.0,
        "p99_ttft_ms": 500.0 + 0.98 * 500.0,
        "mean_e2el_ms": sum(e2el) / 3,
        "median_e2el_ms": 1500.0,
        "duration_s": span,
    }
    assert set(want) == set(case.KIND_METRICS["serve"])
    for metric, value in want.items():
        assert measure.served(done, metric) == pytest.approx(value), metric


def test_mean_itl_under_speculation_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "glm-5-h200-sglang-tp8-eagle-c1"
    (tmp_path / "cases").mkdir()
    text = (suite.SUITE / "cases" / f"{name}.yaml").read_text()
    assert "metric: mean_tpot_ms\n" in text
    (tmp_path / "cases" / f"{name}.yaml").write_text(text.replace("metric: mean_tpot_ms\n", "metric: mean_itl_ms\n"))
    code, out, err = invoke(monkeypatch, capsys, "validate", "--suite", str(tmp_path))
    assert code == 2 and out == "" and err.count("\n") == 1 and "mean_itl_ms under speculation" in err, err


def test_json_fields_and_summary_agree(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    ids = ("qwen3-8b-h100-vllm-bf16-c4", "dsv3-h100-ep72-decode", "dsv3-h100-ep72-tbo-gain")
    args = [a for i in ids for a in ("--case", i)]
    code, out, _ = invoke(monkeypatch, capsys, "validate", *args, "--json", "--coverage")
    assert code == 0
    doc = json.loads(out)
    errors = {
        f"{m}_abs_{e}error": f for e in ("", "loo_", "loso_") for m, f in (("median", statistics.median), ("max", max))
    }
    assert set(doc) == {"cases", "source_urls", *errors, "sources", "band_coverage", "fitted", "coverage", "by_source"}
    assert [c["id"] for c in doc["cases"]] == list(ids)
    need = {"id", "metric", "published", "predicted", "error", "loo_error", "loso_error", "source", "source_id"}
    for c in doc["cases"]:
        assert need | {"engine", "hardware"} <= set(c)
        assert 1 + c["error"] == pytest.approx(c["predicted"] / c["published"], rel=1e-5)
    urls = [doc["source_urls"][c["source"]] for c in doc["cases"]]  # each URL once, each case its place
    assert urls == [case.load(suite.SUITE / "cases" / f"{i}.yaml", ROOT).spec.source.url for i in ids]
    assert len(doc["source_urls"]) == len(set(urls)) == 2
    assert {c["source_id"] for c in doc["cases"]} == {
        "lmsys/blog/2025-05-05-large-scale-ep",
        "gpustack/qwen3-8b/h100-latency",
    }
    for key, f in errors.items():  # the summary is the cases' own, to the last digit
        assert doc[key] == f(abs(c[key.split("_abs_")[1]]) for c in doc["cases"])
    assert sum(c["cases"] for c in doc["coverage"]) == len(ids)


def test_out_writes_the_table_and_the_chart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = invoke(monkeypatch, capsys, "validate", "--case", "dsv3-h100-ep72-decode", "--out", str(tmp_path))
    assert code == 0 and "dsv3-h100-ep72-decode" in out
    rows = (tmp_path / "validation.csv").read_text().splitlines()
    assert rows[0].startswith("id,source_id,engine,engine_version,hardware,weights,model_class,regime,how,metric")
    assert len(rows) == 2
    assert next(csv.DictReader(rows))["hardware"] == "h100"
    assert (tmp_path / "validation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# Cases of every kind of figure (served runs, a DP-attention decode, a ratio, a burst, speculation) on both engines,
# sources enough to leave one out: a run of them passes through every stage of the suite.
SOME = (
    "dsv3-h200-dp16-decode",
    "dsv3-h200-dp16-decode-mtp",
    "dsv3-h100-ep72-tbo-gain",
    "kimi-k2.5-h200-sglang-tp8-int4-c1",
    "qwen3-8b-h100-sglang-bf16-c4-ttft",
    "dsr1-h200-vllm-tp8-burst-2k",
    "glm-5.2-b200-sglang-tp8-mtp516-8k1k-c1-ttft",
    "minimax-m2.5-b200-vllm-fp8-tp2-8k1k-c64",
    "dsr1-b200-sglang-ix-fp8kv-tp8-1k1k-c1",
)


def test_the_suite_is_deterministic() -> None:
    """The same cases give the same answer, bit for bit: the fit (moving its terms off their starts here), the
    leave-one-out and leave-one-source-out refits and the bands, run twice. (Twice over the whole corpus this took 8
    of the test suite's 19 minutes; these cases run every stage of it in seconds.)"""
    first, again = suite.run(ids=SOME), suite.run(ids=SOME)
    assert json.dumps(again, sort_keys=True) == json.dumps(first, sort_keys=True)
    params = fit.load(suite.SUITE / "fit.yaml")
    starts = dict(zip(fit.keys(params), (p.start for p in params), strict=True))
    assert any(v != starts[k] for k, v in first["fitted"].items())
    assert len({c["source_id"] for c in first["cases"]}) >= 5 and len(first["cases"]) == len(SOME)


def test_the_fit_recovers_a_parameter_it_is_given() -> None:
    """Cases whose published figure is the model's own at a chosen decode_graph_floor_us: the fit returns it,
    and every error and leave-one-out error is ~0."""
    truth = 7.5
    param = fit.Parameter(
        path="deployment.decode.decode_graph_floor_us",
        engines=["vllm-0.x", "sglang-0.5"],
        start=3.0,
        low=0.5,
        high=20.0,
        step=0.05,
        why="test",
        informs=[],
    )
    targets = []
    for name in ("qwen3-8b-h100-sglang-bf16-c4", "kimi-k2.5-h200-sglang-tp8-int4-c1", "dsv3-h100-ep72-decode"):
        c = case.load(suite.SUITE / "cases" / f"{name}.yaml", ROOT)
        one = c.spec.model_copy(update={"how": case.DecodeBatch(kind="decode_batch", batch=4, context=1000)})
        one = one.model_copy(update={"metric": "step_ms"})
        c.spec = one

        def f(overrides: dict, c: case.Case = c) -> float:
            return measure.predict(c, overrides)

        targets.append(fit.Target(one.engine, f({param.path: truth}), f))
    got = fit.fit(targets, [param])
    assert got.values[param.path] == pytest.approx(truth, rel=1e-3)
    held = fit.left_out(targets, [param], got, [0, 0, 1])
    for t, pred, loo, out in zip(targets, got.predicted, got.loo_predicted, held, strict=True):
        assert pred == pytest.approx(t.published, rel=1e-4) and loo == pytest.approx(t.published, rel=1e-3)
        assert out == pytest.approx(t.published, rel=1e-3)


@pytest.mark.xfail(
    strict=True,
    reason="the modeled predictions miss the issue's bounds: median |error| 9.3%, but max 198% (438 cases from 37 "
    "sources, 82% within 25%; docs/validation.md: the dense models' bursts and TTFTs on H100, an API server's speed "
    "on its host, SGLang's thin experts on B200 and its speculative decoding at batch are the misses)",
)
def test_the_model_meets_the_suites_bounds(result: dict) -> None:
    assert result["median_abs_error"] <= 0.10
    assert result["max_abs_error"] <= 0.25


def test_the_held_out_median_meets_issue_42s_bound(result: dict) -> None:
    """Issue 42: the median |error| with each case's whole source left out of the fit is at most 12%."""
    assert result["median_abs_loso_error"] <= 0.12


@pytest.mark.xfail(
    strict=True,
    reason="355 of 438 cases (81.1%) are within ±25% with their source left out; issue 42 asks 85% "
    "(docs/validation.md, 'What carries each miss')",
)
def test_the_held_out_share_within_25_percent_meets_issue_42s_bound(result: dict) -> None:
    within = sum(abs(r["loso_error"]) <= 0.25 for r in result["cases"])
    assert within >= 0.85 * len(result["cases"])


def test_the_engine_presets_hold_the_fitted_values(result: dict) -> None:
    """The fit starts at the presets' values and stays there: the presets are the fit's output, not hand-set."""
    from simulator.config import presets

    params = fit.load(suite.SUITE / "fit.yaml")
    for p, key in zip(params, fit.keys(params), strict=True):
        term = p.path.rsplit(".", 1)[1]
        for engine in p.engines:
            assert presets.engine(engine)[term] == pytest.approx(result["fitted"][key], rel=0.01), (engine, term)


def test_the_committed_error_bands_are_the_suites(result: dict) -> None:
    """validation/bands.json (what run, max-rate and plan print) is `phaseplan validate --write-bands` today, and
    its held-out errors judge the bands as the summary says."""
    from simulator.validation import bands

    doc = json.loads(bands.BANDS.read_text())
    assert doc == bands.from_rows(result["cases"])
    assert len(doc["errors"]) == len(result["cases"]) and doc["level"] == bands.LEVEL
    assert bands.band_coverage(result["cases"]) == result["band_coverage"]


def test_each_fitted_parameter_has_an_unfitted_value_from_the_engine_schema() -> None:
    """What a held-out refit that cannot fit a parameter sets it to: the schema's default (no CPU work, no DP
    sync, a perfect two-batch overlap), or where the schema's is null (the roofline's own) the stated 1."""
    got = {p.path.rsplit(".", 1)[1]: p.unfitted for p in fit.load(suite.SUITE / "fit.yaml")}
    assert got == {
        "host_step_us": 0.0,
        "dp_sync_us": 0.0,
        "tbo_hidden_share": 1.0,
        "fp8_gemm_mma_factor": 1.0,
        "request_latency_us": 0.0,
        "frontend_accept_us": 0.0,
        "frontend_prepare_us": 0.0,
        "eager_kernel_us": 0.0,
        "decode_layer_us": 0.0,
    }


@pytest.mark.parametrize(
    "name, term, step",
    [
        ("qwen3-8b-h100-sglang-bf16-c4", "dp_sync_us", 5000.0),  # dp 1
        ("dsv3-h200-dp16-decode", "tbo_hidden_share", 0.5),  # no two-batch overlap
        ("dsv3-h200-dp16-decode", "fp8_kv_read_factor", 3.0),  # a BF16 cache
        ("glm-4.6-h200-vllm-bf16-tp8-burst-2k", "fp8_gemm_mma_factor", 3.0),  # BF16 weights, nothing in FP8
    ],
)
def test_a_term_the_fit_does_not_step_on_a_case_cannot_move_it(name: str, term: str, step: float) -> None:
    """`measure.moved_by` says False only where the pricing code reads the term under a setting the case's pools
    lack: stepping it there changes nothing, to the last bit."""
    c = case.load(suite.SUITE / "cases" / f"{name}.yaml", ROOT)
    path = f"deployment.decode.{term}"
    assert not measure.moved_by(c, path) and measure.moved_by(c, "deployment.decode.host_step_us")
    assert measure.predict(c, {path: step}) == measure.predict(c, {})


def test_at_80_columns_a_case_is_one_line_and_no_number_is_in_exponent_notation(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    ids = ("glm-5.2-h200-sglang-dp8-fp8kv-gen-heavy", "dsv3-h100-ep72-decode", "dsv3-h100-ep72-tbo-gain")
    code, out, _ = invoke(monkeypatch, capsys, "validate", *(a for i in ids for a in ("--case", i)))
    assert code == 0
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert [line.split()[0] for line in lines[2:5]] == list(ids)  # after the two-line header, one line a case
    assert "22,282" in lines[3] and not re.search(r"\d[eE][+-]?\d", out)
    code, out, _ = invoke(monkeypatch, capsys, "validate", *(a for i in ids for a in ("--case", i)), "--coverage")
    assert code == 0 and all(len(line) <= 80 for line in out.splitlines())
    assert "multi-node" in out and "thin" in out


def test_a_case_is_filed_under_the_sequences_its_decode_instances_ran() -> None:
    """A filled batch: its per-rank batch over the DP ranks; a closed loop: its clients per decode instance; an
    open loop: the model's own peak decode batch (a rate of 1 req/s over 2,000-token outputs keeps dozens)."""
    load = {c.id: c for c in suite.load_cases()}
    assert measure.sequences(load["kimi-k2.5-h200-sglang-tp8-int4-c1"]) == 1
    assert measure.sequences(load["qwen3-8b-h100-vllm-bf16-c4"]) == 4
    assert measure.sequences(load["dsv3-h200-dp16-decode"]) == 2 * 16
    assert measure.sequences(load["dsv3-h100-ep72-tbo-gain"]) == 256 * 72  # a ratio: its `of` measurement
    assert measure.sequences(load["dsr1-h200-sglang-dpattn-burst-32k"]) == 100
    assert measure.sequences(load["glm-5.2-h200-vllm-tp8-gen-heavy"]) > 4


@pytest.mark.parametrize("clients", [4, 16])
def test_run_prints_the_bands_of_its_cell(
    clients: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run at 4 clients (peak decode batch 4) is filed in the few-sequence regime, at 16 in the batched one; its
    throughput, TPOT and TTFT lines are the bands of that cell (or its neighbours', said as outside the validated
    region, or none where no case measures the kind)."""
    from simulator.validation import bands, cells

    monkeypatch.setenv("COLUMNS", "1000")
    path = str(suite.SUITE / "scenarios" / "qwen3-8b-h100.yaml")
    code, out, err = invoke(monkeypatch, capsys, "run", path, "--set", f"traffic.concurrency={clients}", "--json")
    assert code == 0, err
    result = json.loads(out)
    cell = cells.of_answer(result["scenario"], result["metrics"])
    assert cell.regime == ("few" if clients <= 4 else "batched") and cell.hardware == "h100"
    code, out, err = invoke(monkeypatch, capsys, "run", path, "--set", f"traffic.concurrency={clients}")
    assert code == 0, err
    printed = [line for line in out.splitlines() if line.startswith(("output throughput", "TPOT p95", "TTFT p95"))]
    assert printed == bands.headline(result, "output throughput", result["metrics"]["output_tokens_per_s"])
    assert len(printed) == 3
