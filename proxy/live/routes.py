"""The page's routes: `GET /ui` (the page), `/ui/static/*` (its files, shipped in the package),
`GET /ui/events` (server-sent events: a `hello` with the store's snapshot, then `record` and `well`
events as requests go by: `events.py`), `GET /ui/conversations` (that snapshot, as JSON) and
`GET /ui/conversations/{key}` (one conversation's records and well). Each data route answers with
what the key it was given may see (`owners.py`). Past `COMPACT_UI_STREAMS` pages watching, a new
event stream gets 503 with `Retry-After`, and its connection is closed.

With `COMPACT_API_KEYS` set, the page and its files are open (they hold no data) and the data routes
need a key as every other route does (`RequireApiKey`): the page asks for it once, keeps it in
`sessionStorage`, and sends it in a header (it reads the event stream with `fetch`, since an
`EventSource` cannot send headers, and a key in the query string would land in access logs).
"""

from __future__ import annotations

from importlib import resources
from pathlib import PurePath

import orjson
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from proxy.errors import ProxyError, error_response
from proxy.live.events import EventStream
from proxy.live.pages import event_bytes
from proxy.live.records import Records

STATIC = resources.files("proxy.live") / "static"
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",  # the page's ES modules
    ".svg": "image/svg+xml",
}
FILES = {f.name: TYPES[suffix] for f in STATIC.iterdir() if (suffix := PurePath(f.name).suffix) in TYPES}
OPEN_PREFIXES = ("/ui/static/",)  # with the page itself, `/ui`: no data in them
RETRY_AFTER_S = 5  # what a page refused past `COMPACT_UI_STREAMS` is told to wait
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
        sight = records.owners.sight_of(request.headers.raw)
        return Response(
            orjson.dumps(records.snapshot(sight)), media_type="application/json", headers=SECURITY
        )

    async def conversation(request: Request) -> Response:
        sight = records.owners.sight_of(request.headers.raw)
        found = records.conversation(request.path_params["key"], sight)
        if found is None:  # another key's too: nothing says it exists
            raise ProxyError(404, "No such conversation (it may have been forgotten).", code="not_found")
        return Response(orjson.dumps(found), media_type="application/json", headers=SECURITY)

    async def events(request: Request) -> Response:
        sight = records.owners.sight_of(request.headers.raw)
        page = records.pages.open(sight)
        if page is None:
            return error_response(
                503,
                f"{records.pages.cap} pages are watching already (COMPACT_UI_STREAMS); try again later.",
                type="server_error",
                code="too_many_pages",
                headers={"retry-after": str(RETRY_AFTER_S), "connection": "close"},
            )
        return EventStream(
            records.pages, page, lambda: event_bytes("hello", records.snapshot(sight)), SECURITY
        )

    app.add_api_route("/ui", page, methods=["GET"], include_in_schema=False)
    app.add_api_route("/ui/static/{name}", static, methods=["GET"], include_in_schema=False)
    app.add_api_route("/ui/events", events, methods=["GET"], include_in_schema=False)
    app.add_api_route("/ui/conversations", snapshot, methods=["GET"], include_in_schema=False)
    app.add_api_route("/ui/conversations/{key}", conversation, methods=["GET"], include_in_schema=False)


def _file(name: str) -> Response:
    return Response((STATIC / name).read_bytes(), media_type=FILES[name], headers=SECURITY)
