"""`phaseplan profile import aiconfigurator`: small Parquet tables written here (the shapes of AIConfigurator's),
mapped onto phaseplan's families; bad or missing tables; the profile contract's extensions; provenance."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli

pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")

from simulator.config.loader import load  # noqa: E402
from simulator.pricing import roofline  # noqa: E402
from simulator.pricing.costmodel import CostModel  # noqa: E402
from simulator.pricing.ops import line_ops, routed_parts, step_ops  # noqa: E402
from simulator.pricing.profile import Profile  # noqa: E402
from simulator.results.report import provenance_line  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
V = "0.5.14"
META = "schema_version: 1\nprovenance: legacy\nruntime:\n  framework: sglang\n  version: {v}\n"


def _table(root: Path, op: str, fw: str, version: str, file: str, rows: list[dict]) -> None:
    d = root / op / fw / version
    d.mkdir(parents=True, exist_ok=True)
    (d / "collection_meta.yaml").write_text(META.format(v=version).replace("sglang", fw))
    pq.write_table(pa.Table.from_pylist(rows), d / file)


def fixture_tables(root: Path, skip: str = "") -> Path:
    """One or two rows per table, in AIConfigurator's columns and units (latency in ms)."""

    def base(**kw: object) -> dict:
        return {"framework": "SGLang", "version": V, "device": "NVIDIA H200", **kw}

    gemm = [
        base(op_name="gemm", kernel_source=src, gemm_dtype=dt, m=m, n=n, k=k, latency=lat)
        for src, dt in (
            ("sglang_torch_linear", "bfloat16"),
            ("sglang_deepgemm_gemm_nt_f8f8bf16", "fp8_block"),
            ("sglang_sgl_kernel_fp8_scaled_mm", "fp8"),
        )
        for n in (1024, 4096)
        for k in (1024, 4096)
        for m, lat in ((1, 0.004 * n * k / 2**20), (64, 0.008 * n * k / 2**20))
    ]
    tables = {
        "gemm": ("gemm", "gemm_perf.parquet", gemm),
        "mla_bmm": (
            "mla_bmm",
            "mla_bmm_perf.parquet",
            [
                base(
                    op_name="mla_gen_pre",
                    kernel_source="sglang_torch_bmm",
                    bmm_dtype="bfloat16",
                    num_tokens=8,
                    num_heads=16,
                    latency=0.005,
                ),
                base(
                    op_name="mla_gen_post",
                    kernel_source="sglang_sgl_kernel_bmm_fp8",
                    bmm_dtype="fp8",
                    num_tokens=8,
                    num_heads=16,
                    latency=0.004,
                ),
            ],
        ),
        "generation_mla": (
            "mla",
            "generation_mla_perf.parquet",
            [
                base(
                    op_name="mla_generation",
                    kernel_source="flash_attention",
                    mla_dtype="bfloat16",
                    kv_cache_dtype=kv,
                    num_heads=16,
                    batch_size=8,
                    isl=1,
                    tp_size=8,
                    step=step,
                    latency=lat,
                )
                for kv, f in (("bfloat16", 1.0), ("fp8", 3.0))
                for step, lat in ((1023, 0.02 * f), (4095, 0.05 * f))
            ],
        ),
        "context_mla": (
            "mla",
            "context_mla_perf.parquet",
            [
                base(
                    op_name="mla_context",
                    kernel_source="flash_attention",
                    mla_dtype="bfloat16",
                    kv_cache_dtype=kv,
                    num_heads=16,
                    batch_size=b,
                    isl=4096,
                    tp_size=8,
                    step=0,
                    latency=0.5 * b,
                )
                for kv in ("bfloat16", "fp8")
                for b in (1, 2)
            ],
        ),
        "generation_attention": (
            "attention",
            "generation_attention_perf.parquet",
            [
                base(
                    op_name="generation_attention",
                    kernel_source=src,
                    batch_size=4,
                    isl=1,
                    num_heads=8,
                    num_key_value_heads=1,
                    head_dim=128,
                    beam_width=1,
                    attn_dtype="bfloat16",
                    kv_cache_dtype="bfloat16",
                    step=2047,
                    window_size=w,
                    latency=lat,
                )
                for src, w, lat in (("fa3", 0, 0.012), ("triton", 0, 0.020), ("fa3", 1024, 0.009))
            ],
        ),
        "context_attention": (
            "attention",
            "context_attention_perf.parquet",
            [
                base(
                    op_name="context_attention",
                    kernel_source="fa3",
                    batch_size=1,
                    isl=2048,
                    num_heads=8,
                    num_key_value_heads=1,
                    head_dim=128,
                    beam_width=1,
                    attn_dtype="bfloat16",
                    kv_cache_dtype="bfloat16",
                    step=0,
                    window_size=0,
                    latency=0.04,
                )
            ],
        ),
        "moe": (
            "moe",
            "moe_perf.parquet",
            [
                base(
                    op_name="moe",
                    kernel_source=src,
                    moe_dtype=dt,
                    num_tokens=t,
                    hidden_size=7168,
                    inter_size=2048,
                    topk=8,
                    num_experts=384,
                    moe_tp_size=8,
                    moe_ep_size=1,
                    distribution=dist,
                    latency=lat,
                )
                for src, dt in (
                    ("sglang_marlin_moe", "int4_wo"),
                    ("sglang_marlin_moe_situ_as_silu", "int4_wo"),
                    ("sglang_fused_moe_triton", "w4a16_mxfp4"),
                )
                for dist, f in (("balanced", 1.5), ("power_law_1.01", 1.0))
                for t, lat in ((1, 0.03 * f), (64, 0.43 * f))
            ],
        ),
        "allreduce": (
            "comm",
            "custom_allreduce_perf.parquet",
            [
                base(
                    op_name="all_reduce",
                    kernel_source=src,
                    allreduce_dtype="bfloat16",
                    num_gpus=8,
                    message_size=size,
                    latency=lat,
                    backend=src,
                )
                for src, f in (("SGLang_CustomAllReduce_graph", 1.0), ("SGLang_CustomAllReduce_eager", 8.0))
                for size, lat in ((1024, 0.0033 * f), (1048576, 0.019 * f))
            ],
        ),
    }
    for name, (op, file, rows) in tables.items():
        if name != skip:
            _table(root, op, "sglang", V, file, rows)
    if skip != "allgather":
        _table(
            root,
            "comm",
            "nccl",
            "2.29.2",
            "nccl_perf.parquet",
            [
                base(op_name=op, kernel_source="NCCL", nccl_dtype="half", num_gpus=8, message_size=size, latency=lat)
                for op in ("all_gather", "all_reduce")
                for size, lat in ((1024, 0.012), (1048576, 0.024))
            ],
        )
    return root


def imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    data = fixture_tables(tmp_path / "h200_sxm")
    out = tmp_path / "p.json"
    code, text = run_cli(
        monkeypatch, capsys, "profile", "import", "aiconfigurator", "--data", str(data), "--out", str(out)
    )
    assert code == 0, text
    assert "SGLang 0.5.14 kernels" in text
    return out


def rows(doc: dict, family: str) -> list[dict]:
    t = doc["kernels"][family]
    return [dict(zip(t["columns"], r, strict=True)) for r in t["rows"]]


def test_import_maps_each_table_onto_its_family(tmp_path, monkeypatch, capsys) -> None:
    doc = json.loads(imported(tmp_path, monkeypatch, capsys).read_text())
    gemm = rows(doc, "gemm")
    # bf16 and block FP8 are phaseplan formats; per-tensor fp8 is not, and is left out; ms -> µs
    assert {(r["weights"], r["batch"]) for r in gemm} == {("bf16", 1), ("fp8", 1), ("bf16", 16)}
    assert len([r for r in gemm if r["batch"] == 1]) == 2 * 2 * 2 * 2
    one = next(r for r in gemm if (r["m"], r["n"], r["k"], r["weights"]) == (64, 4096, 1024, "fp8"))
    assert one["median_us"] == pytest.approx(0.008 * 4 * 1e3)
    # MLA's absorbed W_UK bmm (BF16 only: the FP8 bmm is not phaseplan's)
    assert [(r["m"], r["n"], r["k"], r["median_us"]) for r in gemm if r["batch"] == 16] == [(8, 512, 128, 5.0)]
    mla = {(r["kv"], r["layout"], r["context"]): r["median_us"] for r in rows(doc, "decode_attention_mla")}
    assert mla == {
        ("bf16", "any", 1024): 20.0,
        ("bf16", "any", 4096): 50.0,
        ("fp8_e4m3", "flat", 1024): 60.0,
        ("fp8_e4m3", "flat", 4096): 150.0,
    }
    assert {r["page_size"] for r in rows(doc, "decode_attention_mla")} == {"any"}
    # GQA decode: the engine's default kernel (fa3); Triton's rows are the Triton backend's own family, keyed with
    # K and V widths; sliding-window rows left out
    assert [(r["context"], r["median_us"]) for r in rows(doc, "decode_attention_gqa")] == [(2048, 12.0)]
    tri = rows(doc, "decode_attention_triton")
    assert [(r["q_heads"], r["kv_heads"], r["k_dim"], r["v_dim"], r["context"], r["median_us"]) for r in tri] == [
        (8, 1, 128, 128, 2048, 20.0)
    ]
    assert "prefill_attention_triton" not in doc["kernels"]  # no Triton prefill row measured: no family
    prefill = {
        (r["heads"], r["kv_heads"], r["qk_dim"], r["v_dim"], r["tokens"], r["context"]): r["median_us"]
        for r in rows(doc, "prefill_attention")
    }
    assert prefill == {(16, 16, 192, 128, 4096, 4096): 500.0, (8, 1, 128, 128, 2048, 2048): 40.0}  # batch 1 only
    moe = rows(doc, "fused_moe")  # power-law Marlin int4 rows, keyed as the released group 32; stand-ins left out
    assert [(r["tokens"], r["weights"], r["group"], r["tp"], r["ep"], r["median_us"]) for r in moe] == [
        (1, "int4", 32, 8, 1, 30.0),
        (64, "int4", 32, 8, 1, 430.0),
    ]
    # collectives: elements of 2 bytes; the graphed custom all-reduce, NCCL's all-gather
    assert [(r["bytes"], r["median_us"]) for r in rows(doc, "allreduce")] == [(2048, 3.3), (2097152, 19.0)]
    assert [(r["bytes"], r["median_us"]) for r in rows(doc, "allgather")] == [(2048, 12.0), (2097152, 24.0)]
    by = doc["measured_by"]
    assert (
        by["summary"] == "measured on H200 by AIConfigurator unknown (tables read from a folder) (SGLang 0.5.14 "
        "kernels)"
    )
    assert by["license"] == "Apache-2.0" and by["tables"]["moe"]["collection"] == "legacy"
    assert by["moe_distribution"] == "power_law_1.01"
    assert by["tables"]["allgather"]["framework"] == "NCCL"


