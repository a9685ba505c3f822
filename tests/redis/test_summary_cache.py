"""Issue 35, row 13: summaries shared through a real `redis-server` by the real `compacting-proxy`
process, and Redis stopped (SIGSTOP: it accepts and never answers) while requests are summarised:
the summarised request waits for Redis no longer than the cache's short bound (6.1 s on e02f76e,
redis-py's socket timeout and retries), the next ones not at all, and once Redis runs again the
summaries are shared again. One warning per outage."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis as redis_client

from proxy.engine.summary import INSTRUCTIONS
from tests.support.conversations import summarised_chat
from tests.support.deployment import Redis, running_redis
from tests.support.fakes import completion
from tests.support.hostile import Hostile, Proxy, ScriptedHandler, Seen, hostile_upstream, proxy_for

pytestmark = [pytest.mark.redis, pytest.mark.process]

SETTINGS = {"COMPACT_WINDOW": "6000", "COMPACT_SUMMARIZE": "true", "COMPACT_SUMMARY_TOKENS": "200"}
SLACK_S = 1.0  # the bound (0.25 s) and this shared machine's noise


def summarising(hostile: Hostile) -> None:
    """A chat server that answers the proxy's summary requests with a summary, and chats with "ok"."""

    def chat(h: ScriptedHandler, seen: Seen) -> None:
        body = json.loads(seen.body)
        asked = body["messages"][0].get("content") == INSTRUCTIONS
        h.json(200, completion("- order #4471 summary" if asked else "ok"))

    hostile.routes["/v1/chat/completions"] = chat


@pytest.fixture
def redis() -> Iterator[Redis]:
    with running_redis() as server:
        yield server


def summarised(proxy: Proxy, seed: int) -> tuple[httpx.Response, float]:
    body: dict[str, Any] = {"model": "m", "messages": summarised_chat(seed=seed)}
    started = time.monotonic()
    response = httpx.post(proxy.base_url + "/v1/chat/completions", json=body, timeout=60)
    took = time.monotonic() - started
    assert response.status_code == 200, response.text
    assert response.headers.get("x-compaction-summarized") == "1", response.headers
    return response, took


def stored(redis: Redis) -> int:
    return len(redis_client.Redis.from_url(redis.url).keys("compacting-proxy:summary:*"))


def test_13_redis_stopped_delays_a_summarised_request_by_a_short_bound_at_most(redis: Redis) -> None:
    with hostile_upstream() as hostile:
        summarising(hostile)
        with proxy_for(hostile.url, COMPACT_CACHE_URL=redis.url, **SETTINGS) as proxy:
            _, control = summarised(proxy, seed=1)
            assert stored(redis) >= 1, "the summary was not shared"
            os.kill(redis.process.pid, signal.SIGSTOP)
            try:
                _, first = summarised(proxy, seed=2)
                _, next_one = summarised(proxy, seed=3)
            finally:
                os.kill(redis.process.pid, signal.SIGCONT)
            print(f"summarised: {control:.2f} s, Redis stopped: {first:.2f} s then {next_one:.2f} s")
            assert first < control + SLACK_S, f"{first:.2f} s with Redis stopped, {control:.2f} s with it"
            assert next_one < control + SLACK_S, f"{next_one:.2f} s, {control:.2f} s"
            before = stored(redis)
            deadline = time.monotonic() + 30
            seed = 4
            while stored(redis) == before and time.monotonic() < deadline:  # back within its retry
                summarised(proxy, seed=seed)
                seed += 1
                time.sleep(0.5)
            assert stored(redis) > before, "summaries were not shared again once Redis answered"
            log = proxy.log
    assert log.count("summary cache (redis) unavailable") == 1, log[-3000:]
    assert log.count("summary cache (redis) is back") == 1, log[-3000:]
