"""The import graph of `proxy/`, read with `ast` (an import inside a function or under
`TYPE_CHECKING` counts too): how many modules and arrows, each folder's arrows to the others, and
every cycle (a strongly connected group of modules).

    .venv/bin/python scripts/module_graph.py            # counts, folder arrows, cycles
    .venv/bin/python scripts/module_graph.py --arrows   # and every module's arrows
"""

from __future__ import annotations

import argparse
import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROXY = ROOT / "proxy"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(imported: str, modules: set[str]) -> str | None:
    """The module of ours an import names (`from proxy.x import name` names `proxy.x`)."""
    while imported and imported not in modules:
        imported = imported.rpartition(".")[0]
    return imported or None


def graph() -> dict[str, set[str]]:
    """Each module of `proxy/` and the modules of `proxy/` it imports (the package itself left out)."""
    paths = {module_name(p): p for p in sorted(PROXY.rglob("*.py"))}
    modules = set(paths)
    edges: dict[str, set[str]] = {}
    for name, path in paths.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from package import name`: the submodule when `name` is one, else the package.
                targets = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            for target in targets:
                module = _resolve(target, modules) if target.split(".")[0] == "proxy" else None
                if module is not None and module not in (name, "proxy"):
                    found.add(module)
        edges[name] = found
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def folder(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--arrows", action="store_true", help="print every module's arrows")
    args = parser.parse_args()
    edges = graph()
    arrows = sum(len(targets) for targets in edges.values())
    print(f"modules: {len(edges)}  arrows: {arrows}")
    between = Counter(
        (folder(source), folder(target))
        for source, targets in edges.items()
        for target in targets
        if folder(source) != folder(target)
    )
    print("arrows between folders:")
    for (source, target), count in sorted(between.items()):
        print(f"  {source} -> {target}: {count}")
    found = cycles(edges)
    print(f"cycles: {len(found)}")
    for group in found:
        print("  " + " <-> ".join(group))
    names = Counter(path.stem for path in PROXY.rglob("*.py") if path.stem != "__init__")
    clashes = sorted(name for name, count in names.items() if count > 1)
    print(f"file names used twice or more: {', '.join(clashes) or 'none'}")
    if args.arrows:
        for source in sorted(edges):
            for target in sorted(edges[source]):
                print(f"{source} -> {target}")


if __name__ == "__main__":
    main()