@pytest.mark.parametrize("skip", ["gemm", "moe", "allgather"])
def test_a_missing_table_is_one_line_exit_2_and_nothing_written(tmp_path, monkeypatch, capsys, skip) -> None:
    data = fixture_tables(tmp_path / "h200_sxm", skip=skip)
    out = tmp_path / "p.json"
    code, text = run_cli(
        monkeypatch, capsys, "profile", "import", "aiconfigurator", "--data", str(data), "--out", str(out)
    )
    assert code == 2 and text.startswith("error: ") and len(text.strip().splitlines()) == 1, text
    assert "table" in text and not out.exists()


@pytest.mark.parametrize("damage", ["column", "garbage", "latency"])
def test_a_bad_table_is_one_line_exit_2_and_nothing_written(tmp_path, monkeypatch, capsys, damage) -> None:
    data = fixture_tables(tmp_path / "h200_sxm")
    path = data / "moe" / "sglang" / V / "moe_perf.parquet"
    if damage == "column":
        pq.write_table(pq.read_table(path).drop(["topk"]), path)
        expect = "lacks column(s) topk"
    elif damage == "garbage":
        path.write_bytes(b"not parquet")
        expect = "not a readable Parquet table"
    else:
        t = pq.read_table(path)
        pq.write_table(t.set_column(t.column_names.index("latency"), "latency", pa.array([-1.0] * t.num_rows)), path)
        expect = "latency -1.0"
    out = tmp_path / "p.json"
    code, text = run_cli(
        monkeypatch, capsys, "profile", "import", "aiconfigurator", "--data", str(data), "--out", str(out)
    )
    assert code == 2 and expect in text and len(text.strip().splitlines()) == 1, text
    assert "moe_perf.parquet" in text and not out.exists()


def import_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], data: Path, out: Path, *more: str):
    """`phaseplan profile import aiconfigurator --data DATA --out OUT [more]`: (exit code, output)."""
    args = ["profile", "import", "aiconfigurator", "--data", str(data), "--out", str(out), *more]
    return run_cli(monkeypatch, capsys, *args)


def test_no_package_and_no_folder_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "p.json"
    code, text = import_cli(monkeypatch, capsys, tmp_path / "nowhere", out)
    assert code == 2 and "no AIConfigurator data folder" in text and not out.exists()


def kimi(tmp_path: Path, profile: Path) -> tuple:
    sc, _ = load(ROOT / "scenarios" / "kimi-k2.6-decode.yaml", [f"profile={profile}"])
    pool = sc.deployment.pools()["decode"]
    return sc, pool


