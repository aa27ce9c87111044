"""Write the launch flags of a released engine as data: `python tools/engine_flags.py sglang 0.5.23`.

It downloads that release from the package index (`pip download --no-deps`: the wheel or sdist the index serves),
reads the files that define its command-line arguments with `ast` (nothing of the engine is imported or run), and
writes `simulator/deploy/flags/<engine>-<version>.json`: every flag's name, the type of its value, its choices
where the source spells them out, and whether it is deprecated. `simulator/deploy/flags.py` reads those files;
the launch commands are checked against them.

How each engine defines its flags (what the readers below follow):

* `parser.add_argument("--flag", type=..., choices=..., action=...)` calls (all three engines; the router's names
  are `f"--{prefix}name"`, its standalone launcher's prefix empty);
* SGLang >= 0.5.14: fields annotated `A[T, "help"]` or `A[T, Arg(...)]` become `--field-name` (or `Arg.cli_name`)
  plus `Arg.aliases`, unless `Arg(no_cli=True)` (its `arg_groups/arg_utils.py`); 0.5.23 moved the fields into
  `arg_groups/fields/*.py`;
* vLLM: `group.add_argument("--flag", **parallel_kwargs["field"])`, the kwargs derived from the field of the
  config dataclass named in `parallel_kwargs = get_kwargs(ParallelConfig)` (a `Literal` gives the choices, a bool
  a `--flag/--no-flag` switch, a dataclass a JSON value); `vllm serve`'s frontend dataclasses (`FrontendArgs`,
  `BaseFrontendArgs`) turn every field into `--field-name`.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "simulator" / "deploy" / "flags"


@dataclass(frozen=True)
class Engine:
    package: str  # the name on the package index
    files: tuple[str, ...]  # the source files read (globs, paths inside the package)
    argument_files: tuple[str, ...]  # of those, where add_argument calls and field classes define flags
    annotated_fields: bool = True  # classes' `A[T, ...]` fields are flags (SGLang's rule)
    frontend_classes: tuple[str, ...] = ()  # dataclasses every field of which is a flag (vLLM serve)


ENGINES = {
    "sglang": Engine(
        "sglang",
        ("sglang/srt/server_args.py", "sglang/srt/arg_groups/*.py", "sglang/srt/arg_groups/fields/*.py"),
        ("sglang/srt/server_args.py", "sglang/srt/arg_groups/fields/*.py"),
    ),
    "sglang-router": Engine("sglang-router", ("sglang_router/router_args.py",), ("sglang_router/router_args.py",)),
    # The benchmark clients a release ships (bench.sh): `python -m sglang.bench_serving` (`sglang.benchmark.serving`
    # from the releases that moved it) and `vllm bench serve`, whose dataset flags live in `benchmarks/datasets`.
    "sglang-bench": Engine(
        "sglang", ("sglang/bench_serving.py", "sglang/benchmark/serving.py"), ("*",), annotated_fields=False
    ),
    "vllm-bench": Engine(
        "vllm",
        ("vllm/benchmarks/serve.py", "vllm/benchmarks/datasets.py", "vllm/benchmarks/datasets/datasets.py"),
        ("*",),
        annotated_fields=False,
    ),
    "vllm": Engine(
        "vllm",
        (
            "vllm/engine/arg_utils.py",
            "vllm/entrypoints/openai/cli_args.py",
            "vllm/entrypoints/common/cli_args.py",
            "vllm/entrypoints/cli/serve.py",
            "vllm/config/*.py",
            "vllm/config/*/*.py",
            "vllm/model_executor/layers/quantization/__init__.py",
        ),
        (
            "vllm/engine/arg_utils.py",
            "vllm/entrypoints/openai/cli_args.py",
            "vllm/entrypoints/common/cli_args.py",
            "vllm/entrypoints/cli/serve.py",
        ),
        annotated_fields=False,  # vLLM's flags are add_argument calls and the frontend dataclasses
        frontend_classes=("FrontendArgs", "BaseFrontendArgs"),
    ),
}
SCALARS = {"int": "int", "float": "float", "str": "str", "bool": "bool"}
# Annotations around the type that says what a flag takes (pydantic's SkipValidation: the value is not checked).
WRAPPERS = ("Optional", "Union", "A", "Annotated", "SkipValidation")


# ------------------------------------------------------------------ the release's files


def download(engine: Engine, version: str, folder: Path) -> Path:
    """The release's archive, fetched with pip's own client (no dependencies, nothing installed)."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        f"{engine.package}=={version}",
        "-d",
        str(folder),
    ]
    subprocess.run(cmd, check=True)
    (archive,) = [p for p in folder.iterdir() if p.suffix in (".whl", ".gz", ".zip")]
    return archive


