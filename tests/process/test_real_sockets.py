"""Real sockets, real clients, real sizes: the `compacting-proxy` process between clients (the
official `openai` SDKs for Python and Node, `http.client`, raw sockets) and a real upstream on
loopback (`tests/support/upstreams/faulty.py`, which keeps every request's bytes and header lines).

Long chats of 20 KB to 8 MB go through one after another on one keep-alive connection, streamed
and not: each must be answered 200, and reach the upstream as the same bytes when under the line,
compacted when over. A request's head and body often arrive in one socket read: that must never be
taken for an oversize head (431), while a real one still is. Forwarded answers keep the upstream's
own headers: one `Date`, one `Server`, its `Content-Length` (also for `HEAD`), each `Set-Cookie`;
repeated request headers reach the upstream as separate lines.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from email.utils import parsedate_to_datetime
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.support.node import node_client
from tests.support.upstreams.chats import TOOLS, support_chat
from tests.support.upstreams.faulty import FaultyUpstream, RequestRecord, serve_in_thread
from tests.support.upstreams.proxy_server import ProxyServer, running_proxy

pytestmark = pytest.mark.process  # starts the real proxy (and upstreams) on loopback

WINDOW = 100_000
HEADER_LIMIT = 8192  # small, so that a body read together with its head is far over it
UNDER_THE_LINE = (20_000, 64_000, 150_000)  # bytes: forwarded as they came
OVER_THE_LINE = (1_000_000, 8_000_000)  # bytes: compacted


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultyUpstream]:
    with serve_in_thread() as server:
        yield server


@pytest.fixture(scope="module")
def proxy(upstream: FaultyUpstream) -> Iterator[ProxyServer]:
    # By name, not address: an HTTP client keeps cookies for a host name, never for an IP address.
    url = f"http://localhost:{upstream.port}/v1"
    with running_proxy(url, WINDOW, max_header_bytes=str(HEADER_LIMIT)) as server:
        yield server


@cache
def chat_of(size: int) -> str:
    """A support chat of about `size` bytes as a chat request body (JSON text), ending on a user turn."""
    items = 20 if size < 200_000 else 300
    per_exchange = len(json.dumps(support_chat(8, result_items=items))) / 8
    messages = support_chat(max(1, round(size / per_exchange)), result_items=items)
    return json.dumps({"model": "faulty", "messages": messages, "tools": TOOLS})


def received(upstream: FaultyUpstream, tag: str) -> RequestRecord:
    """The request tagged `tag` (``x-fault: ok; tag=...``) as the upstream received it."""
    found = [r for c in list(upstream.connections) for r in list(c.requests) if r.fault.tag == tag]
    assert len(found) == 1, f"the upstream received {len(found)} requests tagged {tag}"
    return found[0]


def check_forwarded(
    size: int, sent_sha256: str, before: dict[str, Any], got: RequestRecord, compaction: dict[str, str]
) -> None:
    """Under the line: the bytes the client sent. Over it: a chat less than half the size that
    keeps its start, its last turn and its tools, with headers saying so."""
    if size in UNDER_THE_LINE:
        assert hashlib.sha256(got.body).hexdigest() == sent_sha256, f"{size}: the bytes were changed"
        assert not compaction
        return
    after = json.loads(got.body)
    assert len(got.body) < len(json.dumps(before)) // 2
    assert after["messages"][0] == before["messages"][0]
    assert after["messages"][-1] == before["messages"][-1]
    assert after["tools"] == before["tools"]
    assert int(compaction["x-compaction-tokens-after"]) < int(compaction["x-compaction-tokens-before"])


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_long_chats_with_the_python_sdk(upstream: FaultyUpstream, proxy: ProxyServer, stream: bool) -> None:
    sent: list[bytes] = []
    http_client = httpx.Client(
        limits=httpx.Limits(max_connections=1),  # one keep-alive connection for all of them
        event_hooks={"request": [lambda request: sent.append(request.content)]},
    )
    sdk = openai.OpenAI(
        base_url=proxy.base_url + "/v1", api_key="sk-test", max_retries=0, timeout=60, http_client=http_client
    )
    # Whether a head and its body share a read is up to the scheduler (this SDK writes them apart):
    # about one in ten did on a loaded machine, so the sizes where it matters go round many times.
    for round_ in range(8):
        for size in (*UNDER_THE_LINE, *(OVER_THE_LINE if round_ < 2 else ())):
            tag = f"py-{stream}-{size}-{round_}"
            body = json.loads(chat_of(size))
            raw = sdk.chat.completions.with_raw_response.create(
                model=body["model"],
                messages=body["messages"],
                tools=body["tools"],
                stream=stream,
                extra_headers={"x-fault": f"ok; tag={tag}"},
            )
            assert raw.status_code == 200
            if stream:
                content = "".join(
                    chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices
                )
                assert content == "".join(f"{tag}:{i} " for i in range(3))
            else:
                assert raw.parse().choices[0].message.content == f"ok {tag}"
            compaction = {k: v for k, v in raw.headers.items() if k.startswith("x-compaction-")}
            sha256 = hashlib.sha256(sent[-1]).hexdigest()
            check_forwarded(size, sha256, json.loads(sent[-1]), received(upstream, tag), compaction)
    http_client.close()


def test_long_chats_with_the_node_sdk(upstream: FaultyUpstream, proxy: ProxyServer, tmp_path: Path) -> None:
    requests: list[dict[str, Any]] = []
    bodies: dict[str, int] = {}
    for stream in (False, True):
        for size in (*UNDER_THE_LINE, *OVER_THE_LINE):
            tag = f"node-{stream}-{size}"
            requests.append({"tag": tag, "body": {**json.loads(chat_of(size)), "stream": stream}})
            bodies[tag] = size
    path = tmp_path / "requests.json"
    path.write_text(json.dumps(requests))
    results = node_client("long_chats.mjs", proxy.base_url + "/v1", str(path), needs="openai", timeout=180)
    assert [r.get("error") for r in results] == [None] * len(requests), results
    for result in results:
        tag, size = result["tag"], bodies[result["tag"]]
        assert result["status"] == 200
        streamed = tag.startswith("node-True")
        assert result["content"] == ("".join(f"{tag}:{i} " for i in range(3)) if streamed else f"ok {tag}")
        assert result["server"] == "faulty/1.0"  # the upstream's, once
        assert result["date"].count(",") == 1 and parsedate_to_datetime(result["date"])
        before = next(r["body"] for r in requests if r["tag"] == tag)
        check_forwarded(size, result["sentSha256"], before, received(upstream, tag), result["headers"])


# --- raw HTTP: one read, many reads, pipelined, oversize -------------------------------------------


def connect(proxy: ProxyServer) -> socket.socket:
    host, port = proxy.base_url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def post(path: str, body: bytes, *, tag: str = "", close: bool = False) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n"
    head += f"Content-Length: {len(body)}\r\n"
    head += f"x-fault: ok; tag={tag}\r\n" if tag else ""
    head += "Connection: close\r\n" if close else ""
    return (head + "\r\n").encode() + body


def read_response(sock: socket.socket, buffer: bytearray) -> tuple[int, dict[str, str], bytes]:
    """One response with a Content-Length from `sock` (what is read past it stays in `buffer`)."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        assert chunk, f"the proxy closed the connection; it had sent {bytes(buffer[:200])!r}"
        buffer += chunk
    end = buffer.index(b"\r\n\r\n")
    status_line, *lines = buffer[:end].decode("latin-1").split("\r\n")
    headers = {
        name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)
    }
    length = int(headers["content-length"])
    del buffer[: end + 4]
    while len(buffer) < length:
        chunk = sock.recv(65536)
        assert chunk, "the proxy closed the connection mid-body"
        buffer += chunk
    body = bytes(buffer[:length])
    del buffer[:length]
    return int(status_line.split()[1]), headers, body


