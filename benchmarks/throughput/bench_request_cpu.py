"""CPU time the proxy process spends per request, against another checkout's proxy in the same run:
`python -m benchmarks.throughput.bench_request_cpu --before ../main/.venv/bin/compacting-proxy [--quick]`, or
`--baseline DIR` (another checkout's `proxy` package on this venv, as `run.py --baseline` does),
`--bare` (the bare FastAPI + httpx passthrough, `bare_passthrough.py`; `--bare-transport aiohttp` the
same on another upstream client) and `--body large`.

Throughput on a shared 2-core machine moves by tens of percent from one minute to the next; the CPU
time a process spends per request moves far less, since another tenant's load delays the process
without adding to its own CPU time. Both proxies (this checkout's and `--before`'s, or only this
one) run under the line in front of the fast fake upstream (`tests/support/upstreams/fast.py`); sequential small
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

from benchmarks.throughput.bare_passthrough import TRANSPORTS
from benchmarks.throughput.chat_bodies import large_chat, small_chat
from tests.support.proc import cpu_seconds
from tests.support.processes import free_port, running
from tests.support.upstreams.fast import running_fast_upstream

HOST = "127.0.0.1"


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
    parser.add_argument("--baseline", action="append", default=[], help="another checkout's folder")
    parser.add_argument("--bare", action="store_true", help="also the bare FastAPI + httpx passthrough")
    parser.add_argument(
        "--bare-transport",
        action="append",
        default=[],
        choices=TRANSPORTS,
        help="also the bare passthrough on this upstream client (`bare_passthrough.py --transport`)",
    )
    parser.add_argument("--body", choices=("small", "large"), default="small")
    args = parser.parse_args()
    per_block = args.requests or (200 if args.quick else 1000)
    rounds = args.rounds or (2 if args.quick else 7)
    body = orjson.dumps(small_chat() if args.body == "small" else large_chat())
    own = str(Path(sys.executable).parent / "compacting-proxy")
    targets = {"after": own}
    if args.before:
        targets["before"] = args.before
    code = {Path(folder).name: str(Path(folder).resolve()) for folder in args.baseline}
    targets.update({name: own for name in code})
    with running_fast_upstream() as up:
        env = {"COMPACT_UPSTREAM_URL": f"http://{HOST}:{up}/v1", "COMPACT_WINDOW": "1000000"}
        ports = {name: free_port() for name in targets}
        servers = {
            name: running(
                [exe, "--host", HOST, "--port", str(ports[name]), "--no-access-log"],
                ready_url=f"http://{HOST}:{ports[name]}/healthz",
                env={**env, "PYTHONPATH": code[name]} if name in code else env,
            )
            for name, exe in targets.items()
        }
        for transport in (["httpx"] if args.bare else []) + args.bare_transport:
            name = f"bare-{transport}"
            ports[name] = free_port()
            bare = [
                sys.executable,
                str(Path(__file__).parent / "bare_passthrough.py"),
                "--transport",
                transport,
            ]
            bare += ["--port", str(ports[name]), "--upstream", f"http://{HOST}:{up}", "--lifetime", "3600"]
            servers[name] = running(bare, ready_url=f"http://{HOST}:{ports[name]}/v1/models")
            targets[name] = bare[0]
        processes = {name: server.__enter__() for name, server in servers.items()}
        try:
            for name in targets:
                send(ports[name], body, 200)  # warm up
            samples: dict[str, list[float]] = {name: [] for name in targets}
            for k in range(rounds):
                order = list(targets) if k % 2 == 0 else list(reversed(targets))
                for name in order:
                    pid = processes[name].pid
                    started = cpu_seconds(pid)
                    send(ports[name], body, per_block)
                    samples[name].append((cpu_seconds(pid) - started) / per_block * 1e6)
        finally:
            for server in servers.values():
                server.__exit__(None, None, None)
    print(
        f"`{' '.join(['python -m benchmarks.throughput.bench_request_cpu', *sys.argv[1:]])}`: {rounds} rounds"
    )
    print(
        f"of {per_block} sequential {args.body} chats under the line; CPU µs per request of the proxy process"
    )
    print()
    print("| proxy | median | rounds | this checkout (after) / it |")
    print("|---|---:|---|---:|")
    after = statistics.median(samples["after"])
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.0f} | {', '.join(f'{v:.0f}' for v in values)} | {after / median:.2f}x |")


if __name__ == "__main__":
    main()
