"""What one replica learns, shared with the others through Redis (`COMPACT_CACHE_URL`).

The learned tables (calibration factors, windows the upstream was seen cutting at, detected windows,
the `num_ctx` chosen per Ollama model) stay in local memory, and every read is local: the hot path
never waits for Redis. A table that learns something calls `publish`, which only notes it; a
background writer sends it to Redis (a hash per table, for replicas that start later, and a
pub/sub message, so the others apply it within milliseconds). A background reader applies the
others' messages and reloads every hash on connecting and every `refresh` seconds, so a lost message
or an outage is caught up. Redis down, slow or stopped: each replica goes on with what it knows, the
writer keeps the latest unsent value per key, and there is one warning per outage, not one per request.

Each table says how a value received merges with the local one (windows keep the smallest; a
calibration takes the last one learned anywhere), so the same history gets the same compacted bytes
from every replica once the news has travelled. Workers of one host (`--workers N`) share the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Protocol, TypeVar

import orjson

from proxy.counting.cache import ModelTable, table_key
from proxy.counting.calibration import Calibrator, _ModelState

log = logging.getLogger("proxy.shared")

PREFIX = "compacting-proxy:state:"
CHANNEL = PREFIX + "news"
REFRESH = 30.0  # seconds between full reloads (pub/sub carries the news in between)
RETRY = 1.0  # seconds before trying a Redis that failed again
TTL = 7 * 24 * 3600  # a table not written for this long is forgotten by Redis

V = TypeVar("V")
Json = Any


def _key_json(key: Hashable) -> str:
    return orjson.dumps(table_key(key)).decode()


def _key_from_json(text: str) -> Hashable:
    def tupled(value: Any) -> Hashable:
        return tuple(tupled(v) for v in value) if isinstance(value, list) else value

    result: Hashable = tupled(orjson.loads(text))
    return result


async def stop(tasks: list[asyncio.Task[None]], flush: Callable[[], Awaitable[None]]) -> None:
    """Stop a user of the link: its background tasks cancelled and waited for, then what it still
    holds sent (`flush`), if Redis is there."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    with contextlib.suppress(Exception):
        await flush()


class Companion(Protocol):
    async def start(self) -> None: ...
    async def close(self) -> None: ...


