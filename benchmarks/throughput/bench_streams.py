"""Many concurrent streams through one proxy process: throughput, completeness, memory.

``python -m benchmarks.throughput.bench_streams [--clients 200] [--per-client 3] [--rounds 3]``

It starts the faulty upstream (``tests/support/upstreams/faulty.py``, in its normal mode) and the real
``compacting-proxy`` in front of it, each as its own process on a free loopback port, then runs
``--rounds`` rounds of ``--clients`` concurrent streaming clients, each sending ``--per-client``
streamed chats one after the other. The upstream streams a known SSE body (``--chunks`` events,
``--delay`` seconds apart, tagged per request), so every stream is checked byte for byte. After
each round the proxy gets ``--settle`` seconds, then its RSS (``VmRSS``) and open file descriptors
are read from ``/proc``. A table goes to stdout (Markdown).

The driver (`drive`, in ``tests/support/load.py``) is the one ``tests/slow/test_load.py`` runs. Traffic goes to 127.0.0.1 only; each
round stops by itself after ``--deadline`` seconds whatever happened, and both processes are
stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

import httpx

from tests.support.load import drive, proxy_process, upstream_process
from tests.support.proc import cpu_seconds, fd_count, rss_kib


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--per-client", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--delay", type=float, default=0.02)
    parser.add_argument("--settle", type=float, default=2.0)
    parser.add_argument("--deadline", type=float, default=60.0, help="seconds per round, at most")
    parser.add_argument(
        "--no-direct", action="store_true", help="skip the reference round straight at the upstream"
    )
    args = parser.parse_args()
    load_before = os.getloadavg()[0]

    with upstream_process() as upstream, proxy_process(upstream) as (proxy, base):
        start_rss, start_fds = rss_kib(proxy.pid), fd_count(proxy.pid)
        direct = None
        if not args.no_direct:
            direct = asyncio.run(
                drive(
                    upstream,
                    clients=args.clients,
                    per_client=args.per_client,
                    chunks=args.chunks,
                    delay=args.delay,
                    deadline=args.deadline,
                    round_id="direct",
                )
            )
        rows = []
        for n in range(1, args.rounds + 1):
            cpu_before = cpu_seconds(proxy.pid)
            result = asyncio.run(
                drive(
                    base + "/v1",
                    clients=args.clients,
                    per_client=args.per_client,
                    chunks=args.chunks,
                    delay=args.delay,
                    deadline=args.deadline,
                    round_id=f"r{n}",
                )
            )
            cpu = cpu_seconds(proxy.pid) - cpu_before
            peak = rss_kib(proxy.pid)
            time.sleep(args.settle)
            rows.append((n, result, cpu, peak, rss_kib(proxy.pid), fd_count(proxy.pid)))
        streams_open = next(
            line.split()[-1]
            for line in httpx.get(base + "/metrics").text.splitlines()
            if line.startswith("compacting_proxy_streams_open ")
        )

    floor = args.delay * (args.chunks + 1)
    print(
        f"{args.clients} concurrent clients x {args.per_client} streams per round, {args.chunks} content "
        f"events {args.delay * 1000:.0f} ms apart (a stream takes >= {floor * 1000:.0f} ms), "
        f"{os.cpu_count()} cores, load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after\n"
    )
    print(f"proxy at start: RSS {start_rss / 1024:.1f} MiB, {start_fds} fds\n")
    print(
        "| round | streams | complete | other | streams/s | p50 ms | p99 ms | proxy CPU ms/stream "
        "| RSS end MiB | RSS settled MiB | fds |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    if direct:
        other = ", ".join(f"{k}={v}" for k, v in direct.outcomes.items() if k != "ok") or "-"
        print(
            f"| direct (no proxy) | {direct.started} | {direct.completed} | {other} | "
            f"{direct.per_second:.0f} | {direct.percentile(0.5) * 1000:.0f} | "
            f"{direct.percentile(0.99) * 1000:.0f} | - | - | - | - |"
        )
    for n, r, cpu, peak, settled, fds in rows:
        other = ", ".join(f"{k}={v}" for k, v in r.outcomes.items() if k != "ok") or "-"
        print(
            f"| {n} | {r.started} | {r.completed} | {other} | {r.per_second:.0f} | "
            f"{r.percentile(0.5) * 1000:.0f} | {r.percentile(0.99) * 1000:.0f} | "
            f"{cpu * 1000 / max(1, r.started):.2f} | {peak / 1024:.1f} | "
            f"{settled / 1024:.1f} | {fds} |"
        )
    median = statistics.median(r.per_second for _, r, *_ in rows)
    print(f"\nmedian streams/s {median:.0f}; streams_open after: {streams_open}")


if __name__ == "__main__":
    main()
