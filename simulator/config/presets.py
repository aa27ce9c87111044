"""Model, hardware and serving-engine presets: YAML files in `presets/` beside this module, each citing a source."""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from simulator.errors import InputError

ROOT = Path(__file__).parent / "presets"


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
    """A fresh copy: a `--set model.attention.heads` must not change the cached preset for later loads."""
    return copy.deepcopy(_read("models", name))


def hardware(name: str) -> dict[str, Any]:
    return copy.deepcopy(_read("hardware", name))


def engine(name: str) -> dict[str, Any]:
    return copy.deepcopy(_read("engines", name))
