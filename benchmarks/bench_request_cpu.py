"""CPU time the proxy process spends per request, against another checkout's proxy in the same run:
`python -m benchmarks.bench_request_cpu --before ../main/.venv/bin/compacting-proxy [--quick]`.

Throughput on a shared 2-core machine moves by tens of percent from one minute to the next; the CPU
time a process spends per request moves far less, since another tenant's load delays the process
without adding to its own CPU time. Both proxies (this checkout's and `--before`'s, or only this
one) run under the line in front of the fast fake upstream (`fake_upstream.py`); sequential small
chats (`chat_bodies.py`) on one kept-alive connection go to each in turn, in blocks, for several
rounds, and each process's user + system CPU time is read from `/proc` (psutil) around its blocks.
Medians of the rounds, in microseconds per request, and the ratio to `--before`.
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import sys
from pathlib import Path

import orjson
import psutil

from benchmarks.chat_bodies import small_chat
from tests.support.processes import free_port, running

HOST = "127.0.0.1"


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def send(port: int, body: bytes, count: int) -> None:
    connection = http.client.HTTPConnection(HOST, port, timeout=30)
    try:
        for _ in range(count):
            connection.request(
                "POST", "/v1/chat/completions", body=body, headers={"content-type": "application/json"}
            )
            response = connection.getresponse()
            response.read()
            assert response.status == 200, response.status
    finally:
        connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="another checkout's compacting-proxy executable")
    parser.add_argument("--quick", action="store_true", help="fewer requests and rounds")
    parser.add_argument("--requests", type=int, help="requests per block (default 1000, quick 200)")
    parser.add_argument("--rounds", type=int, help="blocks per proxy (default 7, quick 2)")
    args = parser.parse_args()
    per_block = args.requests or (200 if args.quick else 1000)
    rounds = args.rounds or (2 if args.quick else 7)
    body = orjson.dumps(small_chat())
    up = free_port()
    upstream = [sys.executable, "-m", "benchmarks.fake_upstream", "--port", str(up), "--lifetime", "3600"]
    targets = {"after": str(Path(sys.executable).parent / "compacting-proxy")}
    if args.before:
        targets["before"] = args.before
    env = {"COMPACT_UPSTREAM_URL": f"http://{HOST}:{up}/v1", "COMPACT_WINDOW": "1000000"}
    with running(upstream, ready_url=f"http://{HOST}:{up}/v1/models"):
        ports = {name: free_port() for name in targets}
        servers = {
            name: running(
                [exe, "--host", HOST, "--port", str(ports[name]), "--no-access-log"],
                ready_url=f"http://{HOST}:{ports[name]}/healthz",
                env=env,
            )
            for name, exe in targets.items()
        }
        processes = {name: server.__enter__() for name, server in servers.items()}
        try:
            for name in targets:
                send(ports[name], body, 200)  # warm up
            samples: dict[str, list[float]] = {name: [] for name in targets}
            for k in range(rounds):
                order = list(targets) if k % 2 == 0 else list(reversed(targets))
                for name in order:
                    process = psutil.Process(processes[name].pid)
                    started = cpu_seconds(process)
                    send(ports[name], body, per_block)
                    samples[name].append((cpu_seconds(process) - started) / per_block * 1e6)
        finally:
            for server in servers.values():
                server.__exit__(None, None, None)
    print(f"`{' '.join(['python -m benchmarks.bench_request_cpu', *sys.argv[1:]])}`: {rounds} rounds")
    print(f"of {per_block} sequential small chats under the line; CPU µs per request of the proxy process")
    print()
    print("| proxy | median | rounds | after / before |")
    print("|---|---:|---|---:|")
    before = statistics.median(samples["before"]) if "before" in samples else None
    for name, values in samples.items():
        median = statistics.median(values)
        ratio = f"{median / before:.2f}x" if before else "-"
        print(f"| {name} | {median:.0f} | {', '.join(f'{v:.0f}' for v in values)} | {ratio} |")


if __name__ == "__main__":
    main()
