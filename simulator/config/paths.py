"""Dotted scenario paths (`traffic.rate`, `deployment.decode.kv_cache`) resolved against the schema itself.

A path names a field of `Scenario`, through its nested models — pools, speculative decoding, length
distributions — and through the model and hardware presets, whose fields a `--set` or a sweep may set (the
loader expands the preset first). A typo is one `InputError` naming the path, the keys valid where it went
wrong and the nearest of them ("did you mean 'arrival'?"), before anything runs: a sweep over `traffic.rat`
would otherwise run every point into the same error, and a search over a mistyped path every candidate.

The planner prints its candidates' paths short (`prefill.instances` for `deployment.prefill.instances`,
`space.label`); `check_path` accepts those where asked and returns the full path.
"""

from __future__ import annotations

import difflib
import types
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, ValidationError

from simulator.config import bounds, presets
from simulator.config.scenario import Scenario
from simulator.errors import InputError

SHORT_PREFIXES = ("deployment", "traffic")  # what `space.label` strips from a candidate's paths
SHOWN_KEYS = 40  # valid keys listed in one error line at most (a pool has 31)
PRESETS = {"ModelSpec": "model", "HardwareSpec": "hardware", "EngineSpec": "engine"}  # a name of a preset of each


@dataclass(frozen=True)
class _Node:
    """What a path segment may lead into: models (a union has several), a mapping, a list, or a plain value."""

    models: tuple[type[BaseModel], ...] = ()
    mapping_keys: tuple[str, ...] | None = None  # a dict with these keys only (Literal keys); None: any key
    mapping_value: Any = None  # the dict's value annotation (when this node is a dict)
    list_item: Any = None  # the list's item annotation (when this node is a list)
    is_any: bool = False  # no schema below (Any, or the sweep block: its keys are paths themselves)

    @property
    def is_mapping(self) -> bool:
        return self.mapping_value is not None

    @property
    def is_list(self) -> bool:
        return self.list_item is not None

    @property
    def is_leaf(self) -> bool:
        return not (self.models or self.is_mapping or self.is_list or self.is_any)