def test_head_and_body_in_one_read_are_never_taken_for_a_big_head(
    upstream: FaultyUpstream, proxy: ProxyServer
) -> None:
    with connect(proxy) as sock:
        buffer = bytearray()
        for round_ in range(3):  # several in a row on one keep-alive connection
            for size in UNDER_THE_LINE:
                tag = f"one-read-{size}-{round_}"
                body = chat_of(size).encode()
                sock.sendall(post("/v1/chat/completions", body, tag=tag))  # head and body in one write
                status, _, answer = read_response(sock, buffer)
                assert status == 200, answer
                assert received(upstream, tag).body == body
        # Pipelined: two whole requests in one write, then a /compact with a big body.
        first, second = chat_of(20_000).encode(), chat_of(64_000).encode()
        sock.sendall(
            post("/v1/chat/completions", first, tag="piped-1")
            + post("/v1/chat/completions", second, tag="piped-2")
        )
        assert [read_response(sock, buffer)[0] for _ in range(2)] == [200, 200]
        assert received(upstream, "piped-1").body == first and received(upstream, "piped-2").body == second
        sock.sendall(post("/compact", chat_of(8_000_000).encode()))
        status, _, answer = read_response(sock, buffer)
        assert status == 200, answer[:300]
        assert json.loads(answer)["report"]


