"""`/readyz`: whether the upstream answers at all, asked at most once per `READY_TTL` seconds."""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx
from starlette.responses import Response

from proxy.errors import ProxyError, error_response
from proxy.upstream.forwarding import Upstream

# `/readyz` is open to anyone: its answer is reused this long, so it cannot be made a way to send
# the upstream a request per request.
READY_TTL = 2.0
READY_TIMEOUT = 5.0


class Readiness:
    """The upstream answers (any HTTP status counts: it is reachable). Only its status line is read,
    and one answer serves every `/readyz` for `READY_TTL` seconds."""

    def __init__(self, upstream: Upstream, *, needs_upstream: bool = True) -> None:
        self.upstream = upstream
        self.needs_upstream = needs_upstream  # off: ready as soon as the process serves
        self._lock = asyncio.Lock()
        self._last: tuple[float, str | None] = (float("-inf"), None)  # when last asked, and the error

    async def answer(self) -> Response:
        if not self.needs_upstream:
            return Response(b'{"status":"ready"}', media_type="application/json")
        async with self._lock:
            if time.monotonic() - self._last[0] >= READY_TTL:
                error = await ask_ready(self.upstream)
                self._last = (time.monotonic(), error)
        if self._last[1] is not None:
            return error_response(
                503,
                f"The upstream does not answer: {self._last[1]}.",
                type="upstream_error",
                code="upstream_unreachable",
            )
        return Response(b'{"status":"ready"}', media_type="application/json")


async def ask_ready(upstream: Upstream) -> str | None:
    """None if the upstream answers `GET /models` at all, else why not. The body is never read."""
    try:
        response = await asyncio.wait_for(
            upstream.open("GET", upstream.url("/models"), upstream.request_headers([]), b""), READY_TIMEOUT
        )
    except TimeoutError:
        return "ReadTimeout"
    except ProxyError as exc:
        return type(exc.__cause__).__name__ if exc.__cause__ else exc.code or "error"
    with contextlib.suppress(httpx.HTTPError):
        await response.aclose()
    return None