def _node(annotation: Any) -> _Node:
    """The node an annotation describes: unions (Optional, MLA | GQA, `float | list[float]`) merge their arms."""
    if annotation is Any:
        return _Node(is_any=True)
    origin = get_origin(annotation)
    if origin is Annotated:
        return _node(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return _merge([_node(a) for a in get_args(annotation) if a is not type(None)])
    if origin is dict:
        key, value = get_args(annotation)
        keys = tuple(str(k) for k in get_args(key)) if get_origin(key) is Literal else None
        return _Node(mapping_keys=keys, mapping_value=value)
    if origin is list:
        return _Node(list_item=get_args(annotation)[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _Node(models=(annotation,))
    return _Node()


def _merge(arms: list[_Node]) -> _Node:
    """One node for the arms of a union: a key is valid when any arm takes it."""
    mapping = next((a for a in arms if a.is_mapping), None)
    lst = next((a for a in arms if a.is_list), None)
    return _Node(
        models=tuple(m for a in arms for m in a.models),
        mapping_keys=mapping.mapping_keys if mapping else None,
        mapping_value=mapping.mapping_value if mapping else None,
        list_item=lst.list_item if lst else None,
        is_any=any(a.is_any for a in arms),
    )


def _field_node(models: tuple[type[BaseModel], ...], key: str) -> _Node | None:
    """The node of field `key` in any of the models (None: no such field)."""
    if models == (Scenario,) and key == "sweep":
        return _Node(is_any=True)
    arms = [_node(m.model_fields[key].annotation) for m in models if key in m.model_fields]
    return _merge(arms) if arms else None


def valid_keys(node: _Node) -> list[str]:
    """The keys that may follow at a node, in schema order (a union's arms merged)."""
    keys: list[str] = []
    for m in node.models:
        keys += [k for k in m.model_fields if k not in keys]
    if node.mapping_keys:
        keys += [k for k in node.mapping_keys if k not in keys]
    return keys


def nearest(key: str, keys: list[str]) -> str | None:
    near = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
    return near[0] if near else None


def _keys_text(keys: list[str]) -> str:
    shown = ", ".join(keys[:SHOWN_KEYS])
    return shown + (f", … ({len(keys) - SHOWN_KEYS} more)" if len(keys) > SHOWN_KEYS else "")


class PathError(InputError):
    """A path that names no field: `at` is its prefix that does, `near` the key nearest the one that went wrong
    and `keys` those valid there."""

    def __init__(self, reason: str, at: tuple[str, ...], near: str | None = None, keys: list[str] = ()) -> None:
        self.reason, self.at, self.near, self.keys = reason, at, near, list(keys)
        super().__init__(self.message())

    def message(self, near: str | None = None) -> str:
        """The reason, the nearest key (or `near` instead: a whole path) and the keys valid there."""
        near = near or self.near
        where = ".".join(self.at) or "the top level"
        listed = f" (valid keys at {where}: {_keys_text(self.keys)})" if self.keys else ""
        return self.reason + (f"; did you mean '{near}'?" if near else "") + listed


def resolve(keys: list[str] | tuple[str, ...]) -> _Node:
    """Walk the schema along `keys`; raise PathError at the first segment that names nothing."""
    node = _Node(models=(Scenario,))
    for depth, key in enumerate(keys):
        at = tuple(keys[:depth])
        where = ".".join(at) or "the top level"
        if node.is_any:
            return node
        if not key:
            raise PathError(f"an empty key after {where!r}" if at else "an empty key", at)
        if node.models:
            nxt = _field_node(node.models, key)
            if nxt is not None:
                node = nxt
                continue
        if node.is_mapping and (node.mapping_keys is None or key in node.mapping_keys):
            node = _node(node.mapping_value)
            continue
        if node.is_list and not node.models:
            if not key.isdigit():
                raise PathError(f"'{'.'.join(at)}' is a list: a key into it is an index (0, 1, …)", at)
            node = _node(node.list_item)
            continue
        if node.is_leaf:
            raise PathError(f"'{'.'.join(at)}' is not a mapping", at)
        keys_there = valid_keys(node)
        raise PathError("unknown key", at, nearest(key, keys_there), keys_there)
    return node


def unknown_key_message(loc: tuple[str, ...]) -> str:
    """What the loader says of an unknown key at `loc` (pydantic's `extra_forbidden`): the valid keys there and
    the nearest one."""
    try:
        resolve(loc)
    except PathError as e:
        return str(e)
    return "unknown key"


def check_path(path: str, *, short_names: bool = True) -> str:
    """The full dotted path a user's path names, or an InputError `PATH: why` (valid keys, did you mean).

    With `short_names`, a path the planner prints without its `deployment.` or `traffic.` (`prefill.instances`)
    is accepted and returned whole (`deployment.prefill.instances`); without, the error suggests the whole path.
    """
    keys = path.split(".")
    try:
        resolve(keys)
        return path
    except PathError as e:
        if e.at or not keys[0]:
            raise InputError(f"{path}: {_explained(keys, e)}") from None
        for prefix in SHORT_PREFIXES:  # the first key named nothing: is it a short name of the planner's?
            try:
                resolve([prefix, *keys])
            except PathError as under:
                if len(under.at) > 1:  # a short name with a typo further on
                    raise InputError(f"{path}: {_explained([prefix, *keys], under)}") from None
                continue
            full = f"{prefix}.{path}"
            if short_names:
                return full
            raise InputError(f"{path}: {e.message(full)}") from None
        near = _nearest_first_key(keys[0])
        raise InputError(f"{path}: {e.message('.'.join([near, *keys[1:]]) if near else None)}") from None


def _explained(keys: list[str], e: PathError) -> str:
    """The error, its suggestion the whole corrected path where that path resolves."""
    fixed = [*e.at, e.near, *keys[len(e.at) + 1 :]] if e.near else []
    return e.message(".".join(fixed) if fixed and _resolves(fixed) else None)


def _resolves(keys: list[str]) -> bool:
    try:
        resolve(keys)
    except PathError:
        return False
    return True


def _nearest_first_key(key: str) -> str | None:
    """The nearest top-level key, or field of a short-name prefix (`arrivals` -> `traffic.arrival`)."""
    names = {k: k for k in valid_keys(_Node(models=(Scenario,)))}
    for prefix in SHORT_PREFIXES:
        for k in valid_keys(resolve([prefix])):
            names.setdefault(k, f"{prefix}.{k}")
    near = nearest(key, list(names))
    return names[near] if near else None


def check_value(path: str, value: Any) -> None:
    """One value for the field a full dotted path names, checked alone before it is combined with others (a
    search's values): a scalar, of the field's type and within its range (`bounds`); a key of a mapping or an item
    of a list is held to a number within ±DEFAULT_LIMIT. Raises InputError `PATH: why`."""
    if isinstance(value, dict | list):
        raise InputError(f"{path}: {_shown(value)} is not one value (a number, a name or a boolean)")
    owner, adapter, preset = _leaf(path)
    checked = value  # as the field reads it: the text "1e400" is the number inf
    try:
        if isinstance(value, str) and preset is not None:  # a preset's name, read where a scenario is loaded
            getattr(presets, preset)(value)
        elif adapter is not None:
            checked = adapter.validate_python(value)
    except InputError as e:
        raise InputError(f"{path}: {e}") from None
    except ValidationError as e:
        msg = e.errors()[0]["msg"].removeprefix("Value error, ")
        raise InputError(f"{path}: {_shown(value)}: {msg}") from None
    if isinstance(checked, int | float) and not isinstance(checked, bool):
        keys = tuple(path.split("."))
        try:
            bounds.check_value(owner, keys[-1], checked, keys)
        except ValueError as e:
            raise InputError(str(e)) from None


@cache
def _leaf(path: str) -> tuple[str, TypeAdapter | None, str | None]:
    """What checks a value of the field `path` ends in: its model's name, its type, and the preset kind a name
    there reads ("" and None where the path ends in a mapping's key or a list's item)."""
    keys = path.split(".")
    owner = next((m for m in resolve(keys[:-1]).models if keys[-1] in m.model_fields), None)
    if owner is None:
        return "", None, None
    field = owner.model_fields[keys[-1]]
    annotation = Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation
    preset = next((PRESETS[m.__name__] for m in _node(field.annotation).models if m.__name__ in PRESETS), None)
    return owner.__name__, TypeAdapter(annotation), preset


def _shown(value: Any) -> str:
    """A value as an error quotes it: a long one (a number of thousands of digits) cut, with its length."""
    text = repr(value) if not isinstance(value, int) else str(value)
    return text if len(text) <= 40 else f"{text[:20]}… ({len(text):,} characters)"
