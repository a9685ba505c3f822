"""`/compact` (the dry run) end to end over HTTP on a long agent history, against other checkouts:
`python -m benchmarks.throughput.bench_compact_http [--baseline DIR ...] [--messages 2000] [--quick]`.

Each proxy (this checkout's, and every `--baseline` checkout's `proxy` package run on this venv, as
`run.py --baseline` does) is started in front of the fake upstream with a window that makes the
history compact (`--window`, default 32,768: the 2,000-message history of about 430 KB is cut to a
fraction); one client sends the same history (`bench_engine.history`: a tool-heavy agent chat) over
a kept-alive connection, as a chat's turns resend it. The proxies take turns in every round (the
order alternating), so a neighbour's load hits them alike: medians of the rounds' medians, in ms
from the first byte sent to the last byte read, and each baseline's over this checkout's.
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks.engine.bench_engine import history
from tests.support.proc import cpu_seconds
from tests.support.processes import free_port, running
from tests.support.upstreams.fast import running_fast_upstream

HOST = "127.0.0.1"


def timed(connection: http.client.HTTPConnection, body: bytes, count: int) -> list[float]:
    """Milliseconds per `/compact` call, `count` calls one after another."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        connection.request("POST", "/compact", body=body, headers={"content-type": "application/json"})
        response = connection.getresponse()
        answer = response.read()
        times.append((time.perf_counter() - started) * 1000)
        assert response.status == 200, (response.status, answer[:300])
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", action="append", default=[], help="another checkout's folder")
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--window", type=int, default=32768)
    parser.add_argument("--calls", type=int, help="calls per round (default 20, quick 5)")
    parser.add_argument("--rounds", type=int, help="rounds (default 7, quick 2)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    calls = args.calls or (5 if args.quick else 20)
    rounds = args.rounds or (2 if args.quick else 7)
    body = history(args.messages)
    exe = str(Path(sys.executable).parent / "compacting-proxy")
    targets: dict[str, dict[str, str]] = {"this checkout": {}}
    for folder in args.baseline:
        targets[os.path.basename(folder.rstrip("/"))] = {"PYTHONPATH": str(Path(folder).resolve())}
    with running_fast_upstream() as up:
        base_env = {"COMPACT_UPSTREAM_URL": f"http://{HOST}:{up}/v1", "COMPACT_WINDOW": str(args.window)}
        ports = {name: free_port() for name in targets}
        servers = {
            name: running(
                [exe, "--host", HOST, "--port", str(ports[name]), "--no-access-log"],
                ready_url=f"http://{HOST}:{ports[name]}/healthz",
                env={**base_env, **extra},
            )
            for name, extra in targets.items()
        }
        processes = {name: server.__enter__().pid for name, server in servers.items()}
        connections = {name: http.client.HTTPConnection(HOST, ports[name], timeout=60) for name in targets}
        try:
            for name in targets:
                timed(connections[name], body, 3)  # warm: the chat's earlier turns
            samples: dict[str, list[float]] = {name: [] for name in targets}
            cpu: dict[str, list[float]] = {name: [] for name in targets}
            for k in range(rounds):
                order = list(targets) if k % 2 == 0 else list(reversed(targets))
                for name in order:
                    started = cpu_seconds(processes[name])
                    samples[name].append(statistics.median(timed(connections[name], body, calls)))
                    cpu[name].append((cpu_seconds(processes[name]) - started) / calls * 1000)
        finally:
            for connection in connections.values():
                connection.close()
            for server in servers.values():
                server.__exit__(None, None, None)
    print(
        f"`python -m benchmarks.throughput.bench_compact_http {' '.join(sys.argv[1:])}`: {rounds} rounds of {calls}"
    )
    print(f"calls, {args.messages} messages ({len(body) / 1024:.0f} KB), COMPACT_WINDOW={args.window}")
    print()
    print(
        "| proxy | ms per /compact: median (best round) | rounds | CPU ms per call | against this checkout |"
    )
    print("|---|---:|---|---:|---:|")
    ours = statistics.median(samples["this checkout"])
    for name, values in samples.items():
        median = statistics.median(values)
        rounds_text = ", ".join(f"{v:.1f}" for v in values)
        spent = statistics.median(cpu[name])
        print(
            f"| {name} | {median:.1f} ({min(values):.1f}) | {rounds_text} | {spent:.1f} | {median / ours:.2f}x |"
        )


if __name__ == "__main__":
    main()
