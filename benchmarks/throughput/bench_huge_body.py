"""A huge body's cost and the proxy's answers meanwhile (issue 23, row 9):
``python -m benchmarks.throughput.bench_huge_body [--baseline DIR] [--rounds N] [--quick]``.

A Responses body of 200,000 items (15 MB, 100,000 `function_call`s each answered) is posted to the
real process, in front of a recording upstream, `--rounds` times, while `/healthz` is polled every
10 ms: the POST's time and the slowest `/healthz`, against the idle `/healthz` measured just before.
With `--baseline DIR` (a checkout unpacked there, e.g. `git archive 957c7e4 | tar -x -C DIR`), that
checkout's `proxy` package runs too, the two taking turns round by round.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

from tests.support.health import answer_all
from tests.support.hostile import function_calls, hostile_upstream
from tests.support.processes import free_port, running

ROOT = Path(__file__).resolve().parents[2]


def one_round(url: str, content: bytes) -> tuple[float, float, float]:
    """(POST seconds, slowest /healthz during it, slowest /healthz idle)."""
    with httpx.Client(base_url=url, timeout=120) as client:
        idle = []
        for _ in range(50):
            started = time.perf_counter()
            client.get("/healthz")
            idle.append(time.perf_counter() - started)
            time.sleep(0.01)
        busy: list[float] = []
        done = threading.Event()

        def poll() -> None:
            with httpx.Client(base_url=url, timeout=30) as poller:
                while not done.is_set():
                    started = time.perf_counter()
                    poller.get("/healthz")
                    busy.append(time.perf_counter() - started)
                    done.wait(0.01)

        thread = threading.Thread(target=poll)
        thread.start()
        started = time.perf_counter()
        response = client.post("/v1/responses", content=content, headers={"content-type": "application/json"})
        took = time.perf_counter() - started
        done.set()
        thread.join()
        assert response.status_code == 200, response.text[:300]
        time.sleep(1.5)  # the request's objects freed before the next round
        return took, max(busy), max(idle)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", type=Path)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="one round")
    args = parser.parse_args()
    args.rounds = 1 if args.quick else args.rounds
    content = function_calls(100_000)
    checkouts = {"this branch": ROOT, **({str(args.baseline): args.baseline} if args.baseline else {})}
    figures: dict[str, list[tuple[float, float, float]]] = {name: [] for name in checkouts}
    with hostile_upstream() as hostile:
        answer_all(hostile)
        for _ in range(args.rounds):
            for name, root in checkouts.items():
                port = free_port()
                env = {
                    "COMPACT_UPSTREAM_URL": hostile.url,
                    "COMPACT_MAX_MESSAGES": "300000",
                    "COMPACT_WINDOW": "16000000",
                }
                # `-m proxy` would take the `proxy` package of the current directory first.
                start = f"import sys; sys.path.insert(0, {str(root)!r}); sys.argv[0] = 'compacting-proxy'; "
                start += "from proxy.cli import main; main()"
                command = [sys.executable, "-c", start, "--port", str(port), "--no-access-log"]
                with running(command, ready_url=f"http://127.0.0.1:{port}/healthz", env=env):
                    figures[name].append(one_round(f"http://127.0.0.1:{port}", content))
                hostile.seen.clear()
    print(f"load average {os.getloadavg()[0]:.1f}; medians of {args.rounds} rounds (all rounds in brackets)")
    print("| checkout | POST 15 MB, ms | slowest /healthz during it, ms | slowest idle /healthz, ms |")
    print("| --- | ---: | ---: | ---: |")
    for name, rows in figures.items():
        cells = []
        for column in range(3):
            values = [row[column] * 1000 for row in rows]
            cells.append(f"{statistics.median(values):.0f} {[round(v) for v in values]}")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
