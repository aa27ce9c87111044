"""Model, hardware and serving-engine presets: YAML files in `presets/` beside this module, each citing a source.

An engine may also be a file of its own (`engine: engines/NAME.yaml`, what `phaseplan calibrate` writes): a name
ending in .yaml or .yml is a path, taken as given when absolute, else from the working directory, else from the
repository root (where `engines/` keeps the fitted ones), so a scenario names it the same from either.
"""

from __future__ import annotations

import copy
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
    path = ROOT / kind / f"{name}.yaml"
    if not path.is_file():
        label = {"models": "model", "hardware": "hardware", "engines": "engine"}[kind]
        raise InputError(f"unknown {label} preset '{name}' (known: {', '.join(names(kind))})")
    return yaml.safe_load(path.read_text())


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
    """A preset by name, or an engine file by path (`is_file`)."""
    if not is_file(name):
        return copy.deepcopy(_read("engines", name))
    path = engine_path(name)
    stat = path.stat()
    return copy.deepcopy(_read_file(path, stat.st_mtime_ns, stat.st_size))


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
    """An engine file under the YAML limits of scenario text; keyed by its stat so an edited file is read anew."""
    try:
        data, _ = safe_yaml.parse(safe_yaml.read_text(path))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise InputError(f"engine file {path}{where}: {getattr(e, 'problem', None) or 'YAML syntax error'}") from None
    if not isinstance(data, dict):
        raise InputError(f"engine file {path}: an engine must be a YAML mapping, got {type(data).__name__}")
    return data
