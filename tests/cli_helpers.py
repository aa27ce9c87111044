"""Running the `phaseplan` command line in-process, as a user would, for tests that read its exit code and output."""

from __future__ import annotations

import sys

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
