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
