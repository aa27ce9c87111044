"""The what-if knobs: the scenario fields a planner touches, read from the picked study, and turned back into
the dotted overrides `--set` takes — so a run in the page is exactly `phaseplan run STUDY --set ...`.

A knob left at the study's own value is no override at all; that is what keeps the page's default run of a
study equal to the CLI's.
"""

from __future__ import annotations

import json
import math
from typing import Any, get_args

from pydantic import ValidationError

from simulator.config import loader, presets
from simulator.config.scenario import Length, Scenario
from simulator.config.specs import KVFormat, RoutingPolicy, WeightFormat
from simulator.errors import InputError

POOL_FIELDS = (
    "instances",
    "tp",
    "ep",
    "weights",
    "kv_cache",
    "mem_fraction",
    "host_tier_gib",
    "dp",
    "nodes",
    "two_batch_overlap",
)
SPECULATIVE = "deployment.decode.speculative"  # speculation is a decode pool's (parallel.check_pool)
MTP_TAU = {1: 1.85, 2: 2.5, 3: 3.0}  # a starting mean accepted length per draft tokens (DeepSeek-V3: 1.85-1.9 at 1)
GPU_PRICE = "cost.gpu_hour_usd"
SCENARIO_GPU = None  # a pool's GPU knob at "the scenario's hardware" (`--set deployment.decode.hardware=null`)
# The choices are the schema's own, so a format or policy the simulator gains shows up in the page.
WEIGHT_FORMATS: list[str] = list(get_args(WeightFormat))
KV_FORMATS: list[str] = list(get_args(KVFormat))
ROUTING: list[str] = list(get_args(RoutingPolicy))
LENGTH_DISTS = ["fixed", "uniform", "lognormal"]  # empirical lengths come from a file the page does not edit
TP_CHOICES = [1, 2, 4, 8, 16]
EP_CHOICES = [1, 2, 4, 8]
DP_CHOICES = [1, 2, 4, 8, 16]  # DP attention ranks of an instance (attention TP = tp / dp)
# The number knobs' widget ranges (a pool's field by its last part), shared by the sidebar and the URL check, so
# a URL can never give a widget a value it refuses.
RANGES: dict[str, tuple[float, float]] = {
    "instances": (1, 1024),
    "host_tier_gib": (0.0, 65_536.0),
    "nodes": (1, 64),
    GPU_PRICE: (0.01, 1000.0),
    "traffic.concurrency": (1, 4096),
    "traffic.rate": (0.01, 10_000.0),
    "traffic.trace_speedup": (0.01, 10_000.0),
    "traffic.shared_prefix_tokens": (0, 1_000_000),
    "slo.ttft_p95_ms": (1.0, 1e7),
    "slo.tpot_p95_ms": (0.1, 1e5),
}
TOKENS = (1, 2_000_000)  # a length distribution's value, low, high or median
SIGMA = (0.0, 3.0)
LENGTH_FIELDS = {"fixed": ["value"], "uniform": ["low", "high"], "lognormal": ["median", "sigma"]}
MAX_URL_ITEMS = 64  # a study has at most a few dozen knobs
MAX_URL_ITEM_CHARS = 400
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


PRESET_KINDS = {"model": "models", "hardware": "hardware", "engine": "engines"}  # a scenario field's preset folder


def preset_choice(raw: dict[str, Any], key: str) -> str:
    """The preset a study names for `model`/`hardware`/`engine` (or runs on when it names none); an inline spec
    shows as 'inline: NAME'."""
    value = raw.get(key, loader.PRESET_DEFAULTS.get(key))
    return value if isinstance(value, str) else f"inline: {value.get('name', key)}"


def pool_gpu(raw: dict[str, Any], pool: str) -> str | None:
    """The GPU a study names for a pool (None: the scenario's `hardware`); an inline one shows as 'inline: NAME'."""
    value = ((raw.get("deployment") or {}).get(pool) or {}).get("hardware")
    return value if value is None or isinstance(value, str) else f"inline: {value.get('name', 'hardware')}"


def preset_options(raw: dict[str, Any], key: str) -> list[str]:
    """The presets a select knob offers (for the engine, also the fitted engines in the project's `engines/`)."""
    names = presets.names(PRESET_KINDS[key]) + (presets.fitted_files() if key == "engine" else [])
    own = preset_choice(raw, key)
    return names if own in names else [own, *names]


