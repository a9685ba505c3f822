"""For the red-team tests against the real process: `Hostile` answering each API with a small valid
answer (`answer_all`), the real `compacting-proxy` in front of it (`upstream_and_proxy`), and
`/healthz` polled while heavy work goes on (`health_during`, `responsive_during`): it must answer
within 50 ms plus the idle noise measured first in the same test, plus `floor`, one C call of the
proxy's that cannot be split (parsing the whole body, `parse_time`)."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
import orjson

from tests.support.fakes import anthropic_message, completion
from tests.support.hostile import Hostile, Proxy, ScriptedHandler, Seen, hostile_upstream, proxy_for

HEALTH_SLACK_S = 0.050


def answer_all(hostile: Hostile) -> None:
    """The upstream answers each API with a small, valid answer of its own shape."""

    def chat(h: ScriptedHandler, seen: Seen) -> None:
        h.json(200, completion("ok"))

    def messages(h: ScriptedHandler, seen: Seen) -> None:
        h.json(200, anthropic_message())

    def responses(h: ScriptedHandler, seen: Seen) -> None:
        h.json(
            200,
            {
                "id": "resp_1",
                "object": "response",
                "status": "completed",
                "model": "m",
                "output": [],
                "usage": {"input_tokens": 10, "output_tokens": 1, "total_tokens": 11},
            },
        )

    hostile.routes.update(
        {
            "/v1/chat/completions": chat,
            "/v1/messages": messages,
            "/v1/responses": responses,
            "/v1/models": lambda h, s: h.json(200, {"object": "list", "data": []}),
            "/": lambda h, s: h.json(200, {"path": s.path}),
        }
    )


@contextmanager
def upstream_and_proxy(**env: str) -> Iterator[tuple[Hostile, Proxy]]:
    with hostile_upstream() as hostile:
        answer_all(hostile)
        with proxy_for(hostile.url, **env) as proxy:
            yield hostile, proxy


@dataclass
class Health:
    idle: list[float]
    busy: list[float] = field(default_factory=list)
    floor: float = 0.0  # one C call of the proxy's that cannot be split (parsing the whole body)

    @property
    def bound(self) -> float:
        return HEALTH_SLACK_S + max(self.idle) + self.floor

    def check(self) -> None:
        assert len(self.busy) >= 3, f"too few /healthz polls during the request: {self.busy}"
        worst = max(self.busy)
        print(
            f"/healthz: idle max {max(self.idle) * 1000:.0f} ms, busy max {worst * 1000:.0f} ms "
            f"over {len(self.busy)} polls, parse floor {self.floor * 1000:.0f} ms"
        )
        assert worst <= self.bound, (
            f"/healthz took {worst * 1000:.0f} ms during the request, over {self.bound * 1000:.0f} ms "
            f"(idle {max(self.idle) * 1000:.1f} ms + 50 + parse {self.floor * 1000:.0f}); "
            f"all: {[round(b * 1000) for b in self.busy]}"
        )


def _timed_get(client: httpx.Client) -> float:
    started = time.perf_counter()
    assert client.get("/healthz").status_code == 200
    return time.perf_counter() - started


def parse_time(content: bytes) -> float:
    """How long orjson takes to parse `content` here: one C call that holds the GIL throughout, in
    the proxy's worker thread too, so no other client is answered meanwhile (the floor of a body
    this large, whatever the proxy does around it)."""
    gc.disable()
    try:
        times = []
        for _ in range(3):
            started = time.perf_counter()
            orjson.loads(content)
            times.append(time.perf_counter() - started)
        return max(times)
    finally:
        gc.enable()


def responsive_during(proxy: Proxy, work: Callable[[], None], floor: float = 0.0) -> None:
    """`work` done while /healthz is polled, within the bound; on this shared two-core machine the
    scheduler alone sometimes keeps a process off the CPU for 100-200 ms, so one more try is
    allowed (a proxy that freezes on `work` freezes on both)."""
    failures = []
    for _ in range(2):
        with health_during(proxy, floor) as health:
            work()
        try:
            health.check()
            return
        except AssertionError as failure:
            failures.append(str(failure))
    raise AssertionError("\n".join(failures))


@contextmanager
def in_background(work: Callable[[], None], done: threading.Event, *, join_s: float) -> Iterator[None]:
    """`work` in a daemon thread while the block runs; then `done` is set (the work watches it) and
    the thread given `join_s` to end."""
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=join_s)


@contextmanager
def health_during(proxy: Proxy, floor: float = 0.0) -> Iterator[Health]:
    """Measure idle /healthz round trips, then poll /healthz every 10 ms until the block ends. The
    block must not hold this process's GIL long (encode bodies before it): the poller runs here."""
    with httpx.Client(base_url=proxy.base_url, timeout=30) as client:
        health = Health([], floor=floor)
        done = threading.Event()
        started = time.monotonic()
        while time.monotonic() - started < 1.0:  # idle: as often and as long as while busy, about
            health.idle.append(_timed_get(client))
            done.wait(0.01)

        def poll() -> None:
            while not done.is_set():
                health.busy.append(_timed_get(client))
                done.wait(0.01)

        with in_background(poll, done, join_s=60):
            yield health
