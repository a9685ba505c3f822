"""Relaying the upstream's answer to the client: streamed chunk by chunk as it arrives
(`StreamedResponse`), or read whole and passed on with a true length (`read_raw`,
`buffered_response`). Bodies go on as raw bytes with their `content-encoding`, so what the upstream
sent is what the client gets; a stream the upstream breaks off ends with an error event where the
stream can carry one, in the route's format's own words (given by the caller: this layer names no
format).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable

import httpx
import orjson
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from proxy.errors import ProxyError
from proxy.metrics import Metrics
from proxy.upstream.forwarding import HOP_BY_HOP, MAX_ANSWER_BYTES, map_transport_errors, response_headers

log = logging.getLogger("proxy.upstream")

TAIL_BYTES = 4096  # enough for the final chunk of a stream, where the usage report is
NDJSON_TYPES = ("application/x-ndjson", "application/ndjson")


class StreamBroken(Exception):
    """The upstream broke off a body the client had begun to receive and that cannot carry an
    error event: the client's connection is aborted. Logged once, as a warning, where it happens."""


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


def ndjson_error_line(message: str, *, at_line_start: bool = False) -> bytes:
    """What ends an NDJSON stream the upstream broke off: Ollama's `{"error": ...}` line, on a line
    of its own, never after an empty one (the ollama client parses every line, and an empty line is
    not JSON)."""
    return (b"" if at_line_start else b"\n") + orjson.dumps({"error": message}) + b"\n"


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


class UpstreamStream(StreamingResponse):
    """An answer streamed from the upstream's `response` (passed on, or translated as it arrives):
    the upstream response is closed when the client has it all, goes away, or the upstream fails,
    and the stream is counted among the open ones (`metrics`, when given)."""

    response: httpx.Response
    metrics: Metrics | None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.metrics:
            self.metrics.streams_open.inc()
        try:
            await super().__call__(scope, receive, send)
        finally:
            with contextlib.suppress(httpx.HTTPError):  # a broken stream is closed: said already
                await self.response.aclose()
            if self.metrics:
                self.metrics.streams_open.dec()


class StreamedResponse(UpstreamStream):
    """The upstream's body passed on chunk by chunk as it arrives. The upstream response is closed
    when the client has it all, disconnects, or the upstream fails. `on_complete` gets the last
    bytes of a stream that ended normally (where the usage report is); `stream_error` words the
    event that ends an SSE stream the upstream broke off (the route's format's own); `rewrite`, if
    given, rewrites a successful plain SSE stream on its way (a report added to an event)."""

    def __init__(
        self,
        response: httpx.Response,
        extra: dict[str, str] | None = None,
        *,
        stream_error: Callable[[str], bytes],
        on_complete: Callable[[bytes], None] | None = None,
        metrics: Metrics | None = None,
        rewrite: Callable[[AsyncIterator[bytes]], AsyncIterator[bytes]] | None = None,
    ) -> None:
        super().__init__(self._relay(response), status_code=response.status_code)
        # The body goes on exactly as it came, so the upstream's length stays true (also for HEAD,
        # which has no body). uvicorn would wait for the body a 204 or 304 never has.
        # A rewritten stream (plain SSE only: its events can be read) loses the upstream's length.
        sse = is_event_stream(response) and "content-encoding" not in response.headers
        self.rewrite = rewrite if rewrite and response.is_success and sse else None
        length = None if self.rewrite else response.headers.get("content-length")
        keep_length = length is not None and response.status_code not in (204, 304)
        dropped = HOP_BY_HOP - {b"content-length"} if keep_length else HOP_BY_HOP
        self.raw_headers = response_headers(response, extra, dropped=dropped)
        self.response = response
        self.on_complete = on_complete if response.is_success else None
        self.metrics = metrics
        # An error event can be added to a plain SSE or NDJSON stream only: not to a compressed one,
        # nor past a length already announced.
        plain = "content-encoding" not in response.headers and length is None
        content_type = response.headers.get("content-type", "")
        self.stream_error = stream_error
        self.framing = (
            None
            if not plain
            else "sse"
            if is_event_stream(response)
            else "ndjson"
            if content_type.startswith(NDJSON_TYPES)
            else None
        )

    async def _relay(self, response: httpx.Response) -> AsyncIterator[bytes]:
        tail = b""
        at_line_start = True
        chunks = raw_chunks(response)
        if self.rewrite:
            chunks = self.rewrite(chunks)
        try:
            async for chunk in chunks:
                if self.on_complete:
                    tail = (tail + chunk)[-TAIL_BYTES:]
                if chunk:
                    at_line_start = chunk.endswith(b"\n")
                yield chunk
        except httpx.HTTPError as exc:
            log.warning("upstream stream failed after the response began: %s: %s", type(exc).__name__, exc)
            if self.metrics:
                self.metrics.upstream_errors.labels("stream_broken").inc()
            if self.framing is None:
                raise StreamBroken(type(exc).__name__) from None
            # The status line is gone already: say so inside the stream, where SDKs look for errors.
            message = f"The upstream stream broke off ({type(exc).__name__})."
            if self.framing == "sse":
                yield self.stream_error(message)
            else:
                yield ndjson_error_line(message, at_line_start=at_line_start)
            return
        if self.on_complete:
            self.on_complete(tail)


def is_event_stream(response: httpx.Response) -> bool:
    content_type: str = response.headers.get("content-type", "")
    return content_type.startswith("text/event-stream")
