"""Issue 35, the big-body rows, against the real `compacting-proxy` process on loopback in front of
`Hostile` (a scripted upstream that records what it received): Codex compaction items repeated in
one request (row 1), Gemini calls matched without ids (row 2), item-heavy bodies compacted (row 11).
`/healthz` is polled while the heavy request runs and must answer within 50 ms plus the idle noise
of the same test (`tests/support/health.py`), and the proxy's RSS stays under 300 MB.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from tests.support.fakes import completion
from tests.support.health import responsive_during
from tests.support.hostile import Hostile, Proxy, ScriptedHandler, Seen, hostile_upstream, proxy_for

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]
RSS_LIMIT_KB = 300 * 1024
POSTER = httpx.Client(timeout=120, headers={"content-type": "application/json"})


@contextmanager
def chat_upstream_and_proxy(**env: str) -> Iterator[tuple[Hostile, Proxy]]:
    """A Chat Completions upstream answering every chat with a small answer, and the proxy."""
    with hostile_upstream() as hostile:

        def chat(h: ScriptedHandler, seen: Seen) -> None:
            h.json(200, completion("ok"))

        hostile.routes["/v1/chat/completions"] = chat
        hostile.routes["/v1/models"] = lambda h, s: h.json(200, {"object": "list", "data": []})
        with proxy_for(hostile.url, **env) as proxy:
            yield hostile, proxy


def post(url: str, content: bytes) -> tuple[httpx.Response, float]:
    started = time.perf_counter()
    response = POSTER.post(url, content=content)
    return response, time.perf_counter() - started


# --- 2: Gemini calls and results without ids are matched in linear time ----------------------------


def gemini_calls_without_ids(calls: int) -> bytes:
    """A model turn of `calls` function calls, then a user turn of as many responses, none with an id
    (Gemini CLI's own calls carry ids; the API's examples and other clients' do not)."""
    call_parts = [{"functionCall": {"name": "f", "args": {"n": i}}} for i in range(calls)]
    answers = [{"functionResponse": {"name": "f", "response": {"output": "ok"}}} for _ in range(calls)]
    contents: list[dict[str, Any]] = [
        {"role": "user", "parts": [{"text": "run them all"}]},
        {"role": "model", "parts": call_parts},
        {"role": "user", "parts": answers},
    ]
    return json.dumps({"contents": contents}).encode()


def test_2_gemini_calls_without_ids_are_matched_without_freezing_the_proxy() -> None:
    content = gemini_calls_without_ids(8_000)  # 8,000 calls + 8,000 responses, ~0.6 MB
    with chat_upstream_and_proxy(COMPACT_WINDOW="1000000") as (hostile, proxy):
        url = proxy.base_url + "/v1beta/models/m:generateContent"

        def send() -> None:
            response, _ = post(url, content)
            assert response.status_code == 200, response.text[:300]

        responsive_during(proxy, send)
        assert proxy.rss_kb() < RSS_LIMIT_KB, proxy.rss_kb()
    sent = json.loads(hostile.seen[-1].body)["messages"]
    calls = [c["id"] for m in sent if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
    results = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
    assert len(calls) == 8_000 and results == calls  # each response answers its call, in order
