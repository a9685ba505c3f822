"""A fast fake OpenAI-compatible upstream, for measuring what stands in front of it.

It must cost far less than any proxy put in front of it, so it is a raw asyncio protocol with
httptools parsing HTTP/1.1 (keep-alive, pipelining, chunked request bodies, ``Expect:
100-continue``) on uvloop, and it never parses the JSON of a non-streaming request:

- ``POST /v1/chat/completions``: a fixed small ``chat.completion`` with ``usage``
  (``prompt_tokens`` is the request size / 4, so calibration code sees a plausible number).
- the same with ``"stream": true``: SSE, a role chunk, ``--chunks`` content chunks, a finish chunk,
  a usage chunk when ``stream_options.include_usage`` is asked for, then ``data: [DONE]``, each
  event in its own HTTP chunk, ``--stream-delay-ms`` apart (the first one is sent at once). A
  model name ending in ``@delay=N`` overrides the delay for that request.
- ``GET /v1/models``: one model.

``python tests/support/upstreams/fast.py --port P`` serves until ``--lifetime`` seconds have passed;
`running_fast_upstream()` starts it so, as a process of its own (it must not share a GIL with what it
serves or with the load), and stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import re
import signal
import sys
import time
import typing
from collections.abc import Iterator
from pathlib import Path

import httptools
import orjson

_STREAM_RE = re.compile(rb'"stream"\s*:\s*true')
_USAGE_RE = re.compile(rb'"include_usage"\s*:\s*true')
_DELAY_RE = re.compile(r"@delay=(\d+(?:\.\d+)?)$")

_COMPLETION = (
    b'{"id":"chatcmpl-fake","object":"chat.completion","created":1700000000,"model":"fake-model",'
    b'"choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the fake upstream."},'
    b'"logprobs":null,"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":%d,"completion_tokens":7,"total_tokens":%d}}'
)
_MODELS = orjson.dumps(
    {"object": "list", "data": [{"id": "fake-model", "object": "model", "created": 0, "owned_by": "bench"}]}
)
_NOT_FOUND = b'{"error":{"message":"not found","type":"invalid_request_error","param":null,"code":null}}'


def _response(
    status: bytes, body: bytes, keep_alive: bool, content_type: bytes = b"application/json"
) -> bytes:
    return b"".join(
        (
            b"HTTP/1.1 ",
            status,
            b"\r\ncontent-type: ",
            content_type,
            b"\r\ncontent-length: ",
            str(len(body)).encode(),
            b"\r\n" if keep_alive else b"\r\nconnection: close\r\n",
            b"\r\n",
            body,
        )
    )


def _sse_events(chunks: int, usage: bool, prompt_tokens: int) -> list[bytes]:
    def chunk(delta: dict[str, str], finish: str | None) -> bytes:
        payload = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "fake-model",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        return b"data: " + orjson.dumps(payload) + b"\n\n"

    events = [chunk({"role": "assistant", "content": ""}, None)]
    events += [chunk({"content": f"tok{i} "}, None) for i in range(chunks)]
    events.append(chunk({}, "stop"))
    if usage:
        payload = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "fake-model",
            "choices": [],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": chunks,
                "total_tokens": prompt_tokens + chunks,
            },
        }
        events.append(b"data: " + orjson.dumps(payload) + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events


class FakeUpstream(asyncio.Protocol):
    """One connection: parse requests, answer them in order."""

    def __init__(self, chunks: int, delay: float) -> None:
        self.chunks = chunks
        self.delay = delay
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.expect_continue = False
        self.pending: collections.deque[tuple[bytes, bytes, bytes, bool]] = collections.deque()
        self.streaming = False
        self.closed = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = typing.cast(asyncio.Transport, transport)  # uvloop's is no subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.write(_response(b"400 Bad Request", b"{}", keep_alive=False))
            self.transport.close()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.url = b""
        self.body = []
        self.expect_continue = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"expect" and value.lower() == b"100-continue":
            self.expect_continue = True

    def on_headers_complete(self) -> None:
        if self.expect_continue and self.transport is not None:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        request = (self.parser.get_method(), self.url, b"".join(self.body), self.parser.should_keep_alive())
        if self.streaming or self.pending:
            self.pending.append(request)
        else:
            self.handle(*request)

    # answering
    def handle(self, method: bytes, url: bytes, body: bytes, keep_alive: bool) -> None:
        assert self.transport is not None
        path = url.split(b"?", 1)[0]
        if path == b"/v1/chat/completions" and method == b"POST":
            if _STREAM_RE.search(body):
                self.streaming = True
                self.transport.pause_reading()
                asyncio.get_running_loop().create_task(self.stream(body, keep_alive))
                return
            tokens = len(body) // 4
            out = _response(b"200 OK", _COMPLETION % (tokens, tokens + 7), keep_alive)
        elif path == b"/v1/models" and method == b"GET":
            out = _response(b"200 OK", _MODELS, keep_alive)
        else:
            out = _response(b"404 Not Found", _NOT_FOUND, keep_alive)
        self.transport.write(out)
        if not keep_alive:
            self.transport.close()

    async def stream(self, body: bytes, keep_alive: bool) -> None:
        assert self.transport is not None
        delay = self.delay
        try:
            model = str(orjson.loads(body).get("model", ""))
        except (orjson.JSONDecodeError, AttributeError):
            model = ""
        if match := _DELAY_RE.search(model):
            delay = float(match.group(1)) / 1000
        events = _sse_events(self.chunks, bool(_USAGE_RE.search(body)), len(body) // 4)
        self.transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
            b"transfer-encoding: chunked\r\n" + (b"" if keep_alive else b"connection: close\r\n") + b"\r\n"
        )
        for i, event in enumerate(events):
            if i and delay:
                await asyncio.sleep(delay)
            if self.closed:
                return
            self.transport.write(b"%x\r\n%s\r\n" % (len(event), event))
        self.transport.write(b"0\r\n\r\n")
        self.streaming = False
        if not keep_alive:
            self.transport.close()
            return
        while self.pending and not self.streaming:
            self.handle(*self.pending.popleft())
        if not self.streaming and not self.closed:
            self.transport.resume_reading()


async def serve(host: str, port: int, chunks: int, delay: float, lifetime: float) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: FakeUpstream(chunks, delay), host, port, backlog=1024)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"fake upstream on http://{host}:{port}/v1 (pid-ready {time.time():.3f})", flush=True)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=lifetime)
    server.close()


def command(port: int, lifetime: float) -> list[str]:
    """Its command line as a process on `port`, stopping by itself after `lifetime` seconds."""
    return [sys.executable, str(Path(__file__).resolve()), "--port", str(port), "--lifetime", str(lifetime)]


@contextlib.contextmanager
def running_fast_upstream(lifetime: float = 3600) -> Iterator[int]:
    """The upstream as a process of its own on a free loopback port, until the block ends; yields the port."""
    from tests.support.processes import free_port, running  # here: run by its path, the server needs neither

    port = free_port()
    with running(command(port, lifetime), ready_url=f"http://127.0.0.1:{port}/v1/models"):
        yield port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18000)
    parser.add_argument("--chunks", type=int, default=5, help="content chunks per streamed reply")
    parser.add_argument("--stream-delay-ms", type=float, default=0.0, help="delay between SSE events")
    parser.add_argument(
        "--lifetime", type=float, default=3600.0, help="stop by itself after this many seconds"
    )
    args = parser.parse_args()
    import uvloop  # comes with uvicorn[standard]

    uvloop.run(serve(args.host, args.port, args.chunks, args.stream_delay_ms / 1000, args.lifetime))


if __name__ == "__main__":
    main()
