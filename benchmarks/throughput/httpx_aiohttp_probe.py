"""How does ``httpx_aiohttp.AiohttpTransport`` behave where a proxy cares? A side-by-side probe.

Each scenario runs once with httpx's own transport (httpcore) and once with the aiohttp one, both
behind the same ``httpx.AsyncClient`` calls, against a small misbehaving server on 127.0.0.1:

- streaming: are SSE events yielded by ``aiter_raw()`` as they arrive (times and sizes)?
- ``content-encoding: gzip``: does ``aiter_raw()`` give the compressed bytes, ``aread()`` the
  decoded ones, and what ``accept-encoding`` reaches the server?
- failures: connection refused, connect timeout (a full accept queue), read timeout before the
  response and in the middle of a stream, pool timeout, server closing without a response, a body
  cut short (content-length and chunked), a garbage status line: which exception comes out?
- an early ``aclose()`` of a stream: does the upstream see its connection closed (so generation
  stops), and is the connection reused afterwards?
- duplicate response headers, a streamed request body, a keep-alive connection the server closed
  while idle.

A third column runs the proxy's ``UpstreamTransport`` (``proxy/transport.py``): the same transport with its
exceptions mapped the way httpcore's are: what the proxy uses.

``python -m benchmarks.throughput.httpx_aiohttp_probe`` prints a Markdown table and exits (about 10 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
from httpx_aiohttp import AiohttpTransport

from proxy.upstream.transport import UpstreamTransport

HOST = "127.0.0.1"
PAYLOAD = json.dumps(
    {"object": "chat.completion", "choices": [{"message": {"content": "x" * 2000}}]}
).encode()
GZIPPED = gzip.compress(PAYLOAD)


class Server:
    """Answers by path; records what it saw (request headers, connections opened and closed)."""

    def __init__(self) -> None:
        self.seen_headers: dict[str, dict[str, str]] = {}
        self.connections = 0
        self.closed_at: list[float] = []
        self.stream_cut_at: float | None = None
        self.port = 0

    async def start(self) -> asyncio.AbstractServer:
        server = await asyncio.start_server(self.handle, HOST, 0)
        self.port = server.sockets[0].getsockname()[1]
        return server

    async def read_request(self, reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes] | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        lines = head.decode().split("\r\n")
        path = lines[0].split(" ")[1]
        headers = {
            k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)
        }
        body = b""
        if "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding") == "chunked":
            while True:
                size = int((await reader.readline()).strip(), 16)
                chunk = await reader.readexactly(size + 2)
                if size == 0:
                    break
                body += chunk[:-2]
        return path, headers, body

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                req = await self.read_request(reader)
                if req is None:
                    break
                path, headers, body = req
                self.seen_headers[path] = headers
                keep = await self.answer(path, body, reader, writer)
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.closed_at.append(time.monotonic())
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def answer(
        self, path: str, body: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        w = writer.write
        if path == "/sse-slow" or path == "/sse-long":
            w(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            n = 5 if path == "/sse-slow" else 100
            for i in range(n):
                event = b'data: {"i": %d}\n\n' % i
                w(b"%x\r\n%s\r\n" % (len(event), event))
                try:
                    await writer.drain()
                except ConnectionError:
                    self.stream_cut_at = time.monotonic()
                    return False
                if writer.is_closing() or reader.at_eof():
                    self.stream_cut_at = time.monotonic()
                    return False
                await asyncio.sleep(0.1 if path == "/sse-slow" else 0.05)
            w(b"0\r\n\r\n")
            return True
        if path == "/gzip":
            w(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(GZIPPED), GZIPPED)
            )
            return True
        if path == "/slow-headers":
            await asyncio.sleep(2)
            return False
        if path == "/stall-mid-stream":
            w(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                b"6\r\ndata: \r\n"
            )
            await writer.drain()
            await asyncio.sleep(2)
            return False
        if path == "/close-no-response":
            return False
        if path == "/short-body":
            w(b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{"partial":')
            await writer.drain()
            return False
        if path == "/short-chunked":
            w(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                b"8\r\ndata: 1\n\r\n"
            )
            await writer.drain()
            return False
        if path == "/garbage":
            w(b"HELLO THERE\r\n\r\n")
            await writer.drain()
            return False
        if path == "/dup-headers":
            w(
                b"HTTP/1.1 200 OK\r\nset-cookie: a=1\r\nset-cookie: b=2\r\nX-Mixed-Case: v\r\n"
                b"content-length: 2\r\n\r\nok"
            )
            return True
        if path == "/echo":
            w(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: %d\r\n\r\n%s"
                % (len(body), body)
            )
            return True
        if path == "/ok-then-close":
            w(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()
            return False  # closes the idle keep-alive connection without saying so
        w(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
        return True


# The remapped transport is the proxy's own (`proxy/transport.py`): it re-maps from the original
# aiohttp error with a first-match table, most specific first, as httpcore would raise.


def _describe(exc: BaseException) -> str:
    kind = type(exc)
    mod = kind.__module__.split(".")[0]
    tag = "" if isinstance(exc, httpx.HTTPError) else " (NOT an httpx.HTTPError)"
    return f"`{mod}.{kind.__name__}`{tag}"


Scenario = Callable[[httpx.AsyncClient, Server], Awaitable[str]]


async def sse_timing(client: httpx.AsyncClient, srv: Server) -> str:
    t0 = time.monotonic()
    arrivals = []
    async with client.stream("POST", f"http://{HOST}:{srv.port}/sse-slow", content=b"{}") as resp:
        async for chunk in resp.aiter_raw():
            arrivals.append((round((time.monotonic() - t0) * 1000), len(chunk)))
    return "chunks at ms (bytes): " + ", ".join(f"{t} ({n})" for t, n in arrivals)


async def gzip_raw(client: httpx.AsyncClient, srv: Server) -> str:
    async with client.stream("GET", f"http://{HOST}:{srv.port}/gzip") as resp:
        raw = b"".join([c async for c in resp.aiter_raw()])
    resp2 = await client.get(f"http://{HOST}:{srv.port}/gzip")
    sent = srv.seen_headers["/gzip"].get("accept-encoding")
    return (
        f"aiter_raw = {'the gzip bytes' if raw == GZIPPED else 'DECODED' if raw == PAYLOAD else '?'}; "
        f"aread = {'decoded' if resp2.content == PAYLOAD else 'raw'}; header content-encoding "
        f"kept: {resp2.headers.get('content-encoding')}; accept-encoding sent: {sent!r}"
    )


def failing(path: str, method: str = "GET", stream: bool = False) -> Scenario:
    async def run(client: httpx.AsyncClient, srv: Server) -> str:
        try:
            if stream:
                async with client.stream(method, f"http://{HOST}:{srv.port}{path}") as resp:
                    async for _ in resp.aiter_raw():
                        pass
            else:
                await client.request(method, f"http://{HOST}:{srv.port}{path}")
        except BaseException as exc:
            return _describe(exc) + f": {str(exc)[:70]!r}"
        return "no error"

    return run


async def refused(client: httpx.AsyncClient, srv: Server) -> str:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port = s.getsockname()[1]  # bound, never listening: connection refused
        try:
            await client.get(f"http://{HOST}:{port}/")
        except BaseException as exc:
            return _describe(exc) + f": {str(exc)[:70]!r}"
    return "no error"


async def connect_timeout(client: httpx.AsyncClient, srv: Server) -> str:
    listener = socket.socket()
    listener.bind((HOST, 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):  # fill the accept queue so further SYNs are dropped
            f = socket.socket()
            f.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                f.connect_ex((HOST, port))
            fillers.append(f)
        await asyncio.sleep(0.1)
        t0 = time.monotonic()
        try:
            await client.get(f"http://{HOST}:{port}/", timeout=httpx.Timeout(5.0, connect=0.3))
        except BaseException as exc:
            return _describe(exc) + f" after {time.monotonic() - t0:.2f} s"
        return "no error"
    finally:
        for f in fillers:
            f.close()
        listener.close()


async def read_timeout(client: httpx.AsyncClient, srv: Server) -> str:
    t0 = time.monotonic()
    try:
        await client.get(f"http://{HOST}:{srv.port}/slow-headers", timeout=httpx.Timeout(5.0, read=0.3))
    except BaseException as exc:
        return _describe(exc) + f" after {time.monotonic() - t0:.2f} s"
    return "no error"


async def read_timeout_mid_stream(client: httpx.AsyncClient, srv: Server) -> str:
    t0 = time.monotonic()
    try:
        async with client.stream(
            "GET", f"http://{HOST}:{srv.port}/stall-mid-stream", timeout=httpx.Timeout(5.0, read=0.3)
        ) as resp:
            async for _ in resp.aiter_raw():
                pass
    except BaseException as exc:
        return _describe(exc) + f" after {time.monotonic() - t0:.2f} s"
    return "no error"


async def pool_timeout(client: httpx.AsyncClient, srv: Server) -> str:
    # the client for this scenario has max_connections=1; hold the one connection with a stream
    url = f"http://{HOST}:{srv.port}/sse-slow"
    async with client.stream("POST", url, content=b"{}"):
        t0 = time.monotonic()
        try:
            await client.get(f"http://{HOST}:{srv.port}/gzip", timeout=httpx.Timeout(5.0, pool=0.2))
        except BaseException as exc:
            return _describe(exc) + f" after {time.monotonic() - t0:.2f} s"
    return "no error (second request was not blocked)"


async def early_close(client: httpx.AsyncClient, srv: Server) -> str:
    before = srv.connections
    srv.stream_cut_at = None
    async with client.stream("POST", f"http://{HOST}:{srv.port}/sse-long", content=b"{}") as resp:
        async for _ in resp.aiter_raw():
            break
        t_close = time.monotonic()
    await asyncio.sleep(0.5)
    cut = srv.stream_cut_at
    closed = [t for t in srv.closed_at if t >= t_close]
    await client.get(f"http://{HOST}:{srv.port}/gzip")
    reused = srv.connections == before + 1
    cut_s = (
        f"upstream saw the close after {(cut - t_close) * 1000:.0f} ms"
        if cut
        else ("upstream connection closed" if closed else "upstream NOT told (kept streaming)")
    )
    return f"{cut_s}; next request {'reused a pooled connection' if reused else 'opened a new connection'}"


async def dup_headers(client: httpx.AsyncClient, srv: Server) -> str:
    resp = await client.get(f"http://{HOST}:{srv.port}/dup-headers")
    raw = [(k.decode(), v.decode()) for k, v in resp.headers.raw]
    return f"raw headers: {raw}; reason={resp.reason_phrase!r}; http_version={resp.http_version}"


async def streamed_request(client: httpx.AsyncClient, srv: Server) -> str:
    async def body() -> AsyncIterator[bytes]:
        for i in range(3):
            yield b"part%d;" % i

    resp = await client.post(f"http://{HOST}:{srv.port}/echo", content=body())
    te = srv.seen_headers["/echo"].get("transfer-encoding")
    return f"echo={resp.content!r}, request transfer-encoding={te!r}"


async def request_headers(client: httpx.AsyncClient, srv: Server) -> str:
    await client.post(
        f"http://{HOST}:{srv.port}/echo",
        content=b"{}",
        headers={"Authorization": "Bearer x", "X-Custom": "1", "Content-Type": "application/json"},
    )
    seen = srv.seen_headers["/echo"]
    return "server saw: " + ", ".join(f"{k}: {v}" for k, v in sorted(seen.items()))


async def stale_keepalive(client: httpx.AsyncClient, srv: Server) -> str:
    await client.get(f"http://{HOST}:{srv.port}/ok-then-close")
    await asyncio.sleep(0.2)
    try:
        resp = await client.post(f"http://{HOST}:{srv.port}/echo", content=b"again")
    except BaseException as exc:
        return "POST after the server closed the idle connection: " + _describe(exc)
    return f"POST after the server closed the idle connection: {resp.status_code} (reconnected)"


SCENARIOS: list[tuple[str, Scenario]] = [
    ("SSE relayed as it arrives (events 100 ms apart)", sse_timing),
    ("gzip response", gzip_raw),
    ("connection refused", refused),
    ("connect timeout (connect=0.3 s)", connect_timeout),
    ("read timeout before headers (read=0.3 s)", read_timeout),
    ("read timeout mid-stream (read=0.3 s)", read_timeout_mid_stream),
    ("pool timeout (1 connection, pool=0.2 s)", pool_timeout),
    ("server closes without a response", failing("/close-no-response")),
    ("body shorter than content-length", failing("/short-body")),
    ("chunked stream cut short", failing("/short-chunked", stream=True)),
    ("garbage status line", failing("/garbage")),
    ("early aclose() of a stream", early_close),
    ("duplicate / mixed-case response headers", dup_headers),
    ("streamed request body", streamed_request),
    ("request headers as sent upstream", request_headers),
    ("server closed an idle keep-alive connection", stale_keepalive),
]


def transports(one_connection: bool) -> dict[str, Callable[[], httpx.AsyncBaseTransport]]:
    limits = httpx.Limits(max_connections=1 if one_connection else 10, max_keepalive_connections=10)
    return {
        "httpx (httpcore)": lambda: httpx.AsyncHTTPTransport(limits=limits),
        "httpx-aiohttp": lambda: AiohttpTransport(limits=limits),
        "httpx-aiohttp, errors remapped (proxy/transport.py)": lambda: UpstreamTransport(limits),
    }


async def main() -> int:
    srv = Server()
    server = await srv.start()
    rows: list[tuple[str, dict[str, str]]] = []
    async with server:
        for title, scenario in SCENARIOS:
            row: dict[str, str] = {}
            for name, make in transports(scenario is pool_timeout).items():
                async with httpx.AsyncClient(transport=make(), timeout=5.0) as client:
                    try:
                        row[name] = await asyncio.wait_for(scenario(client, srv), timeout=10)
                    except BaseException as exc:
                        row[name] = "scenario failed: " + _describe(exc) + f" {exc!s:.80}"
            rows.append((title, row))
            print(f"  {title}", file=sys.stderr, flush=True)
        server.close()
    names = list(transports(False))
    print("| scenario | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for title, row in rows:
        print(f"| {title} | " + " | ".join(row.get(n, "").replace("|", "\\|") for n in names) + " |")
    from importlib import metadata

    print(
        "\n"
        + ", ".join(f"{d} {metadata.version(d)}" for d in ("httpx", "httpcore", "aiohttp", "httpx-aiohttp"))
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
