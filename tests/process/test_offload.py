"""Compacting a big history runs off the event loop: the real proxy process keeps answering other
clients meanwhile (issue 18, item 1)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest

from tests.support.format_fixtures import recorded

pytestmark = pytest.mark.process  # starts the real proxy (and upstreams) on loopback


def big_agent_chat(results: int, lines: int) -> dict[str, Any]:
    """An agent loop of file reads: about 2.7 MB at 400 x 120, some 270 ms of planning here."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Fix the bug."},
    ]
    for i in range(results):
        call = {"name": "read_file", "arguments": json.dumps({"path": f"src/mod{i}.py"})}
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"c{i}", "type": "function", "function": call}],
            }
        )
        text = "\n".join(f"def function_{i}_{k}(x):\n    return x + {k}  # line {k}" for k in range(lines))
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": text})
    return {"model": "small", "messages": messages}


def timed(client: httpx.Client) -> float:
    started = time.perf_counter()
    assert client.get("/healthz").status_code == 200
    return time.perf_counter() - started


def test_healthz_answers_within_50_ms_while_a_big_history_is_compacted(
    upstream: str, proxy: str, fresh_record: None
) -> None:
    body = json.dumps(big_agent_chat(400, 120)).encode()
    done = threading.Event()
    outcome: dict[str, Any] = {}

    def send() -> None:
        try:
            outcome["response"] = httpx.post(
                f"{proxy}/v1/chat/completions",
                content=body,
                headers={"content-type": "application/json"},
                timeout=60,
            )
        finally:
            done.set()

    with httpx.Client(base_url=proxy, timeout=10) as client:
        client.get("/healthz")  # the connection is open before the big request starts
        # What this (shared, noisy) machine adds to a /healthz with no big request in flight.
        idle = [timed(client) for _ in range(50)]
        sender = threading.Thread(target=send)
        sender.start()
        latencies: list[float] = []
        while not done.is_set():
            latencies.append(timed(client))
            time.sleep(0.005)
        sender.join()
    response = outcome["response"]
    assert response.status_code == 200, response.text
    assert int(response.headers["x-compaction-tokens-before"]) > 500_000
    assert recorded(upstream), "the compacted request reached the upstream"
    assert len(latencies) >= 5, "the big request was in flight for a while"
    # Every answer but one within 50 ms (plus what this shared machine added when idle); the one is
    # a hand-off on a loaded machine (seen up to 73 ms at load 9 on 2 cores), never the whole
    # compaction: on the event loop that blocked /healthz for 311 ms.
    noise = max(idle) - min(idle)
    slowest, second = sorted(latencies)[-1], sorted(latencies)[-2]
    shown = f"{[round(x * 1000) for x in latencies]} ms (idle: up to {max(idle) * 1000:.0f} ms)"
    assert second < 0.050 + noise and slowest < 0.150, shown
