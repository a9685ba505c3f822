from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest

from proxy.engine.summary import INSTRUCTIONS, SUMMARY_PREFIX, chunks
from tests.support.conversations import summarised_chat as long_chat
from tests.support.fakes import SummarisingUpstream, completion, proxy_client
from tests.support.format_chats import posted_to
from tests.support.processes import free_port

SETTINGS = {"window": 6000, "summarize": True, "summary_tokens": 200}


async def test_dropped_exchanges_are_replaced_by_a_summary() -> None:
    upstream = SummarisingUpstream()
    async with proxy_client(upstream, **SETTINGS) as client:
        response = await client.post("/v1/chat/completions", json={"model": "m", "messages": long_chat()})
    assert response.status_code == 200
    assert response.headers["x-compaction-summarized"] == "1"
    [sent] = upstream.chat_requests()
    summaries = [m for m in sent["messages"] if str(m.get("content")).startswith(SUMMARY_PREFIX)]
    assert len(summaries) == 1 and "order #4471 summary" in summaries[0]["content"]
    assert int(response.headers["x-compaction-tokens-after"]) <= 4800


async def test_summaries_are_cached_across_turns() -> None:
    upstream = SummarisingUpstream()
    chat = long_chat()
    async with proxy_client(upstream, **SETTINGS) as client:
        await client.post("/v1/chat/completions", json={"model": "m", "messages": chat})
        calls = upstream.summary_calls
        chat = [*chat, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "next?"}]
        await client.post("/v1/chat/completions", json={"model": "m", "messages": chat})
    assert calls >= 1
    assert upstream.summary_calls == calls, "the same dropped run is summarised once"
    first, second = upstream.chat_requests()
    assert second["messages"][: len(first["messages"])] == first["messages"], (
        "the prefix stays byte-identical"
    )


async def test_a_failing_summariser_falls_back_to_dropping() -> None:
    upstream = SummarisingUpstream(fail=True)
    async with proxy_client(upstream, **SETTINGS) as client:
        response = await client.post("/v1/chat/completions", json={"model": "m", "messages": long_chat()})
    assert response.status_code == 200
    assert "x-compaction-summarized" not in response.headers
    assert int(response.headers["x-compaction-dropped"]) > 0


async def test_a_stalled_summariser_times_out_and_falls_back() -> None:
    async def stall(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if body["messages"][0].get("content") == INSTRUCTIONS:
            raise httpx.ReadTimeout("stalled")
        return httpx.Response(200, json=completion())

    async with proxy_client(httpx.MockTransport(stall), **SETTINGS) as client:
        response = await client.post("/v1/chat/completions", json={"model": "m", "messages": long_chat()})
    assert response.status_code == 200 and "x-compaction-summarized" not in response.headers


def test_chunk_keys_are_stable_as_a_run_grows() -> None:
    run = long_chat(40)[2:]
    small = chunks(run[:40], model="m", chunk_chars=3000)
    grown = chunks(run, model="m", chunk_chars=3000)
    assert len(small) >= 2
    assert [c.key for c in small[:-1]] == [c.key for c in grown[: len(small) - 1]]


# Shared between replicas through a real Redis server.


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (scripts/test.sh installs it from Debian)")
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("redis-server did not start")
        time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    process.terminate()
    process.wait(timeout=10)


@pytest.mark.redis
async def test_replicas_share_summaries_through_redis(redis_url: str) -> None:
    first, second = SummarisingUpstream(), SummarisingUpstream()
    chat = long_chat()
    async with proxy_client(first, cache_url=redis_url, **SETTINGS) as replica_a:
        a = await replica_a.post("/v1/chat/completions", json={"model": "m", "messages": chat})
    async with proxy_client(second, cache_url=redis_url, **SETTINGS) as replica_b:
        b = await replica_b.post("/v1/chat/completions", json={"model": "m", "messages": chat})
    assert a.headers["x-compaction-summarized"] == b.headers["x-compaction-summarized"] == "1"
    assert first.summary_calls >= 1 and second.summary_calls == 0, "replica B reused replica A's summary"
    assert first.chat_requests() == second.chat_requests(), "both replicas sent the same bytes upstream"


@pytest.mark.redis
async def test_redis_down_is_a_cache_miss_not_a_failure() -> None:
    upstream = SummarisingUpstream()
    dead = f"redis://127.0.0.1:{free_port()}/0"
    async with proxy_client(upstream, cache_url=dead, **SETTINGS) as client:
        response = await client.post("/v1/chat/completions", json={"model": "m", "messages": long_chat()})
    assert response.status_code == 200 and response.headers["x-compaction-summarized"] == "1"


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/messages"])
async def test_other_formats_get_the_summary_in_their_own_shape(path: str) -> None:
    """The summary stands where the run was dropped, as an assistant item of the client's format."""
    upstream = SummarisingUpstream()
    upstream.respond = lambda request: (
        upstream.answer(request)
        if request.url.path.endswith("/chat/completions")
        else httpx.Response(200, json={"usage": {"input_tokens": 10}})
    )
    body = posted_to(path, long_chat(), max_tokens=100)
    async with proxy_client(upstream, **SETTINGS) as client:
        response = await client.post(path, json=body)
    assert response.headers["x-compaction-summarized"] == "1"
    [sent] = [json.loads(r.content) for r in upstream.requests if r.url.path == path]
    history = sent["input" if path == "/v1/responses" else "messages"]
    [summary] = [m for m in history if SUMMARY_PREFIX in json.dumps(m.get("content"))]
    assert summary["role"] == "assistant" and "order #4471 summary" in json.dumps(summary["content"])