def sources(archive: Path, engine: Engine) -> dict[str, str]:
    """Path inside the package -> text, for the files the engine's flags are read from."""
    out: dict[str, str] = {}

    def take(name: str, read: Any) -> None:
        parts = name.split("/")
        for start in range(len(parts)):  # an sdist nests the package (name-version/python/sglang/...)
            inner = "/".join(parts[start:])
            if any(fnmatch.fnmatchcase(inner, g) for g in engine.files):
                out[inner] = read().decode("utf-8")
                return

    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as z:
            for name in z.namelist():
                take(name, lambda name=name: z.read(name))
    else:
        with tarfile.open(archive) as t:
            for m in t.getmembers():
                if m.isfile():
                    take(m.name, lambda m=m: t.extractfile(m).read())  # type: ignore[union-attr]
    return out


# ------------------------------------------------------------------ reading the definitions


class Symbols:
    """Module-level names bound to literal lists or `Literal[...]` types, and the classes, of every file read."""

    def __init__(self, trees: dict[str, ast.Module]) -> None:
        self.values: dict[str, list[Any]] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        for tree in trees.values():
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    self.classes.setdefault(node.name, node)
                target, value = _binding(node)
                if target is not None:
                    got = self.literal(value)
                    if got is not None:
                        self.values.setdefault(target, got)

    def literal(self, node: ast.AST | None) -> list[Any] | None:
        """A list of constants: `[...]`, `(...)`, `{...}`, `Literal[...]`, a name bound to one, or `list(...)`,
        `get_args(...)`, `sorted(...)` of one; None where the values are computed at run time."""
        if isinstance(node, ast.List | ast.Tuple | ast.Set) and all(isinstance(e, ast.Constant) for e in node.elts):
            return [e.value for e in node.elts]  # type: ignore[attr-defined]
        if isinstance(node, ast.Name):
            return self.values.get(node.id)
        if isinstance(node, ast.Subscript) and _name(node.value) == "Literal":
            elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            values: list[Any] = []
            for e in elts:
                got = [e.value] if isinstance(e, ast.Constant) else self.literal(e)
                if got is None:
                    return None
                values += got
            return values
        if isinstance(node, ast.Call) and _name(node.func) in ("list", "get_args", "sorted", "tuple") and node.args:
            return self.literal(node.args[0])
        return None


def _binding(node: ast.stmt) -> tuple[str | None, ast.AST | None]:
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id, node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        return node.target.id, node.value
    return None, None


