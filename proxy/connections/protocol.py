"""uvicorn's httptools protocol with the limits a server facing the internet needs: on the request
head's size, on the time a client may take to send it, on how slowly it may send a body, on how many
requests it may pipeline ahead of its answers, and on how many client connections are open at once.

httptools itself buffers a header of any size before the app sees it, so a hostile client could
send megabytes of headers. This counts a head's bytes as they arrive and answers 431 (closing the
connection) past `COMPACT_MAX_HEADER_BYTES`, before the parser has seen the read that crossed the
line, so at most the limit plus one read is ever buffered. Bodies are not counted here: the app
limits them (`COMPACT_MAX_BODY_BYTES`).

Only head bytes count. A read that begins inside a head counts up to the blank line that ends it
(which may come in this read, with the body after it, or in a later one); a read that begins inside
a body counts nothing, so a long chat whose head and body arrive together is never refused.

Pipelining: httptools parses every request in whatever it is fed, and uvicorn queues each one behind
the answer under way, so one 256 KB read of tiny `GET`s was 7,700 queued requests. Here a read is fed
to the parser one message at a time (a head up to its blank line, a body up to its `Content-Length`),
and once `MAX_QUEUED` requests wait behind the answer under way, the rest of the read is kept and the
connection is not read again (`HeldFlow.hold`) until the queue drains: as h11, nginx and Kestrel, which
take the next request only when the current one is answered, a connection costs at most one read and
a few parsed requests however much it pipelines.

Past `COMPACT_MAX_CLIENT_CONNECTIONS` open connections a few more (`PROBE_RESERVE`) are accepted for
the probe paths only (`/healthz`, `/readyz`, `/metrics`, answered and closed; any other request gets
503), as Envoy's health listener ignores its global connection limit, so a full proxy still answers
its liveness probe; past those a new connection gets 503 and is closed at once.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httptools
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT

from proxy.connections.deadlines import PRESSURE_SHARE, Deadlines
from proxy.connections.flow import (
    OVERLOADED,
    PROBE_PATHS,
    HeldFlow,
    answer_overloaded,
    reserve_of,
    turns_of,
)
from proxy.settings import Settings

DEFAULT_MAX_HEADER_BYTES = 64 * 1024
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_BODY_TIMEOUT = 30.0
DEFAULT_MAX_CLIENT_CONNECTIONS = 1000
DEFAULT_MIN_BODY_RATE = 240.0
DEFAULT_MIN_BODY_RATE_GRACE = 5.0
MAX_QUEUED = 8  # parsed requests waiting behind the answer under way, per connection
PIPELINED_PER_TURN = 2  # pipelined requests started per turn of the event loop, of all connections
PROBE_RESERVE = 16  # connections past the cap, for the probe paths only
CHUNKED_SLICE = 4096  # a chunked body is fed in pieces this size: its end is not known ahead
HEAD_END = b"\r\n\r\n"
CHUNKED_END = b"0\r\n\r\n"


@dataclass(frozen=True, slots=True)
class ClientLimits:
    """The limits on one worker's clients (the `COMPACT_*` settings of the same names)."""

    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    max_client_connections: int = DEFAULT_MAX_CLIENT_CONNECTIONS
    min_body_rate: float = DEFAULT_MIN_BODY_RATE
    min_body_rate_grace: float = DEFAULT_MIN_BODY_RATE_GRACE

    @classmethod
    def of(cls, settings: Settings) -> ClientLimits:
        return cls(
            settings.max_header_bytes,
            settings.header_timeout,
            settings.body_timeout,
            settings.max_client_connections,
            settings.min_body_rate,
            settings.min_body_rate_grace,
        )


def protocol_with(limits: ClientLimits) -> Callable[..., LimitedHttpToolsProtocol]:
    """The protocol for uvicorn's `http` option, with `limits`. A partial of a module-level class and
    a dataclass pickles, so it reaches each `--workers` process (spawned, with uvicorn's config)."""
    return functools.partial(LimitedHttpToolsProtocol, limits=limits)


