"""uvicorn's httptools protocol with the limits a server facing the internet needs: on the request
head's size, on the time a client may take to send it, on the time it may leave a body idle, and on
how many client connections are open at once.

httptools itself buffers a header of any size before the app sees it, so a hostile client could
send megabytes of headers. This counts a head's bytes as they arrive and answers 431 (closing the
connection) past `COMPACT_MAX_HEADER_BYTES`, before the parser has seen the read that crossed the
line, so at most the limit plus one read is ever buffered. Bodies are not counted here: the app
limits them (`COMPACT_MAX_BODY_BYTES`).

Only head bytes count. A read that begins inside a head counts up to the blank line that ends it
(which may come in this read, with the body after it, or in a later one); a read that begins inside
a body counts nothing, so a long chat whose head and body arrive together is never refused.

Time, as nginx's `client_header_timeout` and `client_body_timeout` have it: a head must be complete
within `COMPACT_HEADER_TIMEOUT` seconds of the connection opening (or of its first byte, on a
kept-alive connection, whose idle time uvicorn's keep-alive timeout bounds), and a body may go
`COMPACT_BODY_TIMEOUT` seconds without a byte, unless the proxy itself stopped reading (flow
control). Either gets a 408 and the connection is closed: a slowloris client holds a connection
for seconds, not for ever. Past `COMPACT_MAX_CLIENT_CONNECTIONS` open connections a new one gets a
503 and is closed at once, so the process keeps file descriptors for its upstream and its probes.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from proxy.errors import error_body

DEFAULT_MAX_HEADER_BYTES = 64 * 1024
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_BODY_TIMEOUT = 30.0
DEFAULT_MAX_CLIENT_CONNECTIONS = 1000
HEAD_END = b"\r\n\r\n"
REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large", 503: b"Service Unavailable"}


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        env = os.environ
        self.max_header_bytes = int(env.get("COMPACT_MAX_HEADER_BYTES", DEFAULT_MAX_HEADER_BYTES))
        self.header_timeout = float(env.get("COMPACT_HEADER_TIMEOUT", DEFAULT_HEADER_TIMEOUT))
        self.body_timeout = float(env.get("COMPACT_BODY_TIMEOUT", DEFAULT_BODY_TIMEOUT))
        self.max_client_connections = int(
            env.get("COMPACT_MAX_CLIENT_CONNECTIONS", DEFAULT_MAX_CLIENT_CONNECTIONS)
        )
        self.in_head = True  # from the connection's start or a message's end to the next head's end
        self.head_bytes = 0
        self.tail = b""  # the last bytes received: a head's blank line may straddle two reads
        self.deadline: asyncio.TimerHandle | None = None
        self.in_body = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_client_connections:
            self.send_error(503, "The proxy has too many open connections; try again later.", "overloaded")
            return
        self._arm(self.header_timeout, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_headers_complete(self) -> None:
        self.in_head, self.head_bytes = False, 0
        self._disarm()
        self.in_body = True
        self._arm(self.body_timeout, self._body_timed_out)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self.in_body = False
        self._disarm()
        super().on_message_complete()
        self.in_head = True

    def data_received(self, data: bytes) -> None:
        if self.in_head and not self.transport.is_closing():
            idle = self.cycle is None or self.cycle.response_complete  # not an answer under way
            if self.deadline is None and idle:  # the first byte of a head on a kept-alive connection
                self._arm(self.header_timeout, self._head_timed_out)
            end = (self.tail + data).find(HEAD_END)
            self.head_bytes += len(data) if end < 0 else max(0, end + len(HEAD_END) - len(self.tail))
            if self.head_bytes > self.max_header_bytes:
                self.send_431()
                return
        elif self.in_body:
            self._arm(self.body_timeout, self._body_timed_out)
        self.tail = (self.tail + data[-3:])[-3:]
        super().data_received(data)

    def _arm(self, seconds: float, callback: Any) -> None:
        self._disarm()
        self.deadline = self.loop.call_later(seconds, callback)

    def _disarm(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def _head_timed_out(self) -> None:
        self.deadline = None
        if not self.transport.is_closing():
            message = f"The request head was not complete within {self.header_timeout:g} seconds."
            self.send_error(408, message, "request_timeout")

    def _body_timed_out(self) -> None:
        self.deadline = None
        if self.transport.is_closing() or not self.in_body:
            return
        if self.flow.read_paused:  # the proxy is not reading: the client is not the one waiting
            self._arm(self.body_timeout, self._body_timed_out)
            return
        message = f"The request body sent nothing for {self.body_timeout:g} seconds."
        self.send_error(408, message, "request_timeout")

    def send_431(self) -> None:
        message = f"The request's headers are larger than the proxy's limit of {self.max_header_bytes} bytes."
        self.send_error(431, message, "request_header_fields_too_large")

    def send_error(self, status: int, message: str, code: str) -> None:
        """Answer `status` (unless an answer has begun already) and close the connection."""
        started = self.cycle is not None and self.cycle.response_started
        if not started:
            kind = "server_error" if status >= 500 else "invalid_request_error"
            body = error_body(message, type=kind, code=code)
            head = (
                b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n" % (status, REASONS[status])
                + b"connection: close\r\ncontent-length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
            )
            self.transport.write(head + body)
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True  # the app reading this body hears the client is gone
            self.cycle.message_event.set()
        self.transport.close()
