"""A small OpenAI-compatible upstream that misbehaves on request, byte for byte and on the clock.

Raw asyncio (a `Protocol` per connection and a hand-written HTTP/1.1 reader), so a test decides
exactly which bytes go out and when, and sees exactly when the other side closed the connection.
Each request picks its behaviour with an ``x-fault`` header (or a ``fault=`` query parameter, for
clients that cannot set headers); the proxy forwards both unchanged::

    x-fault: ok; chunks=8; delay=0.02; tag=c1   a normal answer (SSE when the body asks to stream)
    x-fault: status; code=429; retry_after=7    that status, an OpenAI-style error body, Retry-After
    x-fault: stall                              read the request, never answer
    x-fault: stall; after=2                     headers and 2 SSE events, then silence
    x-fault: reset; after=2                     headers and 2 SSE events, then a TCP reset (abort)
    x-fault: close; after=2                     the same but a clean FIN in the middle of the body
    x-fault: close                              close without answering (an empty reply)
    x-fault: garbage                            bytes that are not HTTP, then close
    x-fault: bad-status                         an invalid status line, then close
    x-fault: ok; cookies=2                      also two Set-Cookie headers, as api.openai.com sends

Every answer carries a `Date` and a `Server` header, as real servers' do, and a `HEAD` request gets
the head of the `GET` answer (its `Content-Length`, no body). Each request's header lines are kept
in order, repeated ones apart (`RequestRecord.raw_headers`).

A refused connection needs no mode: point the proxy at a closed port (`closed_port()`).

Stalls are bounded (``hold``, 60 s by default): nothing here waits forever. The SSE body is a pure
function of ``chunks`` and ``tag`` (`sse_events`), so a client can check it received exactly what
was sent. Every connection is kept as a `ConnectionRecord` (when it opened, which side closed it and
when, how many events went out).

Two ways to run it:

- in-process, `serve_in_thread()`: its own event loop in a daemon thread, so synchronous tests and
  subprocesses around it are unaffected, and a test reads the connection records directly (this is
  how the fault tests watch the proxy close its upstream connection);
- as a process, ``python -m tests.support.upstreams.faulty --port P``: for load tests, so the upstream does
  not share a GIL and a core with the test's own clients. Counters are at ``GET /_faulty/stats``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.utils import formatdate

import orjson

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
DEFAULT_HOLD_S = 60.0
GARBAGE = b"\x00\x16\x03\x01 this is not HTTP \xff\xfe\r\n\r\n"
BAD_STATUS = b"HTTP/1.1 two-hundred OK\r\ncontent-length: 0\r\n\r\n"


@dataclass(frozen=True)
class Fault:
    """What one request asked for: a mode and its parameters, parsed from ``x-fault``."""

    mode: str = "ok"
    chunks: int = 3
    delay: float = 0.0
    after: int = -1  # events sent before the fault; -1: before any response byte
    code: int = 200
    retry_after: str | None = None
    tag: str = ""
    hold: float = DEFAULT_HOLD_S
    stream: bool | None = None  # force SSE (or JSON); None: as the request body asks
    cookies: int = 0  # Set-Cookie headers on the answer

    @classmethod
    def parse(cls, spec: str) -> Fault:
        mode, *params = [part.strip() for part in spec.split(";")]
        values: dict[str, str] = {}
        for param in params:
            name, _, value = param.partition("=")
            values[name.strip()] = value.strip()
        stream = values.get("stream")
        return cls(
            mode=mode or "ok",
            chunks=int(values.get("chunks", 3)),
            delay=float(values.get("delay", 0.0)),
            after=int(values.get("after", -1)),
            code=int(values.get("code", 200)),
            retry_after=values.get("retry_after"),
            tag=values.get("tag", ""),
            hold=float(values.get("hold", DEFAULT_HOLD_S)),
            stream=None if stream is None else stream in ("1", "true", "yes"),
            cookies=int(values.get("cookies", 0)),
        )


def sse_events(chunks: int, tag: str = "") -> list[bytes]:
    """The SSE body of a normal streamed answer: ``chunks`` content events, a finish event, [DONE]."""
    base = {
        "id": f"chatcmpl-faulty-{tag}",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "faulty",
    }

    def event(delta: dict[str, str], finish: str | None = None) -> bytes:
        choices = [{"index": 0, "delta": delta, "finish_reason": finish}]
        return b"data: " + orjson.dumps({**base, "choices": choices}) + b"\n\n"

    events = [event({"content": f"{tag}:{i} "}) for i in range(chunks)]
    return [*events, event({}, "stop"), b"data: [DONE]\n\n"]


def sse_body(chunks: int, tag: str = "") -> bytes:
    return b"".join(sse_events(chunks, tag))


def completion_body(tag: str = "") -> bytes:
    return orjson.dumps(
        {
            "id": f"chatcmpl-faulty-{tag}",
            "object": "chat.completion",
            "created": 1,
            "model": "faulty",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": f"ok {tag}"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
        }
    )


def error_body(status: int) -> bytes:
    kind = "rate_limit_exceeded" if status == 429 else "server_error"
    message = f"faulty upstream answered {status} on purpose"
    return orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": kind}})


@dataclass
class RequestRecord:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes
    fault: Fault
    raw_headers: list[tuple[str, str]] = field(default_factory=list)  # as they came, repeats apart


@dataclass
class ConnectionRecord:
    """One accepted connection. ``closed_by``: "peer" (the proxy closed it), "server" (we did, in
    order), "abort" (we reset it on purpose) or "shutdown" (the server stopped)."""

    id: int
    opened_at: float
    requests: list[RequestRecord] = field(default_factory=list)
    events_sent: int = 0
    peer_closed_at: float | None = None
    closed_at: float | None = None
    closed_by: str | None = None

    @property
    def open(self) -> bool:
        return self.closed_at is None


class _Connection(asyncio.Protocol):
    def __init__(self, server: FaultyUpstream) -> None:
        self.server = server
        self.buffer = bytearray()
        self.more = asyncio.Event()
        self.lost = asyncio.Event()
        self.eof = False
        self.writable = asyncio.Event()
        self.writable.set()
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None
        self.record = ConnectionRecord(next(server.ids), time.monotonic())
        self.answer = Answer()

    # asyncio callbacks -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server.connections.append(self.record)
        self.server.live.add(self)
        self.task = asyncio.get_running_loop().create_task(self.serve())

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self.more.set()

    def eof_received(self) -> bool:
        self.eof = True
        self._mark_peer_closed()
        self.more.set()
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        if self.record.closed_by is None:
            self._mark_peer_closed()
        self.record.closed_at = time.monotonic()
        self.lost.set()
        self.more.set()
        self.writable.set()
        self.server.live.discard(self)
        if self.task and not self.task.done():
            self.task.cancel()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def _mark_peer_closed(self) -> None:
        if self.record.peer_closed_at is None and self.record.closed_by is None:
            self.record.peer_closed_at = time.monotonic()
            self.record.closed_by = "peer"

    # serving -----------------------------------------------------------------------------------

    async def serve(self) -> None:
        try:
            while not self.lost.is_set():
                request = await self.read_request()
                if request is None:
                    break
                self.record.requests.append(request)
                self.server.requests_total += 1
                keep_alive = await self.respond(request)
                if not keep_alive:
                    break
        except asyncio.CancelledError:
            pass
        finally:
            self.close("server")

    def close(self, how: str) -> None:
        if self.transport and not self.transport.is_closing():
            if self.record.closed_by is None:
                self.record.closed_by = how
            if how == "abort":
                self.transport.abort()
            else:
                self.transport.close()

    async def read_request(self) -> RequestRecord | None:
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            if self.eof or self.lost.is_set() or len(self.buffer) > MAX_HEAD_BYTES:
                return None
            self.more.clear()
            await self.more.wait()
        head = bytes(self.buffer[:end]).decode("latin-1")
        del self.buffer[: end + 4]
        request_line, *lines = head.split("\r\n")
        method, target, _ = ([*request_line.split(" ", 2), "", ""])[:3]
        raw_headers = [
            (name.strip(), value.strip()) for name, _, value in (line.partition(":") for line in lines)
        ]
        headers = {name.lower(): value for name, value in raw_headers}
        length = int(headers.get("content-length", "0") or 0)
        if length > MAX_BODY_BYTES:
            return None
        while len(self.buffer) < length:
            if self.eof or self.lost.is_set():
                return None
            self.more.clear()
            await self.more.wait()
        body = bytes(self.buffer[:length])
        del self.buffer[:length]
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(target).query)
        spec = headers.get("x-fault") or (query.get("fault") or ["ok"])[0]
        return RequestRecord(method, target, headers, body, Fault.parse(spec), raw_headers)

    async def write(self, data: bytes) -> None:
        assert self.transport
        if self.lost.is_set():
            raise asyncio.CancelledError
        self.transport.write(data)
        await self.writable.wait()

    async def hold(self, seconds: float) -> None:
        """Say nothing until the other side gives up or `seconds` pass."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.lost.wait(), seconds)

    async def respond(self, request: RequestRecord) -> bool:
        """Answer one request; False when the connection must not be reused."""
        fault = request.fault
        self.answer = Answer(request.method == "HEAD", fault.cookies)
        path = urllib.parse.urlsplit(request.target).path
        keep_alive = request.headers.get("connection", "").lower() != "close"
        if path == "/_faulty/stats":
            await self.send_json(200, orjson.dumps(self.server.stats()))
            return keep_alive
        if path.endswith("/models") or path in ("/health", "/healthz"):
            models = {"object": "list", "data": [{"id": "faulty", "object": "model", "owned_by": "test"}]}
            await self.send_json(200, orjson.dumps(models))
            return keep_alive
        if fault.after < 0 and fault.mode in ("stall", "reset", "close", "garbage", "bad-status"):
            if fault.mode == "stall":
                await self.hold(fault.hold)
            elif fault.mode == "garbage":
                await self.write(GARBAGE)
            elif fault.mode == "bad-status":
                await self.write(BAD_STATUS)
            self.close("abort" if fault.mode == "reset" else "server")
            return False
        if fault.mode == "status":
            retry = {"retry-after": fault.retry_after} if fault.retry_after else {}
            await self.send_json(fault.code, error_body(fault.code), retry)
            return keep_alive
        stream = fault.stream
        if stream is None:
            try:
                stream = bool(orjson.loads(request.body).get("stream")) if request.body else False
            except (orjson.JSONDecodeError, AttributeError):
                stream = False
        if not stream:
            await asyncio.sleep(fault.delay)
            await self.send_json(200, completion_body(fault.tag))
            return keep_alive
        return await self.stream(fault) and keep_alive

    async def send_json(self, status: int, body: bytes, extra: dict[str, str] | None = None) -> None:
        headers = {"content-type": "application/json", "content-length": str(len(body)), **(extra or {})}
        await self.write(self.answer.head(status, headers) + (b"" if self.answer.head_only else body))

    async def stream(self, fault: Fault) -> bool:
        headers = {"content-type": "text/event-stream", "cache-control": "no-cache"}
        await self.write(self.answer.head(200, {**headers, "transfer-encoding": "chunked"}))
        for i, event in enumerate(sse_events(fault.chunks, fault.tag)):
            if i == fault.after and fault.mode in ("stall", "reset", "close"):
                if fault.mode == "stall":
                    await self.hold(fault.hold)
                self.close("abort" if fault.mode == "reset" else "server")
                return False
            if i and fault.delay:
                await asyncio.sleep(fault.delay)
            await self.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.record.events_sent += 1
        await self.write(b"0\r\n\r\n")
        return True


