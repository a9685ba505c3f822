"""Forwarding to the one configured upstream: URLs, headers, errors and streamed responses.

All I/O goes through one injected httpx transport, so tests swap it instead of patching. Response bodies are passed on as raw bytes (`aiter_raw`) with their `content-encoding`,
so what the upstream sent is what the client gets. Upstream 4xx/5xx are responses, not exceptions;
only transport failures become errors, mapped once in `map_transport_errors`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager

import httpx
import orjson
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from proxy.errors import ProxyError
from proxy.metrics import Metrics
from proxy.settings import Settings
from proxy.upstream.encoding import Inflater

log = logging.getLogger("proxy.upstream")

RawHeaders = Sequence[tuple[bytes, bytes]]
URL_CACHE_SIZE = 256
TAIL_BYTES = 4096  # enough for the final chunk of a stream, where the usage report is
# The most the proxy reads whole of an answer it must parse or rewrite (a chat answer that does not
# stream, an error body); streamed answers are passed on and never buffered.
MAX_ANSWER_BYTES = 64 * 1024 * 1024

# Headers that describe one hop, not the message (RFC 9110 §7.6.1), plus those recomputed for the
# body actually sent (a streamed response puts the upstream's content-length back: its body is the same).
# Where clients put their key: OpenAI's Bearer, Anthropic's and Azure's own headers.
CREDENTIAL_HEADERS = frozenset({b"authorization", b"x-api-key", b"api-key"})
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
        b"expect",  # the proxy has read the whole body already: no 100-continue round trip upstream
    }
)


def build_transport(settings: Settings) -> httpx.AsyncBaseTransport:
    """The pooled keep-alive transport shared by every request for the lifetime of the app."""
    from proxy.upstream.transport import UpstreamTransport

    limits = httpx.Limits(
        max_connections=settings.max_connections,
        max_keepalive_connections=settings.max_connections,
        keepalive_expiry=30,
    )
    return UpstreamTransport(limits)


def build_timeout(settings: Settings) -> httpx.Timeout:
    return httpx.Timeout(
        connect=settings.connect_timeout,
        read=settings.read_timeout,
        write=settings.write_timeout,
        pool=settings.pool_timeout,
    )


@contextmanager
def map_transport_errors() -> Iterator[None]:
    """Turn a failure to reach or hear from the upstream into a 502 or 504 the client can read."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise ProxyError(
            504,
            f"The upstream did not answer in time ({type(exc).__name__}).",
            type="upstream_error",
            code="upstream_timeout",
        ) from exc
    except httpx.HTTPError as exc:
        # The details (the upstream's address, the bytes a broken server sent) are for the log, not
        # for the client.
        log.warning("upstream request failed: %s: %s", type(exc).__name__, exc)
        raise ProxyError(
            502,
            f"The upstream could not be reached ({type(exc).__name__}).",
            type="upstream_error",
            code="upstream_unreachable",
        ) from exc


class AnswerTooLarge(ValueError):
    """An answer the proxy reads whole is larger than its bound."""


class StreamBroken(Exception):
    """The upstream broke off a body the client had begun to receive and that cannot carry an
    error event: the client's connection is aborted. Logged once, as a warning, where it happens."""


class Upstream:
    """The upstream server: where a client's path goes, with which headers, through which transport.

    Requests go straight to the transport: `httpx.AsyncClient` would add URL merging, cookie
    handling and redirect bookkeeping that a proxy does not want, at a measured cost per request."""

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport,
        base_url: str,
        api_key: str | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> None:
        self.transport = transport
        self.base_url = base_url.rstrip("/")
        self.root_url = self.base_url.removesuffix("/v1")
        self.api_key = api_key.encode() if api_key else None
        self.extensions = {"timeout": (timeout or httpx.Timeout(60.0)).as_dict()}
        self._urls: dict[str, httpx.URL] = {}

    def url(self, path: str, query: bytes = b"", *, from_root: bool = False) -> httpx.URL:
        """The upstream URL for `path`, relative to the upstream's base (e.g. `/chat/completions`), or
        with `from_root` to the server's root (its base without `/v1`, e.g. Ollama's `/api/...`)."""
        path = ("\0" if from_root else "") + path  # one cache for both
        url = self._urls.get(path)
        if url is None:
            url = httpx.URL((self.root_url + path[1:]) if from_root else self.base_url + path)
            if len(self._urls) < URL_CACHE_SIZE:  # paths come from clients: the cache stays bounded
                self._urls[path] = url
        return url.copy_with(query=query) if query else url

    def request_headers(
        self, incoming: RawHeaders, *, key_header: bytes | None = None
    ) -> list[tuple[bytes, bytes]]:
        """The client's headers for the upstream, hop-by-hop ones left out. The configured key, if
        any, replaces the client's credentials: in `key_header` (the route's own: Anthropic's
        `x-api-key`, Azure's `api-key`), else in the header the client gave them in, else as
        `authorization: Bearer`."""
        hop = hop_by_hop(incoming)
        if not self.api_key:
            return [(name, value) for name, value in incoming if name.lower() not in hop]
        used = [name.lower() for name, _ in incoming if name.lower() in CREDENTIAL_HEADERS]
        header = key_header or (used[0] if used else b"authorization")
        headers = [
            (name, value)
            for name, value in incoming
            if (lower := name.lower()) not in hop and lower not in CREDENTIAL_HEADERS
        ]
        value = b"Bearer " + self.api_key if header == b"authorization" else self.api_key
        headers.append((header, value))
        return headers

    async def open(self, method: str, url: httpx.URL, headers: RawHeaders, content: bytes) -> httpx.Response:
        """Send a request and return the response with its body still unread."""
        request = httpx.Request(
            method, url, headers=list(headers), content=content, extensions=self.extensions
        )
        with map_transport_errors():
            return await self.transport.handle_async_request(request)


