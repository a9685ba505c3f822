"""Reading from a client connection: uvicorn's flow control with a hold, and the probe reserve.

`HeldFlow` is uvicorn's `FlowControl` (pause reading while a body waits for the app, resume when the
app asks for more) with one more reason to stop reading: a hold, set while a connection's pipelined
requests wait their turn. Under a hold, uvicorn's own calls to resume change nothing; its last wish is
applied when the hold ends. It also keeps the time reading was paused, which a body's minimum data
rate does not count (Kestrel's rule: time the server is not reading is not the client's fault).

`ProbeReserve` holds the few connections accepted past `COMPACT_MAX_CLIENT_CONNECTIONS`: each may ask
for `/healthz`, `/readyz` or `/metrics` and is closed after its answer; anything else gets 503. When
the reserve is full, a new connection evicts the oldest one whose head has not arrived, so clients
that open sockets and send nothing cannot keep the probes out (a probe sends its head at once).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from uvicorn.protocols.http.flow_control import FlowControl

from proxy.errors import openai_error_body

PROBE_PATHS = frozenset({b"/healthz", b"/readyz", b"/metrics"})
OVERLOADED = "The proxy has too many open connections; try again later."


class HeldFlow(FlowControl):
    def __init__(self, transport: asyncio.Transport, clock: Callable[[], float]) -> None:
        super().__init__(transport)
        self.clock = clock
        self.held = False
        self.wanted = True  # what uvicorn last asked for: reading or not
        self.paused_since: float | None = None
        self.paused_total = 0.0

    def pause_reading(self) -> None:
        self.wanted = False
        self._pause()

    def resume_reading(self) -> None:
        self.wanted = True
        if not self.held:
            self._resume()

    def hold(self) -> None:
        self.held = True
        self._pause()

    def release(self) -> None:
        self.held = False
        if self.wanted:
            self._resume()

    def paused_for(self, now: float) -> float:
        """Seconds reading has been paused in all, up to `now`."""
        running = now - self.paused_since if self.paused_since is not None else 0.0
        return self.paused_total + running

    def _pause(self) -> None:
        if not self.read_paused:
            self.paused_since = self.clock()
        super().pause_reading()

    def _resume(self) -> None:
        if self.read_paused and self.paused_since is not None:
            self.paused_total += self.clock() - self.paused_since
            self.paused_since = None
        super().resume_reading()


class Evictable(Protocol):
    in_head: bool

    def evict(self) -> None: ...


class ProbeReserve:
    """At most `size` connections past the cap, oldest first; see the module's docstring."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.members: dict[Evictable, None] = {}  # insertion-ordered: the oldest first
        self.last_busy = float("-inf")  # when the server was last seen under load (see the protocol)

    def __len__(self) -> int:
        return len(self.members)

    def admit(self, connection: Evictable) -> bool:
        if len(self.members) >= self.size:
            waiting = next((member for member in self.members if member.in_head), None)
            if waiting is None:  # every one is being answered: the newcomer is refused
                return False
            self.members.pop(waiting)
            waiting.evict()
        self.members[connection] = None
        return True

    def leave(self, connection: Evictable) -> None:
        self.members.pop(connection, None)


class PipelineTurns:
    """Connections' pipelined requests started a few per turn of the event loop, in the order they
    became ready, instead of each at once when the answer before it ends. A client that pipelines
    thousands of requests (and 50 such clients) is answered at the same total rate, but each turn
    of the loop runs only a few of those requests' steps, so a new connection's request (a probe)
    waits for a few short turns, not behind one step of every busy connection's next request.
    Requests that are not pipelined (a connection's first, or the next one after its answer was
    read) never wait here."""

    def __init__(self, per_turn: int) -> None:
        self.per_turn = per_turn
        self.waiting: deque[Callable[[], None]] = deque()
        self.scheduled = False

    def __len__(self) -> int:
        return len(self.waiting)

    def add(self, start: Callable[[], None]) -> None:
        """`start` called in a later turn of the loop (it checks its connection is still open)."""
        self.waiting.append(start)
        if not self.scheduled:
            self.scheduled = True
            asyncio.get_running_loop().call_soon(self._turn)

    def _turn(self) -> None:
        for _ in range(min(self.per_turn, len(self.waiting))):
            self.waiting.popleft()()
        self.scheduled = bool(self.waiting)
        if self.scheduled:
            asyncio.get_running_loop().call_soon(self._turn)


def turns_of(server_state: Any, per_turn: int) -> PipelineTurns:
    """The pipelined requests' turns of one server (one per worker process), on its `ServerState`."""
    turns: PipelineTurns | None = getattr(server_state, "compact_pipeline_turns", None)
    if turns is None:
        turns = PipelineTurns(per_turn)
        server_state.compact_pipeline_turns = turns
    return turns


def reserve_of(server_state: Any, size: int) -> ProbeReserve:
    """The reserve of one server (one per worker process), kept on uvicorn's shared `ServerState`;
    it also keeps when that server was last under load."""
    reserve: ProbeReserve | None = getattr(server_state, "compact_probe_reserve", None)
    if reserve is None:
        reserve = ProbeReserve(size)
        server_state.compact_probe_reserve = reserve
    return reserve


async def answer_overloaded(scope: Any, receive: Any, send: Any) -> None:
    """503 in OpenAI's error shape, and the connection closed: a request past the cap not for a probe."""
    body = openai_error_body(OVERLOADED, type="server_error", code="overloaded")
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        (b"retry-after", b"1"),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})
