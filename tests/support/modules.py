"""The modules of `proxy/` read as source: their dotted names and what they import (read with `ast`,
so an import inside a function or under `TYPE_CHECKING` counts too). The layer test and the layout
test check the same imports."""

from __future__ import annotations

import ast
from pathlib import Path

PROXY = Path(__file__).resolve().parents[2] / "proxy"

# Where a statement can hold others: an import is a statement, so the walk skips every expression
# (most of a tree's nodes; `ast.walk` over them was most of the layer test's time).
BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def module_name(path: Path) -> str:
    """`proxy/ways/base.py` is `proxy.ways.base`, `proxy/ways/__init__.py` is `proxy.ways`."""
    parts = path.relative_to(PROXY.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(tree: ast.AST) -> list[str]:
    """The modules a module's statements import (absolute imports only: the project uses no other)."""
    found = []
    statements = [tree]
    while statements:
        node = statements.pop()
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        for field in BODIES:
            statements.extend(getattr(node, field, ()))
    return found


def where(path: Path) -> str:
    """`proxy/ways/base.py`, as a message names a module."""
    return str(path.relative_to(PROXY.parent))


def with_late_line(path: Path, line: str) -> str:
    """The source of `path` with `line` at its end, inside a function (where an import or a comparison
    would hide from a check that reads only the top): what a check's own test feeds it."""
    return path.read_text() + f"\n\ndef _late(self, route, wire) -> None:\n    {line}\n"