def hop_by_hop(headers: RawHeaders, dropped: frozenset[bytes] = HOP_BY_HOP) -> frozenset[bytes]:
    """`dropped` and every header the message's `Connection` header names (RFC 9110 7.6.1)."""
    named = [
        token.strip().lower()
        for name, value in headers
        if name.lower() == b"connection"
        for token in value.split(b",")
    ]
    return dropped.union(named) if named else dropped


def response_headers(
    response: httpx.Response, extra: dict[str, str] | None = None, *, dropped: frozenset[bytes] = HOP_BY_HOP
) -> list[tuple[bytes, bytes]]:
    raw = response.headers.raw
    dropped = hop_by_hop(raw, dropped)
    headers = [(name, value) for name, value in raw if name.lower() not in dropped]
    headers.extend((name.encode(), value.encode()) for name, value in (extra or {}).items())
    return headers


def raw_chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    """The body as sent, still content-encoded. (A response made with its content already read, as
    mock transports make them, has only its decoded content left.)"""
    if response.is_stream_consumed:
        return _single(response.content)
    return response.aiter_raw()


async def _single(content: bytes) -> AsyncIterator[bytes]:
    yield content


async def read_raw(response: httpx.Response, limit: int = MAX_ANSWER_BYTES) -> bytes:
    """The whole body as sent, the response closed afterwards; a 502 past `limit` bytes."""
    chunks: list[bytes] = []
    size = 0
    try:
        with map_transport_errors():
            async for chunk in raw_chunks(response):
                size += len(chunk)
                if size > limit:
                    raise ProxyError(
                        502,
                        f"The upstream's answer is larger than the proxy's limit of {limit} bytes.",
                        type="upstream_error",
                        code="upstream_answer_too_large",
                    )
                chunks.append(chunk)
            return b"".join(chunks)
    finally:
        await response.aclose()


async def read_decoded(response: httpx.Response, limit: int) -> bytes:
    """The whole body, its `Content-Encoding` undone, at most `limit` bytes once decoded
    (`AnswerTooLarge` past it, `ValueError` for a coding the proxy cannot decode). The response is
    closed afterwards. For answers the proxy reads for itself: probes, summaries."""
    try:
        if response.is_stream_consumed:  # a mock transport's response, decoded already
            if len(response.content) > limit:
                raise AnswerTooLarge(f"the answer is larger than {limit} bytes")
            return response.content
        inflater = Inflater(response.headers.get("content-encoding"))
        out = bytearray()
        async for chunk in response.aiter_raw():
            for piece in inflater.pieces(chunk):
                out += piece
                if len(out) > limit:
                    raise AnswerTooLarge(f"the answer is larger than {limit} bytes")
        return bytes(out)
    finally:
        await response.aclose()


async def decoded_lines(response: httpx.Response, max_line: int) -> AsyncIterator[bytes]:
    """The body's lines (NDJSON), decoded as `read_decoded` does, each at most `max_line` bytes
    (`AnswerTooLarge` past it): a stream of any length, never one line held whole past the bound."""
    if response.is_stream_consumed:
        for line in response.content.splitlines():
            yield line
        return
    inflater = Inflater(response.headers.get("content-encoding"))
    pending = b""
    async for chunk in response.aiter_raw():
        for piece in inflater.pieces(chunk):
            pending += piece
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line
            if len(pending) > max_line:
                raise AnswerTooLarge(f"a line of the answer is longer than {max_line} bytes")
    if pending:
        yield pending


