"""The send timeout's watch, on a clock of its own: what counts as the client taking its answer."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from proxy.connections.sending import SendWatch, held_for_client


class Clock:
    """A loop's `time` and `call_later`, run by hand."""

    def __init__(self) -> None:
        self.now = 0.0
        self.due: list[tuple[float, Callable[[], None]]] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], None]) -> Any:
        self.due.append((self.now + delay, callback))
        return Timer(self.due, self.due[-1])

    def advance(self, seconds: float) -> None:
        end = self.now + seconds
        while (ready := sorted(t for t in self.due if t[0] <= end)) and ready:
            self.due.remove(ready[0])
            self.now = ready[0][0]
            ready[0][1]()
        self.now = end


class Timer:
    def __init__(self, due: list[Any], entry: Any) -> None:
        self.due, self.entry = due, entry

    def cancel(self) -> None:
        if self.entry in self.due:
            self.due.remove(self.entry)


class Transport:
    def __init__(self) -> None:
        self.buffered = 0

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def get_extra_info(self, name: str) -> None:
        return None


def watch(timeout: float) -> tuple[SendWatch, Transport, Clock, list[float]]:
    transport, clock, fired = Transport(), Clock(), []
    sent = SendWatch(transport, clock, timeout, lambda: fired.append(clock.now))  # type: ignore[arg-type]
    return sent, transport, clock, fired


def test_an_answer_nobody_takes_times_out_once() -> None:
    sent, transport, clock, fired = watch(10)
    transport.buffered = 100_000
    sent.start()
    clock.advance(60)
    assert fired == [10.0]


def test_a_client_taking_a_little_at_a_time_is_never_cut() -> None:
    sent, transport, clock, fired = watch(10)
    transport.buffered = 1_000_000
    sent.start()
    for _ in range(100):  # 1,000 bytes every 9 s: far slower than the answer, within the timeout
        clock.advance(9)
        transport.buffered -= 1_000
    assert fired == []


def test_stopped_when_writing_resumes_and_counted_afresh_when_paused_again() -> None:
    sent, transport, clock, fired = watch(10)
    transport.buffered = 100_000
    sent.start()
    clock.advance(8)
    sent.stop()
    clock.advance(100)
    sent.start()
    clock.advance(9)
    assert fired == []
    clock.advance(2)
    assert fired == [118.0]


@pytest.mark.skipif(sys.platform != "linux", reason="SIOCOUTQ is Linux's")
def test_the_kernels_queue_counts_as_held() -> None:
    """Bytes sent and not yet acknowledged (Linux's `SIOCOUTQ`) are held until the client reads them."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        left = socket.create_connection(server.getsockname())
        right, _ = server.accept()
    with left, right:
        left.setblocking(False)
        sent = left.send(b"x" * 4_000_000)  # more than the client's buffer takes unread

        class Connected(Transport):
            def get_extra_info(self, name: str) -> Any:
                return left if name == "socket" else None

        held = held_for_client(Connected())  # type: ignore[arg-type]
        assert 0 < held <= sent  # sent, not yet read and acknowledged
        received = 0
        while received < sent:
            received += len(right.recv(65536))
        deadline = time.monotonic() + 30
        while held_for_client(Connected()) > 0:  # type: ignore[arg-type]  # the last ack on its way
            assert time.monotonic() < deadline
            time.sleep(0.01)
