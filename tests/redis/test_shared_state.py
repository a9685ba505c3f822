"""The shared state's link to a real `redis-server`: what one replica learns reaches another, merged
the way each table says; Redis stopped or frozen never reaches the caller, and gives one warning."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Callable

import pytest

from proxy.sharing.link import SharedCalibrator, SharedState, SharedTable
from tests.support.deployment import running_redis

pytestmark = pytest.mark.redis

MODEL = "llama3.2:3b"


async def until(condition: Callable[[], bool], timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the news did not arrive"
        await asyncio.sleep(0.01)


def smallest(local: int | None, received: int) -> int:
    return received if local is None else min(local, received)


def replica(url: str) -> tuple[SharedState, SharedTable[int], SharedCalibrator]:
    state = SharedState(url)
    table: SharedTable[int] = SharedTable(state, "seen_windows", encode=int, decode=int, merge=smallest)
    return state, table, SharedCalibrator(state)


async def test_what_one_replica_learns_reaches_the_others_and_the_late_ones() -> None:
    with running_redis() as redis:
        (a, seen_a, calib_a), (b, seen_b, calib_b) = replica(redis.url), replica(redis.url)
        await a.start()
        await b.start()
        try:
            seen_a[(MODEL, None)] = 4096
            for _ in range(3):
                calib_a.observe(MODEL, 1000, 1300)
            await until(lambda: seen_b.get((MODEL, None)) == 4096 and calib_b.factor(MODEL) > 1.0)
            assert calib_b.factor(MODEL) == calib_a.factor(MODEL) and calib_b.calibrated(MODEL)
            seen_b[(MODEL, None)] = 8192  # a larger window seen later does not undo a cut
            seen_b[(MODEL, 2048)] = 2048
            await until(lambda: seen_a.get((MODEL, 2048)) == 2048)
            assert seen_a.get((MODEL, None)) == 4096
            late, seen_late, calib_late = replica(redis.url)
            await late.start()
            try:
                await until(lambda: seen_late.get((MODEL, 2048)) == 2048)
                assert calib_late.factor(MODEL) == calib_a.factor(MODEL)
            finally:
                await late.close()
        finally:
            await a.close()
            await b.close()


async def test_redis_stopped_or_frozen_never_reaches_the_caller_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "proxy.shared")
    with running_redis() as first:
        port = int(first.url.rsplit(":", 1)[1].split("/")[0])
        (a, seen_a, _), (b, seen_b, _) = replica(first.url), replica(first.url)
        await a.start()
        await b.start()
        await asyncio.sleep(0.2)
        os.kill(first.process.pid, signal.SIGSTOP)  # slow: it accepts and never answers
        started = time.monotonic()
        for window in range(4096, 4096 - 100, -1):
            seen_a[(MODEL, None)] = window
            assert seen_a.get((MODEL, None)) == window
        assert time.monotonic() - started < 1.0, (
            "learning and reading never wait for Redis (its timeout is 2 s)"
        )
        await asyncio.sleep(3)
        os.kill(first.process.pid, signal.SIGCONT)
        first.stop()  # and now gone
        await asyncio.sleep(2.5)
        seen_a[(MODEL, None)] = 1024
        assert seen_a.get((MODEL, None)) == 1024
    warnings = [r for r in caplog.records if "unavailable" in r.getMessage()]
    assert 1 <= len(warnings) <= 2, "one warning per replica, not one per write"
    with running_redis(port):  # back: what was learned meanwhile is sent
        await until(lambda: seen_b.get((MODEL, None)) == 1024, timeout=10)
    await a.close()
    await b.close()
    assert any("is back" in r.getMessage() for r in caplog.records)
