"""A page's event stream, `GET /ui/events`: a `hello` with what its key may see, then the events
queued for it (`pages.Page`) as requests go by, and a comment every `PING_S` seconds of quiet, which
finds a page that went away without closing.

A page that falls behind is dropped by the store once its backlog passes its bound (nothing more is
queued for it). If it was only slow, the write under way ends within `DROP_GRACE_S` and the stream
ends with it: the page sees its end and reconnects. If it reads nothing, that write is abandoned
(cancelled) and the stream waits for the client to hang up, keeping its place among the
`COMPACT_UI_STREAMS`: such a connection cannot be closed at once without losing what is already in
its buffers, and releasing its place would let such clients pile up until the proxy's own traffic
finds no connection.
"""

from __future__ import annotations

import signal
from collections.abc import Callable

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from proxy.live.pages import Page, Pages

WAKE_S = 1.0  # how often a quiet stream checks that the server is not shutting down
PING_S = 15.0
DROP_GRACE_S = 10.0  # how long a dropped page's write under way may take before it is abandoned
HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"x-accel-buffering", b"no")]


class EventStream(Response):
    """The response of one page's stream (`hello`: its first event, written when it starts)."""

    def __init__(
        self,
        pages: Pages,
        page: Page,
        hello: Callable[[], bytes],
        headers: dict[str, str],
        grace: float = DROP_GRACE_S,
    ) -> None:
        super().__init__(status_code=200)
        self.pages, self.page, self.hello, self.grace = pages, page, hello, grace
        self.stream_headers = HEADERS + [(k.encode(), v.encode()) for k, v in headers.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as group:
                sending = anyio.CancelScope()

                async def send_all() -> None:
                    with sending:
                        await self._send_events(send)
                        group.cancel_scope.cancel()  # complete: dropped, or the server exits

                async def stop_when_dropped() -> None:
                    await self.page.gone.wait()
                    await anyio.sleep(self.grace)  # a slow page's write ends, and its stream with it
                    sending.cancel()  # a page that reads nothing: its write is abandoned

                group.start_soon(send_all)
                group.start_soon(stop_when_dropped)
                if await _until_disconnect(receive):
                    group.cancel_scope.cancel()
                else:  # the server is exiting: the stream ends itself, unless its client reads nothing
                    await anyio.sleep(2 * WAKE_S)
                    group.cancel_scope.cancel()
        finally:
            self.pages.close(self.page)

    async def _send_events(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.stream_headers})
        await send({"type": "http.response.body", "body": self.hello(), "more_body": True})
        quiet = 0.0
        while not server_exiting() and not self.page.dropped:
            chunk = await self.page.next(WAKE_S)
            if chunk is None:
                quiet += WAKE_S
                if quiet >= PING_S:
                    quiet = 0.0
                    await send({"type": "http.response.body", "body": b": ping\n\n", "more_body": True})
                continue
            quiet = 0.0
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _until_disconnect(receive: Receive) -> bool:
    """Until the client hangs up (True), or the server exits (its graceful shutdown waits for us)."""
    while not server_exiting():
        with anyio.move_on_after(WAKE_S):
            while (await receive())["type"] != "http.disconnect":
                pass
            return True
    return False


def server_exiting() -> bool:
    """Whether uvicorn is shutting down: its graceful shutdown waits for open responses, and an
    event stream never ends by itself (uvicorn's signal handler is a method of its `Server`)."""
    server = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
    return bool(getattr(server, "should_exit", False))
