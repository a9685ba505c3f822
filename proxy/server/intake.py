"""What comes in from the client, checked at the door: the body read under a limit (and decoded when
it came compressed), the path and message count checked, and the wait for a client that goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import urllib.parse
from collections.abc import Coroutine
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from proxy.bodies.encoding import decode_body
from proxy.errors import ProxyError

log = logging.getLogger("proxy")


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with a 413 as soon as it passes `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
    except ClientDisconnect:  # gone, or closed by the body timeout: nobody reads an answer
        raise ProxyError(
            400, "The client went away before its body was complete.", code="incomplete_body"
        ) from None
    return b"".join(chunks)


async def read_json_body(request: Request, limit: int) -> bytes:
    """A body compaction must read: decoded when it was sent compressed."""
    raw = await read_body(request, limit)
    encoding = request.headers.get("content-encoding")
    return decode_body(raw, encoding, limit) if encoding else raw


def _too_large(limit: int) -> ProxyError:
    """The 413 for a body refused before its end (the connection closed after it, as nginx does)."""
    message = f"The request body is larger than the proxy's limit of {limit} bytes."
    return ProxyError(413, message, code="request_too_large", closes=True)


def raw_path(request: Request) -> str:
    """The path as the client sent it (still percent-encoded)."""
    raw: bytes = request.scope.get("raw_path") or request.url.path.encode()
    return raw.decode("latin-1")


def check_path(path: str) -> None:
    """Nothing in a path may step outside the upstream's base URL, encoded or not."""
    path = urllib.parse.unquote(path)
    segments = path.split("/")
    if ".." in segments or "." in segments or "//" in path or "\\" in path or "://" in path or "@" in path:
        raise ProxyError(400, "The request path is not allowed.", code="invalid_path")


def check_messages(body: dict[str, object], limit: int) -> None:
    messages = body.get("messages")
    if isinstance(messages, list) and len(messages) > limit:
        raise ProxyError(
            400,
            f"Too many messages: {len(messages)}, the proxy's limit is {limit}.",
            code="too_many_messages",
            param="messages",
        )


async def until_disconnect(request: Request, work: Coroutine[Any, Any, Response]) -> Response:
    """Run `work` (the upstream exchange up to the response headers, or the whole answer when it is
    read at once), and cancel it if the client goes away first: an upstream generating for nobody
    is closed instead of working on until it answers or times out."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    log.info("the client went away before the upstream answered; upstream request cancelled")
    return Response(status_code=499)


async def _disconnected(request: Request) -> None:
    """Wait for the client to disconnect (the request body has been read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
