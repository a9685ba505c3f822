"""Bounded in-process tables: the LRU under the memos and the summary cache (`proxy.sharing.summaries`
puts Redis behind it), and the tables keyed by model names.
"""

from __future__ import annotations

import hashlib
import sys
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

# Tables keyed by what clients send (model names): this many entries at most, and a name longer
# than `MAX_KEY_CHARS` kept as its digest, so 10,000 distinct 1 MB names cost no more than 1,024 short.
MODEL_TABLE_SIZE = 1024
MAX_KEY_CHARS = 256

V = TypeVar("V")


class LruCache:
    """The least recently used entries go first once there are `size` of them, or once they hold
    more than `max_bytes` (their keys and values as Python keeps them; an entry larger than that is
    not kept at all): a memo of capped results of a 1M-token window each stays within its bytes."""

    def __init__(self, size: int = 1024, max_bytes: int | None = None) -> None:
        self.size = size
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[Hashable, tuple[str, int]] = OrderedDict()

    def get(self, key: Hashable) -> str | None:
        item = self._items.get(key)
        if item is None:
            return None
        # Not `contextlib.suppress`: its object costs more than the lookup, hundreds a request.
        try:  # noqa: SIM105
            self._items.move_to_end(key)
        except KeyError:  # evicted by a store in another thread meanwhile
            pass
        return item[0]

    def __len__(self) -> int:
        return len(self._items)

    def put(self, key: Hashable, value: str) -> None:
        weight = entry_bytes(key) + sys.getsizeof(value)
        old = self._items.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
        if self.max_bytes is not None and weight > self.max_bytes:
            return
        self._items[key] = (value, weight)
        self.bytes += weight
        while len(self._items) > self.size or (self.max_bytes is not None and self.bytes > self.max_bytes):
            self.bytes -= self._items.popitem(last=False)[1][1]


ENTRY_OVERHEAD = 160  # an OrderedDict entry, its tuple and its links


def entry_bytes(key: Hashable) -> int:
    """What a key costs in memory with its entry (a tuple's parts counted, each once)."""
    parts = key if isinstance(key, tuple) else (key,)
    return ENTRY_OVERHEAD + sys.getsizeof(key) + sum(sys.getsizeof(part) for part in parts if part is not key)


def table_key(key: Hashable) -> Hashable:
    """`key` as a table keeps it: a long string (or one inside a tuple) by its digest."""
    if isinstance(key, str) and len(key) > MAX_KEY_CHARS:
        return "sha256:" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    if isinstance(key, tuple):
        return tuple(table_key(part) for part in key)
    return key


class ModelTable(Generic[V]):
    """A mapping keyed by client input (model names): least recently used entries go first past
    `size`, long keys are kept as digests."""

    def __init__(self, size: int = MODEL_TABLE_SIZE) -> None:
        self.size = size
        self._items: OrderedDict[Hashable, V] = OrderedDict()

    def get(self, key: Hashable, default: V | None = None) -> V | None:
        key = table_key(key)
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        return default

    def __contains__(self, key: Hashable) -> bool:
        return table_key(key) in self._items

    def __getitem__(self, key: Hashable) -> V:
        key = table_key(key)
        self._items.move_to_end(key)
        return self._items[key]

    def __setitem__(self, key: Hashable, value: V) -> None:
        key = table_key(key)
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> Iterator[tuple[Hashable, V]]:
        return iter(list(self._items.items()))
