"""Streaming latency: time to the first SSE event, over N sequential requests on one connection.

A blocking socket and h11 (no client library in the way), ``time.perf_counter`` around each
step. For every request it records when the status line arrived, when the first ``data:`` event
arrived, when the last byte arrived, and how many events came. The fake upstream spaces its events
``delay`` apart, so a proxy that relays chunk by chunk shows ``first_event`` far below ``total``;
one that buffers the stream shows them nearly equal.

``python -m benchmarks.throughput.ttfb --port P --body body.json -n 20``
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import time
from pathlib import Path
from typing import Any

import h11


def _one(
    sock: socket.socket, conn: h11.Connection, host: str, path: str, body: bytes, key: str = "sk-bench"
) -> dict[str, Any]:
    headers = [
        ("Host", host),
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(body))),
        ("Authorization", f"Bearer {key}"),
        ("Accept", "text/event-stream"),
    ]
    start = time.perf_counter()
    request = conn.send(h11.Request(method="POST", target=path, headers=headers)) or b""
    request += conn.send(h11.Data(data=body)) or b""
    request += conn.send(h11.EndOfMessage()) or b""
    sock.sendall(request)  # one write: no Nagle/delayed-ACK stall between headers and body
    status = 0
    t_headers = t_first = None
    events = 0
    tail = b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(sock.recv(65536))
            continue
        now = time.perf_counter()
        if isinstance(event, h11.Response):
            status, t_headers = event.status_code, now
        elif isinstance(event, h11.Data):
            data = tail + bytes(event.data)
            found = data.count(b"data:")
            if found and t_first is None:
                t_first = now
            events += found
            tail = data[-4:]  # an event marker split across two reads
        elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
            break
    total = time.perf_counter() - start
    return {
        "status": status,
        "headers_ms": ((t_headers or start) - start) * 1000,
        "first_event_ms": ((t_first or time.perf_counter()) - start) * 1000,
        "total_ms": total * 1000,
        "events": events,
    }


def measure(
    host: str, port: int, path: str, body: bytes, n: int, timeout: float = 30.0, key: str = "sk-bench"
) -> dict[str, Any]:
    """N sequential streaming requests; medians of each timing, and the per-request samples."""
    samples: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout * max(n, 1)
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = h11.Connection(h11.CLIENT)
    try:
        for _ in range(n):
            if time.monotonic() > deadline:
                break
            samples.append(_one(sock, conn, f"{host}:{port}", path, body, key))
            if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                conn.start_next_cycle()
            else:  # the server closed: reconnect
                sock.close()
                sock = socket.create_connection((host, port), timeout=timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn = h11.Connection(h11.CLIENT)
    finally:
        sock.close()
    ok = [s for s in samples if s["status"] == 200]

    def med(key: str) -> float | None:
        return statistics.median(s[key] for s in ok) if ok else None

    return {
        "samples": samples,
        "requests": len(samples),
        "ok": len(ok),
        "headers_ms": med("headers_ms"),
        "first_event_ms": med("first_event_ms"),
        "total_ms": med("total_ms"),
        "events": statistics.median(s["events"] for s in ok) if ok else 0,
        "streamed": bool(ok) and statistics.median(s["first_event_ms"] / s["total_ms"] for s in ok) < 0.5,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/v1/chat/completions")
    parser.add_argument("--body", type=Path, required=True, help="a JSON body with stream: true")
    parser.add_argument("-n", type=int, default=20)
    args = parser.parse_args()
    print(json.dumps(measure(args.host, args.port, args.path, args.body.read_bytes(), args.n), indent=2))


if __name__ == "__main__":
    main()