def _name(node: ast.AST) -> str:
    """`x` of `x`, `a.b.x`; '' otherwise."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def value_type(annotation: ast.AST | None, sym: Symbols, nested: bool = False) -> dict[str, Any]:
    """What a field's annotation makes its flag take: a type, choices, a list, no value (a bool switch), or JSON
    (a config dataclass: its fields' own types, one level down, so a JSON value's keys can be checked too)."""
    kinds: list[ast.AST] = []

    def flatten(n: ast.AST | None) -> None:  # X | Y, Optional[X], Union[X, Y], A[X, ...]
        if n is None:
            return
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr):
            flatten(n.left)
            flatten(n.right)
        elif isinstance(n, ast.Subscript) and _name(n.value) in WRAPPERS:
            inner = n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]
            for e in inner[:1] if _name(n.value) in ("A", "Annotated", "SkipValidation") else inner:
                flatten(e)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):  # a string annotation
            try:
                flatten(ast.parse(n.value, mode="eval").body)
            except SyntaxError:
                kinds.append(n)
        elif not (isinstance(n, ast.Constant) and n.value is None):
            kinds.append(n)

    flatten(annotation)
    names = [_name(k) for k in kinds]
    choices = next((c for c in (sym.literal(k) for k in kinds) if c is not None), None)
    if choices is not None and not all(isinstance(k, ast.Name) and k.id in SCALARS for k in kinds):
        listed = [c for c in choices if c is not None]
        kind = "int" if listed and all(type(c) is int for c in listed) else "str"
        return {"type": kind, "choices": listed}
    if "bool" in names:
        return {"type": "str", "nargs": "?"} if "str" in names else {"type": "bool"}
    for k in kinds:
        if isinstance(k, ast.Subscript) and _name(k.value) in ("list", "List", "tuple", "Tuple", "set"):
            inner = value_type(k.slice.elts[0] if isinstance(k.slice, ast.Tuple) else k.slice, sym, nested=True)
            return {**inner, "nargs": "+"}
        if _name(k) in ("dict", "Dict") or (isinstance(k, ast.Subscript) and _name(k.value) in ("dict", "Dict")):
            return {"type": "json"}
        if isinstance(k, ast.Name | ast.Attribute) and _name(k) in sym.classes:  # a config dataclass: JSON
            if nested:
                return {"type": "json"}
            fields = _config_fields(_name(k), sym)
            keys = {f: value_type(a, sym, nested=True) for f, a in fields.items() if not f.startswith("_")}
            return {"type": "json", "fields": dict(sorted(keys.items()))}
    for scalar in ("int", "float", "str"):
        if scalar in names:
            return {"type": scalar}
    return {"type": "str"}


def _arg_meta(meta: ast.AST) -> dict[str, ast.AST] | None:
    """The keywords of `Arg(...)` (a bare string is `Arg(help=...)`); None for other metadata."""
    if isinstance(meta, ast.Constant) and isinstance(meta.value, str):
        return {}
    if isinstance(meta, ast.Call) and _name(meta.func) == "Arg":
        return {k.arg: k.value for k in meta.keywords if k.arg}
    return None


def _action(kw: dict[str, ast.AST]) -> dict[str, Any]:
    """What an `action=` makes of a flag: a switch, deprecated, or nothing said."""
    action = kw.get("action")
    text = action.value if isinstance(action, ast.Constant) else _name(action) if action is not None else ""
    out: dict[str, Any] = {}
    if text in ("store_true", "store_false", "BooleanOptionalAction") or "StoreTrue" in str(text):
        out["type"] = "bool"
    if text == "BooleanOptionalAction":  # --flag and --no-flag
        out["negatable"] = True
    if "Deprecated" in str(text) or (isinstance(kw.get("deprecated"), ast.Constant) and kw["deprecated"].value):  # type: ignore[attr-defined]
        out["deprecated"] = True
        new = kw.get("new_flag")
        if isinstance(new, ast.Constant):
            out["replaced_by"] = new.value
    return out


def field_flags(cls: ast.ClassDef, sym: Symbols) -> dict[str, dict[str, Any]]:
    """SGLang's annotated fields: `A[T, "help"]` / `A[T, Arg(...)]` -> `--field-name` and its aliases."""
    out: dict[str, dict[str, Any]] = {}
    for st in cls.body:
        if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
            continue
        ann = st.annotation
        if not (isinstance(ann, ast.Subscript) and _name(ann.value) in ("A", "Annotated")):
            continue
        elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        kw = next((m for m in (_arg_meta(e) for e in elts[1:]) if m is not None), None)
        if kw is None or (isinstance(kw.get("no_cli"), ast.Constant) and kw["no_cli"].value):  # type: ignore[attr-defined]
            continue
        spec = value_type(elts[0], sym)
        if "choices" in kw:
            listed = sym.literal(kw["choices"])
            spec = {**spec, "choices": listed} if listed is not None else {**spec, "choices_computed": True}
        spec |= _action(kw)
        if "type_parser" in kw:
            spec["type"] = SCALARS.get(_name(kw["type_parser"]), "str")
        main = kw["cli_name"].value if isinstance(kw.get("cli_name"), ast.Constant) else None  # type: ignore[attr-defined]
        main = main or "--" + st.target.id.replace("_", "-")
        _add(out, main, sym.literal(kw.get("aliases")) or [], spec)
    return out


def frontend_flags(cls: ast.ClassDef, sym: Symbols) -> dict[str, dict[str, Any]]:
    """vLLM serve's frontend dataclasses: every public field is `--field-name`."""
    out: dict[str, dict[str, Any]] = {}
    for st in cls.body:
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and not st.target.id.startswith("_"):
            if _name(st.annotation) == "ClassVar" or (
                isinstance(st.annotation, ast.Subscript) and _name(st.annotation.value) == "ClassVar"
            ):
                continue
            spec = value_type(st.annotation, sym)
            if spec == {"type": "bool"}:  # the frontend's bools are BooleanOptionalActions too
                spec["negatable"] = True
            _add(out, "--" + st.target.id.replace("_", "-"), [], spec)
    return out


def _config_fields(cls_name: str, sym: Symbols) -> dict[str, ast.AST]:
    cls = sym.classes.get(cls_name)
    if cls is None:
        return {}
    out = {}
    for base in cls.bases:  # fields a config inherits
        out |= _config_fields(_name(base), sym)
    for st in cls.body:
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
            out[st.target.id] = st.annotation
    return out