def test_a_head_split_over_many_reads_is_counted_whole(proxy: ProxyServer) -> None:
    def send_in_pieces(sock: socket.socket, data: bytes, piece: int = 512) -> None:
        for start in range(0, len(data), piece):
            try:
                sock.sendall(data[start : start + piece])
            except (BrokenPipeError, ConnectionResetError):
                return  # answered and closed already
            time.sleep(0.002)  # separate reads, most likely; the verdict must not depend on it

    fine = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Fill: " + b"a" * (HEADER_LIMIT - 200) + b"\r\n\r\n"
    with connect(proxy) as sock:
        buffer = bytearray()
        for _ in range(2):
            send_in_pieces(sock, fine)
            assert read_response(sock, buffer)[0] == 200
    too_big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Fill: " + b"a" * (2 * HEADER_LIMIT) + b"\r\n\r\n"
    with connect(proxy) as sock:
        send_in_pieces(sock, too_big)
        status, _, body = read_response(sock, bytearray())
        assert status == 431
        assert json.loads(body)["error"]["code"] == "request_header_fields_too_large"


def test_a_huge_head_still_gets_431_and_the_connection_closed(proxy: ProxyServer) -> None:
    huge = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 2_000_000 + b"\r\n"
    with connect(proxy) as sock:
        sending = threading.Thread(target=send_ignoring_close, args=(sock, huge))
        sending.start()
        status, headers, _ = read_response(sock, bytearray())
        sending.join()
        assert status == 431 and headers["connection"] == "close"
        try:
            rest = sock.recv(65536)
        except ConnectionResetError:  # closed with our unread bytes still in its buffer
            rest = b""
        assert rest == b""


