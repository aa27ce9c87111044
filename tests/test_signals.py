"""Hostile input, round two (issue 23): outputs all or nothing under SIGINT and SIGTERM, and worker processes
stopped with their parent. SIGTERM between a sweep's renames left the new CSV beside the old JSON plus temporary
files; SIGINT during the second rename restored the CSV and deleted the JSON; SIGTERM to `sweep --jobs 2` left
its workers alive holding 1.2 GB. Each test below failed before the fix.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulator import atomic

ROOT = Path(__file__).resolve().parents[1]
PHASEPLAN = Path(sys.executable).with_name("phaseplan")


class Stop(BaseException):
    """What the CLI's SIGTERM handler raises (phaseplan.cli.Terminated), for this test's own handler."""


def _raise_stop(signum: int, frame: object) -> None:
    raise Stop


@pytest.fixture
def sigterm_raises():
    before = signal.signal(signal.SIGTERM, _raise_stop)
    yield
    signal.signal(signal.SIGTERM, before)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


OLD = {"s-sweep.csv": b"old csv\n", "s-sweep.json": b"old json\n", "s-sweep-pareto.csv": b"old pareto\n"}
NEW = {"s-sweep.csv": "new csv\n", "s-sweep.json": "new json\n", "s-sweep-pareto.csv": "new pareto\n"}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("at", [0, 1, 2])
def test_a_signal_at_each_rename_leaves_the_new_set_whole(tmp_path, monkeypatch, sigterm_raises, sig, at) -> None:
    """The signal comes right after rename number `at`: it is held until every file is in place, then delivered."""
    for name, data in OLD.items():
        (tmp_path / name).write_bytes(data)
    real = Path.replace
    renames: list[Path] = []

    def replace(self: Path, target: Path) -> Path:
        out = real(self, target)
        if not str(self).endswith(".old"):  # a file put in place (not an earlier file restored)
            renames.append(Path(target))
            if len(renames) == at + 1:
                os.kill(os.getpid(), sig)
        return out

    monkeypatch.setattr(Path, "replace", replace)
    with pytest.raises(KeyboardInterrupt if sig == signal.SIGINT else Stop):
        atomic.write_files({tmp_path / n: t for n, t in NEW.items()})
    assert len(renames) == 3  # every rename ran before the signal was delivered
    assert snapshot(tmp_path) == {n: t.encode() for n, t in NEW.items()}  # and nothing else: no temporaries


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_temporaries_are_written(tmp_path, monkeypatch, sigterm_raises, sig) -> None:
    for name, data in OLD.items():
        (tmp_path / name).write_bytes(data)
    real = atomic.tempfile.mkstemp
    made = []

    def mkstemp(*args, **kwargs):
        made.append(1)
        if len(made) == 2:
            os.kill(os.getpid(), sig)
        return real(*args, **kwargs)

    monkeypatch.setattr(atomic.tempfile, "mkstemp", mkstemp)
    with pytest.raises(KeyboardInterrupt if sig == signal.SIGINT else Stop):
        atomic.write_files({tmp_path / n: t for n, t in NEW.items()})
    assert snapshot(tmp_path) == {n: t.encode() for n, t in NEW.items()}


def test_a_failed_write_with_a_signal_pending_leaves_the_old_set(tmp_path, monkeypatch, sigterm_raises) -> None:
    """A rename that fails after a signal came: the rollback runs whole, then the signal is delivered."""
    for name, data in OLD.items():
        (tmp_path / name).write_bytes(data)
    real = Path.replace
    count = []

    def replace(self: Path, target: Path) -> Path:
        if not str(self).endswith(".old"):
            count.append(1)
            if len(count) == 2:
                os.kill(os.getpid(), signal.SIGTERM)
                raise OSError(28, "No space left on device", str(target))
        return real(self, target)

    monkeypatch.setattr(Path, "replace", replace)
    with pytest.raises(Stop):
        atomic.write_files({tmp_path / n: t for n, t in NEW.items()})
    assert snapshot(tmp_path) == OLD


def test_workers_stop_with_an_interrupted_map() -> None:
    """An exception in the parent (as SIGTERM raises) stops the workers at once instead of waiting them out."""
    from simulator.planning.backends import Backend

    pids: list[int] = []

    def first_done(n: int) -> None:
        pids.extend(p.pid for p in b._pool._processes.values())  # type: ignore[union-attr]
        raise Stop

    t0 = time.monotonic()
    with pytest.raises(Stop), Backend("local", 2) as b:
        b.map(time.sleep, [0.01, 60, 60], first_done)
    assert time.monotonic() - t0 < 20  # not the 60 s a running point would take
    assert pids
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # killed and reaped: not even a zombie


def _group_alive(pgid: int) -> list[str]:
    out = subprocess.run(["ps", "-o", "pid=,stat=,args=", "-g", str(pgid)], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if line.strip()]


@pytest.mark.skipif(not PHASEPLAN.exists() or shutil.which("ps") is None, reason="needs the console script and ps")
def test_sigterm_to_a_parallel_sweep(tmp_path) -> None:
    """The acceptance protocol: SIGTERM at several moments of `sweep --jobs 2 --out`: the folder holds the old
    complete set or the new one, nothing else, and no process of the sweep survives it by 3 s."""
    study = str(ROOT / "scenarios" / "kimi-k2.6-kv-formats.yaml")
    cmd = [str(PHASEPLAN), "sweep", study, "--jobs", "2", "--set", "traffic.requests=64"]
    old, new = tmp_path / "old", tmp_path / "new"
    subprocess.run([*cmd, "--out", str(old)], check=True, capture_output=True, cwd=ROOT)
    subprocess.run([*cmd, "--set", "seed=7", "--out", str(new)], check=True, capture_output=True, cwd=ROOT)
    want_old, want_new = snapshot(old), snapshot(new)
    assert want_old != want_new
    for delay in (0.8, 2.0):
        shutil.copytree(old, tmp_path / "o", dirs_exist_ok=True)
        p = subprocess.Popen(
            [*cmd, "--set", "seed=7", "--out", str(tmp_path / "o")],
            cwd=ROOT,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(delay)
        p.send_signal(signal.SIGTERM)
        err = p.communicate(timeout=30)[1].decode()
        time.sleep(3)
        assert _group_alive(p.pid) == [], delay
        assert snapshot(tmp_path / "o") in (want_old, want_new), delay
        assert "Traceback" not in err and (p.returncode == 0 or err.strip() == "error: terminated (SIGTERM)"), err


@pytest.mark.skipif(not PHASEPLAN.exists(), reason="needs the console script")
def test_sigterm_while_the_cli_is_still_importing_is_answered() -> None:
    """A SIGTERM in the first instant (the CLI's imports take ~1 s on a busy machine) is the usual one line and
    exit 143, not a silent death by the default action."""
    p = subprocess.Popen([str(PHASEPLAN), "presets"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # The interpreter's own start-up (before any of phaseplan runs) can take over 50 ms on a loaded machine; the
    # signal is sent once the console script has installed its handler (Linux: SIGTERM in /proc's SigCgt mask).
    _wait_for_sigterm_handler(p)
    p.send_signal(signal.SIGTERM)
    err = p.communicate(timeout=30)[1].decode()
    assert (p.returncode, err.strip()) in ((143, "error: terminated (SIGTERM)"), (0, "")), (p.returncode, err)


def _wait_for_sigterm_handler(p: subprocess.Popen, timeout_s: float = 20.0) -> None:
    status = Path(f"/proc/{p.pid}/status")
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and p.poll() is None:
        try:
            caught = next(line for line in status.read_text().splitlines() if line.startswith("SigCgt:"))
        except (OSError, StopIteration):
            return  # no /proc: send at once
        if int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)):
            return
        time.sleep(0.002)


def test_a_sigterm_wrapped_by_the_code_it_interrupted_is_still_a_termination() -> None:
    """A SIGTERM raised inside a class body's __set_name__ (matplotlib's import) arrives as a RuntimeError whose
    cause is `Terminated`: the CLI answers it as a termination, not a traceback."""
    from phaseplan.cli import Terminated, _caused_by_terminated

    try:
        try:
            raise Terminated
        except Terminated as t:
            raise RuntimeError("Error calling __set_name__") from t
    except RuntimeError as e:
        assert _caused_by_terminated(e)
    assert not _caused_by_terminated(RuntimeError("unrelated"))
