"""Every test file where a newcomer looks for it (README, Development): a fast test beside the part
of `proxy/` it tests (`tests/engine/` for `proxy/engine/`, `tests/test_settings.py` for
`proxy/settings.py`), a file whose tests all need a tier in that tier's folder (`tests/process/`,
`tests/llama/`, ...), checks of the repository as a whole in `tests/project/`. A plain `pytest`
skips the tier folders unread, so a whole-tier file left among the fast ones costs every run its
imports. And every module of `proxy/` where its part of the picture is: each folder's role (below)
checked on what its modules import and define, each failure saying where the code goes, and each
module and function small enough to read whole. And every benchmark in the group of what it
measures, none at the top of `benchmarks/`."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression

from proxy.formats.chat import ChatCompletions
from tests.support.benchmark_groups import BENCHMARKS, GROUPS, misplaced_benchmark
from tests.support.folders import (
    BRIDGES,
    classes_in,
    misplaced_import,
    missing_seam,
    names_seams,
    oversized,
    unregistered,
    unrouted,
)
from tests.support.modules import imports, module_name, with_late_line
from tests.support.tiers import NOT_TESTS, PROJECT, PROXY, TESTS, TIERS, can_select, home, mirrored

PYPROJECT = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
TEST_FILES = sorted(p for p in TESTS.rglob("test_*.py") if p.relative_to(TESTS).parts[0] not in NOT_TESTS)


def misplaced(path: Path) -> str | None:
    """Why a test file is not where the layout puts it, or None."""
    parts = path.relative_to(TESTS).parts
    where = f"tests/{'/'.join(parts)}"
    if len(parts) == 1:
        module = path.stem.removeprefix("test_")
        if any(module == m.stem or module.startswith(m.stem + "_") for m in PROXY.glob("*.py")):
            return None
        return f"{where}: only a test of a module at proxy/'s top (test_settings.py) sits at tests/; move it to {home(path)}"
    folder = parts[0]
    if folder in TIERS or folder == PROJECT:
        return None
    if folder not in mirrored():
        return f"{where}: tests/{folder}/ mirrors no folder of proxy/ and is no tier; move it to {home(path)}"
    tier = whole_file_tier(path.read_text())
    if tier:
        return f"{where}: every test in it is marked `{tier}`; move it to tests/{tier}/"
    return None


def _tiers_named(node: ast.AST) -> set[str]:
    """The tier markers an expression names as `pytest.mark.<tier>` (called or not)."""
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and n.attr in TIERS and ast.unparse(n.value) == "pytest.mark"
    }


def whole_file_tier(source: str) -> str | None:
    """The tier every test of a module needs: named by its `pytestmark` or on every test function."""
    tree = ast.parse(source)
    common: set[str] | None = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            named = _tiers_named(node.value)
            if named:
                return min(named, key=TIERS.index)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"):
            marks: set[str] = set().union(*(_tiers_named(d) for d in node.decorator_list))
            common = marks if common is None else common & marks
    return min(common, key=TIERS.index) if common else None


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: str(p.relative_to(TESTS)))
def test_every_test_file_is_where_the_layout_puts_it(path: Path) -> None:
    assert misplaced(path) is None, misplaced(path)


def test_each_tier_marker_has_its_folder_and_each_folder_is_a_package() -> None:
    markers = {line.split(":", 1)[0] for line in PYPROJECT["markers"]}
    assert markers == set(TIERS)
    for folder in [*TIERS, PROJECT, *mirrored()]:
        if (TESTS / folder).is_dir():
            assert (TESTS / folder / "__init__.py").exists(), f"tests/{folder}/ needs an __init__.py"


def test_a_plain_pytest_imports_no_tier_folder() -> None:
    default = PYPROJECT["addopts"][PYPROJECT["addopts"].index("-m") + 1]
    for tier in TIERS:
        assert not can_select(Expression.compile(default).evaluate, tier), tier


@pytest.mark.parametrize(
    ("expression", "tier", "selects"),
    [
        ("process", "process", True),
        ("redis", "process", True),  # a test in tests/process/ may also be marked redis
        ("not llama", "process", True),
        ("process and not slow", "slow", False),
        ("llama and cli", "cli", True),
        ("not (process or cli)", "cli", False),
        ("slow and not redis", "redis", False),
    ],
)
def test_a_folder_is_skipped_only_when_none_of_its_tests_could_be_selected(
    expression: str, tier: str, selects: bool
) -> None:
    assert can_select(Expression.compile(expression).evaluate, tier) is selects


@pytest.mark.parametrize(
    ("where", "source", "why"),
    [
        ("test_pipeline.py", "def test_x(): pass\n", "move it to tests/server/"),
        ("test_planner.py", "def test_x(): pass\n", "move it to tests/planning/"),
        ("misc/test_x.py", "def test_x(): pass\n", "mirrors no folder"),
        (
            "engine/test_x.py",
            "import pytest\npytestmark = pytest.mark.process\n",
            "move it to tests/process/",
        ),
        (
            "server/test_x.py",
            "import pytest\n@pytest.mark.llama\ndef test_a(): pass\n@pytest.mark.llama\n"
            "@pytest.mark.process\ndef test_b(): pass\n",
            "move it to tests/llama/",
        ),
    ],
)
def test_the_check_says_where_a_misplaced_file_goes(
    where: str, source: str, why: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = TESTS / where
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: source)
    assert why in (misplaced(path) or "")


def test_a_fast_file_with_some_tier_tests_stays_beside_its_part() -> None:
    source = "import pytest\n@pytest.mark.process\ndef test_a(): pass\ndef test_b(): pass\n"
    assert whole_file_tier(source) is None


# ---------------------------------------------------------------- each folder of proxy/ holds its part
# (`tests/support/folders.py` says each folder's role)

MODULES = sorted(PROXY.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PROXY)))
def test_each_module_imports_what_its_folders_role_allows(path: Path) -> None:
    name = module_name(path)
    bad = [why for i in imports(ast.parse(path.read_text())) if (why := misplaced_import(name, i))]
    assert bad == [] and names_seams(path, path.read_text()) == []


def test_every_way_implements_the_whole_seam_and_every_bridge_is_wired() -> None:
    wiring = (PROXY / "server" / "parts.py").read_text()
    bad = [why for module, cls in classes_in("ways") if (why := missing_seam(module, cls))]
    bad += [why for bridge in BRIDGES if (why := unregistered(bridge, wiring))]
    assert bad == []


def test_every_wire_format_is_on_a_route_row() -> None:
    assert [why for module, cls in classes_in("formats") if (why := unrouted(module, cls))] == []


@pytest.mark.parametrize(
    ("module", "imported", "goes"),
    [
        ("proxy.server.app", "proxy.connections.flow", "goes in connections/"),
        ("proxy.server.pipeline", "uvicorn.protocols.http.httptools_impl", "goes in connections/"),
        ("proxy.upstream.probes", "concurrent.futures", "it goes in bodies/"),
        ("proxy.server.app", "proxy.bodies.split_parse", "through proxy.bodies.work.Bodies"),
        ("proxy.formats.chat", "httpx", "goes in ways/ or upstream/"),
        ("proxy.live.records", "proxy.ways.direct", "never the request path's objects"),
        ("proxy.ways.direct", "proxy.live.records", "only the request's steps"),
        ("proxy.server.pipeline", "proxy.ways.ollama.bridge", "wired in server/parts.py alone"),
        ("proxy.cli", "proxy.connections.protocol", None),
        ("proxy.server.parts", "proxy.ways.gemini.choice", None),
        ("proxy.ways.gemini.over_ollama", "proxy.ways.ollama.bridge", None),
    ],
)
def test_the_folder_check_says_where_an_import_goes(module: str, imported: str, goes: str | None) -> None:
    why = misplaced_import(module, imported)
    assert why is None if goes is None else goes in (why or "")


@pytest.mark.parametrize(
    ("module", "line"),
    [  # as they stood at 38fb865
        ("server/remote_compaction.py", 'return self.active and route.format.name == "responses"'),
        ("ways/choice.py", 'if route.bridge == "ollama": pass'),
        ("server/pipeline.py", 'report_of = getattr(wire, "context_report", None)'),
    ],
)
def test_the_check_sees_a_format_named_in_the_core(module: str, line: str) -> None:
    path, routes = PROXY / module, PROXY / "formats" / "routes.py"
    assert names_seams(path, with_late_line(path, line)), f"{line} in {module} went unnoticed"
    assert names_seams(routes, with_late_line(routes, line)) == []  # a format's own folder may name it


class HalfWay:
    """Relays, but says neither where it goes nor what it sends."""

    async def relay(self, response: object, answer: object) -> None: ...


class Unrouted(ChatCompletions):
    """A wire format no route row carries."""


def test_the_seam_and_route_checks_say_what_is_missing() -> None:
    assert "lacks ['content', 'from_root', 'outgoing', 'path', 'retries', 'window']" in (
        missing_seam("proxy.ways.half", HalfWay) or ""
    )
    assert "wire ['OllamaNative'] in server/parts.py" in (unregistered("ollama", "") or "")
    assert "registers itself" in (unregistered("carrier_pigeon", "") or "")
    assert "on no route row" in (unrouted("proxy.formats.unrouted", Unrouted) or "")
    assert unrouted("proxy.formats.chat", ChatCompletions) is None


# ---------------------------------------------------------------- each module of proxy/ small enough to read whole


def test_no_module_of_proxy_is_over_300_lines_nor_any_function_over_60() -> None:
    bad = [why for path in MODULES for why in oversized(path, path.read_text())]
    assert bad == [], "\n".join(bad)


def test_the_size_check_names_the_file_and_the_function() -> None:
    path = PROXY / "live" / "records.py"
    method = "class Records:\n    @property\n    def add(self) -> None:\n" + "        pass\n" * 59
    assert oversized(path, method) == [
        "proxy/live/records.py:3 Records.add is 61 lines (at most 60): let it read as its steps, the helpers beside it"
    ]
    assert oversized(path, method.replace("        pass\n", "", 1)) == []
    nested = "def build():\n    async def drawn():\n" + "        pass\n" * 60
    assert [why.split(" is ")[0] for why in oversized(path, nested)] == [
        "proxy/live/records.py:1 build",
        "proxy/live/records.py:2 build.<locals>.drawn",
    ]
    assert oversized(path, "x = 1\n" * 301) == [
        "proxy/live/records.py is 301 lines (at most 300): split it along a seam, one job a module"
    ]


# ---------------------------------------------------------------- each benchmark in the group of what it measures
# (`tests/support/benchmark_groups.py` says each group's role)


def test_nothing_but_the_groups_at_the_top_of_benchmarks() -> None:
    assert [why for path in sorted(BENCHMARKS.iterdir()) if (why := misplaced_benchmark(path))] == []


def test_each_group_is_a_package_that_says_what_it_measures() -> None:
    folders = {p.name for p in BENCHMARKS.iterdir() if p.is_dir() and any(p.glob("*.py"))}
    assert folders == set(GROUPS), "a folder of benchmarks/ is a group of GROUPS, and each group a folder"
    for group in GROUPS:
        init = BENCHMARKS / group / "__init__.py"
        assert init.exists() and ast.get_docstring(ast.parse(init.read_text())), (
            f"{init}: say what it measures"
        )


@pytest.mark.parametrize(
    ("name", "goes"),
    [
        ("bench_not_written_yet.py", "counting/: the count and the estimate"),
        ("check_not_written_yet.py", "agents/: the real agent CLIs and real agent trajectories"),
        ("bench_notes.py", "benchmarks/notes/bench_notes.py is the module of that name now"),
        ("chat_bodies.py", "benchmarks/throughput/chat_bodies.py is the module of that name now"),
    ],
)
def test_the_benchmark_check_says_where_a_module_at_the_top_goes(name: str, goes: str) -> None:
    assert goes in (misplaced_benchmark(BENCHMARKS / name) or "")
    assert misplaced_benchmark(BENCHMARKS / "__init__.py") is None
    assert misplaced_benchmark(BENCHMARKS / "notes" / "bench_notes.py") is None
