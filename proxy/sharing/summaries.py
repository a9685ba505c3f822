"""Where summaries are kept so the next turns (and the other replicas) reuse them instead of paying
again.

An in-process LRU always; in front of Redis when `COMPACT_CACHE_URL=redis://…` is set, so replicas
behind a load balancer share summaries. The first replica to store a summary wins (`SET NX`) and
everyone uses that one, so every replica sends the same bytes and the upstream's prompt cache holds.

A summary is looked up and stored on the request's way, so Redis is given `REDIS_WAIT` seconds at
most: down, slow or stopped (a stopped server accepts and never answers, which redis-py's own
timeouts and retries made 6 s), the lookup is a miss and the summary stays this replica's. After a
failure Redis is left alone for `RETRY` seconds, so during an outage one request in that time waits
the short bound and the others not at all; one warning per outage, and one when it is back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from proxy.counting.cache import LruCache

log = logging.getLogger("proxy.cache")

KEY_PREFIX = "compacting-proxy:summary:"
REDIS_WAIT = 0.25  # seconds a lookup or a store may wait for Redis (it answers in about 1 ms)
RETRY = 5.0  # seconds Redis is left alone after it failed


class SummaryCache:
    """Two levels: the local LRU, then Redis if configured."""

    def __init__(
        self,
        *,
        size: int = 1024,
        redis_url: str | None = None,
        ttl: int = 7 * 24 * 3600,
        max_bytes: int | None = None,
    ) -> None:
        self.local = LruCache(size, max_bytes)
        self.ttl = ttl
        self.redis: Any = None
        self._down_until = 0.0
        self._down = False
        if redis_url:
            import redis.asyncio

            self.redis = redis.asyncio.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)

    async def get_many(self, keys: list[str]) -> dict[str, str]:
        found = {k: v for k in keys if (v := self.local.get(k)) is not None}
        missing = [k for k in keys if k not in found]
        if missing and (
            values := await self._ask(lambda: self.redis.mget([KEY_PREFIX + k for k in missing]))
        ):
            for key, value in zip(missing, values, strict=True):
                if value is not None:
                    found[key] = value.decode()
                    self.local.put(key, found[key])
        return found

    async def put(self, key: str, value: str) -> str:
        """Store `value` unless another replica stored one first; return the one to use."""
        stored = await self._ask(lambda: self._store(key, value))
        self.local.put(key, stored or value)
        return stored or value

    async def _store(self, key: str, value: str) -> str:
        if await self.redis.set(KEY_PREFIX + key, value.encode(), nx=True, ex=self.ttl):
            return value
        first = await self.redis.get(KEY_PREFIX + key)
        return first.decode() if first is not None else value

    async def _ask(self, call: Callable[[], Awaitable[Any]]) -> Any:
        """What `call()` gets from Redis within `REDIS_WAIT`, or None: no Redis, left alone, or failing."""
        if self.redis is None or time.monotonic() < self._down_until:
            return None
        try:
            answer = await asyncio.wait_for(call(), REDIS_WAIT)
        except Exception as exc:  # a cache outage is a miss
            self._down_until = time.monotonic() + RETRY
            if not self._down:
                self._down = True
                reason = str(exc) or type(exc).__name__
                log.warning("summary cache (redis) unavailable: %s; summaries stay this replica's", reason)
            return None
        if self._down:
            self._down = False
            log.warning("summary cache (redis) is back")
        return answer

    async def close(self) -> None:
        if self.redis is not None:
            await self.redis.aclose()
