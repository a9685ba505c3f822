"""The live page under attack (issue 35, rows 3, 4, 5, 7 and 10), against the real process over
loopback, one section per row.

The real `compacting-proxy` runs in front of `Hostile` (an upstream in a thread of this process that
answers each API). Where a row is about memory, the proxy's RSS is read from `/proc` while the attack
goes on, and the attack stops as soon as it passes 300 MB (the old page reached gigabytes). Where a
row is about freezing, `/healthz` is polled while the request runs and must answer within 50 ms plus
the idle noise measured first in the same test (`responsive_during`).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import h11
import httpx
import pytest

from tests.support.health import in_background, parse_time, responsive_during, upstream_and_proxy
from tests.support.hostile import Proxy

pytestmark = pytest.mark.process

BIG_NAME = 4 * 1024 * 1024
RSS_LIMIT_MB = 300
CHAT = "/v1/chat/completions"


def chat(model: str, messages: list[dict[str, Any]] | None = None) -> bytes:
    messages = messages or [{"role": "user", "content": "hello"}]
    return json.dumps({"model": model, "messages": messages}).encode()


def big_name(n: int) -> str:
    return f"model-{n:04d}-" + "x" * BIG_NAME


def post(proxy: Proxy, content: bytes, key: str | None = None) -> httpx.Response:
    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    return httpx.post(proxy.base_url + CHAT, content=content, headers=headers, timeout=120)


def rss_mb(proxy: Proxy) -> float:
    return proxy.rss_kb() / 1024


def within_memory(proxy: Proxy, what: str) -> None:
    rss = rss_mb(proxy)
    assert rss < RSS_LIMIT_MB, f"RSS {rss:.0f} MB {what}"


@contextmanager
def watching(proxy: Proxy, key: str | None = None) -> Iterator[list[bytes]]:
    """A page that reads `/ui/events` in a thread: the events it got, as they came (bytes)."""
    events: list[bytes] = []
    done = threading.Event()
    sock = socket.create_connection(("127.0.0.1", int(proxy.base_url.rsplit(":", 1)[1])), timeout=30)
    head = b"GET /ui/events HTTP/1.1\r\nhost: proxy\r\n"
    sock.sendall(head + (f"x-api-key: {key}\r\n".encode() if key else b"") + b"\r\n")
    connection = h11.Connection(h11.CLIENT)
    connection.send(h11.Request(method="GET", target="/ui/events", headers=[("host", "proxy")]))

    def next_event() -> Any:
        while (event := connection.next_event()) is h11.NEED_DATA:
            try:
                connection.receive_data(sock.recv(65536))
            except TimeoutError:
                if done.is_set():
                    return None
        return event

    response = next_event()
    assert isinstance(response, h11.Response) and response.status_code == 200, response
    sock.settimeout(0.2)

    def read() -> None:
        buffer = b""
        while isinstance(event := next_event(), h11.Data):
            buffer += bytes(event.data)
            *frames, buffer = buffer.split(b"\n\n")
            events.extend(f for f in frames if not f.startswith(b":"))

    try:
        with in_background(read, done, join_s=30):
            yield events
    finally:
        sock.close()


def open_stream(proxy: Proxy) -> socket.socket:
    """A page that asks for `/ui/events` and never reads a byte (a small receive buffer)."""
    port = int(proxy.base_url.rsplit(":", 1)[1])
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(b"GET /ui/events HTTP/1.1\r\nhost: proxy\r\n\r\n")
    return sock


def head_of(sock: socket.socket) -> bytes:
    """The answer's status line and headers (what came before the connection closed, if it did)."""
    sock.settimeout(30)
    head = b""
    while b"\r\n\r\n" not in head and (chunk := sock.recv(1)):
        head += chunk
    return head


def status_of(head: bytes) -> int | None:
    return int(head.split(b" ", 2)[1]) if head else None


