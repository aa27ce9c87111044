"""Outputs all or nothing: every failing `run`, `sweep` and `profile` leaves its output folder exactly as it
was — earlier results intact, no temporaries, no new folder — whether it fails before, during or after the work.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_helpers import invoke

from simulator.atomic import write_files
from simulator.errors import InputError

SMALL = (
    "name: small\nmodel: llama-3.1-70b\ntraffic: {concurrency: 1, requests: 2, prompt_tokens: 64, output_tokens: 4}\n"
)
RUN_FILES = ["result.json", "requests.csv", "latency-cdf.png", "kv-and-queue.png"]
SWEEP_CHARTS = [f"s-sweep-{m}.png" for m in ("tok-s-gpu", "ttft-p95-ms", "tpot-p95-ms", "slo-pct", "usd-mtok-out")]


def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """`phaseplan ARGS`: its exit code and stderr."""
    code, _, err = invoke(monkeypatch, capsys, *args)
    return code, err


def snapshot(folder: Path) -> dict[str, bytes | None] | None:
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


def fail_on_rename(monkeypatch: pytest.MonkeyPatch, nth: int) -> None:
    """The nth rename into place and those after it fail as a full disk would (the earlier ones succeed)."""
    real = Path.replace
    calls = {"n": 0}

    def replace(self: Path, target: Path) -> Path:
        if str(self).endswith(".tmp"):
            calls["n"] += 1
            if calls["n"] >= nth:
                raise OSError(28, "No space left on device", str(target))
        return real(self, target)

    monkeypatch.setattr(Path, "replace", replace)


def boom(*args: object, **kwargs: object) -> None:
    raise InputError("traffic: failed in the middle of the simulation")


@pytest.mark.parametrize("existing", [True, False], ids=["earlier-results", "new-folder"])
@pytest.mark.parametrize("stage", ["budget", "simulation", "first-rename", "last-rename"])
@pytest.mark.parametrize("verb", ["run", "sweep", "sweep --pareto"])
def test_failing_run_or_sweep_leaves_out_as_it_was(tmp_path, monkeypatch, capsys, verb, stage, existing) -> None:
    """A run writes four files (Result, requests, two charts); a sweep seven (CSV, JSON, a chart per metric) and
    with --pareto two more (the frontier's CSV and PNG): all or none."""
    verb, *flags = verb.split()
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SMALL + ("sweep:\n  seed: [1, 2]\n" if verb == "sweep" else ""))
    out = tmp_path / "out" / "deeper"
    if existing:
        out.mkdir(parents=True)
        (out / "notes.txt").write_text("mine")
        for name in (
            *RUN_FILES,
            "s-sweep.csv",
            "s-sweep.json",
            *SWEEP_CHARTS,
            "s-sweep-pareto.csv",
            "s-sweep-pareto.png",
        ):
            (out / name).write_text(f"an earlier {name}")
    before = snapshot(tmp_path)
    args = [verb, str(scenario), "--out", str(out), *flags]
    if stage == "budget":
        args += ["--max-requests", "1"]
    elif stage == "simulation":  # (a sweep keeps a failed point: there the whole sweep fails)
        monkeypatch.setattr(
            "simulator.engine.run.simulate" if verb == "run" else "simulator.planning.sweeps.run_sweep", boom
        )
    else:
        files = len(RUN_FILES) if verb == "run" else 2 + len(SWEEP_CHARTS) + 2 * len(flags)
        fail_on_rename(monkeypatch, 1 if stage == "first-rename" else files)
    code, err = cli(monkeypatch, capsys, *args)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("stage", ["work", "rename"])
def test_failing_profile_leaves_out_as_it_was(tmp_path, monkeypatch, capsys, stage) -> None:
    (tmp_path / "p.json").write_text("an earlier profile")
    before = snapshot(tmp_path)
    if stage == "work":
        monkeypatch.setattr("kernels.profiler.write_modeled_profile", boom)
    else:
        fail_on_rename(monkeypatch, 1)
    code, err = cli(
        monkeypatch, capsys, "profile", "--device", "roofline", "--quick", "--out", str(tmp_path / "p.json")
    )
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert snapshot(tmp_path) == before
    code, err = cli(
        monkeypatch, capsys, "profile", "--device", "roofline", "--quick", "--out", str(tmp_path / "new" / "p.json")
    )
    assert code == 2 and not (tmp_path / "new").exists()


def test_a_sweep_writes_its_pareto_files_with_its_own(tmp_path, monkeypatch, capsys) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SMALL + "sweep:\n  seed: [1, 2]\n")
    code, err = cli(monkeypatch, capsys, "sweep", str(scenario), "--out", str(tmp_path / "o"), "--pareto")
    assert code == 0, err
    names = sorted(p.name for p in (tmp_path / "o").iterdir())
    assert names == sorted(["s-sweep-pareto.csv", "s-sweep-pareto.png", "s-sweep.csv", "s-sweep.json", *SWEEP_CHARTS])
    assert all((tmp_path / "o" / n).read_bytes()[:4] == b"\x89PNG" for n in SWEEP_CHARTS)
    assert (tmp_path / "o" / "s-sweep-pareto.png").read_bytes()[:4] == b"\x89PNG"


def test_successful_writes_replace_whole_files(tmp_path) -> None:
    (tmp_path / "a.json").write_text("old")
    write_files({tmp_path / "a.json": "new a", tmp_path / "sub" / "b.csv": "new b"})
    assert (tmp_path / "a.json").read_text() == "new a" and (tmp_path / "sub" / "b.csv").read_text() == "new b"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.json", "b.csv", "sub"]
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o666 & ~mask


def test_a_successful_run_writes_its_result(tmp_path, monkeypatch, capsys) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SMALL)
    code, err = cli(monkeypatch, capsys, "run", str(scenario), "--out", str(tmp_path / "o"))
    assert code == 0, err
    assert json.loads((tmp_path / "o" / "result.json").read_text())["metrics"]["completed"] == 2
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == sorted(RUN_FILES)


def test_earlier_file_kept_without_hard_links(tmp_path, monkeypatch) -> None:
    """Where the file system has no hard links the earlier file is copied aside, and still comes back."""
    (tmp_path / "a.csv").write_text("earlier a")

    def no_links(*args: object) -> None:
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    fail_on_rename(monkeypatch, 2)
    with pytest.raises(InputError, match="cannot write"):
        write_files({tmp_path / "a.csv": "new a", tmp_path / "b.json": "new b"})
    assert snapshot(tmp_path) == {"a.csv": b"earlier a"}


def test_the_writability_probe_leaves_the_folder_as_it_was(tmp_path) -> None:
    """`--out` is probed by writing in the nearest existing folder; its listing and times are put back."""
    from simulator.atomic import check_target

    folder = tmp_path / "existing"
    folder.mkdir()
    (folder / "kept.txt").write_text("x")
    os.utime(folder, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))  # 2001-09-09, to the ns
    check_target(folder / "new" / "deeper", ["result.json"])
    assert sorted(p.name for p in folder.iterdir()) == ["kept.txt"]
    assert os.stat(folder).st_mtime_ns == 1_000_000_000_000_000_000
