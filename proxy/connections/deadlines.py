"""The protocol's clock and its own answers: the part of `LimitedHttpToolsProtocol` (`protocol.py`)
that keeps a client's time limits and answers the ones it breaks.

Time, as nginx's `client_header_timeout` and `client_body_timeout` have it: a head must be complete
within `COMPACT_HEADER_TIMEOUT` seconds of the connection opening (or of its first byte, on a
kept-alive connection, whose idle time uvicorn's keep-alive timeout bounds), and a body may go
`COMPACT_BODY_TIMEOUT` seconds without a byte, unless the proxy itself stopped reading (flow
control). A body that was under way while the proxy was under load (open connections at half of
`COMPACT_MAX_CLIENT_CONNECTIONS` or more, at any time since its head's end) must also arrive at `COMPACT_MIN_BODY_RATE` bytes a second on average, counted from its head's end
after a grace of `COMPACT_MIN_BODY_RATE_GRACE` seconds, time the proxy was not reading excluded:
Kestrel's `MinRequestBodyDataRate`, applied under pressure as Envoy's overload manager shortens its
timeouts, so a slow upload at ordinary load is still served. Each gets a 408 and the connection is
closed: a slowloris client holds a connection for seconds, not for ever.

One deadline runs at a time per connection (the head's, the body's, or the keep-alive's): re-armed
as a request goes, its timer moved only when it would fire too late.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from proxy.connections.flow import ProbeReserve
from proxy.errors import openai_error_body

PRESSURE_SHARE = 0.5  # of the cap: from there on, the minimum body rate applies
RATE_CHECK_EVERY = 1.0  # seconds, as Kestrel's heartbeat
REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large", 503: b"Service Unavailable"}


class Deadlines(HttpToolsProtocol):
    """The deadlines and the protocol's own answers (408, 431, 503); the state they read is set by
    `LimitedHttpToolsProtocol`."""

    header_timeout: float
    body_timeout: float
    max_client_connections: int
    min_body_rate: float
    min_rate_grace: float
    reserve: ProbeReserve
    deadline: Callable[[], None] | None  # what to do when `deadline_at` passes
    deadline_at: float
    timer: asyncio.TimerHandle | None  # fires at or before `deadline_at`
    in_body: bool
    body_bytes: int
    body_start: float  # the loop's clock at the head's end
    body_paused_at_start: float  # seconds reading had been paused by then
    rate_check: asyncio.TimerHandle | None

    def _arm(self, seconds: float, callback: Callable[[], None]) -> None:
        """Run `callback` in `seconds` unless disarmed or re-armed first. The timer is moved only
        when it would fire too late: deadlines mostly move later, and the timer then catches up."""
        self.deadline, self.deadline_at = callback, self.loop.time() + seconds
        if self.timer is not None and self.timer.when() > self.deadline_at:
            self.timer.cancel()
            self.timer = None
        if self.timer is None:
            self.timer = self.loop.call_at(self.deadline_at, self._on_timer)

    def _disarm(self) -> None:
        self.deadline = None

    def _on_timer(self) -> None:
        self.timer = None
        if self.deadline is None:
            return
        if self.loop.time() < self.deadline_at:  # the deadline moved on since the timer was set
            self.timer = self.loop.call_at(self.deadline_at, self._on_timer)
            return
        callback, self.deadline = self.deadline, None
        callback()

    def _keep_alive_ended(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()

    def _stop_rate_check(self) -> None:
        if self.rate_check is not None:
            self.rate_check.cancel()
            self.rate_check = None

    def _head_timed_out(self) -> None:
        if not self.transport.is_closing():
            message = f"The request head was not complete within {self.header_timeout:g} seconds."
            self.send_error(408, message, "request_timeout")

    def _body_timed_out(self) -> None:
        if self.transport.is_closing() or not self.in_body:
            return
        if self.flow.read_paused:  # the proxy is not reading: the client is not the one waiting
            self._arm(self.body_timeout, self._body_timed_out)
            return
        message = f"The request body sent nothing for {self.body_timeout:g} seconds."
        self.send_error(408, message, "request_timeout")

    def _check_rate(self) -> None:
        """Kestrel's minimum body data rate, checked every second once the grace is over."""
        self.rate_check = None
        if self.transport.is_closing() or not self.in_body:
            return
        now = self.loop.time()
        if len(self.connections) >= self.max_client_connections * PRESSURE_SHARE:
            self.reserve.last_busy = now
        if self.reserve.last_busy >= self.body_start:  # busy at some time since the head's end
            paused = self.flow.paused_for(now) - self.body_paused_at_start  # type: ignore[attr-defined]
            elapsed = now - self.body_start - paused
            if elapsed >= self.min_rate_grace and self.body_bytes < self.min_body_rate * elapsed:
                message = (
                    f"The request body came slower than {self.min_body_rate:g} bytes a second "
                    "while the proxy was busy."
                )
                self.send_error(408, message, "request_timeout")
                return
        self.rate_check = self.loop.call_later(RATE_CHECK_EVERY, self._check_rate)

    def send_error(self, status: int, message: str, code: str) -> None:
        """Answer `status` (unless an answer has begun already) and close the connection."""
        started = self.cycle is not None and self.cycle.response_started
        if not started:
            kind = "server_error" if status >= 500 else "invalid_request_error"
            body = openai_error_body(message, type=kind, code=code)
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