class LimitedHttpToolsProtocol(Deadlines):
    def __init__(self, *args: Any, limits: ClientLimits | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limits = limits or ClientLimits()
        self.max_header_bytes = limits.max_header_bytes
        self.header_timeout = limits.header_timeout
        self.body_timeout = limits.body_timeout
        self.max_client_connections = limits.max_client_connections
        self.min_body_rate = limits.min_body_rate
        self.min_rate_grace = limits.min_body_rate_grace
        self.reserve = reserve_of(self.server_state, PROBE_RESERVE)
        self.turns = turns_of(self.server_state, PIPELINED_PER_TURN)
        self.probe_only = False  # accepted past the cap: a probe path, or 503
        self.in_head = True  # from the connection's start or a message's end to the next head's end
        self.head_bytes = 0
        self.tail = b""  # the last bytes received: a head's blank line may straddle two reads
        self.deadline: Callable[[], None] | None = None  # what to do when `deadline_at` passes
        self.deadline_at = 0.0
        self.timer: asyncio.TimerHandle | None = None  # fires at or before `deadline_at`
        self.in_body = False
        self.body_left: int | None = None  # of a body with a Content-Length; None when chunked
        self.body_bytes = 0
        self.body_start = 0.0  # the loop's clock at the head's end
        self.body_paused_at_start = 0.0  # seconds reading had been paused by then
        self.rate_check: asyncio.TimerHandle | None = None
        self.backlog = b""  # read but not yet fed: the pipeline queue is full
        self.releasing = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.flow = HeldFlow(transport, self.loop.time)
        if len(self.connections) >= self.max_client_connections * PRESSURE_SHARE:
            self.reserve.last_busy = self.loop.time()
        if len(self.connections) - len(self.reserve) > self.max_client_connections:
            if not self.reserve.admit(self):
                self.send_error(503, OVERLOADED, "overloaded")
                return
            self.probe_only = True
        self._arm(self.header_timeout, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self.timer is not None:
            self.timer.cancel()
        self._stop_rate_check()
        self.backlog = b""
        if self.probe_only:
            self.reserve.leave(self)
        super().connection_lost(exc)

    def evict(self) -> None:
        """Closed to make room in the probe reserve for a newer connection: a 503 as past the reserve."""
        self._disarm()
        self.send_error(503, OVERLOADED, "overloaded")

    # --- the parser's callbacks -------------------------------------------------------------------

    def on_headers_complete(self) -> None:
        self.in_head, self.head_bytes = False, 0
        self._disarm()
        self.in_body = True
        self.body_left = content_length(self.headers)
        self.body_bytes = 0
        self.body_start = self.loop.time()
        self.body_paused_at_start = self.flow.paused_for(self.body_start)  # type: ignore[attr-defined]
        if self.probe_only and not is_probe(self.url):
            self.app = answer_overloaded
        super().on_headers_complete()
        if self.probe_only and self.cycle is not None:
            self.cycle.keep_alive = False  # one answer, then closed: the reserve is for probes

    def on_body(self, body: bytes) -> None:
        self.body_bytes += len(body)
        if self.body_left is not None:
            self.body_left -= len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self.in_body = False
        self._disarm()
        self._stop_rate_check()
        super().on_message_complete()
        self.in_head = True

    def on_response_complete(self) -> None:
        """uvicorn's, with the keep-alive timeout one of this protocol's deadlines: no timer is made
        and cancelled for each request (a kept-alive connection's timer fires every few seconds)."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:  # the next one when its turn comes (left queued meanwhile: order is kept)
            self.turns.add(self._start_pipelined)
        elif self.in_head and self.head_bytes == 0:
            self._arm(self.timeout_keep_alive, self._keep_alive_ended)
        elif self.in_head:  # the next head began while this answer was under way
            self._arm(self.header_timeout, self._head_timed_out)
        if self.backlog and not self.releasing and not self._queue_full():
            self.releasing = True
            self.loop.call_soon(self._release)

    def _start_pipelined(self) -> None:
        if self.pipeline and not self.transport.is_closing():
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)

    # --- reading ------------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self.backlog:  # a read that raced the hold waits behind the bytes held
            self.backlog += data
            return
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        """Feed `data` one message at a time, keeping the rest once the pipeline queue is full."""
        start, size = 0, len(data)
        while start < size and not self.transport.is_closing():
            if self._queue_full():
                self.backlog = data[start:]
                self.flow.hold()  # type: ignore[attr-defined]
                return
            end = self._piece_end(data, start)
            self._receive(data if start == 0 and end == size else data[start:end])
            start = end
        if self.in_body and not self.transport.is_closing():
            self._arm(self.body_timeout, self._body_timed_out)
            if self.rate_check is None and self.min_body_rate > 0:
                self.rate_check = self.loop.call_later(self.min_rate_grace, self._check_rate)

    def _piece_end(self, data: bytes, start: int) -> int:
        """Where the message being parsed ends in `data` (or may end: feeding less is harmless)."""
        size = len(data)
        if self.in_head:
            if start == 0 and self.tail:
                straddle = (self.tail + data[:3]).find(HEAD_END)
                if straddle >= 0:
                    return straddle + len(HEAD_END) - len(self.tail)
            end = data.find(HEAD_END, start)
            return size if end < 0 else end + len(HEAD_END)
        if self.body_left is not None:
            return min(size, start + max(self.body_left, 1))
        end = data.find(CHUNKED_END, start, start + CHUNKED_SLICE)
        return min(size, start + CHUNKED_SLICE if end < 0 else end + len(CHUNKED_END))

    def _receive(self, data: bytes) -> None:
        if self.in_head and not self.transport.is_closing():
            idle = self.cycle is None or self.cycle.response_complete  # not an answer under way
            if self.deadline != self._head_timed_out and idle:  # a kept-alive connection's next head
                self._arm(self.header_timeout, self._head_timed_out)
            end = (self.tail + data).find(HEAD_END)
            self.head_bytes += len(data) if end < 0 else max(0, end + len(HEAD_END) - len(self.tail))
            if self.head_bytes > self.max_header_bytes:
                self.send_431()
                return
        self.tail = (self.tail + data[-3:])[-3:]
        super().data_received(data)

    def _queue_full(self) -> bool:
        if not self.pipeline:
            return False
        return len(self.pipeline) >= MAX_QUEUED or len(self.cycle.body) > HIGH_WATER_LIMIT

    def _release(self) -> None:
        self.releasing = False
        if self.parser is None or self.transport.is_closing():
            return
        data, self.backlog = self.backlog, b""
        self._feed(data)
        if not self.backlog:
            self.flow.release()  # type: ignore[attr-defined]

    # --- answers of the protocol's own ----------------------------------------------------------------

    def send_431(self) -> None:
        message = f"The request's headers are larger than the proxy's limit of {self.max_header_bytes} bytes."
        self.send_error(431, message, "request_header_fields_too_large")


def content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """A body's announced length, or None when it is chunked (or the header is not a number)."""
    length = 0
    for name, value in headers:
        if name == b"transfer-encoding" or (name == b"content-length" and not value.isdigit()):
            return None
        if name == b"content-length":
            length = int(value)
    return length


def is_probe(url: bytes) -> bool:
    try:
        return httptools.parse_url(url).path in PROBE_PATHS
    except httptools.HttpParserInvalidURLError:
        return False
