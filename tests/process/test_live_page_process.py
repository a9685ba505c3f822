"""The live page's event stream on the real process, over real sockets: a request's record arrives
within a second of its answer, and an open stream does not hold the proxy's graceful shutdown."""

from __future__ import annotations

import signal
import time

import httpx
import pytest

from tests.support.live_page import FORMATS_UPSTREAM, as_chat, coding_loop, next_event, requests_of
from tests.support.processes import VENV_BIN, free_port, running
from tests.support.upstreams.proxy_server import running_proxy

pytestmark = pytest.mark.process


def test_a_record_arrives_within_a_second_and_sigterm_ends_the_stream() -> None:
    port = free_port()
    upstream = [str(VENV_BIN / "python"), str(FORMATS_UPSTREAM), "--port", str(port)]
    with (
        running([*upstream, "--window", "100000"], ready_url=f"http://127.0.0.1:{port}/_recorded"),
        running_proxy(f"http://127.0.0.1:{port}/v1", 3000, calibrate="false") as proxy,
        httpx.Client(base_url=proxy.base_url, timeout=10) as client,
        client.stream("GET", "/ui/events") as events,
    ):
        assert events.headers["content-type"].startswith("text/event-stream")
        lines = events.iter_lines()
        kind, hello = next_event(lines)
        assert kind == "hello" and hello["conversations"] == []
        body = as_chat("m", requests_of(coding_loop(12))[-1])
        answer = httpx.post(proxy.base_url + "/v1/chat/completions", json=body, timeout=10)
        answered = time.monotonic()
        kind, record = next_event(lines)
        assert kind == "record" and time.monotonic() - answered < 1.0
        assert record["record"]["headers"] == {
            k: v for k, v in answer.headers.items() if k.startswith("x-compaction-")
        }
        # The well is drawn off the loop (`live/drawing.py`): the record's update with the answer's
        # usage may come before it.
        kinds = []
        while (kind := next_event(lines))[0] != "well":
            kinds.append(kind[0])
        assert kind[1]["seq"] == record["record"]["seq"] and set(kinds) <= {"record"}, kinds

        proxy.process.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        for _ in lines:  # the proxy ends the stream itself
            pass
        proxy.process.wait(timeout=10)
        assert time.monotonic() - stopped < 5, "an open event stream held the shutdown"
