"""What plans share for counting (`proxy.planning.counters`): the vocabularies read at start-up, and
the memo of written notes shared by the loop and the worker threads."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

import httpx
import pytest

from proxy.counting import tokenizers
from proxy.counting.cache import LruCache
from proxy.counting.modes import HEAVIEST_OF, Counting
from proxy.planning import counters
from proxy.planning.counters import LockedMemo, wanted_specs
from proxy.server.app import create_app
from tests.support.fakes import RecordingUpstream, make_settings
from tests.support.kinds import text_of_kind


def test_a_note_evicted_by_another_thread_during_its_lookup_is_still_returned() -> None:
    class EvictedMeanwhile(OrderedDict[Hashable, tuple[str, int]]):
        def move_to_end(self, key: Hashable, last: bool = True) -> None:
            raise KeyError(key)  # what a store in a worker thread evicting `key` just then leaves

    memo = LockedMemo(LruCache(4))
    memo.put("k", "note")
    memo.memo._items = EvictedMeanwhile(memo.memo._items)
    assert memo.get("k") == "note"  # looked up without the lock: never an error


async def test_the_vocabularies_are_read_at_start_up_never_inside_a_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 34, row 6: the four are read while the app starts (before it serves `/readyz`); a request
    counted with them afterwards loads nothing (a load inside it fails this test)."""
    settings = make_settings(window=8192, tokenizer="auto")
    upstream = RecordingUpstream()
    app = create_app(settings, transport=httpx.MockTransport(upstream))
    async with app.router.lifespan_context(app):
        loaded = app.state.planner.vocabularies.loaded
        assert all(loaded.get(spec) for spec in (*HEAVIEST_OF, Counting.HEAVIEST)), loaded

        def no_load(spec: str) -> None:
            raise AssertionError(f"{spec} loaded inside a request")

        monkeypatch.setattr(counters, "text_counter", no_load)
        monkeypatch.setattr(tokenizers, "load_text_counter", no_load)
        body = {"model": "m", "messages": [{"role": "user", "content": text_of_kind("Chinese", 6000)}]}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://p") as client:
            report = (await client.post("/compact", json=body)).json()["report"]
    assert report["counted_by"] == "heaviest"


def test_what_the_settings_count_with_is_what_start_up_reads() -> None:
    assert set(wanted_specs(make_settings(tokenizer="auto"))) >= {*HEAVIEST_OF, Counting.HEAVIEST}
    assert wanted_specs(make_settings(tokenizer="llama3", tokenizer_by_model=False)) == ["llama3"]
