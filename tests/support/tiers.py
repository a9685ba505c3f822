"""Where a test file goes, and which folders a pytest run can skip without importing them.

`tests/` mirrors `proxy/`: a fast test of `proxy/engine/cuts.py` is in `tests/engine/`, of
`proxy/settings.py` at `tests/test_settings.py`. A file whose tests all need a tier (a real process,
llama-server, Redis, the agent CLIs, podman, chromium, minutes) is in the folder named after that
tier's marker, `tests/process/`, `tests/llama/`, ... and every test there carries that marker
(`tests/conftest.py` adds it). A run whose `-m` cannot select a test carrying a folder's marker
never imports that folder: a plain `pytest` (the fast tier) reads none of them, nor the SDKs,
Playwright and harnesses they import. Checks of the repository as a whole are in `tests/project/`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from itertools import combinations
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
PROXY = TESTS.parent / "proxy"

# The tiers' markers (pyproject.toml's), heaviest need first: a file whose tests need several goes
# in the folder of the first it needs (`tests/redis/test_replicas.py` is also `process` and `slow`).
TIERS = ("image", "browser", "cli", "litellm", "llama", "redis", "bench", "slow", "process")
# The folders beside the mirrored ones that hold no test file of their own layout.
NOT_TESTS = ("support", "node", "clis", "templates")
PROJECT = "project"


@cache
def mirrored() -> tuple[str, ...]:
    """The folders of `proxy/` a fast test file may sit in: its subpackages."""
    return tuple(sorted(p.parent.name for p in PROXY.glob("*/__init__.py")))


def tier_of(path: Path) -> str | None:
    """The tier whose folder holds `path` (a file or a folder under `tests/`), or None."""
    try:
        parts = path.resolve().relative_to(TESTS).parts
    except ValueError:
        return None
    return parts[0] if parts and parts[0] in TIERS else None


def _names_asked(evaluate: Callable[[Callable[..., bool]], bool], given: set[str]) -> tuple[bool, set[str]]:
    asked: set[str] = set()

    def matcher(name: str, /, **kwargs: object) -> bool:
        asked.add(name)
        return name in given

    return evaluate(matcher), asked


def can_select(evaluate: Callable[[Callable[..., bool]], bool], tier: str) -> bool:
    """Whether a marker expression (its `evaluate`, pytest's `Expression.evaluate`) is true for some
    test carrying `tier`, whatever else it carries: every other name the expression asks about is
    tried both ways, so a folder is skipped only when none of its tests could be selected."""
    names: set[str] = set()
    while True:
        found = set()
        for size in range(len(names) + 1):
            for extra in combinations(sorted(names), size):
                selected, asked = _names_asked(evaluate, {tier, *extra})
                if selected:
                    return True
                found |= asked - names - {tier}
        if not found:
            return False
        names |= found


def home(path: Path) -> str:
    """Where a test file belongs, said as a hint: the folder of the proxy module its name names."""
    name = path.stem.removeprefix("test_")
    for module in sorted(PROXY.rglob("*.py")):
        if module.stem == name or name.startswith(module.stem + "_"):
            folder = module.parent.relative_to(PROXY).parts
            return f"tests/{folder[0]}/" if folder else "tests/"
    return "the folder of the proxy/ part it tests, or tests/<tier>/ if all its tests carry a tier marker"
