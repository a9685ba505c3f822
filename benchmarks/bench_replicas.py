"""Requests/s through Debian's haproxy (round robin) at 1, 2 and 3 `compacting-proxy` replicas that
share a `redis-server` (`COMPACT_CACHE_URL`), in front of the fast fake upstream (`fake_upstream.py`):
``python -m benchmarks.bench_replicas [--seconds 5] [--clients 16] [--rounds 3]``.

A small chat (`chat_bodies.small_chat`, under the line) at `--clients` connections with `wrk -t1`,
and, as the baseline of the same run, wrk straight at one replica (no haproxy). The targets take turns, `--rounds` times, and the median is kept, so a noisy
neighbour hits them alike. Each replica is one
process on one core: on a machine of C cores, shared with wrk, haproxy and the upstream, the replicas
cannot add up past what C - 1 cores give, so read the figures against `os.cpu_count()`, printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.chat_bodies import write_bodies
from benchmarks.run import run_wrk
from tests.support.deployment import running_haproxy, running_redis
from tests.support.processes import free_port, running
from tests.support.upstreams.proxy_server import running_proxy

HERE = Path(__file__).parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round of 2 s: a check that it runs")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.rounds = 2, 1
    port = free_port()
    upstream = [sys.executable, str(HERE / "fake_upstream.py"), "--port", str(port), "--lifetime", "600"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        body = write_bodies(Path(tmp))["small"]
        stack.enter_context(running(upstream, ready_url=f"http://127.0.0.1:{port}/v1/models"))
        redis = stack.enter_context(running_redis())
        settings = {"cache_url": redis.url}
        proxies = [
            stack.enter_context(running_proxy(f"http://127.0.0.1:{port}/v1", 1_000_000, **settings))
            for _ in range(3)
        ]
        direct = int(proxies[0].base_url.rsplit(":", 1)[1])
        haproxies = [
            int(
                stack.enter_context(
                    running_haproxy([p.base_url.removeprefix("http://") for p in proxies[:n]])
                ).rsplit(":", 1)[1]
            )
            for n in (1, 2, 3)
        ]
        targets = [("1 replica, no haproxy", direct)] + [
            (f"{n} replica(s) behind haproxy", port) for n, port in zip((1, 2, 3), haproxies, strict=True)
        ]
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in targets}
        for _ in range(args.rounds):
            for name, target in targets:
                runs[name].append(run_wrk(target, body, args.clients, args.seconds, args.seconds + 60))
        for name, results in runs.items():
            done = sorted((r for r in results if "error" not in r), key=lambda r: r["rps"])
            rows.append((name, done[len(done) // 2] if done else results[0]))
    print(
        f"cores: {os.cpu_count()}; small chat, wrk -t1 -c{args.clients} -d{args.seconds}s, median of {args.rounds}\n"
    )
    print("| target | req/s | p50 ms | p99 ms | non-2xx + errors |\n| --- | --- | --- | --- | --- |")
    for name, r in rows:
        if "error" in r:
            print(f"| {name} | error: {r['error']} | | | |")
        else:
            print(
                f"| {name} | {r['rps']:.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
                f"{r['non2xx'] + r['socket_errors']} |"
            )


if __name__ == "__main__":
    main()