def argument_flags(tree: ast.Module, sym: Symbols) -> dict[str, dict[str, Any]]:
    """Every `*.add_argument("--flag", ...)` call; vLLM's `**x_kwargs["field"]` read from the config dataclass."""
    out: dict[str, dict[str, Any]] = {}
    kwargs_of: dict[str, str] = {}  # parallel_kwargs -> ParallelConfig
    for node in ast.walk(tree):
        target, value = _binding(node) if isinstance(node, ast.stmt) else (None, None)
        if target and isinstance(value, ast.Call) and _name(value.func) == "get_kwargs" and value.args:
            kwargs_of[target] = _name(value.args[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node.func) == "add_argument":
            names = [n for n in (_flag_text(a) for a in node.args) if n and n.startswith("-")]
            if not names:
                continue
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            spec: dict[str, Any] = {"type": SCALARS.get(_name(kw["type"]), "str")} if "type" in kw else {}
            unpacked = [k.value for k in node.keywords if k.arg is None]  # **parallel_kwargs["tensor_parallel_size"]
            for d in [u for u in unpacked if isinstance(u, ast.Dict)]:  # **{**parallel_kwargs["x"], "default": None}
                unpacked += [v for kk, v in zip(d.keys, d.values, strict=True) if kk is None]
            for v in unpacked:
                if isinstance(v, ast.Subscript) and isinstance(v.slice, ast.Constant):
                    fields = _config_fields(kwargs_of.get(_name(v.value), ""), sym)
                    if v.slice.value in fields:
                        spec = value_type(fields[v.slice.value], sym)
                        if spec == {"type": "bool"}:  # get_kwargs makes a bool a BooleanOptionalAction
                            spec["negatable"] = True
            if "choices" in kw:
                listed = sym.literal(kw["choices"])
                spec = {**spec, "choices": listed} if listed is not None else {**spec, "choices_computed": True}
            if isinstance(kw.get("nargs"), ast.Constant):
                spec["nargs"] = kw["nargs"].value  # type: ignore[attr-defined]
            spec = {"type": "str", **spec, **_action(kw)}
            longs = [n for n in names if n.startswith("--")]
            if longs:
                _add(out, longs[0], [n for n in names if n != longs[0]], spec)
    return out


def _flag_text(node: ast.AST) -> str | None:
    """`"--x"`, or `f"--{prefix}x"` with the prefix (a plain name) left out: the router's standalone launcher's."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        if not all(isinstance(v, ast.Constant) or isinstance(v.value, ast.Name) for v in node.values):  # type: ignore[attr-defined]
            return None
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant))
    return None


def _add(out: dict[str, dict[str, Any]], main: str, aliases: list[str], spec: dict[str, Any]) -> None:
    out[main] = spec
    for a in aliases:
        out.setdefault(a, {**spec, "alias_of": main})


def read_flags(files: dict[str, str], engine: Engine) -> dict[str, dict[str, Any]]:
    trees = {path: ast.parse(text) for path, text in sorted(files.items())}
    sym = Symbols(trees)
    flags: dict[str, dict[str, Any]] = {}
    for path, tree in trees.items():
        if not any(fnmatch.fnmatchcase(path, g) for g in engine.argument_files):
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name in engine.frontend_classes:
                flags |= frontend_flags(node, sym)
            elif isinstance(node, ast.ClassDef) and engine.annotated_fields:
                flags |= field_flags(node, sym)
        flags |= argument_flags(tree, sym)
    return dict(sorted(flags.items()))


# ------------------------------------------------------------------ the committed file


def render(engine_name: str, version: str, archive: Path, files: dict[str, str]) -> str:
    """The JSON: one flag a line, so a release's diff against the last reads flag by flag."""
    flags = read_flags(files, ENGINES[engine_name])
    head: dict[str, Any] = {"engine": engine_name, "version": version}
    if engine_name == "sglang-bench":  # the module to run: the releases that moved the client name the new one
        moved = "sglang/benchmark/serving.py" in files
        head["module"] = "sglang.benchmark.serving" if moved else "sglang.bench_serving"
    head |= {
        "source": {
            "archive": archive.name,
            "sha256": hashlib.sha256(archive.read_bytes()).hexdigest(),
            "files": sorted(files),
            "how": "python tools/engine_flags.py " + f"{engine_name} {version} (read with ast, nothing imported)",
        },
    }
    lines = ["{"] + [f'  "{k}": {json.dumps(v)},' for k, v in head.items()] + ['  "flags": {']
    body = [f"    {json.dumps(name)}: {json.dumps(spec, sort_keys=True)}" for name, spec in flags.items()]
    lines += [",\n".join(body), "  }", "}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("engine", choices=sorted(ENGINES))
    ap.add_argument("version")
    ap.add_argument("--archive", type=Path, help="a release archive already downloaded (else pip download)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    engine = ENGINES[args.engine]
    with tempfile.TemporaryDirectory() as tmp:
        archive = args.archive or download(engine, args.version, Path(tmp))
        files = sources(archive, engine)
        if not files:
            sys.exit(f"{archive.name}: none of {', '.join(engine.files)} in the archive")
        text = render(args.engine, args.version, archive, files)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.engine}-{args.version}.json"
    path.write_text(text)
    print(f"wrote {path}: {len(json.loads(text)['flags'])} flags")


if __name__ == "__main__":
    main()
