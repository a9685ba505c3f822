"""The HTTP protocol alone, CPU per request:
``python -m benchmarks.throughput.bench_protocol [--baseline DIR] [--quick]``.

Keep-alive POSTs of the small chat's size (1.5 KB), one read each, fed to the proxy's protocol class
(`LimitedHttpToolsProtocol`) and to uvicorn's plain `HttpToolsProtocol` (the floor), with an app that
reads the body and answers 200. No sockets: the transport records nothing, so what is timed is the
parser, the protocol's limits and uvicorn's request cycle. Each checkout runs in its own process
(its `proxy` package first on the path, this venv's uvicorn), the checkouts taking turns; the figure
is the median CPU time per request of the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.socketless import RecordingTransport, socketless

ROOT = Path(__file__).resolve().parents[2]
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\n"
    b"Authorization: Bearer sk-bench\r\nContent-Length: 1500\r\n\r\n" + b"x" * 1500
)


async def app(scope: Any, receive: Any, send: Any) -> None:
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


class Transport(RecordingTransport):
    """Counts writes, and keeps none: each answer is two (head, body)."""

    def __init__(self, answered: asyncio.Event) -> None:
        super().__init__()
        self.writes, self.answered = 0, answered

    def write(self, data: Any) -> None:
        self.writes += 1
        if self.writes % 2 == 0:
            self.answered.set()


async def time_protocol(protocol_class: Any, requests: int) -> float:
    """CPU seconds per request through one kept-alive connection."""
    protocol = socketless(protocol_class, app)
    answered = asyncio.Event()
    protocol.connection_made(Transport(answered))

    async def run(count: int) -> None:
        for _ in range(count):
            answered.clear()
            protocol.data_received(REQUEST)
            await answered.wait()

    await run(min(requests, 2000))  # warm up
    started = time.process_time()
    await run(requests)
    return (time.process_time() - started) / requests


def proxy_protocol(code: Path) -> Any:
    """The proxy's protocol class in the checkout at `code`, wherever that checkout keeps it."""
    sys.path.insert(0, str(code))  # this checkout's `tests` and `benchmarks` are imported already
    for name in ("proxy.connections.protocol", "proxy.server.protocol", "proxy.protocol"):
        try:
            return importlib.import_module(name).LimitedHttpToolsProtocol
        except ModuleNotFoundError as missing:
            if missing.name is None or not name.startswith(missing.name):
                raise  # the module is there, something it imports is not
    raise SystemExit(f"no LimitedHttpToolsProtocol in {code}")


def child(kind: str, code: Path, requests: int) -> None:
    """In a process of its own: time the plain protocol, or the proxy's of the checkout at `code`."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    protocol_class = HttpToolsProtocol if kind == "plain" else proxy_protocol(code)
    print(asyncio.run(time_protocol(protocol_class, requests)))


def measure(code: Path, kind: str, requests: int) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACT_")}
    env["PYTHONPATH"] = str(ROOT)
    command = [
        sys.executable,
        "-m",
        "benchmarks.throughput.bench_protocol",
        "--child",
        kind,
        "--code",
        str(code),
    ]
    command += ["--requests", str(requests)]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600, check=True)
    return float(done.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, action="append", default=[], metavar="DIR")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 2,000 requests")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--code", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.code, args.requests)
        return
    rounds, requests = (2, 2000) if args.quick else (args.rounds, args.requests)
    targets = {"uvicorn's plain protocol": (ROOT, "plain"), "this checkout": (ROOT, "proxy")}
    targets |= {f"baseline {path.name}": (path.resolve(), "proxy") for path in args.baseline}
    samples: dict[str, list[float]] = {name: [] for name in targets}
    for turn in range(rounds):
        order = list(targets) if turn % 2 == 0 else list(reversed(targets))
        for name in order:
            samples[name].append(measure(*targets[name], requests))
    print(f"{requests:,} kept-alive 1.5 KB POSTs, {rounds} rounds taking turns; median CPU per request\n")
    print("| protocol | µs per request | rounds |")
    print("| --- | ---: | --- |")
    for name, values in samples.items():
        each = ", ".join(f"{v * 1e6:.1f}" for v in values)
        print(f"| {name} | {statistics.median(values) * 1e6:.1f} | {each} |")


if __name__ == "__main__":
    main()
