"""Plain ASGI middleware, one concern each (cheap on the hot path): the per-route request counter,
the request id (with the `Date` header), and the API-key check.
"""

from __future__ import annotations

import hmac
import os
import time
from email.utils import formatdate

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.errors import error_response
from proxy.formats import RouteTable
from proxy.metrics import Metrics
from proxy.server.logs import request_id

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/ui"})
OPEN_PREFIX = "/ui/static/"  # the live page's files hold no data: its data routes need a key
KEY_HEADERS = (b"x-api-key", b"api-key", b"x-goog-api-key")


class CountRequests:
    """`compact_requests_total` by route label and the status the client got (500 if none was sent)."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics, routes: RouteTable) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = self.routes.label(scope["path"])
        status = 500

        async def send_counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_counted)
        finally:
            self.metrics.requests.labels(route, str(status)).inc()


class RequestId:
    """The request id on every log line and on the answer (the client's own, else a fresh one), and a
    `Date` header when the upstream sent none."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = b""
        for name, value in scope["headers"]:
            if name.lower() == b"x-request-id":
                incoming = value  # the last one, as a dict of the headers would keep
        given = incoming[:128].decode("latin-1").strip()
        rid = given if given.isprintable() and given else os.urandom(16).hex()
        token = request_id.set(rid)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                sent = list(message.get("headers", []))
                names = {name.lower() for name, _ in sent}
                if b"x-request-id" not in names:  # the upstream's own wins
                    sent.append((b"x-request-id", rid.encode()))
                if b"date" not in names:  # RFC 9110 6.6.1: the upstream's own, or the proxy's clock
                    sent.append((b"date", http_date()))
                message["headers"] = sent
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            request_id.reset(token)


_date: tuple[int, bytes] = (0, b"")


def http_date() -> bytes:
    """The `Date` header's value for now, written once a second (it has a second's resolution)."""
    global _date
    now = int(time.time())
    if _date[0] != now:
        _date = (now, formatdate(now, usegmt=True).encode())
    return _date[1]


class RequireApiKey:
    """With `COMPACT_API_KEYS` set, every path but the open ones needs one of the keys, as a bearer
    token, `x-api-key`, `api-key` or `x-goog-api-key`; else a 401 in the shape of the path's protocol."""

    def __init__(self, app: ASGIApp, *, api_keys: list[bytes], routes: RouteTable) -> None:
        self.app = app
        self.api_keys = api_keys
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["type"] == "http" and scope["path"]
        if not path or not self.api_keys or path in OPEN_PATHS or path.startswith(OPEN_PREFIX):
            await self.app(scope, receive, send)
            return
        if not self._authorized(dict((k.lower(), v) for k, v in scope["headers"])):
            await error_response(
                401,
                "Missing or invalid API key for this proxy.",
                type="invalid_request_error",
                code="invalid_api_key",
                shape=self.routes.for_path(scope["path"]).format.error_body,
            )(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _authorized(self, headers: dict[bytes, bytes]) -> bool:
        scheme, _, bearer = headers.get(b"authorization", b"").partition(b" ")
        given = [bearer.strip()] if scheme.lower() == b"bearer" else []
        given += [headers[name].strip() for name in KEY_HEADERS if name in headers]
        return any(hmac.compare_digest(key, allowed) for key in given for allowed in self.api_keys)
