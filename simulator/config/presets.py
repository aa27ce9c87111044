"""Model, hardware and serving-engine presets: YAML files in `presets/` beside this module, each citing a source.

A preset is a name, never a path: `model: /abs/x` or `hardware: ../../x` is an unknown preset, refused before any
file is opened (a path there would read any YAML on the machine and show its values in error lines, or on the
app's page). Two fields take a file where the schema says so, each by its suffix: an engine may be a file of its
own (`engine: engines/NAME.yaml`, what `phaseplan calibrate` writes: a name ending in .yaml or .yml), and a model
a Hugging Face config.json (`model: path/config.json`, `simulator.config.hf_config`). Such a path is taken as given
when absolute, else from the working directory, else from the repository root (where `engines/` keeps the fitted
ones), so a scenario names it the same from either. Every file, bundled or not, is read by the one reader
(`simulator.input_files`), YAML under the limits of scenario text.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from simulator.config import hf_config, safe_yaml
from simulator.errors import InputError

ROOT = Path(__file__).parent / "presets"
REPO = Path(__file__).resolve().parents[2]
FITTED = REPO / "engines"  # engines fitted by `phaseplan calibrate`: the app offers these beside the presets
FILE_SUFFIXES = (".yaml", ".yml")


def names(kind: str) -> list[str]:
    return sorted(p.stem for p in (ROOT / kind).glob("*.yaml"))


@cache
def _read(kind: str, name: str) -> dict[str, Any]:
    known = names(kind)
    if name not in known:  # by name among the bundled files: a path is no preset name
        label = {"models": "model", "hardware": "hardware", "engines": "engine"}[kind]
        raise InputError(f"unknown {label} preset {_shown(name)} (known: {', '.join(known)})")
    return _parse(ROOT / kind / f"{name}.yaml", "preset", "a preset")


def _shown(name: str) -> str:
    """A name as an error shows it: quoted, cut short (it may be a long path or hold line breaks)."""
    return repr(name) if len(name) <= 80 else repr(name[:77]) + "..."


def named(load: Callable[[str], dict[str, Any]], value: Any) -> Any:
    """A schema field that takes a preset's name or inline data: the preset's mapping for a name (an unknown one a
    ValueError, which pydantic reports with the field's YAML path), anything else as given."""
    if not isinstance(value, str):
        return value
    try:
        return load(value)
    except InputError as e:
        raise ValueError(str(e)) from None


def model(name: str) -> dict[str, Any]:
    """A preset by name, or a Hugging Face config.json by path (`hf_config`). A fresh copy: a
    `--set model.attention.heads` must not change the cached preset for later loads."""
    if not name.lower().endswith(".json"):
        return copy.deepcopy(_read("models", name))
    path = file_path(name, "model config")
    stat = path.stat()
    return copy.deepcopy(_read_config(path, stat.st_mtime_ns, stat.st_size))


def hardware(name: str) -> dict[str, Any]:
    return copy.deepcopy(_read("hardware", name))


def engine(name: str) -> dict[str, Any]:
    """A preset by name, or an engine file by path (`is_file`). A preset of an engine's later releases
    (`releases.of`) states only what changed: the rest, sources included, is the earlier preset's."""
    if not is_file(name):
        own = copy.deepcopy(_read("engines", name))
        later = own.get("releases")
        if not isinstance(later, dict):
            return own
        base = copy.deepcopy(_read("engines", str(later.get("of"))))  # one level: the earlier preset names none
        return {**base, **own, "sources": {**base.get("sources", {}), **own.get("sources", {})}}
    path = engine_path(name)
    stat = path.stat()
    return copy.deepcopy(_read_file(path, stat.st_mtime_ns, stat.st_size))


RELEASE = re.compile(r"(\d+)\.(\d+)\.(\d+)")  # the first X.Y.Z a stated version holds: "v0.5.13.post1" is 0.5.13


def for_release(name: str, version: str) -> str:
    """The preset that prices engine `name` at the release `version` states: the preset of its later releases
    whose `releases.since` is the latest at or before it, else `name` itself (also where the version states no
    X.Y.Z release, e.g. a commit). Why: a published run names its release, and an engine's kernels change with it
    (a validation case, or a held-out one, says `sglang-0.5` and `v0.5.12`)."""
    release = _release(version)
    if release is None or is_file(name):
        return name
    later = [(first, other) for other in names("engines") if (first := _since(other, name)) and first <= release]
    return max(later)[1] if later else name


def _since(preset: str, of: str) -> tuple[int, ...] | None:
    """The first release `preset` describes where it is a preset of `of`'s later releases, else None."""
    later = _read("engines", preset).get("releases")
    return _release(str(later.get("since"))) if isinstance(later, dict) and later.get("of") == of else None


def _release(text: str) -> tuple[int, ...] | None:
    found = RELEASE.search(text)
    return tuple(int(x) for x in found.groups()) if found else None


def is_file(name: str) -> bool:
    return name.lower().endswith(FILE_SUFFIXES)


def engine_path(name: str) -> Path:
    return file_path(name, "engine file")


def file_path(name: str, what: str) -> Path:
    """Where a file named `name` is: absolute as given, else under the working directory, else the repo."""
    given = Path(name).expanduser()
    for path in [given] if given.is_absolute() else [Path.cwd() / given, REPO / given]:
        if path.is_file():
            return path
    raise InputError(f"{what} '{name}' not found (looked in the working directory and {REPO})")


def fitted_files() -> list[str]:
    """The engine files in the repository's `engines/`, as a scenario names them (`engines/NAME.yaml`)."""
    return sorted(f"engines/{p.name}" for p in FITTED.glob("*.y*ml") if is_file(p.name)) if FITTED.is_dir() else []


@cache
def _read_config(path: Path, mtime_ns: int, size: int) -> dict[str, Any]:
    """A model config.json, keyed by its stat so an edited file is read anew."""
    return hf_config.read(path)


@cache
def _read_file(path: Path, mtime_ns: int, size: int) -> dict[str, Any]:
    """An engine file; keyed by its stat so an edited file is read anew."""
    return _parse(path, "engine file", "an engine")


def _parse(path: Path, what: str, noun: str) -> dict[str, Any]:
    """A preset or engine file read by the one reader under the YAML limits of scenario text: one error line naming
    the file (and line), never its content."""
    try:
        data, _ = safe_yaml.parse(safe_yaml.read_text(path))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise InputError(f"{what} {path}{where}: {getattr(e, 'problem', None) or 'YAML syntax error'}") from None
    if not isinstance(data, dict):
        raise InputError(f"{what} {path}: {noun} must be a YAML mapping, got {type(data).__name__}")
    return data
