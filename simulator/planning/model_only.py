"""A scenario from a model alone (`phaseplan capacity --model X`): one colocated instance on one node, in the
release's own weight format, at the smallest tensor parallelism whose weights fit — the first question an operator
asks of a new model ("how many GPUs does it take, and how many tokens does the rest hold?").
"""

from __future__ import annotations

from typing import Any

from simulator.capacity import pool_capacity
from simulator.config import loader, presets
from simulator.config.scenario import Scenario
from simulator.config.specs import FP4_FORMATS
from simulator.errors import InputError


def scenario(model: str, hardware: str, sets: tuple[str, ...] = ()) -> tuple[Scenario, dict[str, Any]]:
    """The validated scenario and its mapping; `model` is a preset's name or a config.json's path."""
    try:
        spec, hw = presets.model(model), presets.hardware(hardware)
    except InputError as e:
        raise InputError(f"--model {model} --hardware {hardware}: {e}") from None
    weights = _weights(spec, hw)
    name = f"{spec.get('name', 'model')}-{hardware}"
    tried: list[str] = []
    found = None
    for tp in _tps(int(hw.get("gpus_per_node", 8))):
        data = {
            "name": name,
            "model": model,
            "hardware": hardware,
            "deployment": {"mode": "colocated", "decode": {"tp": tp, "weights": weights}},
        }
        try:
            found = loader.load_mapping(data, f"--model {model}", sets)
        except InputError as e:
            tried.append(str(e))
            continue
        sc = found[0]
        if pool_capacity(sc.model, sc.hardware, sc.deployment.decode).fits:
            return found
    if found is None:
        raise InputError(tried[-1] if tried else f"--model {model}: no layout of one node to try")
    return found  # the largest one tried: the report says why it does not fit


def _weights(spec: dict[str, Any], hw: dict[str, Any]) -> str:
    """The release's format, or where the GPU has no FP4 tensor cores the first of the model's formats it runs."""
    listed = [spec.get("release", "bf16"), *spec.get("formats", {}), "bf16"]
    return next(w for w in listed if w not in FP4_FORMATS or hw.get("fp4_tflops") is not None)


def _tps(per_node: int) -> list[int]:
    return [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= per_node]
