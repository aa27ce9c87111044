"""The launch flags of released engines, as data: `flags/<engine>-<version>.json`, written by
`tools/engine_flags.py` from each release's own argument definitions (read with `ast` from the package on the
index, nothing imported). Which releases are known, the newest, what a release calls a flag, and whether every flag
and value of a command is one the release accepts.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from simulator.errors import InputError

FOLDER = Path(__file__).parent / "flags"
ENGINES = ("sglang", "sglang-router", "vllm", "sglang-bench", "vllm-bench")
NAMES = {
    "sglang": "SGLang",
    "sglang-router": "sglang-router",
    "vllm": "vLLM",
    "sglang-bench": "SGLang's benchmark client",
    "vllm-bench": "vllm bench serve",
}


def _key(version: str) -> tuple[int, ...]:
    """0.5.6.post2 after 0.5.6.post1 after 0.5.6; numbers compared as numbers."""
    return tuple(int(n) for n in re.findall(r"\d+", version))


def versions(engine: str) -> list[str]:
    """The releases with a flags file, oldest first."""
    found = [p.stem.removeprefix(f"{engine}-") for p in FOLDER.glob(f"{engine}-*.json")]
    return sorted((v for v in found if v[:1].isdigit()), key=_key)


@dataclass(frozen=True)
class Release:
    engine: str
    version: str
    flags: dict[str, dict[str, Any]]
    module: str = ""  # the module a benchmark client runs as (`python -m ...`), where the file names one

    @property
    def label(self) -> str:
        return f"{NAMES[self.engine]} {self.version}"

    @property
    def file(self) -> str:
        return f"simulator/deploy/flags/{self.engine}-{self.version}.json"

    def has(self, flag: str) -> bool:
        """A flag the release defines and does not deprecate."""
        spec = self.flags.get(flag)
        return spec is not None and not spec.get("deprecated")

    def choices(self, flag: str) -> list[Any] | None:
        spec = self.flags.get(flag) or {}
        return spec.get("choices")

    def first_choice(self, flag: str, wanted: tuple[str, ...]) -> str | None:
        """The first of `wanted` the release's flag accepts (a flag without listed choices takes the first)."""
        listed = self.choices(flag)
        if listed is None:
            return wanted[0] if self.has(flag) else None
        return next((w for w in wanted if w in listed), None)

    def problems(self, argv: tuple[str, ...] | list[str]) -> list[str]:
        """What the release would refuse of a command: flags it does not define (or deprecates), values that are not
        of the flag's type or among its choices. The words before the first flag are the program and its
        positional arguments; `${VAR}` placeholders stand for values set when the script runs."""
        out: list[str] = []
        words = list(argv)
        i = next((n for n, w in enumerate(words) if w.startswith("--")), len(words))
        while i < len(words):
            flag = words[i]
            spec = self.flags.get(flag)
            if spec is None and flag.startswith("--no-"):  # the off switch of a --flag/--no-flag pair
                on = self.flags.get("--" + flag.removeprefix("--no-"))
                spec = on if on is not None and on.get("negatable") else None
            if spec is None:
                out.append(f"{flag} is not a flag of {self.label}")
                i += 1
                continue
            if spec.get("deprecated"):
                out.append(f"{flag} is deprecated in {self.label} (use {spec.get('replaced_by', 'its successor')})")
            values, i = _values(words, i + 1, spec)
            out += [f"{flag} {v}: {why}" for v in values if (why := value_problem(v, spec)) is not None]
        return out


def _values(words: list[str], i: int, spec: dict[str, Any]) -> tuple[list[str], int]:
    """The values a flag takes from `words[i:]` (none for a switch, up to the next flag for a list)."""
    if spec.get("type") == "bool":
        return [], i
    nargs = spec.get("nargs")
    if nargs in ("+", "*"):
        j = i
        while j < len(words) and not words[j].startswith("--"):
            j += 1
        return words[i:j], j
    if nargs == "?" and (i >= len(words) or words[i].startswith("--")):
        return [], i
    count = nargs if isinstance(nargs, int) else 1
    return words[i : i + count], i + count


def value_problem(value: str, spec: dict[str, Any]) -> str | None:
    """Why a value does not fit a flag's definition, or None."""
    if "${" in value:
        return None
    kind = spec.get("type", "str")
    try:
        parsed: Any = {"int": int, "float": float, "json": json.loads}.get(kind, str)(value)
    except ValueError:
        return f"not a{'n' if kind == 'int' else ''} {kind} value"
    listed = spec.get("choices")
    if listed is not None and value not in [str(c) for c in listed]:
        return f"not among its choices ({', '.join(map(str, listed))})"
    if kind == "json" and "fields" in spec:
        if not isinstance(parsed, dict):
            return "not a JSON object"
        for key, inner in parsed.items():
            field = spec["fields"].get(key)
            if field is None:
                return f"{key} is not a key it reads"
            if isinstance(inner, str | int | float) and not isinstance(inner, bool):
                why = value_problem(str(inner), {k: v for k, v in field.items() if k != "fields"})
                if why is not None:
                    return f"{key}: {why}"
    return None


@cache
def release(engine: str, version: str | None = None) -> Release:
    """A release's flags; the newest known where no version is given."""
    known = versions(engine)
    if not known:
        raise InputError(f"no flags file of {engine} under {FOLDER}")
    chosen = known[-1] if version is None else version.removeprefix("v")
    if chosen not in known:
        raise InputError(f"--engine-version {engine}={version}: no flags file for it (known: {', '.join(known)})")
    data = json.loads((FOLDER / f"{engine}-{chosen}.json").read_text(encoding="utf-8"))
    return Release(engine, chosen, data["flags"], data.get("module", ""))


def parse_choice(items: tuple[str, ...]) -> dict[str, str]:
    """`--engine-version sglang=0.5.14 --engine-version vllm=0.33.0` as {engine: version}, each checked."""
    out: dict[str, str] = {}
    for item in items:
        engine, sep, version = item.partition("=")
        if not sep or engine not in ENGINES:
            raise InputError(
                f"--engine-version {item!r:.60}: expected ENGINE=VERSION, ENGINE one of {', '.join(ENGINES)}"
            )
        release(engine, version)
        out[engine] = version
    return out
