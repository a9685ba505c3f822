"""The pages watching the live page: each one's event stream, fed from the store.

An event is written out once (`event_bytes`) and the same bytes are queued for every page that may
see it (`Sight`). What a page has not read yet is its backlog, bounded in bytes (`BACKLOG_BYTES`, as
Envoy bounds each connection's buffer at 1 MiB by default): a page whose backlog would pass it is
dropped, its backlog freed and nothing more queued for it (a browser that was only slow reconnects,
and its page catches up from the snapshot). At most `COMPACT_UI_STREAMS` pages watch at once, per
worker; past that `open` says no and the route answers 503, as nginx's `limit_conn` does, so pages
never take the connections the proxy's own traffic needs.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import orjson

from proxy.live.owners import Sight

BACKLOG_BYTES = 1024 * 1024


def event_bytes(kind: str, data: dict[str, Any]) -> bytes:
    """One server-sent event."""
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class Page:
    """One page's event stream: the events it has not read yet."""

    def __init__(self, sight: Sight, limit: int = BACKLOG_BYTES) -> None:
        self.sight = sight
        self.limit = limit
        self.backlog: deque[bytes] = deque()
        self.size = 0
        self.dropped = False
        self.gone = asyncio.Event()  # set once dropped
        self._ready = asyncio.Event()

    def offer(self, chunk: bytes) -> None:
        """Queue an event, or drop the page if its backlog would pass the bound (one event however
        large is taken when nothing is waiting: a page that reads gets every event)."""
        if self.dropped:
            return
        if self.backlog and self.size + len(chunk) > self.limit:
            self.drop()
            return
        self.backlog.append(chunk)
        self.size += len(chunk)
        self._ready.set()

    def drop(self) -> None:
        self.dropped = True
        self.backlog.clear()
        self.size = 0
        self._ready.set()
        self.gone.set()

    async def next(self, timeout: float) -> bytes | None:
        """The next event, waiting up to `timeout` seconds (None if none came, or it was dropped)."""
        if not self.backlog and not self.dropped:
            self._ready.clear()
            try:
                await asyncio.wait_for(self._ready.wait(), timeout)
            except TimeoutError:
                return None
        if self.dropped or not self.backlog:
            return None
        chunk = self.backlog.popleft()
        self.size -= len(chunk)
        return chunk


class Pages:
    """The pages watching, at most `cap` at once."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.open_pages: set[Page] = set()

    def __bool__(self) -> bool:
        return bool(self.open_pages)

    def __len__(self) -> int:
        return len(self.open_pages)

    @property
    def backlog_bytes(self) -> int:
        return sum(page.size for page in self.open_pages)

    def open(self, sight: Sight) -> Page | None:
        """A new page's stream, or None when `cap` pages already watch."""
        if len(self.open_pages) >= self.cap:
            return None
        page = Page(sight)
        self.open_pages.add(page)
        return page

    def close(self, page: Page) -> None:
        page.drop()
        self.open_pages.discard(page)

    def publish(self, kind: str, owner: str, data: dict[str, Any], own: dict[str, Any] | None = None) -> None:
        """Offer an event about `owner`'s conversation to each page that may see it: `data` to pages
        that see everything, `own` (else `data`) to the owner's pages. Each is written out once."""
        chunks: dict[bool, bytes] = {}
        for page in self.open_pages:
            if not page.sight.sees(owner):
                continue
            mine = not page.sight.everything and own is not None
            if mine not in chunks:
                chunks[mine] = event_bytes(kind, own if mine and own is not None else data)
            page.offer(chunks[mine])
