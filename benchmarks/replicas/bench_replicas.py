"""Requests/s through Debian's haproxy (round robin) at 1, 2 and 3 `compacting-proxy` replicas that
share a `redis-server` (`COMPACT_CACHE_URL`), in front of the fast fake upstream (`tests/support/upstreams/fast.py`):
``python -m benchmarks.replicas.bench_replicas [--seconds 5] [--clients 16] [--rounds 3] [--pin]``.

A small chat (`chat_bodies.small_chat`, under the line) at `--clients` connections with `wrk -t1`,
and, as the baseline of the same run, wrk straight at one replica (no haproxy). The targets take turns, `--rounds` times, and the median is kept, so a noisy
neighbour hits them alike. Each replica is one
process on one core: on a machine of C cores, shared with wrk, haproxy and the upstream, the replicas
cannot add up past what C - 1 cores give, so read the figures against `os.cpu_count()`, printed.
With `--pin` the replicas run on the last core and everything else (wrk, haproxy, Redis, the
upstream) on the others, so the figures show what one core of replicas gives, not the neighbours'
luck. A replica without Redis, wrk straight at it, is the cost of what replicas share. Beside
req/s, each row gives the CPU time all proxy processes and Redis spent per request served (from
`/proc`), which a noisy neighbour barely moves: the replicas that only receive what another one
shares are counted too.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.throughput.chat_bodies import write_bodies
from benchmarks.throughput.run import run_wrk
from tests.support.deployment import running_haproxy, running_redis
from tests.support.proc import cpu_seconds
from tests.support.upstreams.fast import running_fast_upstream
from tests.support.upstreams.proxy_server import running_proxy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round of 2 s: a check that it runs")
    parser.add_argument(
        "--pin", action="store_true", help="replicas on the last core, the rest on the others"
    )
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    pinned = args.pin and len(cores) > 1
    if pinned:
        os.sched_setaffinity(0, cores[:-1])  # inherited by wrk, haproxy, Redis and the upstream
    if args.quick:
        args.seconds, args.rounds = 2, 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        body = write_bodies(Path(tmp))["small"]
        port = stack.enter_context(running_fast_upstream(lifetime=600))
        redis = stack.enter_context(running_redis())
        settings = {"cache_url": redis.url}
        proxies = [
            stack.enter_context(running_proxy(f"http://127.0.0.1:{port}/v1", 1_000_000, args=(), **settings))
            for _ in range(3)
        ]
        alone = stack.enter_context(running_proxy(f"http://127.0.0.1:{port}/v1", 1_000_000))
        if pinned:
            for proxy in (*proxies, alone):  # every thread of it
                pin = ["taskset", "-a", "-p", "-c", str(cores[-1]), str(proxy.process.pid)]
                subprocess.run(pin, check=True, capture_output=True)
        direct = int(proxies[0].base_url.rsplit(":", 1)[1])
        haproxies = [
            int(
                stack.enter_context(
                    running_haproxy([p.base_url.removeprefix("http://") for p in proxies[:n]])
                ).rsplit(":", 1)[1]
            )
            for n in (1, 2, 3)
        ]
        targets = [("1 replica, no haproxy, no Redis", int(alone.base_url.rsplit(":", 1)[1]))]
        targets += [("1 replica, no haproxy", direct)] + [
            (f"{n} replica(s) behind haproxy", port) for n, port in zip((1, 2, 3), haproxies, strict=True)
        ]
        pids = [p.process.pid for p in (*proxies, alone)] + [redis.process.pid]
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in targets}
        for _ in range(args.rounds):
            for name, target in targets:
                before = cpu_seconds(*pids)
                result = run_wrk(target, body, args.clients, args.seconds, args.seconds + 60)
                if result.get("requests"):
                    result["cpu_ms"] = (cpu_seconds(*pids) - before) * 1000 / result["requests"]
                runs[name].append(result)
        for name, results in runs.items():
            done = sorted((r for r in results if "error" not in r), key=lambda r: r["rps"])
            rows.append((name, done[len(done) // 2] if done else results[0]))
    print(
        f"cores: {os.cpu_count()}{f', replicas pinned to core {cores[-1]}' if pinned else ''}; small chat, wrk -t1 -c{args.clients} -d{args.seconds}s, median of {args.rounds}\n"
    )
    print(
        "| target | req/s | p50 ms | p99 ms | CPU ms / request | non-2xx + errors |\n"
        "| --- | --- | --- | --- | --- | --- |"
    )
    for name, r in rows:
        if "error" in r:
            print(f"| {name} | error: {r['error']} | | | | |")
        else:
            print(
                f"| {name} | {r['rps']:.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
                f"{r.get('cpu_ms', 0):.2f} | {r['non2xx'] + r['socket_errors']} |"
            )


if __name__ == "__main__":
    main()
