from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

pytest_plugins = ["tests.upstreams.fixtures", "tests.format_fixtures"]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> Iterator[None]:
    """Tests build their Settings explicitly: nothing from the host's COMPACT_* variables or a .env."""
    for name in list(os.environ):
        if name.startswith("COMPACT_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(str(tmp_path))
    yield