def test_imported_profile_prices_measured_ops_and_reports_whose(tmp_path, monkeypatch, capsys) -> None:
    path = imported(tmp_path, monkeypatch, capsys)
    prof = Profile.load(path)
    sc, pool = kimi(tmp_path, path)
    assert pool.weights == "int4" and pool.tp == 8
    cost = CostModel(sc.model, sc.hardware, pool, prof, integrity=False)
    assert cost.fused_moe
    # a decode step of one sequence: the routed experts are one fused op, from the measured table
    ops = step_ops(sc.model, pool, 1, 1, (), 0, fused_moe=True)
    fused = [op for op in ops if op.family == "fused_moe"]
    assert len(fused) == 1 and fused[0].count == sc.model.moe_layers
    assert prof.lookup("fused_moe", fused[0].params) == pytest.approx(30.0)
    assert not any(op.family == "moe_gemm" for op in ops)
    # the all-reduce of a 1-token step (7168 bf16 = 14,336 B) is read from the measured table, booked as table
    ar = next(op for op in ops if op.family == "allreduce")
    assert prof.lookup("allreduce", ar.params) == pytest.approx(3.3 + (19.0 - 3.3) * (14336 - 2048) / (2097152 - 2048))
    cost.step_s(1, 1000, 0, [])
    assert cost.usage.seconds["table"] > 0
    # provenance names the tool, framework and the derived count; the report line says whose kernels
    result = {"provenance": prof.provenance()}
    line = provenance_line(result)
    assert "AIConfigurator" in line and "SGLang 0.5.14 kernels" in line and "not phaseplan's own kernels" in line


def test_wildcard_keys_match_any_page_size_and_bf16_layout(tmp_path, monkeypatch, capsys) -> None:
    prof = Profile.load(imported(tmp_path, monkeypatch, capsys))
    shape = {"heads": 16, "batch": 8, "context": 2048, "page_size": 64}
    bf16 = prof.lookup("decode_attention_mla", {**shape, "kv": "bf16", "layout": "tiled"})
    assert bf16 == pytest.approx(20.0 + 30.0 * (2048 - 1024) / 3072)
    assert prof.lookup("decode_attention_mla", {**shape, "kv": "fp8_e4m3", "layout": "flat"}) == pytest.approx(3 * bf16)
    # the tiled FP8 layout was not measured: no table, the roofline prices it
    assert prof.lookup("decode_attention_mla", {**shape, "kv": "fp8_e4m3", "layout": "tiled"}) is None


def test_gemm_between_measured_n_k_is_derived_and_counted(tmp_path, monkeypatch, capsys) -> None:
    prof = Profile.load(imported(tmp_path, monkeypatch, capsys))
    g = {"batch": 1, "weights": "bf16", "group": 0}
    assert prof.lookup("gemm", {**g, "m": 64, "n": 4096, "k": 1024}) == pytest.approx(32.0)  # measured
    assert not prof.derived
    # (2048, 2048) lies between the measured 1024 and 4096: log-bilinear, exact for time ∝ n·k
    assert prof.lookup("gemm", {**g, "m": 64, "n": 2048, "k": 2048}) == pytest.approx(0.008 * 4 * 1e3)
    # between measured m the corners are read linearly first (a time ∝ n·k at every m stays exact)
    assert prof.lookup("gemm", {**g, "m": 32, "n": 2048, "k": 2048}) == pytest.approx((0.004 + 0.004 * 31 / 63) * 4e3)
    assert prof.provenance()["derived_gemm_forms"] == 1
    assert prof.lookup("gemm", {**g, "m": 64, "n": 8192, "k": 1024}) is None  # outside the grid: roofline
    assert prof.lookup("gemm", {**g, "m": 64, "n": 2048, "k": 2048, "weights": "int4", "group": 32}) is None


def test_fused_moe_roofline_is_the_sum_of_the_unfused_parts(tmp_path) -> None:
    sc, pool = kimi(tmp_path, ROOT / "profiles" / "h200-modeled.json")
    unfused = line_ops(sc.model, pool, "tokens", np.array([1, 7, 300]))
    fused = line_ops(sc.model, pool, "tokens", np.array([1, 7, 300]), fused_moe=True)
    one = next(op for op in fused if op.family == "fused_moe")
    parts = routed_parts(one.params)
    moe_ops = {(op.family, op.count) for op in unfused} - {(op.family, op.count) for op in fused}
    assert {f for f, _ in moe_ops} <= {"moe_gemm", "elementwise"}
    total = roofline.op_us("fused_moe", one.params, sc.hardware)
    assert np.allclose(total, sum(roofline.op_us(f, p, sc.hardware) * c for f, p, c in parts))
    assert len(parts) == 5 and [p.family for p in parts].count("moe_gemm") == 2


