"""Outputs all or nothing: a failed run, sweep or profile leaves the output folder exactly as it was.

`check_target` runs before any work, so an unwritable `--out` is one line at once, not a traceback after an
hour of simulation. `write_files` writes every file to a temporary name in its own folder, renames them when
all are written, and on any failure removes its temporaries, what it renamed into place and the folders it
made. SIGINT and SIGTERM are held while it works and delivered when it is done: an interrupted sweep leaves
the old set of files or the new one, never the new CSV beside the old JSON, and no temporary.

Why held signals and not a fresh sibling folder swapped in with one rename: `--out` is a shared folder (`out/`
holds every verb's outputs, a user's own files too), and a rename cannot replace a folder that is not empty,
so the swap would have to copy or link everything else in first and would still not be one step. A manifest
written last would leave the folder mixed and ask every reader to consult it. The renames of a few files take
microseconds; holding two signals for that long costs nothing. (SIGKILL and power loss are not covered: no
user-space write of several files is atomic against them.)
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from simulator import signals
from simulator.errors import InputError


def check_target(folder: Path, names: list[str], option: str = "--out") -> None:
    """Refuse a folder that is a file, cannot be made or written, or where an output name is taken by a folder."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{option} {folder}: exists and is not a folder")
    existing = folder
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(f"{option} {folder}: {existing} is a file, so the folder cannot be made")
    before = os.stat(existing)
    try:  # the only sure test of writing is to write: a probe folder, removed at once
        os.rmdir(tempfile.mkdtemp(prefix=".phaseplan-probe-", dir=existing))
    except OSError as e:
        raise InputError(f"{option} {folder}: cannot write in {existing} ({e.strerror})") from None
    try:  # and the folder's times put back, so a refused or dry run leaves no trace
        os.utime(existing, ns=(before.st_atime_ns, before.st_mtime_ns))
    except OSError:
        pass  # a folder we may write in but do not own: its times cannot be set, only its mtime moved
    for name in names:
        if (folder / name).is_dir():
            raise InputError(f"{option} {folder}: {folder / name} is a folder, where the output file goes")


def check_file_target(path: Path, option: str = "--out") -> None:
    """Refuse an output file path that is a folder or whose folder cannot be made or written."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{option} {path}: is a folder; name the file to write")
    check_target(path.parent, [], f"{option} {path}: folder")


def write_atomic(path: Path, text: str) -> None:
    write_files({Path(path): text})


def write_files(files: Mapping[Path, str | bytes]) -> None:
    """Write all the files or none: temporaries first, then renames (an earlier file kept as a hard link until
    all are in place); any failure undoes what was done, earlier files back where they were. SIGINT and SIGTERM
    wait until the files are all in place or all undone (`simulator.signals`)."""
    with signals.held():
        _write_files(files)


def _write_files(files: Mapping[Path, str | bytes]) -> None:
    made = _make_folders({p.parent for p in files})
    temps: dict[Path, Path] = {}
    backups: dict[Path, Path] = {}
    placed: list[Path] = []
    try:
        for path, text in files.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            temps[path] = Path(tmp)
            if isinstance(text, bytes):
                with os.fdopen(fd, "wb") as fb:
                    fb.write(text)
            else:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text)
            os.chmod(tmp, 0o666 & ~_umask())
        for path, tmp in temps.items():
            if path.exists():
                backups[path] = tmp.with_name(tmp.name + ".old")
                try:
                    os.link(path, backups[path])
                except OSError:  # a file system without hard links: a copy does the same
                    shutil.copy2(path, backups[path])
            tmp.replace(path)
            placed.append(path)
    except BaseException as e:
        for path in placed:
            if path in backups:
                backups.pop(path).replace(path)
            else:
                path.unlink(missing_ok=True)
        for leftover in [*temps.values(), *backups.values()]:
            leftover.unlink(missing_ok=True)
        for folder in reversed(made):
            _rmdir_quietly(folder)
        if isinstance(e, OSError):
            raise InputError(f"{getattr(e, 'filename', None) or 'output'}: cannot write ({e.strerror})") from None
        raise
    for old in backups.values():
        old.unlink()


def _make_folders(folders: set[Path]) -> list[Path]:
    """Make missing folders; return those made, parents first, so a failure can remove them."""
    made: list[Path] = []
    for folder in sorted(folders):
        missing = []
        f = folder
        while not f.exists():
            missing.append(f)
            f = f.parent
        for m in reversed(missing):
            try:
                m.mkdir()
            except OSError as e:
                for done in reversed(made):
                    _rmdir_quietly(done)
                raise InputError(f"{folder}: cannot make the folder ({e.strerror})") from None
            made.append(m)
    return made


def _rmdir_quietly(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
