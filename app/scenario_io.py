"""Scenarios in and out of the app: bundled studies, uploads, and what the page lets an operator download.

An upload goes through the project's own loader, so its errors are the CLI's one-line errors; it is
size-limited before parsing, safe-loaded, and may name files (traces, length files, profiles, a model's
config.json) only inside the project's profiles/, traces/ and scenarios/ folders and engine files only in its
engines/, since the page runs on someone else's machine.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from simulator import input_files
from simulator.config import loader, presets
from simulator.config.scenario import Scenario
from simulator.config.sweep import to_csv
from simulator.console import printable
from simulator.errors import InputError
from simulator.workload.lengths import resolve

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
DATA = (ROOT / "profiles", ROOT / "traces", SCENARIOS)  # the folders an upload may name files in
MAX_UPLOAD_BYTES = input_files.UPLOAD.max_bytes  # a scenario is a page of YAML; anything larger is not one
MAX_UPLOAD_DEPTH = 32  # a scenario nests a few levels; a deep file is built to exhaust the parser


@dataclass(frozen=True)
class Study:
    """A scenario the page starts from: the raw mapping (presets still by name), as validated, and its key."""

    label: str  # what the page and error lines call it
    raw: dict[str, Any]
    scenario: Scenario
    base_dir: Path  # where its relative file names resolve
    key: str  # short hash of the raw mapping: widgets are keyed by it, so they reset when the study changes
    path: str  # what a printed command names: the bundled file, or where an upload is to be saved
    upload: bytes | None = None  # an upload's own bytes, offered back as a download next to its command


def bundled() -> list[Path]:
    return sorted(SCENARIOS.glob("*.yaml"))


def _study(
    label: str,
    raw: dict[str, Any],
    lines: dict[tuple[str, ...], int],
    base_dir: Path,
    path: str,
    upload: bytes | None = None,
) -> Study:
    scenario = loader.validate(raw, label, lines)
    digest = hashlib.sha256(json.dumps([label, raw], sort_keys=True, default=str).encode()).hexdigest()[:12]
    return Study(label, raw, scenario, base_dir, digest, path, upload)


def from_path(path: Path) -> Study:
    """A scenario file; errors are the loader's lines naming the file."""
    raw, lines = loader.read_yaml(path)
    label = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
    return _study(label, raw, lines, path.parent, label)


def from_upload(name: str, content: bytes) -> Study:
    """An uploaded YAML, read as if it sat in `scenarios/` (so `../traces/...` works as in a bundled study)."""
    safe = _safe_name(name)
    label = f"upload {safe}"
    if len(content) > MAX_UPLOAD_BYTES:
        raise InputError(
            f"{label}: {len(content) / 1024:,.0f} KiB is over the {MAX_UPLOAD_BYTES // 1024} KiB "
            "an uploaded scenario may have"
        )
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{label}: not UTF-8 text (a scenario is a YAML file)") from None
    _plain_yaml(label, text)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scenario.yaml"
        path.write_bytes(content)
        try:
            raw, lines = loader.read_yaml(path)
        except InputError as e:
            raise InputError(str(e).replace(str(path), label)) from None
    _preset_files_inside_project(label, raw)
    # Its file names resolve from scenarios/, so that is where the page's commands expect it saved.
    study = _study(label, raw, lines, SCENARIOS, f"scenarios/{safe}", content)
    _files_inside_project(study)
    return study


def _plain_yaml(label: str, text: str) -> None:
    """No anchors or aliases (a few lines of them expand to gigabytes) and no deep nesting in an upload."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                line = event.start_mark.line + 1
                raise InputError(f"{label}: line {line}: YAML anchors and aliases are not accepted in an upload")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_UPLOAD_DEPTH:
                    line = event.start_mark.line + 1
                    raise InputError(f"{label}: line {line}: nested deeper than {MAX_UPLOAD_DEPTH} levels")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError:
        return  # the loader reports a syntax error with its own line


def _safe_name(name: str) -> str:
    return re.sub(r"[^\w.\-]", "_", Path(name).name)[:80] or "scenario"


def _preset_files_inside_project(label: str, raw: dict[str, Any]) -> None:
    """An uploaded scenario may name an engine file only from the project's `engines/`, and a model's config.json
    (`model:`, `draft_model:`) only from its data folders, checked before the file is read (its contents would show
    in an error line), wherever the name sits: the top level, a pool, a sweep's values."""
    for where, key, value in _named(raw):
        if not isinstance(value, str):
            continue
        if key == "engine" and presets.is_file(value):
            what, folders = "engine files", (presets.FITTED,)
        elif key in ("model", "draft_model") and value.lower().endswith(".json"):
            what, folders = "model configs", DATA
        else:
            continue
        try:
            found = presets.file_path(value, what).resolve()
        except InputError as e:
            raise InputError(f"{label}: {where}: {e}") from None
        if not any(found.is_relative_to(f) for f in folders):
            shown = ", ".join(f"{f.name}/" for f in folders)
            raise InputError(
                f"{label}: {where}: an uploaded scenario may only name {what} in the project's {shown} "
                f"folder{'s' if len(folders) > 1 else ''} (got {value!r})"
            )


def _named(node: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, str, Any]]:
    """(where, key, value) of every value in a raw scenario; a sweep's values each under its path's last key."""
    for k, v in node.items():
        where = f"{prefix}{k}"
        if where == "sweep" and isinstance(v, dict):
            for path, values in v.items():
                for x in values if isinstance(values, list) else [values]:
                    yield f"sweep.{path}", str(path).rsplit(".", 1)[-1], x
        elif isinstance(v, dict):
            yield from _named(v, f"{where}.")
        else:
            yield where, str(k), v


def _files_inside_project(study: Study) -> None:
    """An uploaded scenario may read only the project's data files (traces, length files, profiles), from the
    folders that hold them: not its sources, its virtual environment or its git objects."""
    sc = study.scenario
    named = [
        ("traffic.trace", sc.traffic.trace),
        ("traffic.prompt_tokens.file", sc.traffic.prompt_tokens.file),
        ("traffic.output_tokens.file", sc.traffic.output_tokens.file),
    ]
    if sc.profile != "roofline":
        named.append(("profile", sc.profile))
    for where, value in named:
        if value is None:
            continue
        path = resolve(value, study.base_dir).resolve()
        if not any(path.is_relative_to(folder) for folder in DATA):
            raise InputError(
                f"{study.label}: {where}: an uploaded scenario may only name files inside the project's "
                f"{', '.join(f'{f.name}/' for f in DATA)} folders (got {value!r})"
            )


def scenario_yaml(study: Study, overrides: dict[str, Any]) -> str:
    """The study with the page's changes, as a YAML file `phaseplan run` takes (the interactive cap left out)."""
    data = loader.apply_overrides(study.raw, overrides)
    changed = ", ".join(f"{k}={v}" for k, v in overrides.items()) or "none"
    head = printable(f"# from {study.label}, edited in the phaseplan app; changed: {changed}")  # one comment line
    return head + "\n" + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def result_json(result: dict[str, Any]) -> str:
    """A Result exactly as `phaseplan run --json` prints it."""
    return json.dumps(result, indent=2, allow_nan=False) + "\n"


def results_csv(results: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    """(point, Result) pairs as the sweep CSV: one row each, the point's paths first."""
    return to_csv([{"point": point, **result} for point, result in results])
