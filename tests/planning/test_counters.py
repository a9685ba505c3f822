"""The memo of written notes shared by the loop and the worker threads (`proxy.planning.counters`)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from proxy.counting.cache import LruCache
from proxy.planning.counters import LockedMemo


def test_a_note_evicted_by_another_thread_during_its_lookup_is_still_returned() -> None:
    class EvictedMeanwhile(OrderedDict[Hashable, tuple[str, int]]):
        def move_to_end(self, key: Hashable, last: bool = True) -> None:
            raise KeyError(key)  # what a store in a worker thread evicting `key` just then leaves

    memo = LockedMemo(LruCache(4))
    memo.put("k", "note")
    memo.memo._items = EvictedMeanwhile(memo.memo._items)
    assert memo.get("k") == "note"  # looked up without the lock: never an error