def test_moe_distribution_is_chosen_and_checked(tmp_path, monkeypatch, capsys) -> None:
    data = fixture_tables(tmp_path / "h200_sxm")
    out = tmp_path / "p.json"
    code, text = run_cli(
        monkeypatch,
        capsys,
        "profile",
        "import",
        "aiconfigurator",
        "--data",
        str(data),
        "--moe-distribution",
        "balanced",
        "--out",
        str(out),
    )
    assert code == 0, text
    assert [r["median_us"] for r in rows(json.loads(out.read_text()), "fused_moe")] == [45.0, 645.0]
    out.unlink()
    code, text = run_cli(
        monkeypatch,
        capsys,
        "profile",
        "import",
        "aiconfigurator",
        "--data",
        str(data),
        "--moe-distribution",
        "zipf",
        "--out",
        str(out),
    )
    assert code == 2 and "--moe-distribution" in text and not out.exists()


def test_a_newer_release_without_the_table_does_not_hide_the_one_with_it(tmp_path, monkeypatch, capsys) -> None:
    """AIConfigurator 0.12.0's B200 sglang/0.5.16 MoE folder holds only a Kimi-K3 MegaMoE table: the fused MoE is
    read from the newest release that has `moe_perf.parquet` (0.5.14 here), as with no newer folder at all."""
    data = fixture_tables(tmp_path / "b200_sxm")
    newer = data / "moe" / "sglang" / "0.5.16"
    newer.mkdir()
    (newer / "collection_meta.yaml").write_text(META.format(v="0.5.16"))
    pq.write_table(pa.Table.from_pylist([{"latency": 1.0}]), newer / "dsv4_megamoe_module_perf.parquet")
    out = tmp_path / "p.json"
    code, text = run_cli(
        monkeypatch, capsys, "profile", "import", "aiconfigurator", "--data", str(data), "--out", str(out)
    )
    assert code == 0, text
    doc = json.loads(out.read_text())
    assert doc["measured_by"]["tables"]["moe"]["version"] == V
    assert [r["median_us"] for r in rows(doc, "fused_moe")] == [30.0, 430.0]


def test_a_gpu_without_mla_kernels_imports_without_mla_rows(tmp_path, monkeypatch, capsys) -> None:
    """AIConfigurator's A100 folders hold no SGLang/vLLM MLA tables (Ampere has no MLA kernels) and attention tables
    of an older collection, without `window_size`: the profile has no MLA rows, the GQA attention rows are read as
    full attention (window 0), and its notes say both."""
    import shutil

    data = fixture_tables(tmp_path / "a100_sxm")
    shutil.rmtree(data / "mla")
    shutil.rmtree(data / "mla_bmm")
    for file in ("generation_attention_perf.parquet", "context_attention_perf.parquet"):
        path = data / "attention" / "sglang" / V / file
        table = pq.read_table(path)
        table = table.filter(pa.compute.equal(table["window_size"], 0))
        pq.write_table(table.drop(["window_size"]), path)
    out = tmp_path / "p.json"
    code, text = import_cli(monkeypatch, capsys, data, out, "--system", "a100_sxm")
    assert code == 0, text
    doc = json.loads(out.read_text())
    assert "decode_attention_mla" not in doc["kernels"] and doc["device"] == "NVIDIA A100"
    assert {r["batch"] for r in rows(doc, "gemm")} == {1}  # no absorbed MLA bmm
    assert [(r["context"], r["median_us"]) for r in rows(doc, "decode_attention_gqa")] == [(2048, 12.0)]
    assert [(r["qk_dim"], r["median_us"]) for r in rows(doc, "prefill_attention")] == [(128, 40.0)]
    notes = doc["measured_by"]["notes"]
    assert any("No context_mla, generation_mla, mla_bmm table" in n for n in notes)
    assert any("generation_attention has no window_size column" in n for n in notes)
    assert "generation_mla" not in doc["measured_by"]["tables"]


def test_a_table_every_gpu_has_is_still_required(tmp_path, monkeypatch, capsys) -> None:
    """Only MLA's tables may be absent: a GPU's missing GQA attention table is an error, as before."""
    data = fixture_tables(tmp_path / "a100_sxm", skip="generation_attention")
    out = tmp_path / "p.json"
    code, text = import_cli(monkeypatch, capsys, data, out)
    assert code == 2 and "generation_attention" in text and not out.exists()