def length_value(length: Length | dict[str, Any]) -> dict[str, Any]:
    """A length distribution as the plain mapping YAML holds, normalised so equal distributions compare equal."""
    ln = length if isinstance(length, Length) else Length.model_validate(length)
    keep = {**LENGTH_FIELDS, "empirical": ["file"]}[ln.dist]
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
        out[f"deployment.{name}.hardware"] = pool_gpu(raw, name)
    spec = sc.deployment.decode.speculative
    out[SPECULATIVE] = None if spec is None else spec.model_dump(mode="json", exclude_none=True)
    out[GPU_PRICE] = sc.cost.gpu_hour_usd or sc.hardware.gpu_hour_usd  # the price a run pays when it is not moved
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
    out["engine"] = preset_choice(raw, "engine")
    return out


def start_values(sc: Scenario, raw: dict[str, Any]) -> dict[str, Any]:
    """Where the knobs start: the study's values, at its `focus` (the sweep point its question turns on)."""
    return {**study_values(sc, raw), **sc.focus}


def focus_overrides(sc: Scenario, base: dict[str, Any]) -> dict[str, Any]:
    """The focus paths no knob shows: always set, since the page opens at the focus and cannot move them."""
    return {path: value for path, value in sc.focus.items() if path not in base}


def opening(sc: Scenario, raw: dict[str, Any]) -> dict[str, Any]:
    """The overrides the page runs as a study opens with no knob moved in its URL (streamlit_app's `opening`)."""
    base = study_values(sc, raw)
    return {**overrides(base, start_values(sc, raw)), **focus_overrides(sc, base)}


def overrides(base: dict[str, Any], chosen: dict[str, Any]) -> dict[str, Any]:
    """The knobs moved away from the study's values, in the study's knob order (an inline spec is never set)."""
    out = {}
    for path, value in chosen.items():
        if path in base and value != base[path] and not (isinstance(value, str) and value.startswith("inline:")):
            out[path] = value
    return out


def _with_own(options: list[Any], own: Any) -> list[Any]:
    """A select's choices with the study's own value among them (a 3-way TP, say)."""
    return options if own in options else sorted({*options, own})


def select_options(
    sc: Scenario, raw: dict[str, Any], start: dict[str, Any], profiles: list[str]
) -> dict[str, list[Any]]:
    """Every select knob's choices as the sidebar offers them, by path; `profiles` the pricing choices."""
    out: dict[str, list[Any]] = {key: preset_options(raw, key) for key in PRESET_KINDS}
    for name in sc.deployment.pools():
        p = f"deployment.{name}."
        for field, options in (
            ("tp", TP_CHOICES),
            ("ep", EP_CHOICES),
            ("weights", WEIGHT_FORMATS),
            ("kv_cache", KV_FORMATS),
            ("dp", DP_CHOICES),
        ):
            out[p + field] = _with_own(options, start[p + field])
        out[p + "two_batch_overlap"] = [True, False]
        gpus: list[Any] = [SCENARIO_GPU, *presets.names("hardware")]
        out[p + "hardware"] = gpus if start[p + "hardware"] in gpus else [*gpus, start[p + "hardware"]]
    out["routing.policy"] = ROUTING
    out["prefix_cache.enabled"] = out["integrity.enabled"] = [True, False]
    out["profile"] = profiles
    return out


def mem_fraction_range(own: float) -> tuple[float, float]:
    """The slider's range: from 0.3 (or the study's own share, if lower) to all of HBM."""
    return min(0.3, own), 1.0


def number_range(path: str, own: Any) -> tuple[float, float]:
    """The widget range of a number knob."""
    last = path.rsplit(".", 1)[-1]
    if last == "mem_fraction":
        return mem_fraction_range(float(own))
    return RANGES[last] if last in ("instances", "host_tier_gib", "nodes") else RANGES[path]


def url_items(start: dict[str, Any], chosen: dict[str, Any]) -> list[str]:
    """The knobs moved from where the study opens, as the URL carries them: `PATH=VALUE`, a value as `--set`
    writes it (a mapping as JSON), so a reload of the URL opens them again."""
    return [f"{path}={_set_text(v)}" for path, v in chosen.items() if path in start and v != start[path]]


def _set_text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return repr(value) if isinstance(value, float) else str(value)