class SharedState:
    """The link between this replica's learned tables and Redis: write-behind and pub/sub."""

    def __init__(self, redis_url: str, *, refresh: float = REFRESH, ttl: int = TTL) -> None:
        import redis.asyncio

        self.redis: Any = redis.asyncio.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)
        self.refresh = refresh
        self.ttl = ttl
        self.origin = uuid.uuid4().hex  # this replica's own messages are not applied twice
        self._tables: dict[str, Callable[[Hashable, Json], None]] = {}
        self._pending: dict[tuple[str, str], Json] = {}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._down = False
        self._companions: list[Companion] = []

    def attach(self, companion: Companion) -> None:
        """Start and close `companion` (another user of this link, like the live page's) with it."""
        self._companions.append(companion)

    def register(self, name: str, receive: Callable[[Hashable, Json], None]) -> None:
        """`receive(key, value)` is called with what other replicas publish in table `name`."""
        self._tables[name] = receive

    def publish(self, name: str, key: Hashable, value: Json) -> None:
        """Note a value to share: no I/O here, the writer sends it (the latest per key)."""
        self._pending[(name, _key_json(key))] = value
        self._wake.set()

    async def start(self) -> None:
        self._wake = asyncio.Event()  # bound to the running loop
        if self._pending:
            self._wake.set()
        self._tasks = [asyncio.create_task(self._write()), asyncio.create_task(self._read())]
        for companion in self._companions:
            await companion.start()

    async def close(self) -> None:
        for companion in self._companions:
            await companion.close()
        await stop(self._tasks, self._flush)
        with contextlib.suppress(Exception):
            await self.redis.aclose()

    def failed(self, exc: Exception) -> None:
        """Redis failed: warn once per outage."""
        if not self._down:
            self._down = True
            log.warning(
                "shared state (redis) unavailable: %s; this replica goes on with what it knows and "
                "shares again once redis is back",
                exc,
            )

    def recovered(self) -> None:
        if self._down:
            self._down = False
            log.warning("shared state (redis) is back")

    async def _flush(self) -> None:
        pending, self._pending = self._pending, {}
        if not pending:
            return
        try:
            pipe = self.redis.pipeline(transaction=False)
            for (name, key), value in pending.items():
                data = orjson.dumps(value)
                pipe.hset(PREFIX + name, key, data)
                pipe.expire(PREFIX + name, self.ttl)
                message = {"origin": self.origin, "table": name, "key": key, "value": value}
                pipe.publish(CHANNEL, orjson.dumps(message))
            await pipe.execute()
        except Exception:
            for item, value in pending.items():  # keep what was not sent, unless newer news came
                self._pending.setdefault(item, value)
            raise

    async def _write(self) -> None:
        await self.write_behind(self._wake, self._flush)

    async def write_behind(
        self, wake: asyncio.Event, flush: Callable[[], Awaitable[None]], pause: float = 0.0
    ) -> None:
        """Run `flush` each time `wake` is set (then rest `pause` seconds, so what comes meanwhile
        goes together); when Redis fails, warn once and try again every `RETRY` seconds."""
        while True:
            await wake.wait()
            wake.clear()
            try:
                await flush()
                self.recovered()
                if pause:
                    await asyncio.sleep(pause)
            except Exception as exc:
                self.failed(exc)
                await asyncio.sleep(RETRY)
                wake.set()

    async def _reload(self) -> None:
        for name, receive in self._tables.items():
            for key, value in (await self.redis.hgetall(PREFIX + name)).items():
                self._apply(receive, key.decode(), value)

    @staticmethod
    def _apply(receive: Callable[[Hashable, Json], None], key: str, value: bytes | Json) -> None:
        try:
            receive(_key_from_json(key), orjson.loads(value) if isinstance(value, bytes) else value)
        except Exception as exc:  # another version's or a broken entry: ignored
            log.debug("ignored a shared entry %r: %s", key, exc)

    async def _read(self) -> None:
        await self.listen(CHANNEL, self._reload, self._receive, every=self.refresh)

    async def listen(
        self,
        channel: str,
        catch_up: Callable[[], Awaitable[None]],
        receive: Callable[[Any], None],
        *,
        every: float = math.inf,
    ) -> None:
        """Hand each message on `channel` to `receive`, after `catch_up` (what a lost message or an
        outage missed) on each connection and every `every` seconds; when Redis fails, warn once and
        connect again every `RETRY` seconds."""
        while True:
            pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(channel)
                await catch_up()
                self.recovered()
                caught_up = time.monotonic()
                while True:
                    message = await pubsub.get_message(timeout=1.0)
                    if message is not None:
                        receive(message.get("data"))
                    if time.monotonic() - caught_up > every:
                        await catch_up()
                        caught_up = time.monotonic()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.failed(exc)
                await asyncio.sleep(RETRY)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    def _receive(self, data: Any) -> None:
        try:
            message = orjson.loads(data)
            if message["origin"] == self.origin or message["table"] not in self._tables:
                return
            self._apply(self._tables[message["table"]], message["key"], message["value"])
        except Exception as exc:
            log.debug("ignored a shared message: %s", exc)


class SharedTable(ModelTable[V]):
    """A `ModelTable` whose writes are published, and which merges what other replicas publish.

    `encode` gives the value to share (None: keep it local), `decode` reads one back, and
    `merge(local, received)` chooses what the table keeps."""

    def __init__(
        self,
        state: SharedState,
        name: str,
        *,
        encode: Callable[[V], Json],
        decode: Callable[[Json], V],
        merge: Callable[[V | None, V], V] = lambda local, received: received,
    ) -> None:
        super().__init__()
        self.state, self.name = state, name
        self.encode, self.decode, self.merge = encode, decode, merge
        state.register(name, self.receive)

    def __setitem__(self, key: Hashable, value: V) -> None:
        super().__setitem__(key, value)
        if (shared := self.encode(value)) is not None:
            self.state.publish(self.name, key, shared)

    def receive(self, key: Hashable, value: Json) -> None:
        super().__setitem__(key, self.merge(self.get(key), self.decode(value)))


class SharedCalibrator(Calibrator):
    """A `Calibrator` whose per-model state is published after each observation, and replaced by
    the last one learned by any replica."""

    def __init__(self, state: SharedState, enabled: bool = True) -> None:
        super().__init__(enabled)
        self.state = state
        state.register("calibration", self.receive)

    def observe(self, model: str, estimated: int, reported: int) -> None:
        before = self._models.get(model)
        snapshot = (before.smoothed, before.factor) if before else None
        super().observe(model, estimated, reported)
        after = self._models.get(model)
        if after is not None and (after.smoothed, after.factor) != snapshot:
            self.state.publish("calibration", model, [after.smoothed, after.factor])

    def receive(self, key: Hashable, value: Json) -> None:
        smoothed, factor = (float(v) for v in value)
        if smoothed > 0 and factor > 0:
            self._models[key] = _ModelState(smoothed=smoothed, factor=factor)
