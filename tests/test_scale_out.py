"""Sweeps and repeats give the same bytes on every backend and worker count; error bars behave; tables fit.

Ray is an optional extra that `make test` installs; the Ray test skips only where it cannot be imported.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from simulator.config import loader
from simulator.config.sweep import to_csv
from simulator.planning.backends import Backend
from simulator.planning.repeats import repeat
from simulator.planning.slo import SLO
from simulator.planning.spread import drawn_profile
from simulator.planning.sweeps import run_sweep
from simulator.results.report import print_sweep
from simulator.results.sweep_table import sweep_table

ROOT = Path(__file__).resolve().parents[1]
FLEET = ROOT / "scenarios" / "fleet-disaggregated.yaml"


@pytest.fixture(scope="module")
def small_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The KV-format study cut to a few short points, one of which (BF16 weights) does not fit."""
    data = yaml.safe_load((ROOT / "scenarios" / "kimi-k2.6-kv-formats.yaml").read_text())
    data["traffic"]["requests"] = 6
    data["sweep"] = {"deployment.decode.kv_cache": ["bf16", "fp8_e4m3"], "deployment.decode.weights": ["int4", "bf16"]}
    del data["focus"]  # the study's focus names its own sweep's concurrency
    path = tmp_path_factory.mktemp("sweep") / "small.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _sweep(path: Path, backend: Backend) -> list[dict]:
    sc, raw = loader.load(path)
    with backend as b:
        return run_sweep(sc, raw, str(path), path.parent, b)


@pytest.fixture(scope="module")
def sequential(small_sweep: Path) -> list[dict]:
    return _sweep(small_sweep, Backend("local", 1))


def test_a_failed_point_is_kept_with_its_reason_and_the_sweep_goes_on(sequential: list[dict]) -> None:
    failed = [r for r in sequential if "error" in r]
    assert [r["point"]["deployment.decode.weights"] for r in failed] == ["bf16", "bf16"]
    assert all("does not fit" in r["error"] for r in failed)
    assert len([r for r in sequential if "metrics" in r]) == 2
    assert to_csv(sequential).count("does not fit") == 2


def test_parallel_sweep_is_byte_identical(small_sweep: Path, sequential: list[dict]) -> None:
    parallel = _sweep(small_sweep, Backend("local", 2))
    assert json.dumps(parallel) == json.dumps(sequential)
    assert to_csv(parallel) == to_csv(sequential)


def test_ray_backend_is_byte_identical(small_sweep: Path, sequential: list[dict]) -> None:
    pytest.importorskip("ray", reason="Ray is not installed (make test installs the [ray] extra)")
    assert json.dumps(_sweep(small_sweep, Backend("ray", 2))) == json.dumps(sequential)


@pytest.mark.parametrize("width", [80, 200])
def test_sweep_table_fits_the_console(small_sweep: Path, sequential: list[dict], width: int) -> None:
    sc, _ = loader.load(small_sweep)
    buf = io.StringIO()
    print_sweep(Console(file=buf, width=width, highlight=False), sc, sequential, Path("out/x.csv"))
    lines = buf.getvalue().splitlines()
    assert max(len(line) for line in lines) <= width
    assert "…" not in buf.getvalue() and "%" in buf.getvalue()
    assert sum("does not fit" in line for line in lines) == 2
    _, left = sweep_table(sc.name, list(sc.sweep), sequential, width)
    _, left_at_80 = sweep_table(sc.name, list(sc.sweep), sequential, 80)
    assert len(left) < len(left_at_80) if width > 80 else left == left_at_80  # a wider terminal shows more


def test_intervals_narrow_with_repeats_and_repeat_exactly() -> None:
    sc, _ = loader.load(FLEET, ["traffic.duration_s=20", "traffic.rate=1"])
    slo = SLO.parse(None, sc)
    with Backend("local", 1) as b:
        few = repeat(sc, FLEET.parent, 3, slo, b)
        many = repeat(sc, FLEET.parent, 8, slo, b)
    with Backend("local", 2) as b:
        again = repeat(sc, FLEET.parent, 3, slo, b)
    assert json.dumps(again) == json.dumps(few)

    def width(r: dict, name: str) -> float:
        lo, hi = r["metrics"][name]["ci95"]
        return hi - lo

    for name in ("ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s"):
        assert 0 < width(many, name) < width(few, name)
    p = many["slo_met"]
    assert p["ci95"][0] <= p["probability"] <= p["ci95"][1]


def test_profile_spread_draws_within_p10_p90(tmp_path: Path) -> None:
    data = json.loads((ROOT / "profiles" / "h200-modeled.json").read_text())
    for entries in data["kernels"].values():
        for e in entries:
            e["p10_us"], e["p90_us"] = e["median_us"] * 0.9, e["median_us"] * 1.2
    (tmp_path / "p.json").write_text(json.dumps(data))
    sc, _ = loader.load(FLEET, [f"profile={tmp_path / 'p.json'}"])
    draws = [drawn_profile(sc, None, i) for i in (0, 1, 0)]
    family = "decode_attention_mla" if "decode_attention_mla" in data["kernels"] else next(iter(data["kernels"]))
    entry = data["kernels"][family][len(data["kernels"][family]) // 2]
    got = [p.lookup(family, entry["shape"]) for p in draws]  # type: ignore[union-attr]
    assert got[0] == got[2] != got[1]
    assert all(entry["p10_us"] <= g <= entry["p90_us"] for g in got)
