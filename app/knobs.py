"""The what-if knobs: the scenario fields a planner touches, read from the picked study, and turned back into
the dotted overrides `--set` takes — so a run in the page is exactly `phaseplan run STUDY --set ...`.

A knob left at the study's own value is no override at all; that is what keeps the page's default run of a
study equal to the CLI's.
"""

from __future__ import annotations

from typing import Any, get_args

from simulator.config import presets
from simulator.config.scenario import Length, Routing, Scenario
from simulator.config.specs import KVFormat, WeightFormat

POOL_FIELDS = ("instances", "tp", "ep", "weights", "kv_cache", "mem_fraction")
# The choices are the schema's own, so a format or policy the simulator gains shows up in the page.
WEIGHT_FORMATS: list[str] = list(get_args(WeightFormat))
KV_FORMATS: list[str] = list(get_args(KVFormat))
ROUTING: list[str] = list(get_args(Routing.model_fields["policy"].annotation))
LENGTH_DISTS = ["fixed", "uniform", "lognormal"]  # empirical lengths come from a file the page does not edit
# The load knob of each kind of traffic: its label and unit.
LOAD_LABELS = {
    "traffic.concurrency": ("closed-loop clients", "clients"),
    "traffic.rate": ("arrival rate (new requests or conversations per s)", "req/s"),
    "traffic.trace_speedup": ("trace speed-up (× the recorded arrival rate)", "×"),
}


def load_path(sc: Scenario) -> str:
    """The traffic knob a study has: clients, a rate, or a trace's speed-up."""
    t = sc.traffic
    if t.concurrency is not None:
        return "traffic.concurrency"
    return "traffic.rate" if t.rate is not None else "traffic.trace_speedup"


def preset_choice(raw: dict[str, Any], key: str) -> str:
    """The preset a study names for `model`/`hardware`; an inline spec shows as 'inline: NAME'."""
    value = raw.get(key, "h200" if key == "hardware" else None)
    return value if isinstance(value, str) else f"inline: {value.get('name', key)}"


def preset_options(raw: dict[str, Any], key: str) -> list[str]:
    names = presets.names("models" if key == "model" else "hardware")
    own = preset_choice(raw, key)
    return names if own in names else [own, *names]


def length_value(length: Length | dict[str, Any]) -> dict[str, Any]:
    """A length distribution as the plain mapping YAML holds, normalised so equal distributions compare equal."""
    ln = length if isinstance(length, Length) else Length.model_validate(length)
    keep = {"fixed": ["value"], "uniform": ["low", "high"], "lognormal": ["median", "sigma"], "empirical": ["file"]}[
        ln.dist
    ]
    out: dict[str, Any] = {"dist": ln.dist, **{k: getattr(ln, k) for k in keep}}
    if ln.max is not None:
        out["max"] = ln.max
    return out


def study_values(sc: Scenario, raw: dict[str, Any]) -> dict[str, Any]:
    """Every knob at the study's own value, by dotted path."""
    out: dict[str, Any] = {"model": preset_choice(raw, "model"), "hardware": preset_choice(raw, "hardware")}
    for name, pool in sc.deployment.pools().items():
        for f in POOL_FIELDS:
            out[f"deployment.{name}.{f}"] = getattr(pool, f)
    t = sc.traffic
    path = load_path(sc)
    out[path] = getattr(t, path.split(".")[1])
    if t.trace is None:
        out["traffic.prompt_tokens"] = length_value(t.prompt_tokens)
        out["traffic.output_tokens"] = length_value(t.output_tokens)
        out["traffic.shared_prefix_tokens"] = t.shared_prefix_tokens
    out["prefix_cache.enabled"] = sc.prefix_cache.enabled
    out["routing.policy"] = sc.routing.policy
    out["integrity.enabled"] = sc.integrity.enabled
    out["slo.ttft_p95_ms"] = sc.slo.ttft_p95_ms
    out["slo.tpot_p95_ms"] = sc.slo.tpot_p95_ms
    out["profile"] = sc.profile
    return out


def start_values(sc: Scenario, raw: dict[str, Any]) -> dict[str, Any]:
    """Where the knobs start: the study's values, at its `focus` (the sweep point its question turns on)."""
    return {**study_values(sc, raw), **sc.focus}


def focus_overrides(sc: Scenario, base: dict[str, Any]) -> dict[str, Any]:
    """The focus paths no knob shows: always set, since the page opens at the focus and cannot move them."""
    return {path: value for path, value in sc.focus.items() if path not in base}


def overrides(base: dict[str, Any], chosen: dict[str, Any]) -> dict[str, Any]:
    """The knobs moved away from the study's values, in the study's knob order (an inline spec is never set)."""
    out = {}
    for path, value in chosen.items():
        if path in base and value != base[path] and not (isinstance(value, str) and value.startswith("inline:")):
            out[path] = value
    return out
