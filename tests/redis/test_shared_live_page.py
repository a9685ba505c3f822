"""The live page shared by replicas (issue 27, part 2): two real `compacting-proxy` processes sharing a
real `redis-server`, one conversation sent through both in turn. Each replica's page lists every
request of it with the same totals; a page watching one replica receives the records and the wells
of requests served by the other; a replica started later replays what it missed; Redis stopped
loses no request, and each page goes on with its own replica's traffic."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis import Redis

from tests.support.deployment import running_redis
from tests.support.live_page import FORMATS_UPSTREAM, as_chat, coding_loop, next_event, requests_of
from tests.support.processes import VENV_BIN, free_port, running
from tests.support.upstreams.proxy_server import ProxyServer, running_proxy

pytestmark = [pytest.mark.redis, pytest.mark.process]

WINDOW = 3000


def snapshot(replica: ProxyServer) -> dict[str, Any]:
    return httpx.get(replica.base_url + "/ui/conversations", timeout=10).json()  # type: ignore[no-any-return]


def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the other replica's records did not arrive"
        time.sleep(0.05)


def requests_seen(replica: ProxyServer) -> int:
    conversations = snapshot(replica)["conversations"]
    return sum(c["requests"] for c in conversations)


@pytest.fixture
def upstream() -> Iterator[str]:
    port = free_port()
    args = [str(VENV_BIN / "python"), str(FORMATS_UPSTREAM), "--port", str(port), "--window", "100000"]
    with running(args, ready_url=f"http://127.0.0.1:{port}/_recorded"):
        yield f"http://127.0.0.1:{port}/v1"


def send(replica: ProxyServer, step: int) -> httpx.Response:
    body = as_chat("m", requests_of(coding_loop(12))[step])
    answer = httpx.post(replica.base_url + "/v1/chat/completions", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer


def test_every_page_shows_every_replicas_requests(upstream: str) -> None:
    with running_redis() as redis, ExitStack() as stack:
        a, b = (
            stack.enter_context(running_proxy(upstream, WINDOW, calibrate="false", cache_url=redis.url))
            for _ in range(2)
        )
        events = stack.enter_context(httpx.Client(base_url=b.base_url, timeout=10)).stream(
            "GET", "/ui/events"
        )
        lines = stack.enter_context(events).iter_lines()
        assert next_event(lines)[0] == "hello"
        time.sleep(2.5)  # the page's watching flag reaches the other replica (each looks every second)

        answer = send(a, -4)
        kind, record = next_event(lines)  # on b's page: a's request
        assert kind == "record"
        assert record["record"]["headers"] == {
            k: v for k, v in answer.headers.items() if k.startswith("x-compaction-")
        }
        kind, well = next_event(lines)  # its well, drawn by a for b's page
        while kind == "record":  # the answer's figures update the record first
            kind, well = next_event(lines)
        assert kind == "well" and well["seq"] == record["record"]["seq"] and well["blocks"]

        for step, replica in zip(range(-3, 0), (b, a, b), strict=True):
            send(replica, step)
        until(lambda: requests_seen(a) == 4 and requests_seen(b) == 4)
        seen_a, seen_b = snapshot(a), snapshot(b)
        assert len(seen_a["conversations"]) == len(seen_b["conversations"]) == 1
        assert seen_a["totals"] == seen_b["totals"]
        assert seen_a["totals"]["requests"] == 4 and seen_a["totals"]["answers"] == 4
        key = seen_a["conversations"][0]["key"]
        records = httpx.get(f"{a.base_url}/ui/conversations/{key}").json()["records"]
        assert [r["seq"] for r in records] == sorted(r["seq"] for r in records)

        late = stack.enter_context(running_proxy(upstream, WINDOW, calibrate="false", cache_url=redis.url))
        until(lambda: requests_seen(late) == 4)
        assert snapshot(late)["totals"] == seen_a["totals"]


def test_redis_stopped_loses_no_request_and_each_page_keeps_its_own(upstream: str) -> None:
    with running_redis() as redis, ExitStack() as stack:
        a, b = (
            stack.enter_context(running_proxy(upstream, WINDOW, calibrate="false", cache_url=redis.url))
            for _ in range(2)
        )
        send(a, -4)
        until(lambda: requests_seen(b) == 1)
        os.kill(redis.process.pid, signal.SIGSTOP)  # slow: it accepts and never answers
        try:
            started = time.monotonic()
            send(a, -3)
            send(b, -2)
            assert time.monotonic() - started < 5
            assert requests_seen(a) == 2 and requests_seen(b) == 2  # each its own, and the one shared
        finally:
            os.kill(redis.process.pid, signal.SIGCONT)
        until(lambda: requests_seen(a) == 3 and requests_seen(b) == 3, timeout=10)  # caught up


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_long_model_names_reach_redis_and_the_other_replica_cut(upstream: str) -> None:
    """Issue 35, row 3: 30 chats with distinct 4 MB model names through one replica: Redis and the
    other replica's page hold each name as its start and a digest (Redis grew 276 MB, the other
    replica 175 MB, when they held them whole)."""
    with running_redis() as redis, ExitStack() as stack:
        a, b = (
            stack.enter_context(running_proxy(upstream, WINDOW, calibrate="false", cache_url=redis.url))
            for _ in range(2)
        )
        store = Redis.from_url(redis.url)
        redis_before, b_before = store.info("memory")["used_memory"], rss_mb(b)
        for n in range(30):
            body = as_chat(f"model-{n:03d}-" + "x" * 4 * 1024 * 1024, requests_of(coding_loop(2))[0])
            answer = httpx.post(a.base_url + "/v1/chat/completions", json=body, timeout=60)
            assert answer.status_code == 200, answer.text[:300]
        until(lambda: requests_seen(b) == 20, timeout=30)  # its last 20 conversations
        redis_growth = (store.info("memory")["used_memory"] - redis_before) / 2**20
        b_growth = rss_mb(b) - b_before
        seen = httpx.get(b.base_url + "/ui/conversations", timeout=30)
    print(f"row 3 through Redis: Redis +{redis_growth:.1f} MB, the other replica +{b_growth:.0f} MB")
    assert len(seen.content) < 64 * 1024
    assert all(len(c["model"]) <= 128 for c in seen.json()["conversations"])
    assert redis_growth < 16, f"Redis grew {redis_growth:.0f} MB"
    assert b_growth < 64, f"the other replica grew {b_growth:.0f} MB"


def rss_mb(replica: ProxyServer) -> float:
    status = Path(f"/proc/{replica.process.pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024