def send_ignoring_close(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        sock.sendall(data)  # the proxy answers and closes before it has read everything


# --- headers as they came ----------------------------------------------------------------------------


def exchange(
    base_url: str,
    method: str,
    path: str,
    headers: list[tuple[str, str]] | None = None,
    body: bytes | None = None,
) -> tuple[int, list[tuple[str, str]], bytes]:
    """One request with `http.client`, which keeps every header line of the answer apart."""
    host, port = base_url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.putrequest(method, path, skip_accept_encoding=True)
        for name, value in headers or []:
            connection.putheader(name, value)
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        content = response.read()
        return response.status, [(k.lower(), v) for k, v in response.getheaders()], content
    finally:
        connection.close()


def comparable(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Header lines in order, without the proxy's request id and the clock's value. The framing of
    a chunked body is the proxy's own hop (uvicorn adds it last): it is compared apart."""
    hop = ("x-request-id", "transfer-encoding")
    return [(name, "<date>" if name == "date" else value) for name, value in headers if name not in hop]


@pytest.mark.parametrize(
    ("method", "path", "fault", "body"),
    [
        ("GET", "/v1/models", "ok", None),
        ("HEAD", "/v1/models", "ok", None),
        ("GET", "/v1/models", "ok; cookies=2", None),
        ("POST", "/v1/chat/completions", "ok; cookies=2", b'{"model":"m","messages":[]}'),
        ("POST", "/v1/chat/completions", "ok; cookies=2", b'{"model":"m","messages":[],"stream":true}'),
        ("POST", "/v1/chat/completions", "status; code=429; retry_after=7", b'{"model":"m","messages":[]}'),
    ],
    ids=["get", "head", "set-cookie", "chat-set-cookie", "sse-set-cookie", "429"],
)
def test_answers_carry_the_upstreams_headers_as_they_came(
    upstream: FaultyUpstream, proxy: ProxyServer, method: str, path: str, fault: str, body: bytes | None
) -> None:
    request = [("x-fault", fault), ("Content-Type", "application/json")]
    direct = exchange(upstream.base_url, method, path, request, body)
    proxied = exchange(proxy.base_url, method, path, request, body)
    assert proxied[0] == direct[0]
    assert comparable(proxied[1]) == comparable(direct[1])
    assert dict(proxied[1]).get("transfer-encoding") == dict(direct[1]).get("transfer-encoding")
    assert proxied[2] == direct[2]
    names = [name for name, _ in proxied[1]]
    assert names.count("date") == 1 and names.count("server") == 1
    assert dict(proxied[1])["server"] == "faulty/1.0"
    if method == "HEAD":
        assert proxied[2] == b"" and int(dict(proxied[1])["content-length"]) > 0


def test_a_head_answer_leaves_the_connection_ready_for_the_next_request(proxy: ProxyServer) -> None:
    host, port = proxy.base_url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("HEAD", "/v1/models")
        head = connection.getresponse()
        assert head.read() == b""
        connection.request("GET", "/v1/models")
        get = connection.getresponse()
        assert len(get.read()) == int(head.headers["content-length"]) == int(get.headers["content-length"])
    finally:
        connection.close()


def test_the_proxys_own_answers_carry_one_date(proxy: ProxyServer) -> None:
    for path in ("/healthz", "/v1/../secret"):
        _, headers, _ = exchange(proxy.base_url, "GET", path)
        assert [name for name, _ in headers].count("date") == 1


def test_repeated_request_headers_reach_the_upstream_apart(
    upstream: FaultyUpstream, proxy: ProxyServer
) -> None:
    sent = [
        ("Cookie", "a=1; b=2"),
        ("X-Foo", "one"),
        ("Cookie", "c=3"),
        ("X-Foo", "two, three"),
        ("x-fault", "ok; tag=repeated"),
    ]
    status, _, _ = exchange(
        proxy.base_url, "POST", "/v1/chat/completions", sent, b'{"model":"m","messages":[]}'
    )
    assert status == 200
    lines = received(upstream, "repeated").raw_headers
    assert [(n.lower(), v) for n, v in lines if n.lower() in ("cookie", "x-foo")] == [
        ("cookie", "a=1; b=2"),
        ("x-foo", "one"),
        ("cookie", "c=3"),
        ("x-foo", "two, three"),
    ]


def test_an_upstreams_cookies_are_not_replayed_to_it(upstream: FaultyUpstream, proxy: ProxyServer) -> None:
    """A client's Set-Cookie is for that client: the proxy keeps no cookie jar of its own."""
    body = b'{"model":"m","messages":[]}'
    exchange(proxy.base_url, "POST", "/v1/chat/completions", [("x-fault", "ok; cookies=2")], body)
    exchange(proxy.base_url, "POST", "/v1/chat/completions", [("x-fault", "ok; tag=no-cookie")], body)
    names = [name.lower() for name, _ in received(upstream, "no-cookie").raw_headers]
    assert "cookie" not in names
