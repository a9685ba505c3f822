"""`GET /v1/retrieve/{hash}` (LiteLLM's guardrail) and `POST /v1/retrieve` with `{"hash"}` (Headroom's
own clients): the original that `/v1/compress` cut, while it is kept, for the key that sent it.

Found: `{"hash", "original_content"}` as Headroom answers. Not kept (expired, another key's, never
cut, or retrieval off): 404, as Headroom answers, with the reason in `detail` and `error.message`.
"""

from __future__ import annotations

import re

import orjson
from starlette.requests import Request
from starlette.responses import Response

from proxy.bodies.jsonbody import parse_json_object
from proxy.errors import ProxyError
from proxy.gateway.counters import GatewayCounters
from proxy.gateway.originals import Originals, scope_of
from proxy.server.intake import read_json_body

ID = re.compile(r"[a-f0-9]{12,24}")


class Retriever:
    def __init__(self, originals: Originals | None, counters: GatewayCounters, max_body: int) -> None:
        self.originals, self.counters, self.max_body = originals, counters, max_body

    async def by_body(self, request: Request) -> Response:
        body = parse_json_object(await read_json_body(request, self.max_body))
        key = body.get("hash")
        if not isinstance(key, str) or not key:
            raise ProxyError(400, "hash required", param="hash")
        return await self.answer(request, key)

    async def answer(self, request: Request, key: str) -> Response:
        key = key.strip().lower()
        if self.originals is None:
            self.counters.retrieve.labels("off").inc()
            return _missing(key, "Retrieval is off: COMPACT_RETRIEVE=true keeps what /v1/compress cuts.")
        found = ID.fullmatch(key) and await self.originals.get(scope_of(credential(request)), key)
        if not found:
            self.counters.retrieve.labels("missing").inc()
            ttl = self.originals.ttl
            return _missing(key, f"Entry not found (kept {ttl} seconds, for the key that sent it).")
        self.counters.retrieve.labels("found").inc()
        body = orjson.dumps({"hash": key, "original_content": found})
        return Response(body, media_type="application/json")


def credential(request: Request) -> bytes:
    """The key the caller presented (a bearer token, `x-api-key`, `api-key`), whichever header
    carried it: what its originals are kept under."""
    headers = {name.lower(): value.strip() for name, value in request.headers.raw}
    scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
    if scheme.lower() == b"bearer" and token.strip():
        return token.strip()
    for name in (b"authorization", b"x-api-key", b"api-key", b"x-goog-api-key"):
        if headers.get(name):
            return headers[name]
    return b""


def _missing(key: str, reason: str) -> Response:
    body = {"detail": reason, "hash": key, "error": {"type": "not_found", "message": reason}}
    return Response(orjson.dumps(body), status_code=404, media_type="application/json")
