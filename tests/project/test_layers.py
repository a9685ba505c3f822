"""The folders are the layers, and no lower layer imports a higher one (read with `ast`, so an
import inside a function counts too). Bottom to top: `errors`, `counting/`, `settings`, `engine/`,
`metrics` and `bodies/`, `formats/`, `upstream/` and `sharing/`, `planning/`, `ways/` and `live/`, `server/`
and `connections/`, and the commands (`cli`, `demo`, `stub`, `run/`).
Beside them, tests and benchmarks share one helper package, `tests/support/`, and import nothing
else of each other.

What a module loads indirectly counts too: importing every module of `engine/` (and of
`counting/`) in a fresh interpreter loads no web framework, HTTP client or asyncio (read from
`sys.modules` in a subprocess), whichever lower module or library would have brought it in."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.modules import PROXY, imports, module_name, with_late_line

ROOT = PROXY.parent

# A module may import modules of its own rank or lower.
RANKS: dict[str, float] = {
    "proxy.errors": 0,
    "proxy.counting": 1,
    "proxy.settings": 2,
    "proxy.engine": 3,
    "proxy.metrics": 4,
    "proxy.bodies": 4,
    "proxy.formats": 5,
    "proxy.upstream": 6,
    "proxy.sharing": 6,
    "proxy.planning": 6.5,  # deciding a request: over the upstream's probes, under the ways
    "proxy.ways": 7,
    "proxy.live": 7,
    "proxy.connections": 8,
    "proxy.server": 8,
    "proxy.gateway": 8,  # the gateway contract runs the server's pipeline, and the server runs its audit
    "proxy.cli": 9,
    "proxy.run": 9,
    "proxy.demo": 9,
    "proxy.stub": 9,
    "proxy.__main__": 9,
    "proxy": 0,  # the package itself: only `__version__`
}
# The pure core imports none of the I/O or framework libraries.
PURE = ("proxy.engine", "proxy.counting.tokens")
NOT_PURE = {"httpx", "fastapi", "starlette", "logging", "asyncio", "aiohttp"}


def rank(module: str) -> float:
    while module not in RANKS:
        module = module.rpartition(".")[0]
    return RANKS[module]


def violations(path: Path, source: str) -> list[str]:
    name = module_name(path)
    tree = ast.parse(source)
    bad = []
    for imported in imports(tree):
        if imported.split(".")[0] == "proxy" and rank(imported) > rank(name):
            bad.append(f"{name} imports {imported}, a higher layer")
        if name.startswith(PURE) and imported.split(".")[0] in NOT_PURE:
            bad.append(f"{name} imports {imported}: the pure core does no I/O and no logging")
    return bad


MODULES = sorted(PROXY.rglob("*.py"))


def test_every_module_has_a_layer() -> None:
    assert all(rank(module_name(path)) >= 0 for path in MODULES)
    top = {module_name(p) for p in PROXY.glob("*.py")} - {"proxy"}
    assert top <= set(RANKS), f"a module at the top of proxy/ outside the layers: {top - set(RANKS)}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_no_layer_imports_a_higher_one(path: Path) -> None:
    assert violations(path, path.read_text()) == []


@pytest.mark.parametrize(
    ("module", "line"),
    [
        ("engine/compaction.py", "from proxy.server.pipeline import Pipeline"),
        ("counting/tokens.py", "from proxy.engine.plan import ChatPlan"),
        ("formats/chat.py", "from proxy.upstream.forwarding import Upstream"),
        ("upstream/probes.py", "from proxy.server.app import create_app"),
        ("ways/ollama/bridge.py", "import proxy.server.middleware"),
        ("engine/notes.py", "import logging"),
    ],
)
def test_the_check_fails_on_a_bad_import(module: str, line: str) -> None:
    path = PROXY / module
    assert violations(path, with_late_line(path, line)), f"{line} in {module} went unnoticed"


# Every module of a package imported in a fresh interpreter; what is then loaded, one name a line.
LOADS = """
import importlib, pkgutil, sys
package = importlib.import_module(sys.argv[1])
for module in pkgutil.walk_packages(getattr(package, "__path__", []), package.__name__ + "."):
    importlib.import_module(module.name)
print("\\n".join(sys.modules))
"""
IO = {"starlette", "fastapi", "httpx", "httpcore", "h11", "uvicorn", "anyio", "asyncio", "aiohttp", "redis"}
# The engine does no logging either; counting's tokenizer cache logs what it could not load.
INDIRECT = {"proxy.engine": IO | {"logging"}, "proxy.counting": IO}


def loaded(package: str) -> set[str]:
    """The top-level names of every module loaded by importing all of `package`."""
    done = subprocess.run(
        [sys.executable, "-c", LOADS, package], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return {name.split(".")[0] for name in done.stdout.split()}


@pytest.mark.process  # a fresh interpreter: what a plain import loads, nothing else imported first
@pytest.mark.parametrize("package", sorted(INDIRECT))
def test_the_pure_layers_load_no_io_indirectly(package: str) -> None:
    assert loaded(package) & INDIRECT[package] == set()


@pytest.mark.process
def test_the_indirect_check_sees_what_a_module_loads() -> None:
    # The middleware rather than the whole app: it loads all three, at a third of the app's cost.
    assert {"starlette", "asyncio", "logging"} <= loaded("proxy.server.middleware")


def _outside(imported: str) -> bool:
    """An import of the tests or benchmarks other than the shared helper package."""
    top = imported.split(".")[0]
    return top == "benchmarks" or (top == "tests" and imported.split(".")[:2] != ["tests", "support"])


def helper_violations(path: Path, source: str) -> list[str]:
    """Test modules and the helpers import `tests.support`, not another test module nor a benchmark;
    benchmarks import `tests.support` and each other, not a test module."""
    in_benchmarks = path.relative_to(ROOT).parts[0] == "benchmarks"
    bad = []
    for imported in imports(ast.parse(source)):
        if in_benchmarks and imported.split(".")[0] == "benchmarks":
            continue
        if _outside(imported):
            bad.append(f"{path.relative_to(ROOT)} imports {imported}: share it through tests/support/")
    return bad


SHARED = sorted(
    p
    for folder in ("tests", "benchmarks")
    for p in (ROOT / folder).rglob("*.py")
    if "node_modules" not in p.parts and p.name != "conftest.py"
)


@pytest.mark.parametrize("path", SHARED, ids=lambda p: str(p.relative_to(ROOT)))
def test_tests_and_benchmarks_share_only_the_support_package(path: Path) -> None:
    assert helper_violations(path, path.read_text()) == []


@pytest.mark.parametrize(
    ("module", "line"),
    [
        ("tests/engine/test_loops.py", "from tests.test_compaction import assert_invariants"),
        ("tests/engine/test_cache_stability.py", "from benchmarks import bench_cache"),
        ("tests/support/fakes.py", "import benchmarks.throughput.run"),
        ("benchmarks/engine/bench_engine.py", "from tests.test_formats import window_of"),
    ],
)
def test_the_helper_check_fails_on_a_bad_import(module: str, line: str) -> None:
    path = ROOT / module
    assert helper_violations(path, with_late_line(path, line)), f"{line} in {module} went unnoticed"