# --- 3: model names are cut wherever the page keeps or sends them ----------------------------------


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_3_forty_chats_with_4_mb_model_names_cost_the_page_little() -> None:
    # A window of its own: the window probe that a name would otherwise cost is not the page's.
    with upstream_and_proxy(COMPACT_WINDOW="100000") as (hostile, proxy), watching(proxy) as events:
        start = rss_mb(proxy)
        for n in range(40):
            assert post(proxy, chat(big_name(n))).status_code == 200
            hostile.seen.clear()
            within_memory(proxy, f"after {n + 1} chats with 4 MB model names (from {start:.0f} MB)")
        snapshot = httpx.get(proxy.base_url + "/ui/conversations", timeout=60)
        one = snapshot.json()["conversations"][0]
        detail = httpx.get(proxy.base_url + f"/ui/conversations/{one['key']}", timeout=60)
        time.sleep(1.5)  # the last events reach the page
        end = rss_mb(proxy)
    print(f"row 3: RSS {start:.0f} -> {end:.0f} MB; /ui/conversations {len(snapshot.content)} bytes")
    names = [c["model"] for c in snapshot.json()["conversations"]]
    assert len(names) == 20 and len(set(names)) == 20, "cut names must stay distinct"
    assert all(len(name) <= 256 and name.startswith("model-") for name in names)
    assert len(snapshot.content) < 64 * 1024
    assert len(detail.content) < 64 * 1024
    assert events and max(len(e) for e in events) < 64 * 1024
    assert end - start < 64, f"the page kept {end - start:.0f} MB of names"


# --- 4: a page that does not read is dropped, and what it was sent is bounded in bytes ------------


