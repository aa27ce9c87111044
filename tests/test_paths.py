"""Dotted paths checked against the schema: unknown keys name the valid ones and the nearest, before any run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cli_helpers import invoke
from pydantic import BaseModel

from simulator.config import loader, paths
from simulator.config.scenario import Scenario
from simulator.errors import InputError
from simulator.planning import space

ROOT = Path(__file__).resolve().parents[1]
FLEET = str(ROOT / "scenarios" / "fleet-disaggregated.yaml")


def _all_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every field path of a model, through nested models (a union's arms too)."""
    out = []
    for name, field in model.model_fields.items():
        out.append(prefix + name)
        node = paths._node(field.annotation)
        for m in node.models:
            out += _all_paths(m, f"{prefix}{name}.")
    return out


def test_every_schema_field_resolves_to_itself() -> None:
    every = _all_paths(Scenario)
    assert "deployment.decode.speculative.draft_tokens" in every and "model.attention.kv_lora_rank" in every
    for p in every:
        assert paths.check_path(p, short_names=False) == p


def test_bundled_sweep_paths_resolve() -> None:
    for f in sorted((ROOT / "scenarios").glob("*.yaml")):
        sc, _ = loader.load(f)
        for key in sc.sweep:
            assert paths.check_path(key, short_names=False) == key


@pytest.mark.parametrize(
    ("path", "expect"),
    [
        ("traffic.arrivals", "did you mean 'traffic.arrival'?"),
        ("traffic.rat", "did you mean 'traffic.rate'?"),
        ("deployment.decode.instancs", "did you mean 'deployment.decode.instances'?"),
        ("deployment.prefil.instances", "did you mean 'deployment.prefill.instances'?"),
        ("traffic.prompt_tokens.medain", "did you mean 'traffic.prompt_tokens.median'?"),
        ("model.formats.int9.group_size", "did you mean 'model.formats.int4.group_size'?"),
        ("arrivals", "did you mean 'traffic.arrival'?"),
        ("name.sub", "'name' is not a mapping"),
        ("traffic..rate", "an empty key after 'traffic'"),
        ("deployment.decode.speculative.acceptance.x", "a key into it is an index"),
    ],
)
def test_unknown_paths_suggest(path: str, expect: str) -> None:
    with pytest.raises(InputError) as e:
        paths.check_path(path)
    assert str(e.value).startswith(f"{path}: ") and expect in str(e.value)


def test_valid_keys_listed_where_the_path_went_wrong() -> None:
    with pytest.raises(InputError, match=r"\(valid keys at traffic: concurrency, rate, arrival, burst_cv"):
        paths.check_path("traffic.arrivals")


def test_short_names_of_the_planner() -> None:
    assert paths.check_path("prefill.instances") == "deployment.prefill.instances"
    assert paths.check_path("decode.kv_cache") == "deployment.decode.kv_cache"
    assert paths.check_path("rate") == "traffic.rate"
    with pytest.raises(InputError, match="did you mean 'deployment.prefill.instances'"):
        paths.check_path("prefill.instances", short_names=False)
    with pytest.raises(InputError, match="did you mean 'deployment.prefill.instances'"):
        paths.check_path("prefill.instancs")
    assert list(space.parse(["prefill.instances=1..2"]).branches[0].dims) == ["deployment.prefill.instances"]


def test_unknown_key_in_a_file_names_line_and_suggests(tmp_path: Path, monkeypatch, capsys) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("name: x\nmodel: kimi-k2.6\ntraffic:\n  concurrency: 2\n  arrivals: poisson\n")
    code, out, err = invoke(monkeypatch, capsys, "capacity", str(f))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith(f"error: {f}: line 5: traffic.arrivals: unknown key; did you mean 'arrival'? (valid keys")


def _no_run(*_: Any, **__: Any) -> Any:
    raise AssertionError("ran although a path was wrong")


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (("run", FLEET, "--set", "traffic.arrivals=poisson"), "--set traffic.arrivals: unknown key; did you mean"),
        (("sweep", FLEET, "--set", "sweep={traffic.rat: [1, 2]}"), "--set sweep.traffic.rat: unknown key; did you"),
        (("plan", FLEET, "--rate", "1", "--search", "prefill.instancs=1..2"), "--search prefill.instancs: unknown"),
        (("plan", FLEET, "--rate", "1", "--search", "deployment.nosuch=1,2"), "--search deployment.nosuch: unknown"),
    ],
)
def test_path_errors_exit_2_before_any_run(tmp_path: Path, monkeypatch, capsys, args: tuple[str, ...], expect) -> None:
    import simulator.engine.run as result
    import simulator.planning.search as search
    import simulator.planning.sweeps as sweeps

    monkeypatch.setattr(result, "simulate", _no_run)
    monkeypatch.setattr(sweeps, "run_sweep", _no_run)
    monkeypatch.setattr(search, "plan", _no_run)
    out_dir = tmp_path / "out"
    extra = ("--out", str(out_dir)) if args[0] == "sweep" else ()
    code, out, err = invoke(monkeypatch, capsys, *args, *extra)
    assert code == 2 and len(err.strip().splitlines()) == 1 and expect in err, err
    assert not out_dir.exists()


def test_sweep_path_typo_in_a_file_names_its_line(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("name: x\nmodel: kimi-k2.6\nsweep:\n  traffic.concurency: [1, 2]\n")
    with pytest.raises(InputError, match=r"line 4: sweep\.traffic\.concurency: unknown key; did you mean 'traffic\."):
        loader.load(f)
