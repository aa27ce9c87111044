"""The layout's one-way rule: `simulator` never imports kernels, torch or triton, and its modules form no circle.

Planning must work on a machine without torch, and the serving model both clocks share must not lean on the
clock or the device that drives it. Type-only imports count: the coupling is what the rule forbids.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = ("kernels", "torch", "triton", "phaseplan", "app")


def _imports() -> dict[str, set[str]]:
    """Each simulator module and the modules (of any package) it imports, by dotted name."""
    out: dict[str, set[str]] = {}
    for f in (ROOT / "simulator").rglob("*.py"):
        parts = f.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        pkg = name if parts[-1] == "__init__" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                found |= {base} | {f"{base}.{a.name}" for a in node.names}
        out[name] = found
    return out


def test_simulator_imports_no_device_side_package() -> None:
    bad = sorted(f"{m} imports {n}" for m, ns in _imports().items() for n in ns if n.split(".")[0] in FORBIDDEN)
    assert bad == []


def test_simulator_modules_form_no_circle() -> None:
    imports = _imports()
    edges = {m: {n for n in ns if n in imports and n != m} for m, ns in imports.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circles: list[list[str]] = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(edges[m]):
            if state.get(n) == 1:
                circles.append(path[path.index(n) :] + [n])
            elif n not in state:
                visit(n, path + [n])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    assert circles == []


PRODUCT = ("simulator", "kernels", "app", "phaseplan", "bench")


def _private_names(tree: ast.AST) -> set[str]:
    """The private names a module defines: its private functions and classes, and the attributes it assigns."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name.startswith("_"):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and node.attr.startswith("_"):
            names.add(node.attr)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(t, ast.Name) and t.id.startswith("_") and t.id != "__slots__":
                    names.add(t.id)
                elif isinstance(t, ast.Name) and t.id == "__slots__" and isinstance(node.value, ast.Tuple | ast.List):
                    names |= {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
    return names


def test_no_private_attribute_of_another_object_is_touched_outside_its_module() -> None:
    """`x._name` where x is not self or cls reads another object's private state: allowed only in the module
    that defines `_name` (a class's own helpers), never across modules. Names the project does not define
    (a library's, such as torch._scaled_mm) are the library's business."""
    trees = {f: ast.parse(f.read_text()) for pkg in PRODUCT for f in (ROOT / pkg).rglob("*.py")}
    own = {f: _private_names(t) for f, t in trees.items()}
    ours = set().union(*own.values())
    bad = []
    for f, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
                continue
            v = node.value
            if isinstance(v, ast.Name) and v.id in ("self", "cls"):
                continue
            if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "super":
                continue
            if node.attr in ours and node.attr not in own[f]:
                bad.append(f"{f.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert bad == []


def test_the_architecture_page_names_every_package_and_nothing_stale() -> None:
    """docs/architecture.md's "where does X live" table: every package of the product in its first column, every
    package and module it names present."""
    import re

    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("## Where does X live", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in table.splitlines() if ln.startswith("| `")]
    named: dict[str, str] = {}  # package path -> the rest of its row
    for row in rows:
        first, rest = row.split("|")[1], "|".join(row.split("|")[2:])
        for path in re.findall(r"`([^`]+)`", first):
            named[path.rstrip("/")] = rest
    packages = {
        str(f.parent.relative_to(ROOT))
        for pkg in ("simulator", "kernels", "app", "phaseplan")
        for f in (ROOT / pkg).rglob("__init__.py")
    } - {"simulator"}
    packages |= {"bench"}
    assert sorted(packages - set(named)) == [], "packages the table does not name"
    for path, rest in named.items():
        assert (ROOT / path).exists(), f"the table names {path}, which does not exist"
        if (ROOT / path).is_dir():
            for module in re.findall(r"`([a-z_]+\.py)`", rest):
                assert (ROOT / path / module).is_file(), f"{path}/{module} is named but does not exist"
