"""Pytest plugin for tests marked ``llama``: one real llama-server for the whole session.

Load it from ``tests/conftest.py`` with ``pytest_plugins = ["tests.support.upstreams.fixtures"]`` (a plugin,
not a plain import, so the collection hook below runs too).

The binary is built at most once per machine (``scripts/llama_server.py``, ~10 minutes).  When
llama tests are selected and it is missing, the build runs here during collection, outside any
test's timeout, unless ``CI`` is set (CI builds it up front in ``.ci/run``, so a missing binary
there is a failure) or ``COMPACT_LLAMA_BUILD=0`` (then the llama tests are skipped).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from scripts import llama_server as llama_build

if TYPE_CHECKING:  # imported by the fixture: every run loads this plugin, few start a llama-server
    from tests.support.upstreams.llama import LlamaServer

SESSION_CTX = 4096  # room for a short chat with the tool schemas (~1,200 tokens)


@pytest.hookimpl(trylast=True)  # after -m has deselected: a plain `pytest` (fast tier) builds nothing
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    llama_items = [item for item in items if item.get_closest_marker("llama")]
    if not llama_items or llama_build.is_built():
        return
    if os.environ.get("COMPACT_LLAMA_BUILD") == "0":
        skip = pytest.mark.skip(reason="llama-server not built and COMPACT_LLAMA_BUILD=0")
        for item in llama_items:
            item.add_marker(skip)
        return
    if os.environ.get("CI"):
        return  # the fixture fails with the command to run; a silent skip would hide it in CI
    llama_build.ensure_llama_server()


@pytest.fixture(scope="session")
def llama_server() -> Iterator[LlamaServer]:
    """A llama-server with one slot of ``SESSION_CTX`` tokens, shared by the session."""
    from tests.support.upstreams.llama import running_llama_server  # its model writer needs numpy

    if not llama_build.is_built():
        missing = llama_build.binary_path()
        pytest.fail(f"{missing} is not built; run: python scripts/llama_server.py build", pytrace=False)
    with running_llama_server(ctx=SESSION_CTX, slots=1) as server:
        yield server
