"""Many concurrent streams through one real proxy process: the raw asyncio HTTP/1.1 driver (`drive`,
cheap enough per stream that the client is not what is measured) and the two processes (what `/proc`
says of them: `tests/support/proc.py`). Shared by ``tests/slow/test_load.py`` and
``benchmarks/throughput/bench_streams.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson

from tests.support.processes import VENV_BIN, free_port, running
from tests.support.upstreams.faulty import sse_body

MESSAGES = [{"role": "user", "content": "Stream me something."}]


@dataclass
class RoundResult:
    started: int = 0
    completed: int = 0  # byte-identical to what the upstream sent
    outcomes: Counter[str] = field(default_factory=Counter)
    durations: list[float] = field(default_factory=list)
    elapsed: float = 0.0

    @property
    def per_second(self) -> float:
        return self.completed / self.elapsed if self.elapsed else 0.0

    def percentile(self, q: float) -> float:
        if not self.durations:
            return 0.0
        ordered = sorted(self.durations)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class HTTPFramingError(Exception):
    """The proxy's answer was not well-formed HTTP/1.1."""


async def post_stream(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, path: str, body: bytes, fault: str
) -> tuple[int, bytes]:
    """One POST on an open keep-alive connection: the status and the whole (de-chunked) body.

    A few lines of HTTP/1.1 instead of httpx: at 200 concurrent streams httpx's per-chunk and
    per-client overhead made the load generator, not the proxy, the bottleneck on two cores.
    """
    head = (
        f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nx-fault: {fault}\r\n\r\n"
    )
    writer.write(head.encode() + body)
    status_line, *lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or parts[0] != "HTTP/1.1" or not parts[1].isdigit():
        raise HTTPFramingError(status_line)
    headers = {}
    for line in lines:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            chunks.append((await reader.readexactly(size + 2))[:-2])
        content = b"".join(chunks)
    elif "content-length" in headers:
        content = await reader.readexactly(int(headers["content-length"]))
    else:
        raise HTTPFramingError("neither chunked nor a content-length")
    return int(parts[1]), content


async def drive(
    url: str,
    *,
    clients: int,
    per_client: int,
    chunks: int = 8,
    delay: float = 0.02,
    deadline: float = 30.0,
    stream_timeout: float = 30.0,
    round_id: str = "r",
) -> RoundResult:
    """`clients` concurrent clients, each with its own keep-alive connection, each streaming
    `per_client` chats in turn through `url` (the proxy's /v1), every body checked against
    `sse_body`. No new stream starts after `deadline`; each may take `stream_timeout` at most."""
    result = RoundResult()
    target = httpx.URL(url)
    host, port, path = target.host, target.port or 80, target.path.rstrip("/") + "/chat/completions"
    body = orjson.dumps({"model": "faulty", "messages": MESSAGES, "stream": True})
    stop_at = time.monotonic() + deadline

    async def one_client(i: int) -> None:
        connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            for n in range(per_client):
                if time.monotonic() > stop_at:
                    result.outcomes["not_started"] += 1
                    continue
                tag = f"{round_id}c{i}n{n}"
                fault = f"ok; chunks={chunks}; delay={delay}; tag={tag}"
                result.started += 1
                began = time.monotonic()
                try:
                    async with asyncio.timeout(stream_timeout):
                        if connection is None:
                            connection = await asyncio.open_connection(host, port)
                        status, received = await post_stream(*connection, f"{host}:{port}", path, body, fault)
                except (
                    OSError,
                    TimeoutError,
                    asyncio.IncompleteReadError,
                    HTTPFramingError,
                    ValueError,
                ) as exc:
                    result.outcomes[type(exc).__name__] += 1
                    if connection:
                        connection[1].close()
                    connection = None
                    continue
                if status != 200:
                    result.outcomes[f"status_{status}"] += 1
                elif received != sse_body(chunks, tag):
                    result.outcomes["mismatch"] += 1
                else:
                    result.completed += 1
                    result.outcomes["ok"] += 1
                    result.durations.append(time.monotonic() - began)
        finally:
            if connection:
                connection[1].close()
                with contextlib.suppress(OSError):
                    await connection[1].wait_closed()

    started = time.monotonic()
    tasks = [asyncio.create_task(one_client(i)) for i in range(clients)]
    _, pending = await asyncio.wait(tasks, timeout=deadline + stream_timeout + 5)
    for task in pending:
        task.cancel()
        result.outcomes["cancelled"] += 1
    await asyncio.gather(*tasks, return_exceptions=True)
    result.elapsed = time.monotonic() - started
    return result


@contextmanager
def upstream_process(max_seconds: float = 600) -> Iterator[str]:
    """The faulty upstream as its own process; yields its /v1 URL."""
    port = free_port()
    args = [sys.executable, "-m", "tests.support.upstreams.faulty", "--port", str(port)]
    args += ["--max-seconds", str(max_seconds)]
    root = str(Path(__file__).resolve().parents[2])
    env = {"PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with running(args, ready_url=f"http://127.0.0.1:{port}/health", env=env):
        yield f"http://127.0.0.1:{port}/v1"


@contextmanager
def proxy_process(
    upstream_url: str, *extra_args: str, **env: str
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """The real proxy in front of `upstream_url`; yields the process and the proxy's base URL."""
    port = free_port()
    args = [str(VENV_BIN / "compacting-proxy"), "--port", str(port), "--log-level", "warning"]
    args += ["--no-access-log", *extra_args]
    environment = {"COMPACT_UPSTREAM_URL": upstream_url, "COMPACT_WINDOW": "8192", **env}
    with running(args, ready_url=f"http://127.0.0.1:{port}/healthz", env=environment) as process:
        yield process, f"http://127.0.0.1:{port}"
