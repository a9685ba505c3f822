"""Forwarding to the one configured upstream: URLs, headers, transport errors, and the answers the
proxy reads for itself (probes, summaries, the Ollama bridge); relaying answers to the client is
`streaming.py`'s.

All I/O goes through one injected httpx transport, so tests swap it instead of patching. Upstream
4xx/5xx are responses, not exceptions; only transport failures become errors, mapped once in
`map_transport_errors`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager

import httpx

from proxy.bodies.encoding import Inflater
from proxy.errors import ProxyError
from proxy.settings import Settings

log = logging.getLogger("proxy.upstream")

RawHeaders = Sequence[tuple[bytes, bytes]]
URL_CACHE_SIZE = 256
URL_CACHE_PATH_CHARS = 1024
# The most the proxy reads whole of an answer it must parse or rewrite (a chat answer that does not
# stream, an error body); streamed answers are passed on and never buffered.
MAX_ANSWER_BYTES = 64 * 1024 * 1024

# Headers that describe one hop, not the message (RFC 9110 §7.6.1), plus those recomputed for the
# body actually sent (a streamed response puts the upstream's content-length back: its body is the same).
# Where clients put their key: OpenAI's Bearer, Anthropic's, Azure's and Google's own headers.
CREDENTIAL_HEADERS = frozenset({b"authorization", b"x-api-key", b"api-key", b"x-goog-api-key"})
# What the proxy's own calls to a server carry of a request's credentials: its bearer token (and, to
# the upstream's probes, a Gemini API key).
BEARER = frozenset({b"authorization"})
BEARER_OR_GOOGLE_KEY = frozenset({b"authorization", b"x-goog-api-key"})
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


def root_url(base_url: str) -> str:
    """The server's root from its configured base URL: without a trailing `/` and without the `/v1`
    of an OpenAI-compatible base (Ollama's native `/api/...`, llama.cpp's `/props` are there)."""
    return base_url.rstrip("/").removesuffix("/v1")


def credential_headers(headers: RawHeaders, names: frozenset[bytes] = BEARER) -> list[tuple[bytes, bytes]]:
    """The headers among `headers` named in `names` (the bearer token by default), as they came."""
    return [(name, value) for name, value in headers if name.lower() in names]


def build_transport(settings: Settings) -> httpx.AsyncBaseTransport:
    """The pooled keep-alive transport shared by every request for the lifetime of the app."""
    from proxy.upstream.transport import UpstreamTransport

    limits = httpx.Limits(
        max_connections=settings.max_connections,
        max_keepalive_connections=settings.max_connections,
        keepalive_expiry=settings.upstream_keep_alive,
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
        self.root_url = root_url(base_url)
        self.api_key = api_key.encode() if api_key else None
        self.extensions = {"timeout": (timeout or httpx.Timeout(60.0)).as_dict()}
        self._urls: dict[str, httpx.URL] = {}

    @property
    def urls(self) -> Mapping[str, httpx.URL]:
        """The URLs built so far, by path (the metrics count them)."""
        return self._urls

    def url(self, path: str, query: bytes = b"", *, from_root: bool = False) -> httpx.URL:
        """The upstream URL for `path`, relative to the upstream's base (e.g. `/chat/completions`), or
        with `from_root` to the server's root (its base without `/v1`, e.g. Ollama's `/api/...`)."""
        path = ("\0" if from_root else "") + path  # one cache for both
        url = self._urls.get(path)
        if url is None:
            url = httpx.URL((self.root_url + path[1:]) if from_root else self.base_url + path)
            # Paths come from clients: the cache stays bounded in entries and in bytes.
            if len(self._urls) < URL_CACHE_SIZE and len(path) <= URL_CACHE_PATH_CHARS:
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
