"""The package's imports run one way: no module needs, directly or through others, a module that
needs it back (a circle means neither file can be read, tested or changed alone). Every import
counts, the ones inside functions too; only ``if TYPE_CHECKING:`` imports (annotations, never run)
are left out."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "felix_jax"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.with_suffix("").relative_to(PACKAGE.parent).parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def import_graph(modules: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a ``from .x import name`` of a submodule counts as
    that submodule; a module's own parent packages are not edges)."""
    modules = _modules() if modules is None else modules
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        tree = ast.parse(path.read_text())
        skip = _type_checking_nodes(tree)
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skip or not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for t in targets:
                while t and t not in modules and "." in t:
                    t = t.rpartition(".")[0]
                if t in modules and t != mod and not mod.startswith(t + "."):
                    edges[mod].add(t)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_the_cycle_finder_finds_a_circle_and_a_chain_is_none():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_graph_sees_imports_inside_functions_but_not_type_checking_ones(tmp_path):
    pkg = tmp_path / "felix_jax"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .b import g\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\n")
    modules = {"felix_jax": pkg / "__init__.py", "felix_jax.a": pkg / "a.py", "felix_jax.b": pkg / "b.py"}
    edges = import_graph(modules)
    assert edges["felix_jax.a"] == {"felix_jax.b"} and edges["felix_jax.b"] == set()


def test_no_import_circle():
    """None of the four circles this package had (cohort engine <-> group, compare -> sweep -> compare,
    runner <-> scenario, simulator <-> snapshot) nor any other."""
    assert cycles(import_graph()) == []
