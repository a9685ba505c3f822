from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from tests.support.tiers import TIERS, can_select, tier_of

pytest_plugins = ["tests.support.upstreams.fixtures", "tests.support.format_fixtures"]

# Property tests draw the same examples on every run and every clone (`derandomized`, the default: the
# README's test command, CI): a red run is a defect of the change, never of the draw. The random search
# is a command of its own, `HYPOTHESIS_PROFILE=search pytest ...` (README, Development): new examples on
# each run, failures kept in `.hypothesis/` and replayed first; pin what it finds with `@example`.
settings.register_profile("derandomized", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("search", derandomize=False, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "derandomized"))


@pytest.fixture(scope="session")
def working_directories(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cwd")


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    """One event loop for a module's synchronous tests (hypothesis' cannot be async): an app and its
    client made once, each request driven with `runner.run(...)`."""
    with asyncio.Runner() as loop:
        yield loop


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, working_directories: Path) -> Iterator[None]:
    """Tests build their Settings explicitly: nothing from the host's COMPACT_* variables or a .env.

    Each test runs in an empty directory of its own, made by `mkdtemp`: pytest's `tmp_path` would
    cost every test a numbered directory, a lock and a symlink moved (a second per thousand tests)."""
    for name in list(os.environ):
        if name.startswith("COMPACT_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tempfile.mkdtemp(dir=working_directories))
    yield


class StartedAProcess(BaseException):
    """A test of the fast tier started a process or opened a network socket (TEST_NO_PROCESS=1).

    A BaseException, so a test's own ``except Exception`` cannot hide it."""


def _refuse(what: str) -> Any:
    def refused(*args: object, **kwargs: object) -> Any:
        raise StartedAProcess(f"{what} in a test not marked `process` (see README, Development)")

    return refused


def _refuse_inet(what: str, real: Any) -> Any:
    def guarded(sock: socket.socket, *args: object, **kwargs: object) -> Any:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            raise StartedAProcess(f"{what} in a test not marked `process` (see README, Development)")
        return real(sock, *args, **kwargs)

    return guarded


def pytest_configure(config: pytest.Config) -> None:
    """``TEST_NO_PROCESS=1 pytest`` proves the fast tier fast: starting a process or binding or
    connecting a network socket fails the test that does it."""
    if os.environ.get("TEST_NO_PROCESS") != "1":
        return
    subprocess.Popen.__init__ = _refuse("subprocess.Popen")  # type: ignore[method-assign]
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "execv", "execve", "system"):
        if hasattr(os, name):
            setattr(os, name, _refuse(f"os.{name}"))
    for name in ("bind", "connect", "connect_ex"):
        setattr(socket.socket, name, _refuse_inet(f"socket.{name}", getattr(socket.socket, name)))


_SKIPPED_TIERS = pytest.StashKey[dict[str, bool]]()


def _skipped(config: pytest.Config, tier: str) -> bool:
    """The run's `-m` cannot select a test carrying `tier`'s marker."""
    if not config.option.markexpr:
        return False
    skip: dict[str, bool] = config.stash.setdefault(_SKIPPED_TIERS, {})
    if tier not in skip:
        from _pytest.mark.expression import Expression  # pytest's own parser of `-m`

        skip[tier] = not can_select(Expression.compile(config.option.markexpr).evaluate, tier)
    return skip[tier]


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A tier's folder (`tests/process/`, `tests/llama/`, ...) is not even imported when the run's
    `-m` cannot select a test carrying its marker: a plain `pytest` reads none of them."""
    tier = tier_of(collection_path)
    return True if tier is not None and _skipped(config, tier) else None


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """The workers of pyproject's `-n auto`: a plain `pytest` (the whole fast tier, some 1,600 small
    in-process tests) runs on one per core, up to 4 (22-24 s instead of 38 on two cores); a run of a
    tier, of chosen files or `--co` runs in this process, since starting workers would cost it more
    than they save and the tiers' servers are started once per session."""
    plain = config.args_source is pytest.Config.ArgsSource.TESTPATHS and not config.option.collectonly
    fast = all(_skipped(config, tier) for tier in TIERS)
    cores = len(os.sched_getaffinity(0))
    if not (plain and fast) or cores < 2 or os.environ.get("TEST_NO_PROCESS") == "1":
        return 0  # TEST_NO_PROCESS=1 forbids the workers' processes too
    return min(cores, 4)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test in a tier's folder carries that tier's marker, before `-m` selects: the folder says it."""
    for item in items:
        tier = tier_of(item.path)
        if tier is not None:
            item.add_marker(tier)