def stream_error_event(kind: str, message: str, *, at_line_start: bool = False) -> bytes:
    """What ends a stream the upstream broke off, in the stream's own format, where each official
    client raises: Anthropic's `error` event, an `error` event for Responses (whose `error` object
    also makes the openai SDK raise), Chat Completions' error chunk, Ollama's `{"error": ...}` line.
    An NDJSON line starts a line of its own, never after an empty one (the ollama client parses
    every line, and an empty line is not JSON)."""
    if kind == "ndjson":
        return (b"" if at_line_start else b"\n") + orjson.dumps({"error": message}) + b"\n"
    if kind == "messages":
        body = orjson.dumps({"type": "error", "error": {"type": "api_error", "message": message}})
        return b"\n\nevent: error\ndata: " + body + b"\n\n"
    error = {"message": message, "type": "upstream_error", "param": None, "code": "upstream_stream_error"}
    if kind == "responses":
        event = {"type": "error", "code": error["code"], "message": message, "param": None, "error": error}
        return b"\n\nevent: error\ndata: " + orjson.dumps(event) + b"\n\n"
    return b"\n\ndata: " + orjson.dumps({"error": error}) + b"\n\n"


def buffered_response(response: httpx.Response, body: bytes, extra: dict[str, str] | None = None) -> Response:
    """The upstream's answer with `body`, its headers in their order, its length the body's."""
    length = str(len(body)).encode()
    headers = response_headers(response, extra, dropped=HOP_BY_HOP - {b"content-length"})
    if not any(name.lower() == b"content-length" for name, _ in headers):
        headers.append((b"content-length", length))
    forwarded = Response(body, status_code=response.status_code)
    forwarded.raw_headers = [
        (name, length if name.lower() == b"content-length" else value) for name, value in headers
    ]
    return forwarded


class StreamedResponse(StreamingResponse):
    """The upstream's body passed on chunk by chunk as it arrives. The upstream response is closed
    when the client has it all, disconnects, or the upstream fails. `on_complete` gets the last
    bytes of a stream that ended normally (where the usage report is)."""

    def __init__(
        self,
        response: httpx.Response,
        extra: dict[str, str] | None = None,
        *,
        on_complete: Callable[[bytes], None] | None = None,
        metrics: Metrics | None = None,
        stream_format: str = "chat",
    ) -> None:
        super().__init__(self._relay(response), status_code=response.status_code)
        # The body goes on exactly as it came, so the upstream's length stays true (also for HEAD,
        # which has no body). uvicorn would wait for the body a 204 or 304 never has.
        length = response.headers.get("content-length")
        keep_length = length is not None and response.status_code not in (204, 304)
        dropped = HOP_BY_HOP - {b"content-length"} if keep_length else HOP_BY_HOP
        self.raw_headers = response_headers(response, extra, dropped=dropped)
        self.upstream = response
        self.on_complete = on_complete if response.is_success else None
        self.metrics = metrics
        # An error event can be added to a plain SSE or NDJSON stream only: not to a compressed one,
        # nor past a length already announced. SSE errors take the route's format (`stream_format`).
        plain = "content-encoding" not in response.headers and length is None
        content_type = response.headers.get("content-type", "")
        self.error_kind = (
            None
            if not plain
            else stream_format
            if is_event_stream(response)
            else "ndjson"
            if content_type.startswith(("application/x-ndjson", "application/ndjson"))
            else None
        )

    async def _relay(self, response: httpx.Response) -> AsyncIterator[bytes]:
        tail = b""
        at_line_start = True
        try:
            async for chunk in raw_chunks(response):
                if self.on_complete:
                    tail = (tail + chunk)[-TAIL_BYTES:]
                if chunk:
                    at_line_start = chunk.endswith(b"\n")
                yield chunk
        except httpx.HTTPError as exc:
            log.warning("upstream stream failed after the response began: %s: %s", type(exc).__name__, exc)
            if self.metrics:
                self.metrics.upstream_errors.labels("stream_broken").inc()
            if self.error_kind is None:
                raise StreamBroken(type(exc).__name__) from None
            # The status line is gone already: say so inside the stream, where SDKs look for errors.
            yield stream_error_event(
                self.error_kind,
                f"The upstream stream broke off ({type(exc).__name__}).",
                at_line_start=at_line_start,
            )
            return
        if self.on_complete:
            self.on_complete(tail)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.metrics:
            self.metrics.streams_open.inc()
        try:
            await super().__call__(scope, receive, send)
        finally:
            with contextlib.suppress(httpx.HTTPError):  # a broken stream is closed: said already
                await self.upstream.aclose()
            if self.metrics:
                self.metrics.streams_open.dec()


def is_event_stream(response: httpx.Response) -> bool:
    content_type: str = response.headers.get("content-type", "")
    return content_type.startswith("text/event-stream")
