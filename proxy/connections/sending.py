"""Answers a client does not read: nginx's `send_timeout`, kept under the app.

A client that stops reading leaves its answer in the connection's buffers: a live page that reads
nothing (the page drops it, but its connection stays open while the client does), a chat client that
stopped reading halfway (flow control pauses the upstream's stream behind it). The app cannot close a
connection; this layer can.

As nginx's `send_timeout` (60 s by default, `COMPACT_SEND_TIMEOUT`), the time is counted between two
moves of the answer, not over the whole answer, so a slow client that takes a few bytes a minute is
never cut however long the answer. A move is the client taking bytes: what the proxy still holds for
it shrinking, in the transport's buffer and, where the platform tells (Linux's `SIOCOUTQ`), in the
socket's queue not yet acknowledged. The transport's buffer alone would not do: the kernel takes more
of it only once its queue is half empty, which a slow reader of a queue of megabytes reaches after
minutes. The watch runs only while the transport holds more than its high-water mark (writing
paused), so a client that reads costs no timer. Past the timeout the connection is reset (`SO_LINGER`
0, as nginx's `reset_timedout_connection`), which frees the kernel's buffers too, and the app hears
that the client is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import socket
import struct
import termios
from collections.abc import Callable

DEFAULT_SEND_TIMEOUT = 60.0
CHECK_EVERY = 1.0  # seconds, at most; a quarter of the timeout when it is shorter
_NO_LINGER = struct.pack("ii", 1, 0)


class SendWatch:
    """Calls `timed_out` once the bytes held for a connection's client have not shrunk for
    `timeout` seconds, from `start` (writing paused) until `stop` (resumed, or the connection lost)."""

    def __init__(
        self,
        transport: asyncio.Transport,
        loop: asyncio.AbstractEventLoop,
        timeout: float,
        timed_out: Callable[[], None],
    ) -> None:
        self.transport, self.loop, self.timeout, self.timed_out = transport, loop, timeout, timed_out
        self.every = min(CHECK_EVERY, timeout / 4)
        self.timer: asyncio.TimerHandle | None = None
        self.held = 0  # bytes held for the client at the last move
        self.moved_at = 0.0

    def start(self) -> None:
        if self.timer is None:
            self.held, self.moved_at = held_for_client(self.transport), self.loop.time()
            self.timer = self.loop.call_later(self.every, self._check)

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _check(self) -> None:
        self.timer = None
        held, now = held_for_client(self.transport), self.loop.time()
        if held < self.held:
            self.moved_at = now
        self.held = held
        if now - self.moved_at >= self.timeout:
            self.timed_out()
            return
        self.timer = self.loop.call_later(self.every, self._check)


def held_for_client(transport: asyncio.Transport) -> int:
    """The bytes written to `transport` that its client has not taken yet."""
    held = transport.get_write_buffer_size()
    sock = transport.get_extra_info("socket")
    if sock is not None:  # else, or where the platform does not tell, the transport's buffer alone
        with contextlib.suppress(OSError):
            held += struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
    return held


def reset(transport: asyncio.Transport) -> None:
    """Close at once, dropping what is buffered, and send a reset rather than wait for the client."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _NO_LINGER)
    transport.abort()
