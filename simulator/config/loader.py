"""Reading a scenario: YAML file → overrides (`--set`) → presets resolved → validated Scenario.

Every failure becomes one `InputError` line naming the file, the YAML path and, where the parser knows it,
the line — never a traceback.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from simulator.config import bounds, consistency, paths, presets, renamed, safe_yaml
from simulator.config.scenario import Scenario
from simulator.errors import InputError

PRESET_FIELDS = {"model": presets.model, "hardware": presets.hardware, "engine": presets.engine}
PRESET_DEFAULTS = {"hardware": "h200", "engine": "sglang-0.5.10"}  # what a scenario that names neither runs on
MAX_SET_DEPTH = 16


def read_yaml(path: str | Path) -> tuple[dict[str, Any], dict[tuple[str, ...], int]]:
    """Parse a scenario file under the limits of `safe_yaml`; also the line of every mapping key, for errors."""
    return parse_text(safe_yaml.read_text(path), str(path))


def parse_text(text: str, name: str, what: str = "scenario") -> tuple[dict[str, Any], dict[tuple[str, ...], int]]:
    """Parse scenario text (or another YAML mapping: `what` it is, e.g. a validation case) under the YAML limits of
    `safe_yaml`; `name` is what errors call it."""
    if len(text) > safe_yaml.MAX_BYTES:
        raise InputError(f"{name}: {what} is larger than {safe_yaml.MAX_BYTES // 1024} KiB (the limit for YAML input)")
    try:
        data, node = safe_yaml.parse(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        kind = "YAML over a limit" if isinstance(e, safe_yaml.LimitError) else "YAML syntax error"
        raise InputError(f"{name}:{where} {kind}: {problem}") from None
    if not isinstance(data, dict):
        raise InputError(f"{name}: a {what} must be a YAML mapping, got {type(data).__name__}")
    return data, _key_lines(node)


def _key_lines(node: Any, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], int]:
    lines: dict[tuple[str, ...], int] = {}
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            path = prefix + (str(k.value),)
            lines[path] = k.start_mark.line + 1
            lines.update(_key_lines(v, path))
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            lines[prefix + (str(i),)] = v.start_mark.line + 1
            lines.update(_key_lines(v, prefix + (str(i),)))
    return lines


def parse_set(item: str) -> tuple[str, Any]:
    """`a.b.c=VALUE` → (path, YAML-typed value)."""
    path, sep, raw = item.partition("=")
    if not sep or not path.strip():
        raise InputError(f"--set {_short(item)}: expected PATH=VALUE, e.g. deployment.decode.tp=8")
    check_depth(path)
    try:
        value = safe_yaml.parse(raw)[0] if raw.strip() else raw
    except safe_yaml.LimitError as e:
        raise InputError(f"--set {path.strip()}: YAML over a limit: {e.problem}") from None
    except yaml.YAMLError:
        value = raw
    return path.strip(), value


def check_depth(path: str) -> None:
    """A dotted path of at most MAX_SET_DEPTH keys (no scenario field is deeper), refused before it is walked."""
    if path.count(".") >= MAX_SET_DEPTH:
        raise InputError(f"--set {_short(path)}: a path of more than {MAX_SET_DEPTH} keys is no scenario field")


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Set each dotted path; a path into a preset name first expands that preset so its fields can be set. Every
    dotted override passes here (`--set`, a validation case's `set:`, a search's candidates), so here its depth is
    bounded: a path 100,000 keys deep would build a mapping that deep."""
    out = copy.deepcopy(data)
    for path, value in overrides.items():
        check_depth(path)
        keys = path.split(".")
        node: Any = out
        for depth, key in enumerate(keys[:-1]):
            if depth == 0 and key in PRESET_FIELDS and isinstance(node.get(key, PRESET_DEFAULTS.get(key)), str):
                node[key] = PRESET_FIELDS[key](node.get(key, PRESET_DEFAULTS.get(key)))
            elif depth == 2 and key == "hardware" and keys[0] == "deployment" and not isinstance(node.get(key), dict):
                # a pool's own GPU: its preset, or (none yet) the scenario's, expanded so one figure can be set
                gpu = node.get(key) or out.get("hardware", PRESET_DEFAULTS["hardware"])
                node[key] = presets.hardware(gpu) if isinstance(gpu, str) else copy.deepcopy(gpu)
            child = node.get(key) if isinstance(node, dict) else None
            if child is None:
                child = node[key] = {}
            if not isinstance(child, dict):
                raise InputError(f"--set {path}: '{'.'.join(keys[: depth + 1])}' is not a mapping")
            node = child
        node[keys[-1]] = value
    return out


