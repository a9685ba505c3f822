"""Where the originals of what `/v1/compress` cut are kept for `/v1/retrieve/{hash}`.

Each is kept `retrieve_ttl` seconds from its last use and all of them in at most `retrieve_bytes`
bytes, the oldest going first: in this process, and with `COMPACT_CACHE_URL` in Redis as well, so
any replica answers for what another cut (a Lua script keeps the bound there: an index by age, the
sizes, the total). An original is kept under its id and the caller's scope (a digest of the key it
presented), so one key never reads what another key's requests sent. Redis failing is a local
answer and one warning per outage, never a failed request.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import orjson

log = logging.getLogger("proxy.gateway")

PREFIX = "compacting-proxy:originals:"
INDEX, SIZES, TOTAL = PREFIX + "~index", PREFIX + "~sizes", PREFIX + "~total"
# KEYS: index (zset: key -> last use), sizes (hash), total (counter). ARGV: now, ttl, max bytes, then
# key/value pairs. Stores what is new (refreshing what is there), forgets what aged, and trims the
# oldest until the total is within the bound.
KEEP = """
local now, ttl, max = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local function forget(key)
  local size = tonumber(redis.call('HGET', KEYS[2], key) or '0')
  redis.call('HDEL', KEYS[2], key)
  redis.call('ZREM', KEYS[1], key)
  redis.call('DEL', key)
  redis.call('DECRBY', KEYS[3], size)
end
for _, key in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - ttl)) do forget(key) end
for i = 4, #ARGV, 2 do
  local key, value = ARGV[i], ARGV[i + 1]
  if #value <= max then
    if redis.call('SET', key, value, 'NX', 'EX', ttl) then
      redis.call('HSET', KEYS[2], key, #value)
      redis.call('INCRBY', KEYS[3], #value)
    else
      redis.call('EXPIRE', key, ttl)
    end
    redis.call('ZADD', KEYS[1], now, key)
  end
end
while tonumber(redis.call('GET', KEYS[3]) or '0') > max do
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0)
  if #oldest == 0 then redis.call('SET', KEYS[3], 0) break end
  forget(oldest[1])
end
return 1
"""


def scope_of(credential: bytes) -> str:
    """The scope of a caller's originals: a digest of the key it presented (none: a scope too)."""
    return hashlib.sha256(b"compacting-proxy:" + credential).hexdigest()[:16]


def as_text(original: Any) -> str:
    """What `/v1/retrieve` answers for an original: its text, or its JSON."""
    return original if isinstance(original, str) else orjson.dumps(original).decode()


class Originals:
    """The kept originals, bounded by age and bytes, here and in Redis when one is configured."""

    def __init__(
        self, *, ttl: int, max_bytes: int, redis_url: str | None, clock: Callable[[], float] = time.time
    ) -> None:
        self.ttl, self.max_bytes, self.clock = ttl, max_bytes, clock
        self.bytes = 0
        self._local: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self.redis: Any = None
        self._down = False
        if redis_url:
            import redis.asyncio

            self.redis = redis.asyncio.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)
            self._keep = self.redis.register_script(KEEP)

    def __len__(self) -> int:
        return len(self._local)

    async def keep(self, scope: str, originals: Iterable[tuple[str, Any]]) -> None:
        """Keep each (id, original) under `scope`."""
        entries = [(PREFIX + scope + ":" + key, as_text(original)) for key, original in originals]
        if not entries:
            return
        now = self.clock()
        for key, text in entries:
            self._put(key, text, now)
        if self.redis is not None:
            args: list[Any] = [now, self.ttl, self.max_bytes]
            for key, text in entries:
                args += [key, text]
            await self._redis(self._keep(keys=[INDEX, SIZES, TOTAL], args=args))

    async def get(self, scope: str, key: str) -> str | None:
        """The original kept as `key` for `scope`, None when it is not (or no longer) kept."""
        full = PREFIX + scope + ":" + key
        now = self.clock()
        found = self._local.get(full)
        if found is not None and found[1] > now:
            self._local.move_to_end(full)
            return found[0]
        if self.redis is None:
            return None
        value = await self._redis(self.redis.get(full))
        return value.decode("utf-8") if isinstance(value, bytes) else None

    def _put(self, key: str, text: str, now: float) -> None:
        size = len(text.encode("utf-8", "surrogatepass"))
        if key in self._local:
            self._local.move_to_end(key)
            self._local[key] = (text, now + self.ttl)
            return
        if size > self.max_bytes:
            return
        self._local[key] = (text, now + self.ttl)
        self.bytes += size
        while self._local and (self.bytes > self.max_bytes or next(iter(self._local.values()))[1] <= now):
            _, (old, _) = self._local.popitem(last=False)
            self.bytes -= len(old.encode("utf-8", "surrogatepass"))

    async def _redis(self, call: Any) -> Any:
        try:
            result = await call
        except Exception as exc:  # an outage is a local answer
            if not self._down:
                log.warning("originals: Redis unavailable, answering from this replica (%s)", exc)
            self._down = True
            return None
        self._down = False
        return result

    async def close(self) -> None:
        if self.redis is not None:
            await self.redis.aclose()
