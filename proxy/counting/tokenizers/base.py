"""What a token-counting backend is: the names it answers to and how it loads a counter."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TextCounter = Callable[[str], int]


@dataclass(frozen=True, slots=True)
class Backend:
    """One backend: the specs it answers to (exact names, or every spec with `prefix`), how it loads
    the counter a spec names, and how a spec of it looks (for messages)."""

    specs: tuple[str, ...]
    load: Callable[[str], TextCounter]
    example: str
    prefix: str | None = None

    def answers(self, spec: str) -> bool:
        return spec in self.specs or (self.prefix is not None and spec.startswith(self.prefix))


def import_package(module: str, install: str, spec: str) -> Any:
    """An optional package, imported when a counter is first loaded, never at import time."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise RuntimeError(f"the {spec!r} token counter needs {install}: pip install {install}") from exc