def from_url(
    items: list[str], start: dict[str, Any], options: dict[str, list[Any]]
) -> tuple[dict[str, Any], list[str]]:
    """The knob values a URL's `set` items give, checked as the knobs' widgets would check them (`options` the
    select knobs' choices), and one line for each item refused: that knob stays where the study opens."""
    if len(items) > MAX_URL_ITEMS:
        return {}, [f"{len(items):,} set= items, more than the {MAX_URL_ITEMS} a page's knobs can need: all ignored"]
    values: dict[str, Any] = {}
    errors = []
    for item in items:
        short = item if len(item) <= 60 else item[:57] + "…"
        try:
            if len(item) > MAX_URL_ITEM_CHARS:
                raise InputError(f"longer than {MAX_URL_ITEM_CHARS} characters")
            try:
                path, value = loader.parse_set(item)
            except InputError:
                raise InputError("expected PATH=VALUE, e.g. deployment.decode.kv_cache=fp8_e4m3") from None
            values[path] = _checked(path, value, start, options)
        except InputError as e:
            errors.append(f"set={short}: {e}")
    return values, errors


def _checked(path: str, value: Any, start: dict[str, Any], options: dict[str, list[Any]]) -> Any:
    """`value` for the knob `path` if its widget takes it; else InputError saying why."""
    if path not in start:
        raise InputError(f"{path} is no knob of this study")
    own = start[path]
    if path in options:
        if not any(type(value) is type(o) and value == o for o in options[path]):
            shown = ", ".join(str(o) for o in options[path][:12])
            raise InputError(f"{path} takes one of {shown}")
        return value
    if path == SPECULATIVE:
        return _speculative(value)
    if isinstance(own, dict):
        return _length(path, value, own)
    return _number(path, value, *number_range(path, own), integer=isinstance(own, int))


def mtp(draft_tokens: int, acceptance: float) -> dict[str, Any]:
    """The speculative knob's value for MTP drafting (the model's own MTP layers)."""
    return {"method": "mtp", "draft_tokens": draft_tokens, "acceptance": acceptance}


def _speculative(value: Any) -> dict[str, Any] | None:
    """Off (null), or MTP with 1-3 draft tokens and a mean accepted length the schema takes."""
    if value is None:
        return None
    fields = {"method", "draft_tokens", "acceptance"}
    if not isinstance(value, dict) or set(value) != fields or value["method"] != "mtp":
        raise InputError(f"{SPECULATIVE} takes null or {{method: mtp, draft_tokens, acceptance}}")
    k = value["draft_tokens"]
    if k not in MTP_TAU or isinstance(k, bool):
        raise InputError(f"{SPECULATIVE}.draft_tokens takes 1 to {max(MTP_TAU)}")
    return mtp(k, _number(f"{SPECULATIVE}.acceptance", value["acceptance"], 1.0, k + 1.0, integer=False))


def _number(name: str, value: Any, low: float, high: float, integer: bool) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float) or (integer and not isinstance(value, int)):
        raise InputError(f"{name} takes {'a whole number' if integer else 'a number'}")
    if not (math.isfinite(value) and low <= value <= high):
        raise InputError(f"{name} takes {low:g} to {high:g}")
    return value if integer else float(value)


def _length(path: str, value: Any, own: dict[str, Any]) -> dict[str, Any]:
    """A length distribution the page's length knobs can show: one of theirs, fields in their ranges, the study's
    own `max` (no knob edits it)."""
    if not isinstance(value, dict) or value.get("dist") not in LENGTH_FIELDS:
        raise InputError(f"{path} takes a mapping with dist one of {', '.join(LENGTH_FIELDS)}")
    fields = LENGTH_FIELDS[value["dist"]]
    extra = set(value) - {"dist", "max", *fields}
    if extra or any(f not in value for f in fields):
        raise InputError(f"{path} with dist {value['dist']} has exactly {', '.join(fields)} (and max)")
    if value.get("max") != own.get("max"):
        raise InputError(f"{path}.max is the study's own ({own.get('max')})")
    out = dict(value)
    for f in fields:
        low, high = SIGMA if f == "sigma" else TOKENS
        out[f] = _number(f"{path}.{f}", value[f], low, high, integer=value["dist"] != "lognormal")
    try:
        return length_value(out)
    except ValidationError as e:  # e.g. uniform low > high: the schema's own message
        raise InputError(f"{path}: {e.errors()[0]['msg'].removeprefix('Value error, ')}") from None
