"""The head limit of `proxy.connections.protocol`, read by read: the real uvicorn protocol fed exactly the reads
a socket could deliver (every way of cutting the same bytes), with an app that echoes body sizes.

How a client's bytes are cut into reads is up to the network and the scheduler; these cuts decide
whether a limit that counts the wrong bytes refuses a request. The socket-level tests
(tests/process/test_real_sockets.py) check the same through the real process, with real clients.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy.connections.protocol import LimitedHttpToolsProtocol
from tests.support.socketless import RecordingTransport, socketless

LIMIT = 1024


async def echo_size(scope: Any, receive: Any, send: Any) -> None:
    """Answers 200 with the size of the body it read."""
    size, more = 0, True
    while more:
        message = await receive()
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    answer = str(size).encode()
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(answer))]}
    )
    await send({"type": "http.response.body", "body": answer})


async def serve(reads: list[bytes], answers: int) -> bytes:
    """What the protocol wrote back after `reads`, once `answers` responses are out (or it closed)."""
    protocol = socketless(LimitedHttpToolsProtocol, echo_size)
    protocol.max_header_bytes = LIMIT
    transport = RecordingTransport()
    protocol.connection_made(transport)
    for read in reads:
        if transport.closing:
            break
        protocol.data_received(read)
        await asyncio.sleep(0)
    for _ in range(1000):
        if transport.closing or transport.written.count(b"HTTP/1.1 ") >= answers:
            break
        await asyncio.sleep(0)
    protocol.connection_lost(None)
    return bytes(transport.written)


def post(body_size: int, head_fill: int = 0) -> bytes:
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n"
    head += b"X-Fill: " + b"f" * head_fill + b"\r\n" if head_fill else b""
    return head + b"Content-Length: %d\r\n\r\n" % body_size + b"x" * body_size


def cuts(data: bytes, every: int) -> list[Any]:
    """`data` as two reads cut at every `every`-th byte, and as reads of a few fixed sizes."""
    splits = [pytest.param([data[:i], data[i:]], id=f"cut-at-{i}") for i in range(1, len(data), every)]
    sized = [
        pytest.param([data[i : i + size] for i in range(0, len(data), size)], id=f"reads-of-{size}")
        for size in (1, 7, 100, 1000, len(data))
    ]
    return [*splits, *sized]


# Three pipelined requests, the bodies far over the limit, the heads under it.
PIPELINED = post(5 * LIMIT) + post(3 * LIMIT, head_fill=LIMIT // 2) + post(0)


@pytest.mark.parametrize("reads", cuts(PIPELINED, 97))
async def test_bodies_are_never_counted_as_head(reads: list[bytes]) -> None:
    written = await serve(reads, answers=3)
    assert b"431" not in written
    assert written.count(b"HTTP/1.1 200") == 3
    assert written.endswith(b"\r\n\r\n0")  # each answered with its own body size, the last one empty


@pytest.mark.parametrize("reads", cuts(post(10, head_fill=2 * LIMIT), 211))
async def test_a_head_over_the_limit_gets_431_however_it_arrives(reads: list[bytes]) -> None:
    written = await serve(reads, answers=1)
    assert written.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert b"HTTP/1.1 200" not in written


async def test_a_head_just_under_the_limit_passes_in_one_read_or_many() -> None:
    request = post(LIMIT, head_fill=LIMIT - 200)
    head = request[: request.index(b"\r\n\r\n") + 4]
    assert len(head) <= LIMIT
    for reads in ([request], [request[i : i + 10] for i in range(0, len(request), 10)]):
        assert (await serve(reads, answers=1)).startswith(b"HTTP/1.1 200")


# --- slow clients: the head deadline and the body's idle limit ------------------------------------


async def open_protocol(header_timeout: float, body_timeout: float) -> tuple[Any, RecordingTransport]:
    protocol = socketless(LimitedHttpToolsProtocol, echo_size)
    protocol.header_timeout, protocol.body_timeout = header_timeout, body_timeout
    transport = RecordingTransport()
    protocol.connection_made(transport)
    return protocol, transport


async def test_a_head_not_complete_in_time_gets_408_and_is_closed() -> None:
    protocol, transport = await open_protocol(0.1, 10)
    for byte in post(10)[:20]:
        protocol.data_received(bytes([byte]))
        await asyncio.sleep(0.01)
    for _ in range(100):
        if transport.closing:
            break
        await asyncio.sleep(0.01)
    assert transport.closing and transport.written.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    protocol.connection_lost(None)


async def test_a_body_that_keeps_coming_is_not_cut_and_one_that_stops_is() -> None:
    protocol, transport = await open_protocol(10, 0.5)
    request = post(14)
    head = request[: request.index(b"\r\n\r\n") + 4]
    protocol.data_received(head)
    # A byte every 40 ms: slow, never idle for 500 ms (a margin for a loaded machine's late timers),
    # and longer than 500 ms in all.
    for byte in request[len(head) :]:
        await asyncio.sleep(0.04)
        protocol.data_received(bytes([byte]))
    for _ in range(100):
        if transport.written:
            break
        await asyncio.sleep(0.01)
    assert transport.written.startswith(b"HTTP/1.1 200") and not transport.closing
    protocol.data_received(post(14)[: len(head) + 5])  # the next request's body stops after 5 bytes
    for _ in range(300):
        if transport.closing:
            break
        await asyncio.sleep(0.01)
    assert transport.closing and b"HTTP/1.1 408" in transport.written
    protocol.connection_lost(None)


# --- pipelining: parsed one message at a time, the connection held while the queue is full ---------


async def test_pipelined_requests_wait_in_a_bounded_queue_and_are_all_answered() -> None:
    from proxy.connections.protocol import MAX_QUEUED

    protocol, transport = await open_protocol(10, 10)
    requests = 500
    protocol.data_received(post(0) * requests)  # one read: 500 requests
    assert len(protocol.pipeline) <= MAX_QUEUED and protocol.backlog and protocol.flow.held
    longest = 0
    for _ in range(20_000):
        if transport.written.count(b"HTTP/1.1 200") >= requests:
            break
        longest = max(longest, len(protocol.pipeline))
        await asyncio.sleep(0)
    assert transport.written.count(b"HTTP/1.1 200") == requests
    assert longest <= MAX_QUEUED and not protocol.backlog and not protocol.flow.held
    protocol.connection_lost(None)


async def test_a_slow_body_is_cut_by_the_minimum_rate_only_when_the_proxy_is_busy() -> None:
    for busy in (False, True):
        protocol, transport = await open_protocol(10, 10)
        protocol.min_rate_grace = 0.1
        protocol.max_client_connections = 1 if busy else 1000  # one open connection: half the cap
        request = post(20)
        protocol.data_received(request[: request.index(b"\r\n\r\n") + 5])  # a head and one byte
        first = protocol.rate_check
        for _ in range(100):  # until the check after the grace has run: the next one armed, or none
            if protocol.rate_check is not first:
                break
            await asyncio.sleep(0.01)
        cut = transport.written.startswith(b"HTTP/1.1 408 ")
        assert cut == busy and transport.closing == busy, (busy, bytes(transport.written[:60]))
        protocol.connection_lost(None)
