"""The package's structure in figures, read from the source (nothing is imported or run):
modules and lines per layer, the pairs of core folders that import each other (lazy and
``TYPE_CHECKING`` imports included), the core modules each other layer imports, the largest
modules and functions, and the functions called ``one``.

    .venv/bin/python scripts/structure_report.py [--top 10]

Recorded in docs/explanation/design.md ("The structure in figures")."""

from __future__ import annotations

import argparse
import ast
from collections import Counter, defaultdict
from pathlib import Path

PACKAGE = "dagster_lance_partitioned"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports(path: Path, name: str) -> set[str]:
    """The package modules ``path`` (module ``name``) imports, anywhere in it."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith(PACKAGE)}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith(PACKAGE):
                found.add(target)
                found |= {f"{target}.{a.name}" for a in node.names}
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()
    paths = sorted(ROOT.rglob("*.py"))
    modules = {module_name(p): p for p in paths}
    lines = {m: len(p.read_text().splitlines()) for m, p in modules.items()}
    graph = {m: {i for i in imports(p, m) if i in modules and i != m} for m, p in modules.items()}

    def layer(m: str) -> str:
        parts = m.split(".")
        return parts[1] if len(parts) > 1 else "(top)"

    def core_folder(m: str) -> str | None:
        parts = m.split(".")
        if len(parts) > 3 and parts[1] == "core":
            return parts[2]
        return None

    print("| layer | modules | lines |\n|---|---:|---:|")
    by_layer: dict[str, list[str]] = defaultdict(list)
    for m in modules:
        by_layer[layer(m)].append(m)
    for name, ms in sorted(by_layer.items()):
        print(f"| {name} | {len(ms)} | {sum(lines[m] for m in ms):,} |")

    pairs: set[tuple[str, str]] = set()
    for m, targets in graph.items():
        a = core_folder(m)
        for t in targets:
            b = core_folder(t)
            if a and b and a != b:
                pairs.add((a, b))
    mutual = sorted({tuple(sorted(p)) for p in pairs if (p[1], p[0]) in pairs})
    print(f"\ncore folders importing each other: {len(mutual)}")
    for a, b in mutual:
        print(f"- {a} <-> {b}")

    print("\n| layer | core modules it imports |\n|---|---:|")
    for name in ("orchestration", "spark", "cli"):
        used = {
            t for m in by_layer.get(name, []) for t in graph[m] if t.startswith(f"{PACKAGE}.core")
        }
        print(f"| {name} | {len(used)} |")

    print(f"\nlargest modules (top {args.top}):")
    for m, n in sorted(lines.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"- {m.removeprefix(PACKAGE + '.')}: {n}")
    functions: list[tuple[int, str]] = []
    names: Counter[str] = Counter()
    for m, p in modules.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                functions.append((size, f"{m.removeprefix(PACKAGE + '.')}.{node.name}"))
                names[node.name] += 1
    print(f"\nlargest functions (top {args.top}):")
    for size, f in sorted(functions, reverse=True)[: args.top]:
        print(f"- {f}: {size}")
    print(f"\nfunctions called `one`: {names['one']}")


if __name__ == "__main__":
    main()
