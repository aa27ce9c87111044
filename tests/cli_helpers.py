"""Running the `phaseplan` command line in-process, as a user would, for tests that read its exit code and output."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from phaseplan.cli import main


def invoke(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`phaseplan ARGS`: its exit code, stdout and stderr."""
    monkeypatch.setattr(sys, "argv", ["phaseplan", *args])
    try:
        main()
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """`phaseplan ARGS`: its exit code and all it printed, stderr first."""
    code, out, err = invoke(monkeypatch, capsys, *args)
    return code, err + out


def answer(line: str) -> dict:
    """The JSON answer of a `phaseplan …` line the page prints, run as a user would (a process in the repo)."""
    argv = shlex.split(line)
    assert argv[0] == "phaseplan"
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "phaseplan"), *argv[1:], "--json"],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode in (0, 1), proc.stderr  # plan exits 1 when nothing meets the SLO
    return json.loads(proc.stdout)
