"""The tree's architecture: shared_ir at the bottom, the five packages beside each other, experiments on top.

No import goes back up or sideways, nothing imports test code or a package's benchmark script from outside it, and
no package has an import cycle, counting the imports inside functions too (a deferred import hides a cycle from
Python, not from a reader: the modules still depend on each other)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = REPO / "packages"
FIVE = ["offload_trainer", "soc_mapper", "chain_fuser", "dynamic_batcher", "fusion_perf"]
ROOTS = {"shared_ir": REPO, "experiments": REPO, **{p: PACKAGES for p in FIVE}}


def _modules(pkg: str, root: Path) -> dict[str, Path]:
    out = {}
    for p in (root / pkg).rglob("*.py"):
        parts = p.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _imports(mod: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Modules of ``known`` that ``mod`` imports anywhere in its body."""
    base = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    deps: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            deps.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            subs = {f"{target}.{a.name}" for a in node.names} & set(known)
            deps |= subs if len(subs) == len(node.names) else subs | {target}  # a name, not a module: __init__
    return {d for d in deps if d in known and d != mod}


def import_cycles(pkg: str, root: Path = PACKAGES) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    known = _modules(pkg, root)
    graph = {m: _imports(m, p, known) for m, p in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return cycles


def test_the_cycle_finder_finds_a_deferred_cycle(tmp_path):
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import x\n")
    (pkg / "b.py").write_text("x = 1\ndef f():\n    from . import a\n")
    (pkg / "c.py").write_text("from .a import x\n")
    assert import_cycles("cyc", tmp_path) == [["cyc.a", "cyc.b"]]


@pytest.mark.parametrize("pkg", list(ROOTS))
def test_no_import_cycle(pkg):
    assert import_cycles(pkg, ROOTS[pkg]) == []


def _absolute_imports(path: Path) -> set[str]:
    """Every absolute module name ``path`` imports anywhere in its body."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


@pytest.mark.parametrize("pkg", list(ROOTS))
def test_imports_go_down_only(pkg):
    allowed = {"shared_ir": {"shared_ir"}, "experiments": set(ROOTS)}.get(pkg, {"shared_ir", pkg})
    bad = []
    for mod, path in _modules(pkg, ROOTS[pkg]).items():
        for name in _absolute_imports(path):
            top = name.split(".")[0]
            if top == "tests" or (top in ROOTS and top not in allowed):
                bad.append(f"{path.relative_to(REPO)} imports {name}")
            elif pkg == "experiments" and top in FIVE and name.split(".")[1:2] == ["bench"]:
                bad.append(f"{path.relative_to(REPO)} imports the benchmark script {name}")
    assert not bad, "\n".join(bad)
