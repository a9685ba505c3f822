"""One proxy process under many concurrent streams, and its graceful shutdown.

The upstream is `tests/support/upstreams/faulty.py` as its own process (in its normal mode), so it does not
share a core and a GIL with the 200 clients driven from here; the driver is
`tests/support/load.py`'s, which `benchmarks/throughput/bench_streams.py` uses too (a few lines of raw asyncio
HTTP/1.1, cheap enough per stream that the client is not what is measured). Everything is bounded: a round starts no stream after its
deadline and gives each stream 60 s.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.support.load import RoundResult, drive, proxy_process, upstream_process
from tests.support.proc import cpu_seconds, fd_count, rss_kib
from tests.support.upstreams.faulty import serve_in_thread, sse_body

pytestmark = pytest.mark.slow

CLIENTS = 200
MiB = 1024


@pytest.fixture(scope="module")
def upstream_url() -> Iterator[str]:
    with upstream_process(max_seconds=300) as url:
        yield url


def streams_open(base_url: str) -> float:
    text = httpx.get(base_url + "/metrics", timeout=5).text
    return float(
        next(
            line.split()[-1]
            for line in text.splitlines()
            if line.startswith("compacting_proxy_streams_open ")
        )
    )


@dataclass(frozen=True)
class Round:
    result: RoundResult
    cpu_s: float  # the proxy's CPU time during the round
    rss_kib: int  # after the round and a settle period
    fds: int


@dataclass(frozen=True)
class TwoRounds:
    start_fds: int
    first: Round
    second: Round
    streams_open: float


@pytest.fixture(scope="module")
def two_rounds(upstream_url: str) -> TwoRounds:
    """The same load twice through one fresh proxy process: 200 concurrent streams each round."""
    with proxy_process(upstream_url) as (proxy, base):
        start_fds = fd_count(proxy.pid)
        rounds = []
        for n in (1, 2):
            cpu_before = cpu_seconds(proxy.pid)
            result = asyncio.run(
                drive(
                    base + "/v1",
                    clients=CLIENTS,
                    per_client=1,
                    chunks=8,
                    delay=0.02,
                    deadline=20,
                    stream_timeout=60,
                    round_id=f"r{n}",
                )
            )
            cpu = cpu_seconds(proxy.pid) - cpu_before
            time.sleep(1.0)  # settle: finished streams' buffers and tasks are released
            rounds.append(Round(result, cpu, rss_kib(proxy.pid), fd_count(proxy.pid)))
        for n, done in enumerate(rounds, 1):  # shown with -s, and with a failure
            r = done.result
            print(
                f"round {n}: {r.completed}/{r.started} complete {dict(r.outcomes)}, {r.per_second:.0f} "
                f"streams/s, p50 {r.percentile(0.5) * 1000:.0f} ms, proxy CPU {done.cpu_s:.2f} s, "
                f"RSS {done.rss_kib / 1024:.1f} MiB, {done.fds} fds (at start {start_fds})"
            )
        return TwoRounds(start_fds, rounds[0], rounds[1], streams_open(base))


@pytest.mark.timeout(150)
def test_200_concurrent_streams_arrive_whole_and_memory_stays_flat(two_rounds: TwoRounds) -> None:
    first, second = two_rounds.first, two_rounds.second
    for done in (first, second):
        # Every stream that started finished, byte-identical to what the upstream sent.
        assert done.result.started == CLIENTS, done.result.outcomes
        assert done.result.completed == done.result.started, done.result.outcomes
    assert two_rounds.streams_open == 0
    # Round 1 takes the process to its working set for 200 concurrent streams (buffers, pooled
    # upstream connections, allocator arenas); the same load again must fit in it. A leak of
    # even 40 KiB per stream would add 8 MiB here; nothing was observed to grow at all.
    assert second.rss_kib - first.rss_kib <= 8 * MiB, (first.rss_kib, second.rss_kib)
    assert second.rss_kib < 1.5 * first.rss_kib
    # Descriptors: the client connections are gone; what remains is the idle upstream pool,
    # bounded by the concurrency, not by the number of streams served.
    for done in (first, second):
        assert done.fds <= two_rounds.start_fds + CLIENTS + 16, (two_rounds.start_fds, done.fds)


@pytest.mark.timeout(150)
def test_a_warm_pool_costs_no_more_cpu_per_stream_than_a_cold_one(two_rounds: TwoRounds) -> None:
    """A regression test: httpcore 1.0.9's pool, the proxy's first upstream transport, did work per
    pass proportional to (pooled connections)^2, and a second burst of 200 streams, meeting 200 idle
    connections, cost 5-10x the CPU of the first (benchmarks/throughput/LOAD.md)."""
    first, second = two_rounds.first, two_rounds.second
    # CPU time, not wall time: a noisy neighbour slows both rounds alike but adds little CPU.
    assert second.cpu_s <= 2.5 * first.cpu_s, (first.cpu_s, second.cpu_s)


def test_sigterm_lets_the_open_stream_finish_refuses_new_connections_and_exits_0() -> None:
    chunks, delay = 10, 0.3  # a three-second stream
    tag = "graceful"
    with (
        serve_in_thread() as upstream,
        proxy_process(upstream.url, "--timeout-graceful-shutdown", "15") as (
            proxy,
            base,
        ),
    ):
        first_event = threading.Event()
        outcome: dict[str, object] = {}

        def stream() -> None:
            body = {"model": "faulty", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            headers = {"x-fault": f"ok; chunks={chunks}; delay={delay}; tag={tag}"}
            received = b""
            try:
                with httpx.stream(
                    "POST", base + "/v1/chat/completions", json=body, headers=headers, timeout=20
                ) as response:
                    outcome["status"] = response.status_code
                    for chunk in response.iter_raw():
                        received += chunk
                        first_event.set()
            except httpx.HTTPError as exc:
                outcome["error"] = repr(exc)
            outcome["body"] = received
            outcome["finished_at"] = time.monotonic()
            first_event.set()

        reader = threading.Thread(target=stream, daemon=True)
        reader.start()
        assert first_event.wait(10), "the stream never began"
        proxy.send_signal(signal.SIGTERM)
        signalled = time.monotonic()

        refused_at = None
        deadline = signalled + 3
        while time.monotonic() < deadline:
            try:
                httpx.get(base + "/healthz", timeout=0.5)
            except httpx.ConnectError:
                refused_at = time.monotonic()
                break
            except httpx.TransportError:
                pass
            time.sleep(0.05)

        reader.join(20)
        assert not reader.is_alive()
        assert "error" not in outcome, outcome.get("error")
        assert outcome["status"] == 200
        assert outcome["body"] == sse_body(chunks, tag), "the open stream must finish, whole"
        assert refused_at is not None, "new connections must be refused once shutdown began"
        assert refused_at < outcome["finished_at"]  # type: ignore[operator]
        assert proxy.wait(timeout=15) == 0
        log = proxy.log_path.read_text()  # type: ignore[attr-defined]
        assert "Traceback" not in log, log[-3000:]
