"""The upstream transport: aiohttp's connection pool behind httpx's transport interface.

Measured side by side (BENCHMARKS.md), httpx's default transport is what makes a Python proxy
slow: httpcore's pool loop costs more per request than the rest of the stack, and the cost grows
with concurrency. `httpx-aiohttp` keeps the httpx types (requests, responses, exceptions, and the
`MockTransport` seam tests use) on aiohttp's pool, 2.7-3.6x the throughput at 16 clients. Two
things are fixed here: its exception mapping (a refused connection or a server that hung up came out
as `ConnectTimeout`, a garbage status line as a bare aiohttp error), and the headers: aiohttp would
add its own (`User-Agent`, `Accept`, `Accept-Encoding`, `Content-Type`), join repeated ones with
", " (it is handed httpx's merged mapping), and keep a session cookie jar that would replay one
client's `Set-Cookie` to the upstream with every later request and rewrite the `Cookie` header.
A transparent proxy sends what the client sent: each header once per line it came on, no more.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import aiohttp
import aiohttp.abc
import httpx
import yarl
from httpx_aiohttp import AiohttpTransport
from httpx_aiohttp.transport import AiohttpResponseStream

# First match wins, most specific first, with the meanings httpcore gives these exceptions.
REMAP: tuple[tuple[type[BaseException], type[httpx.TransportError]], ...] = (
    (aiohttp.ConnectionTimeoutError, httpx.ConnectTimeout),  # aiohttp folds the pool wait in here
    (aiohttp.SocketTimeoutError, httpx.ReadTimeout),
    (aiohttp.ServerTimeoutError, httpx.ReadTimeout),
    (aiohttp.ClientConnectorError, httpx.ConnectError),
    (aiohttp.ServerDisconnectedError, httpx.RemoteProtocolError),
    (aiohttp.ClientPayloadError, httpx.RemoteProtocolError),
    (aiohttp.ClientResponseError, httpx.RemoteProtocolError),
    (aiohttp.InvalidURL, httpx.UnsupportedProtocol),
    (aiohttp.ClientConnectionError, httpx.ReadError),
    (aiohttp.ClientError, httpx.TransportError),
    (TimeoutError, httpx.ReadTimeout),
)
AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")
WRITE_PIECE = 256 * 1024  # of a large request body, written at a time


@contextmanager
def remapped_errors() -> Iterator[None]:
    try:
        yield
    except (aiohttp.ClientError, httpx.TransportError, TimeoutError) as exc:
        original = exc.__cause__ if isinstance(exc, httpx.TransportError) and exc.__cause__ else exc
        for source, target in REMAP:
            if isinstance(original, source):
                raise target(str(original) or type(original).__name__) from original
        raise


class _RemappedStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream) -> None:
        self.inner = inner
        response = getattr(inner, "_aiohttp_response", None)
        self.content = getattr(response, "content", None)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with remapped_errors():
            try:
                async for chunk in self.inner:
                    yield chunk
            except (aiohttp.ClientError, httpx.TransportError, TimeoutError):
                # aiohttp raises a failure before handing out what it had already received: pass
                # those bytes on first, as a plain socket read would have.
                leftover = b"".join(getattr(self.content, "_buffer", None) or ())
                if leftover:
                    yield leftover
                raise

    async def aclose(self) -> None:
        with remapped_errors():
            await self.inner.aclose()


class PiecedBody(aiohttp.BytesPayload):
    """A large request body written to the connection a piece at a time: written whole, the
    transport's buffer copied all of it in one call of the loop (24 MB: 60 ms here)."""

    async def write(self, writer: aiohttp.abc.AbstractStreamWriter) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(
        self, writer: aiohttp.abc.AbstractStreamWriter, content_length: int | None
    ) -> None:
        view = memoryview(self._value)[:content_length]
        for start in range(0, len(view), WRITE_PIECE):
            await writer.write(view[start : start + WRITE_PIECE])  # drained past 64 KiB buffered


def _body(content: bytes) -> bytes | PiecedBody | None:
    return PiecedBody(content) if len(content) > WRITE_PIECE else content or None


class UpstreamTransport(AiohttpTransport):
    """`AiohttpTransport` that raises what httpx's own transport would and adds no headers."""

    def __init__(self, limits: httpx.Limits) -> None:
        super().__init__(limits=limits, trust_env=False, client=self._session)

    def _session(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=self.limits.max_connections or 0, keepalive_timeout=self.limits.keepalive_expiry
        )
        return aiohttp.ClientSession(
            connector=connector,
            skip_auto_headers=AUTO_HEADERS,
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not isinstance(self.client, aiohttp.ClientSession):
            self.client = self.get_client()
        timeout = request.extensions.get("timeout", {})
        with remapped_errors():
            response = await self.client.request(
                request.method,
                # As the client sent it: yarl would decode `%2e` and re-encode a bare `%`.
                yarl.URL(str(request.url), encoded=True),
                headers=request.headers.multi_items(),  # a list: repeated headers stay apart
                data=_body(request.content),
                allow_redirects=False,
                auto_decompress=False,
                compress=False,
                timeout=aiohttp.ClientTimeout(
                    sock_connect=timeout.get("connect"),
                    sock_read=timeout.get("read"),
                    connect=timeout.get("pool"),
                ),
            ).__aenter__()
        return httpx.Response(
            status_code=response.status,
            headers=response.raw_headers,
            stream=_RemappedStream(AiohttpResponseStream(response)),
            request=request,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": (response.reason or "").encode()},
        )