@dataclass(frozen=True)
class Answer:
    """How the current request is answered: head only (HEAD), and with how many cookies."""

    head_only: bool = False
    cookies: int = 0

    def head(self, status: int, headers: dict[str, str]) -> bytes:
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
        lines += [f"Date: {formatdate(usegmt=True)}", "Server: faulty/1.0"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        lines += [f"Set-Cookie: c{i}=v{i}; Path=/; HttpOnly" for i in range(self.cookies)]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


_REASONS = {200: "OK", 400: "Bad Request", 429: "Too Many Requests", 500: "Internal Server Error"}


class FaultyUpstream:
    """The server. `start()` and `stop()` run on whichever loop owns it."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self.ids = itertools.count(1)
        self.connections: list[ConnectionRecord] = []
        self.live: set[_Connection] = set()
        self.requests_total = 0
        self._server: asyncio.Server | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """What the proxy's ``COMPACT_UPSTREAM_URL`` should be."""
        return self.base_url + "/v1"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self), self.host, self.port, reuse_address=True, backlog=1024
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server:
            self._server.close()
        for connection in list(self.live):
            connection.close("shutdown")
        tasks = [c.task for c in self.live if c.task]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    def find(self, tag: str) -> ConnectionRecord | None:
        """The connection that carried the request tagged `tag` (``x-fault: ...; tag=...``)."""
        for record in list(self.connections):
            if any(request.fault.tag == tag for request in list(record.requests)):
                return record
        return None

    def open_connections(self) -> list[ConnectionRecord]:
        return [c for c in list(self.connections) if c.open]

    def stats(self) -> dict[str, int]:
        return {
            "connections_total": len(self.connections),
            "connections_open": len(self.open_connections()),
            "requests_total": self.requests_total,
        }


@contextmanager
def serve_in_thread(host: str = "127.0.0.1", port: int = 0) -> Iterator[FaultyUpstream]:
    """A running `FaultyUpstream` on its own event loop in a daemon thread, stopped afterwards."""
    loop = asyncio.new_event_loop()
    server = FaultyUpstream(host, port)
    thread = threading.Thread(target=loop.run_forever, name="faulty-upstream", daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(timeout=10)
        yield server
    finally:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(server.stop(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released): connecting to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.upstreams.faulty", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-seconds", type=float, default=3600, help="exit after this long, whatever")
    args = parser.parse_args()

    async def run() -> None:
        server = FaultyUpstream(args.host, args.port)
        await server.start()
        try:
            await asyncio.sleep(args.max_seconds)
        finally:
            await server.stop()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


if __name__ == "__main__":
    main()
