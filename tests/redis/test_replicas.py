"""Replicas that act as one: 3 real `compacting-proxy` processes behind Debian's haproxy (round robin),
sharing what they learn through a real `redis-server`, in front of a fake Ollama (v0.33,
`tests/support/upstreams/ollama.py`) that cuts a prompt over its window silently.

The proxy is told a window of 16,384 and goes through Ollama's `/v1`, which ignores `num_ctx`: Ollama
runs at 4,096 and cuts the long chat silently. The replica that sees the cut learns the real window
(and calibrates its count from Ollama's reports); through Redis the others learn it too, so the next
request through another replica is compacted to fit, and every request reaches Ollama byte-identical
to what one replica alone would have sent.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from tests.support.deployment import Deployment, Redis, running_deployment, running_redis
from tests.support.upstreams.chats import SYSTEM
from tests.support.upstreams.ollama import FakeOllama, running_fake_ollama
from tests.support.upstreams.proxy_server import running_proxy

pytestmark = [pytest.mark.redis, pytest.mark.process, pytest.mark.slow]

MODEL = "llama3.2:3b"
TURNS = 7
# A developer's next turn comes seconds later; what a replica learned reaches the others through
# Redis pub/sub within milliseconds. The test leaves this much between turns.
SETTLE_S = 0.3
SETTINGS = {"upstream_kind": "openai"}

Message = dict[str, Any]


def prose(rng: random.Random, sentences: int) -> str:
    sentence = "the wheel arrived bent and the rim was scratched near the valve so I would like a refund"
    words = sentence.split(" ")
    return " ".join(
        " ".join(rng.choice(words) for _ in range(12)).capitalize() + "." for _ in range(sentences)
    )


def resumed_chat() -> list[Message]:
    """A 10,000-token chat (by Ollama's count) a client resumes: over Ollama's real 4,096."""
    rng = random.Random(2)
    messages: list[Message] = [{"role": "system", "content": SYSTEM}]
    for _ in range(12):
        messages += [{"role": "user", "content": prose(rng, 60)}, {"role": "assistant", "content": "Noted."}]
    messages.append({"role": "user", "content": "So what do you suggest?"})
    return messages


def converse(base_url: str, turns: int = TURNS, between: Any = None) -> list[str | None]:
    """The chat, turn after turn, each on a new connection (so round robin spreads the turns); the
    `x-compaction-upstream-truncated` flag of each answer. `between(turn)` runs after each turn."""
    rng = random.Random(3)
    messages = resumed_chat()
    flags = []
    for turn in range(turns):
        response = httpx.post(
            f"{base_url}/v1/chat/completions", json={"model": MODEL, "messages": messages}, timeout=60
        )
        assert response.status_code == 200, response.text
        flags.append(response.headers.get("x-compaction-upstream-truncated"))
        messages.append({"role": "assistant", "content": response.json()["choices"][0]["message"]["content"]})
        messages.append({"role": "user", "content": prose(rng, 60)})
        if between:
            between(turn)
        time.sleep(SETTLE_S)
    return flags


def chats_served(replica_url: str) -> int:
    text = httpx.get(f"{replica_url}/metrics").text
    found = re.findall(
        r'^compacting_proxy_requests_total\{route="[^"]*chat[^"]*",status="200"\} (\S+)$', text, re.M
    )
    return int(sum(float(n) for n in found))


@pytest.fixture
def redis() -> Iterator[Redis]:
    with running_redis() as server:
        yield server


@contextmanager
def deployed(replicas: int, redis: Redis | None) -> Iterator[tuple[Deployment, FakeOllama]]:
    shared = {"cache_url": redis.url} if redis else {}
    with (
        running_fake_ollama() as fake,
        running_deployment(replicas, f"{fake.base_url}/v1", 16384, **shared, **SETTINGS) as deployment,
    ):
        yield deployment, fake


def test_the_same_chat_through_three_replicas_reaches_the_upstream_as_through_one(redis: Redis) -> None:
    with deployed(1, None) as (one, reference):  # one replica alone, without Redis
        expected = converse(one.base_url)
    with deployed(3, redis) as (three, fake):
        flags = converse(three.base_url)
        served = [chats_served(replica.base_url) for replica in three.replicas]
    assert sorted(served) == [2, 2, 3], "round robin sent the turns to every replica"
    assert flags == expected
    assert len(fake.bodies) == len(reference.bodies) == TURNS
    for turn, (got, want) in enumerate(zip(fake.bodies, reference.bodies, strict=True)):
        assert got == want, f"turn {turn} reached Ollama differently through three replicas"


def test_a_cut_learned_through_one_replica_protects_the_next_request_through_another(redis: Redis) -> None:
    with deployed(3, redis) as (deployment, fake):
        flags = converse(deployment.base_url, turns=4)
    assert fake.truncations[0].prompt_tokens > 9000
    assert flags == ["true", None, None, None], "only the first request was cut"
    assert len(fake.truncations) == 1, "after the first cut, every request fit, through every replica"


def test_redis_stopped_mid_run_loses_no_request(redis: Redis) -> None:
    def stop_redis(turn: int) -> None:
        if turn == 2:
            redis.stop()

    with deployed(3, redis) as (deployment, fake):
        flags = converse(deployment.base_url, turns=8, between=stop_redis)
        logs = [replica.log_tail(400) for replica in deployment.replicas]
    assert len(flags) == 8 and flags[0] == "true"  # every request answered (converse checks the 200s)
    assert len(fake.truncations) == 1, "what was shared before Redis stopped still protects every replica"
    for log in logs:
        assert log.count("shared state (redis) unavailable") == 1, "one warning per replica, not per request"


def test_workers_of_one_process_share_what_they_learn(redis: Redis) -> None:
    """`--workers 3`: the kernel hands each new connection to one of three worker processes."""
    with (
        running_fake_ollama() as fake,
        running_proxy(
            f"{fake.base_url}/v1", 16384, args=("--workers", "3"), cache_url=redis.url, **SETTINGS
        ) as proxy,
    ):
        flags = converse(proxy.base_url, turns=6)
    assert flags == ["true", None, None, None, None, None]
    assert len(fake.truncations) == 1, "after the first cut, every request fit, whichever worker took it"
