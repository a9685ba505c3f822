"""Originals across replicas: two real `compacting-proxy` processes sharing a real `redis-server`
(`COMPACT_CACHE_URL`). What one replica cut for `/v1/compress`, the other returns on
`/v1/retrieve/{hash}`, also once the first is gone; for the key that sent it only; and Redis holds
no more than `COMPACT_RETRIEVE_BYTES` of them, the oldest going first."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
import redis

from tests.support.conversations import agent_chat
from tests.support.deployment import Redis, running_redis
from tests.support.upstreams.proxy_server import ProxyServer, running_proxy

pytestmark = [pytest.mark.redis, pytest.mark.process]

NOWHERE = "http://127.0.0.1:9/v1"
PREFIX = "compacting-proxy:originals:"
SIZES = PREFIX + "~sizes"
KEYS = "key-a,key-b"


@pytest.fixture
def shared() -> Iterator[Redis]:
    with running_redis() as server:
        yield server


def replicas(stack: ExitStack, redis_url: str, count: int, **settings: str) -> list[ProxyServer]:
    env = {
        "cache_url": redis_url,
        "retrieve": "true",
        "api_keys": KEYS,
        "upstream_kind": "openai",
        **settings,
    }
    return [stack.enter_context(running_proxy(NOWHERE, 4096, **env)) for _ in range(count)]


def compress(proxy: ProxyServer, seed: int, key: str = "key-a") -> list[str]:
    chat: list[dict[str, Any]] = [
        *agent_chat(12, seed=seed, result_items=40),
        {"role": "user", "content": "?"},
    ]
    response = httpx.post(
        f"{proxy.base_url}/v1/compress",
        json={"model": "m", "messages": chat},
        headers={"authorization": f"Bearer {key}"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    hashes: list[str] = response.json()["ccr_hashes"]
    assert hashes
    return hashes


def retrieve(proxy: ProxyServer, key: str, who: str = "key-a") -> int:
    headers = {"authorization": f"Bearer {who}"}
    return httpx.get(f"{proxy.base_url}/v1/retrieve/{key}", headers=headers, timeout=30).status_code


def test_any_replica_returns_what_another_cut(shared: Redis) -> None:
    with ExitStack() as stack:
        first, second = replicas(stack, shared.url, 2)
        hashes = compress(first, seed=4)
        assert [retrieve(second, h) for h in hashes] == [200] * len(hashes)
        assert [retrieve(second, h, who="key-b") for h in hashes] == [404] * len(hashes)
        first.process.terminate()
        first.process.wait(timeout=10)
        body = httpx.get(
            f"{second.base_url}/v1/retrieve/{hashes[0]}", headers={"x-api-key": "key-a"}, timeout=30
        ).json()
        assert body["hash"] == hashes[0] and body["original_content"]


def test_redis_keeps_them_within_their_bytes(shared: Redis) -> None:
    bound = 40_000  # more than any one original here, less than all of them
    client = redis.Redis.from_url(shared.url)
    with ExitStack() as stack:
        (proxy,) = replicas(stack, shared.url, 1, retrieve_bytes=str(bound))
        first = compress(proxy, seed=4)
        assert any(k.endswith(first[0].encode()) for k in client.hkeys(SIZES))
        for seed in range(5, 12):
            compress(proxy, seed=seed)
    total = int(client.get(PREFIX + "~total") or 0)
    sizes = client.hgetall(SIZES)
    assert 0 < total <= bound and total == sum(int(size) for size in sizes.values())
    assert not any(k.endswith(first[0].encode()) for k in sizes)  # the oldest went first
    assert not any(k.endswith(first[0].encode()) for k in client.scan_iter(PREFIX + "*"))