def one_point(raw: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """One scenario of a study (a sweep point, a plan candidate, a trial rate): the raw mapping without its sweep
    block and the focus that names one of the sweep's points, with `overrides` set."""
    return apply_overrides({k: v for k, v in raw.items() if k not in ("sweep", "focus")}, overrides)


def resolve_presets(data: dict[str, Any]) -> dict[str, Any]:
    """Each preset name (or engine file) replaced by its mapping; an error is `KeyedError` naming the field."""
    out = {**PRESET_DEFAULTS, **data}
    for key, load in PRESET_FIELDS.items():
        if isinstance(out.get(key), str):
            try:
                out[key] = load(out[key])
            except InputError as e:
                raise KeyedError(key, str(e)) from None
    return out


class KeyedError(InputError):
    """A preset that could not be read, and the scenario field that named it."""

    def __init__(self, key: str, msg: str) -> None:
        super().__init__(msg)
        self.key = key


def validate(
    data: dict[str, Any],
    source: str,
    lines: dict[tuple[str, ...], int] | None = None,
    overridden: frozenset[str] = frozenset(),
) -> Scenario:
    """Validate a raw mapping; the first error names its YAML path (and line, or the --set it came from)."""
    try:
        resolved = resolve_presets(data)
    except KeyedError as e:
        line = (lines or {}).get((e.key,))
        where = f"--set {e.key}" if e.key in overridden else f"{source}:{f' line {line}:' if line else ''} {e.key}"
        raise InputError(f"{where}: {e}") from None
    try:
        sc = Scenario.model_validate(resolved)
        _check_sweep_paths(sc, source, lines, overridden)
        bounds.check(sc)
        consistency.check(sc)
        return sc
    except ValidationError as e:
        err = e.errors()[0]
        loc = tuple(str(x) for x in err["loc"] if not _is_union_tag(x))
        msg = err["msg"].removeprefix("Value error, ")
        if not loc and ": " in msg:  # a cross-field rule names its own path first
            path, msg = msg.split(": ", 1)
            loc = tuple(path.split("."))
        in_file = _engine_file(data, loc)  # "" where the field is the scenario's own
        if err["type"] == "extra_forbidden":
            msg = paths.unknown_key_message(loc)
        elif "input" in err and err["type"] != "missing" and not isinstance(err["input"], dict | list) and not in_file:
            msg += f" (got {_short(err['input'])})"  # a value of the user's own text, never of another file
        raise InputError(_located(loc, msg + in_file, source, lines, overridden)) from None
    except ValueError as e:  # bounds and consistency name their path first
        path, _, msg = str(e).partition(": ")
        loc = tuple(path.split("."))
        raise InputError(_located(loc, msg + _engine_file(data, loc), source, lines, overridden)) from None


def _engine_file(data: dict[str, Any], loc: tuple[str, ...]) -> str:
    """ " (in the engine file PATH)" where an error's field comes from the engine file the scenario names, else ""."""
    engine = data.get("engine")
    if loc[:1] == ("engine",) and isinstance(engine, str) and presets.is_file(engine):
        return f" (in the engine file {presets.engine_path(engine)})"
    return ""


def _check_sweep_paths(
    sc: Scenario, source: str, lines: dict[tuple[str, ...], int] | None, overridden: frozenset[str]
) -> None:
    """Every path of the sweep block names a field (a typo would run every point into the same error)."""
    for key in sc.sweep:
        try:
            paths.check_path(key, short_names=False)
        except InputError as e:
            why = str(e).removeprefix(f"{key}: ")
            raise InputError(_located(("sweep", key), why, source, lines, overridden)) from None


def _located(
    loc: tuple[str, ...], msg: str, source: str, lines: dict[tuple[str, ...], int] | None, overridden: frozenset[str]
) -> str:
    """`--set PATH: msg` when a --set put the value there, else the file, its line and the YAML path — and the
    --sets given, since a cross-field rule may fail at a file's field because of one."""
    dotted = ".".join(loc) or "(top level)"
    if any(dotted == o or dotted.startswith(o + ".") for o in overridden):
        return f"--set {dotted}: {msg}"
    line = _nearest_line(loc, lines or {})
    sets = f" (with --set {', '.join(sorted(overridden))})" if overridden else ""
    return f"{source}:{f' line {line}:' if line else ''} {dotted}: {msg}{sets}"


def locate(path: str | Path, sets: list[str] | tuple[str, ...], dotted: str, msg: str) -> str:
    """A message about the loaded scenario's `dotted` field, for a check made after loading (whether a pool fits):
    the --set under that field that changed it, else the file's line (and the --sets given)."""
    overridden = [parse_set(s)[0] for s in sets]
    under = [o for o in overridden if o == dotted or o.startswith(dotted + ".")]
    if under:
        return f"--set {', '.join(under)}: {dotted}: {msg}"
    _, lines = read_yaml(path)
    return _located(tuple(dotted.split(".")), msg, str(path), lines, frozenset(overridden))


def _is_union_tag(x: Any) -> bool:
    """pydantic puts the tag of a discriminated union (attention: mla|gqa) into the location; users don't."""
    return x in ("mla", "gqa")


def _nearest_line(loc: tuple[str, ...], lines: dict[tuple[str, ...], int]) -> int | None:
    for n in range(len(loc), 0, -1):
        if loc[:n] in lines:
            return lines[loc[:n]]
    return None


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def load(path: str | Path, sets: list[str] | tuple[str, ...] = ()) -> tuple[Scenario, dict[str, Any]]:
    """The scenario as validated, and the raw mapping (with overrides) that sweeps start from."""
    data, lines = read_yaml(path)
    return load_mapping(data, str(path), sets, lines)


def load_text(text: str, name: str, sets: list[str] | tuple[str, ...] = ()) -> tuple[Scenario, dict[str, Any]]:
    """`load` for scenario text that is not a file (an upload): the same YAML limits, bounds and checks.

    What it implies in work is checked apart, before running, by `simulator.budget.check`.
    """
    data, lines = parse_text(text, name)
    return load_mapping(data, name, sets, lines)


def load_mapping(
    data: dict[str, Any],
    name: str,
    sets: list[str] | tuple[str, ...] = (),
    lines: dict[tuple[str, ...], int] | None = None,
) -> tuple[Scenario, dict[str, Any]]:
    """`load` for a scenario mapping built in code (`name` is what errors call it): the same overrides and checks."""
    overrides = {renamed.path(path): value for path, value in (parse_set(s) for s in sets)}
    data = renamed.upgrade(data, name)
    for path in overrides:  # a typo names the valid keys and the nearest, before anything is set
        try:
            paths.check_path(path, short_names=False)
        except InputError as e:
            raise InputError(f"--set {e}") from None
    data = apply_overrides(data, overrides)
    return validate(data, name, lines, frozenset(overrides)), data