def long_loop(n: int, steps: int = 600) -> bytes:
    """A long agent loop with a distinct opening: its well (with previews) is ~100 KB."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"task {n}: fix the build"}]
    for k in range(steps):
        call = {"id": f"c{k}", "type": "function", "function": {"name": "run", "arguments": '{"x": 1}'}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": f"output {k} " * 30})
    return chat(big_name(n), messages)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_4_a_hundred_pages_that_never_read_hold_little_and_nothing_once_gone() -> None:
    with (
        upstream_and_proxy(COMPACT_UI_CONTENT="true", COMPACT_WINDOW="1000000") as (hostile, proxy),
        ExitStack() as stack,
    ):
        start = rss_mb(proxy)
        for _ in range(100):
            stack.enter_context(open_stream(proxy))
        for n in range(30):
            assert post(proxy, long_loop(n)).status_code == 200
            hostile.seen.clear()
            within_memory(proxy, f"with 100 pages that never read, after {n + 1} chats (from {start:.0f} MB)")
        time.sleep(2)  # the last wells are drawn and offered to the pages
        within_memory(proxy, "with 100 pages that never read")
        busy = rss_mb(proxy)
        backlog = proxy.metric('compacting_proxy_table_bytes{table="ui_pages"}')
        assert backlog <= 32 * 2**20, f"{backlog / 2**20:.1f} MiB queued for pages that read nothing"
        stack.close()
        deadline = time.monotonic() + 30
        while proxy.metric('compacting_proxy_table_entries{table="ui_pages"}') > 0:
            assert time.monotonic() < deadline, "the pages that left still hold their places"
            time.sleep(0.2)
        with watching(proxy) as events:  # a page that reads is served again
            assert post(proxy, long_loop(99)).status_code == 200
            deadline = time.monotonic() + 30
            while not any(e.startswith(b"event: well") for e in events) and time.monotonic() < deadline:
                time.sleep(0.1)
        assert any(e.startswith(b"event: well") for e in events)
        time.sleep(1)
        end = rss_mb(proxy)
    print(
        f"row 4: RSS {start:.0f} -> {busy:.0f} MB with the pages ({backlog / 2**20:.1f} MiB queued), "
        f"{end:.0f} MB after they left"
    )
    assert end < start + 100, f"RSS {end:.0f} MB after the pages left (from {start:.0f} MB)"


# --- 5: page streams are capped apart from the traffic the proxy exists for -----------------------


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_5_a_thousand_open_page_streams_leave_chats_served() -> None:
    with upstream_and_proxy() as (_, proxy), ExitStack() as stack:
        sockets = [stack.enter_context(open_stream(proxy)) for _ in range(1000)]
        heads = [head_of(sock) for sock in sockets]
        statuses = [status_of(head) for head in heads]
        streams = statuses.count(200)
        print(f"row 5: {streams} streams open, {statuses.count(503)} answered 503")
        answer = post(proxy, chat("m"))
        assert answer.status_code == 200, f"a chat got {answer.status_code} with 1,000 page streams open"
        assert 1 <= streams <= 64
        assert statuses.count(503) == 1000 - streams
        refused = next(head.lower() for head in heads if status_of(head) == 503)
        assert b"retry-after: 5\r\n" in refused and b"connection: close\r\n" in refused
        health = httpx.get(proxy.base_url + "/healthz", timeout=10)
        assert health.status_code == 200


# --- 7: a key sees the conversations it sent; an admin key sees all -------------------------------

ALICE, BOB, ADMIN = "k-alice-1f0e", "k-bob-77c2", "k-admin-9a41"
CARD = "ALICE: my card is 4111 1111 1111 1111"


def test_7_with_previews_a_key_sees_only_its_own_conversations() -> None:
    keys = {"COMPACT_API_KEYS": f"{ALICE},{BOB},{ADMIN}", "COMPACT_ADMIN_KEYS": ADMIN}
    with (
        upstream_and_proxy(COMPACT_UI_CONTENT="true", **keys) as (_, proxy),
        watching(proxy, BOB) as bob_events,
        watching(proxy, ADMIN) as admin_events,
    ):
        alice_chat = chat("m", [{"role": "user", "content": CARD}])
        assert post(proxy, alice_chat, ALICE).status_code == 200
        assert post(proxy, chat("m", [{"role": "user", "content": "BOB: hello"}]), BOB).status_code == 200
        deadline = time.monotonic() + 10
        while len([e for e in admin_events if e.startswith(b"event: well")]) < 2:
            assert time.monotonic() < deadline, "the admin's page did not get both wells"
            time.sleep(0.05)
        time.sleep(0.5)  # anything meant for another page has had time to arrive
        seen = {
            key: httpx.get(proxy.base_url + "/ui/conversations", headers={"x-api-key": key}).json()
            for key in (ALICE, BOB, ADMIN)
        }
        alice_key = seen[ALICE]["conversations"][0]["key"]
        bob_reads_alice = httpx.get(
            proxy.base_url + f"/ui/conversations/{alice_key}", headers={"x-api-key": BOB}
        )
    previews = {key: [c["preview"] for c in s["conversations"]] for key, s in seen.items()}
    assert previews[ALICE] == [CARD]
    assert previews[BOB] == ["BOB: hello"]
    assert sorted(previews[ADMIN]) == sorted([CARD, "BOB: hello"])
    assert seen[BOB]["totals"]["requests"] == 1 and seen[ADMIN]["totals"]["requests"] == 2
    assert bob_reads_alice.status_code == 404
    assert not any(b"4111" in e for e in bob_events), "another key's preview reached Bob's page"
    assert any(b"4111" in e for e in admin_events)


# --- 10: previews are built off the event loop ----------------------------------------------------


def heavy_history(messages: int = 380, chars: int = 80_000) -> bytes:
    """~30 MB of text in few messages (under the 400 a well is built off the loop for), in words of
    one letter: the old previews split every word of every message (15 million), on the loop."""
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for k in range(messages):
        role = "user" if k % 2 == 0 else "assistant"
        history.append({"role": role, "content": f"turn {k} " + "a " * (chars // 2)})
    return chat("m", history)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_10_a_page_with_previews_does_not_freeze_the_proxy() -> None:
    content = heavy_history()
    floor = parse_time(content)
    with (
        upstream_and_proxy(COMPACT_UI_CONTENT="true", COMPACT_WINDOW="20000000") as (hostile, proxy),
        watching(proxy) as events,
    ):

        def send() -> None:
            assert post(proxy, content).status_code == 200
            hostile.seen.clear()
            deadline = time.monotonic() + 60
            while not any(e.startswith(b"event: well") for e in events) and time.monotonic() < deadline:
                time.sleep(0.02)
            events.clear()

        responsive_during(proxy, send, floor)
