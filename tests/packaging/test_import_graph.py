"""No import cycles anywhere in the package.

Every module is parsed with :mod:`ast`; an edge ``a -> b`` is an import of ``b`` by ``a``
anywhere in ``a`` -- at module level, under ``if TYPE_CHECKING:`` and inside functions alike: a
lazy import only postpones a cycle (and hides it from the reader), so it counts too. ``from pkg
import name`` is an edge to ``pkg.name`` when that is a submodule, else to ``pkg/__init__`` (a
package's re-exports make every importer of the package depend on all of them). A package's
``__init__`` does not depend on its own submodules' importers, but an import of
``pkg.sub`` runs ``pkg/__init__`` first, so ``pkg.sub`` counts as ``pkg`` too -- except from
inside ``pkg`` itself, where the package is already being imported."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import dagster_lance_partitioned

PACKAGE = "dagster_lance_partitioned"
ROOT = Path(dagster_lance_partitioned.__file__).resolve().parent


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not _is_package(module):
        base.pop()
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _with_parents(importer: str, target: str) -> Iterator[str]:
    """``target`` and the packages importing it runs first (those not enclosing ``importer``,
    which are already being imported when ``importer`` runs)."""
    parts = target.split(".")
    for end in range(2, len(parts) + 1):
        name = ".".join(parts[:end])
        if name not in MODULES:
            continue
        if name != target and (importer == name or importer.startswith(name + ".")):
            continue
        yield name


def _direct_imports(module: str) -> set[str]:
    """What ``module`` imports itself (without the packages an import runs first)."""
    tree = ast.parse(MODULES[module].read_text(), str(MODULES[module]))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node)
            names = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names
            ]
        else:
            continue
        for name in names:
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                while name not in MODULES:
                    name = name.rpartition(".")[0]
                found.add(name)
    return found


def _imports(module: str) -> set[str]:
    """What importing ``module`` imports: its own imports and the packages they run first."""
    targets: set[str] = set()
    for name in _direct_imports(module):
        targets.update(_with_parents(module, name))
    targets.discard(module)
    return targets


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _path(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One cycle through the component's first module, for the failure message."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & members):
                if target == start:
                    path = [start]
                    while node != start:
                        path.append(node)
                        node = previous[node]
                    return [start, *reversed(path[1:]), start]
                if target not in previous:
                    previous[target] = node
                    following.append(target)
        frontier = following
    return component


GRAPH = {module: _imports(module) & MODULES.keys() for module in MODULES}


def test_the_graph_sees_the_package():
    assert len(MODULES) > 50
    assert f"{PACKAGE}.core.errors" in GRAPH[f"{PACKAGE}.core.namespace"]


def test_cycles_are_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _path(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]


def test_no_import_cycles():
    cycles = _cycles(GRAPH)
    shown = "\n".join(" -> ".join(_path(GRAPH, c)) + f"  ({len(c)} modules)" for c in cycles)
    assert not cycles, f"import cycles:\n{shown}"


def test_core_imports_neither_dagster_nor_pyspark():
    for module, path in MODULES.items():
        if not module.startswith(f"{PACKAGE}.core"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top not in {"dagster", "pyspark", "dagster_pyspark"}, (module, name)


def _folder(module: str) -> str | None:
    """The folder of core holding ``module`` (None: a top-level module of core, or not core)."""
    parts = module.split(".")
    if parts[1:2] != ["core"] or len(parts) < 4:
        return None
    return parts[2]


def _folder_pairs(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """Pairs of core folders importing each other, with one import each way."""
    edges: dict[tuple[str, str], str] = {}
    for module, targets in graph.items():
        for target in targets:
            a, b = _folder(module), _folder(target)
            if a and b and a != b:
                edges.setdefault((a, b), f"{module} -> {target}")
    return {(a, b): [edges[(a, b)], edges[(b, a)]] for (a, b) in edges if a < b and (b, a) in edges}


def test_no_two_core_folders_import_each_other():
    """Core is a one-way stack of folders: lazy and ``TYPE_CHECKING`` imports count."""
    pairs = _folder_pairs({m: _direct_imports(m) for m in MODULES})
    assert not pairs, f"core folders importing each other: {pairs}"


def test_folder_pairs_are_found():
    graph = {
        f"{PACKAGE}.core.a.x": {f"{PACKAGE}.core.b.y"},
        f"{PACKAGE}.core.b.y": {f"{PACKAGE}.core.a.z"},
        f"{PACKAGE}.core.a.z": set(),
    }
    assert list(_folder_pairs(graph)) == [("a", "b")]


DOORS = {PACKAGE, f"{PACKAGE}.core", f"{PACKAGE}.core.engine", f"{PACKAGE}.core.errors"}


def test_outer_layers_enter_core_only_through_its_doors():
    """The Dagster layer, Spark and the CLI import core only from the public facade
    (``core``, its ``errors``) and ``core.engine``: every other core module is internal."""
    through: dict[str, list[str]] = {}
    for module in MODULES:
        layer = module.split(".")[1] if module.count(".") else ""
        if layer in ("", "core") or module == PACKAGE:
            continue
        for target in _direct_imports(module):
            if target.startswith(f"{PACKAGE}.core") and target not in DOORS:
                through.setdefault(module, []).append(target)
    assert not through, f"imports of core's internals: {through}"


def test_core_packages_export_nothing():
    """One rule for core's folders: their ``__init__`` is a docstring, nothing re-exported."""
    for module, path in MODULES.items():
        if _folder(module + ".x") and path.name == "__init__.py" and module != f"{PACKAGE}.core":
            body = ast.parse(path.read_text()).body
            code = [
                n
                for n in body
                if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
            ]
            assert not code, f"{module} re-exports: {[ast.unparse(n)[:60] for n in code]}"
