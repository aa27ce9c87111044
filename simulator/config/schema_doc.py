"""docs/schema.md, generated from the pydantic schema: every field with its type, default, range and meaning.

The schema is the truth (types and defaults in `scenario.py`, `specs.py`, `parallel.py`; ranges in `bounds.py`;
meanings in each field's description), so the reference is written from it, never by hand, and a test fails
when the file in the repository is stale. Regenerate with `python -m simulator.config.schema_doc` (or print it
with `phaseplan schema`).
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from simulator.config import bounds
from simulator.config.loader import PRESET_DEFAULTS
from simulator.config.scenario import Length, Scenario

DOC = Path(__file__).resolve().parents[2] / "docs" / "schema.md"
PRESET_NAMED = {("Scenario", "model"), ("Scenario", "hardware"), ("Pool", "hardware"), ("Speculative", "draft_model")}

HEADER = """\
# Scenario schema

Generated from the pydantic schema by `python -m simulator.config.schema_doc` (also `phaseplan schema`): the
types and defaults of `simulator/config/scenario.py`, `specs.py` and `parallel.py`, the ranges of
`simulator/config/bounds.py`. Do not edit by hand; `tests/test_schema_doc.py` fails when this file is stale.

A scenario is a YAML mapping of the fields below. Unknown keys are errors (the error lists the valid keys and the
nearest one); every number must be finite and inside its range; `null` is YAML's none. `--set PATH=VALUE`,
a `sweep` block and `plan --search` name fields by their dotted path (`deployment.decode.kv_cache`).
`phaseplan init` writes a commented scenario to start from.
"""


def _models() -> dict[type[BaseModel], list[str]]:
    """Every model reachable from Scenario, in the order first met, with every dotted path where it appears."""
    found: dict[type[BaseModel], list[str]] = {Scenario: []}

    def walk(model: type[BaseModel], prefix: str, on_path: tuple[type[BaseModel], ...]) -> None:
        for name, field in model.model_fields.items():
            for sub in _submodels(field.annotation):
                found.setdefault(sub, []).append(f"{prefix}{name}")
                if sub not in on_path:
                    walk(sub, f"{prefix}{name}.", (*on_path, sub))

    walk(Scenario, "", (Scenario,))
    return found


def _submodels(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in get_args(annotation) for m in _submodels(a)]


def _anchor(model: type[BaseModel]) -> str:
    return model.__name__.lower()


def _type(annotation: Any) -> str:
    origin = get_origin(annotation)
    if origin is Annotated:
        return _type(get_args(annotation)[0])
    if origin is Literal:
        return " \\| ".join(f"`{v}`" for v in get_args(annotation))
    if origin is Union or origin is types.UnionType:
        arms = [_type(a) for a in get_args(annotation) if a is not type(None)]
        return " \\| ".join(arms) + (" \\| null" if type(None) in get_args(annotation) else "")
    if origin is list:
        return f"list of {_type(get_args(annotation)[0])}"
    if origin is dict:
        k, v = get_args(annotation)
        return f"map of {_type(k)} to {_type(v)}"
    if annotation is Any:
        return "any"
    if annotation is Length:  # a bare integer is a fixed length
        return f"int \\| [Length](#{_anchor(Length)})"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{_anchor(annotation)})"
    return getattr(annotation, "__name__", str(annotation))


def _field_type(model: type[BaseModel], name: str, field: FieldInfo) -> str:
    shown = _type(field.annotation)
    return f"preset name \\| {shown}" if (model.__name__, name) in PRESET_NAMED else shown


def _value(v: Any) -> str:
    if isinstance(v, BaseModel):
        return "see below"
    return f"`{json.dumps(v, default=str)}`"


def _default(model: type[BaseModel], name: str, field: FieldInfo) -> str:
    if model is Scenario and name in PRESET_DEFAULTS:  # the loader's, when a scenario names none
        return _value(PRESET_DEFAULTS[name])
    if field.default_factory is not None:
        made = field.default_factory()  # type: ignore[call-arg]
        if isinstance(made, BaseModel):
            shown = made.model_dump(mode="json", exclude_defaults=True)
            return "its defaults" + (f" with {_value(shown)}" if shown else "")
        return _value(made)
    if field.default is PydanticUndefined:
        return "required"
    return _value(field.default)


def _constraints(annotation: Any, metadata: list[Any]) -> list[str]:
    """The bounds a type or Field states itself (PositiveInt: > 0)."""
    out = []
    for m in metadata:
        for attr, sign in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤")):
            if isinstance(m, getattr(annotated_types, attr.capitalize())):
                out.append(f"{sign} {getattr(m, attr):g}")
        if isinstance(m, annotated_types.MinLen):
            out.append(f"at least {m.min_length} item(s)")
    if get_origin(annotation) is Annotated:
        out += _constraints(get_args(annotation)[0], list(get_args(annotation)[1:]))
    elif get_origin(annotation) in (Union, types.UnionType, list):
        for a in get_args(annotation):
            out += _constraints(a, [])
    return out


def _numeric(annotation: Any) -> bool:
    if annotation in (int, float):
        return True
    return any(_numeric(a) for a in get_args(annotation) if a is not type(None))


def _range(model: type[BaseModel], name: str, field: FieldInfo) -> str:
    b = bounds.BOUNDS.get((model.__name__, name))
    if b is not None:
        lo, hi, _what = b
        return f"{bounds.format_number(lo)} to {bounds.format_number(hi)}"
    stated = list(dict.fromkeys(_constraints(field.annotation, list(field.metadata))))
    if _numeric(field.annotation) and not any(c[0] in "<≤" for c in stated):  # bounds.DEFAULT_LIMIT for any number
        stated.append("≤ 10¹⁵" if stated else "within ±10¹⁵")
    return ", ".join(stated) or "-"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _intro(model: type[BaseModel]) -> str:
    doc = model.__doc__ or ""
    if model.__module__ == BaseModel.__module__ or doc.startswith("Usage docs"):  # pydantic's own docstring
        return ""
    return " ".join(doc.split())


def render() -> str:
    """The whole of docs/schema.md."""
    parts = [HEADER]
    for model, where in _models().items():
        parts.append(f"\n## {model.__name__}\n")
        shown = ", ".join(f"`{p}`" for p in where[:6]) + (", …" if len(where) > 6 else "")
        at = f"At {shown}." if where else "The top level of a scenario file."
        parts.append(at + (f" {_intro(model)}" if _intro(model) else "") + "\n")
        parts.append("| field | type | default | range | meaning |\n|---|---|---|---|---|")
        for name, field in model.model_fields.items():
            row = [
                f"`{name}`",
                _field_type(model, name, field),
                _default(model, name, field),
                _range(model, name, field),
                _cell(field.description or ""),
            ]
            parts.append("| " + " | ".join(row) + " |")
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write docs/schema.md (`--check`: only say whether it is up to date)."""
    args = sys.argv[1:] if argv is None else argv
    text = render()
    if "--check" in args:
        fresh = DOC.is_file() and DOC.read_text(encoding="utf-8") == text
        print(f"{DOC}: {'up to date' if fresh else 'stale: run python -m simulator.config.schema_doc'}")
        return 0 if fresh else 1
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
