"""The page's routes: `GET /ui` (the page), `/ui/static/*` (its files, shipped in the package),
`GET /ui/events` (server-sent events: a `hello` with the store's snapshot, then `record` and `well`
events as requests go by), `GET /ui/conversations` (that snapshot, as JSON) and
`GET /ui/conversations/{key}` (one conversation's records and well).

With `COMPACT_API_KEYS` set, the page and its files are open (they hold no data) and the data routes
need a key as every other route does (`RequireApiKey`): the page asks for it once, keeps it in
`sessionStorage`, and sends it in a header (it reads the event stream with `fetch`, since an
`EventSource` cannot send headers, and a key in the query string would land in access logs).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

import orjson
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from proxy.errors import ProxyError
from proxy.live.records import Records

STATIC = resources.files("proxy.live") / "static"
FILES = {
    "index.html": "text/html; charset=utf-8",
    "ui.css": "text/css; charset=utf-8",
    "ui.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
OPEN_PREFIXES = ("/ui/static/",)  # with the page itself, `/ui`: no data in them
WAKE_S = 1.0  # how often a quiet stream checks that the server is not shutting down
PING_S = 15.0  # a comment this often finds a page that went away without closing
# The page loads nothing from anywhere else.
SECURITY = {
    "content-security-policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
    "script-src 'self'; connect-src 'self'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "cache-control": "no-cache",
}


def add_routes(app: FastAPI, records: Records) -> None:
    """Serve the page over `records` (nothing at all when `COMPACT_UI=false`)."""
    if not records.enabled:
        return

    async def page(request: Request) -> Response:
        return _file("index.html")

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in FILES:
            raise ProxyError(404, f"No file /ui/static/{name}.", code="not_found")
        return _file(name)

    async def snapshot(request: Request) -> Response:
        return Response(orjson.dumps(records.snapshot()), media_type="application/json", headers=SECURITY)

    async def conversation(request: Request) -> Response:
        found = records.conversation(request.path_params["key"])
        if found is None:
            raise ProxyError(404, "No such conversation (it may have been forgotten).", code="not_found")
        return Response(orjson.dumps(found), media_type="application/json", headers=SECURITY)

    async def events(request: Request) -> Response:
        return StreamingResponse(
            _stream(records),
            media_type="text/event-stream",
            headers={**SECURITY, "x-accel-buffering": "no"},
        )

    app.add_api_route("/ui", page, methods=["GET"], include_in_schema=False)
    app.add_api_route("/ui/static/{name}", static, methods=["GET"], include_in_schema=False)
    app.add_api_route("/ui/events", events, methods=["GET"], include_in_schema=False)
    app.add_api_route("/ui/conversations", snapshot, methods=["GET"], include_in_schema=False)
    app.add_api_route("/ui/conversations/{key}", conversation, methods=["GET"], include_in_schema=False)


def _file(name: str) -> Response:
    return Response((STATIC / name).read_bytes(), media_type=FILES[name], headers=SECURITY)


async def _stream(records: Records) -> AsyncIterator[bytes]:
    queue = records.watch()
    try:
        yield _event("hello", records.snapshot())
        quiet = 0.0
        while not _server_exiting():
            try:
                kind, data = await asyncio.wait_for(queue.get(), WAKE_S)
            except TimeoutError:
                quiet += WAKE_S
                if quiet >= PING_S:
                    quiet = 0.0
                    yield b": ping\n\n"
                continue
            if kind == "close":
                return
            quiet = 0.0
            yield _event(kind, data)
    finally:
        records.unwatch(queue)


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def _server_exiting() -> bool:
    """Whether uvicorn is shutting down: its graceful shutdown waits for open responses, and an
    event stream never ends by itself (uvicorn's signal handler is a method of its `Server`)."""
    server = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
    return bool(getattr(server, "should_exit", False))
