"""The serving process's collector: startup's objects frozen, young collections between large
requests rather than inside them (`proxy/server/collector.py`)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from proxy.server.collector import YOUNG_THRESHOLD, tune_collector


@pytest.fixture
def collector() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("collector")
def test_tuning_freezes_what_is_built_and_collects_young_objects_less_often() -> None:
    tune_collector()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD > 20 * 700


@pytest.mark.usefixtures("collector")
def test_the_served_app_tunes_the_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.server.app import app_from_env

    for name in ("COMPACT_ENV_FILE", "COMPACT_WINDOW", "COMPACT_CACHE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COMPACT_UPSTREAM_URL", "http://127.0.0.1:9/v1")
    gc.set_threshold(700, 10, 10)
    app_from_env()
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD
