"""How the engine's cost grows with the history: compaction, and the decision alone (parse, count,
decide) when nothing needs compacting, for 100 to 10,000 messages.

Each figure is also given per 1,000 messages, as a ratio against the smallest history measured in
the same run: a linear engine keeps that ratio near 1. "cold" counts every text afresh (a new
process, or another replica); "warm" is the steady state of a chat, whose earlier texts the counter
remembers from the previous turn, with the notes it wrote then.

    python -m benchmarks.engine.bench_engine [--quick]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time

import orjson

from proxy.counting.cache import LruCache
from proxy.counting.tokens import RequestCounter
from proxy.engine.compaction import compact
from proxy.engine.index import Budget, Policy
from proxy.planning.counters import text_counter
from tests.support.conversations import agent_chat

SIZES = (100, 300, 1_000, 3_000, 10_000)


def history(messages: int) -> bytes:
    """A tool-heavy agent chat of about `messages` messages, as request bytes."""
    turns = max(1, messages * 450 // 1972)
    chat = agent_chat(turns, seed=1, result_items=6, parallel=2)
    return orjson.dumps({"model": "m", "messages": chat})


def measure(raw: bytes, budget: Budget, *, warm: bool, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        if not warm:
            text_counter.cache_clear()
        counter = RequestCounter(text_counter("estimate"))
        memo = LruCache(4096)  # the proxy's memo of written notes (proxy/planning/planner.py)
        if warm:
            compact(orjson.loads(raw)["messages"], budget, counter.message, Policy(), memo)
        gc.collect()
        started = time.perf_counter()
        messages = orjson.loads(raw)["messages"]  # a new request: new objects, nothing cached on them
        compact(messages, budget, counter.message, Policy(), memo)
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and rounds")
    args = parser.parse_args()
    sizes = SIZES[:4] if args.quick else SIZES
    rounds = 3 if args.quick else 5
    rows = []
    for size in sizes:
        raw = history(size)
        n = len(orjson.loads(raw)["messages"])
        under = Budget(limit=10**12, target=10**12)
        total = compact(
            orjson.loads(raw)["messages"], under, RequestCounter(text_counter("estimate")).message
        ).tokens_before
        line = Budget(limit=total // 5, target=total * 3 // 20)  # every size compacts to a fifth
        rows.append(
            (
                n,
                len(raw),
                measure(raw, under, warm=False, rounds=rounds),
                measure(raw, under, warm=True, rounds=rounds),
                measure(raw, line, warm=False, rounds=rounds),
                measure(raw, line, warm=True, rounds=rounds),
            )
        )
    base = rows[0]
    print(f"`{' '.join(['python', *sys.argv])}`; best of {rounds}; ms, and per 1,000 messages as a ratio")
    print("against the smallest history in this run (1.0x = linear).\n")
    print("Compaction brings each history down to a fifth of its estimated size.\n")
    print("| messages | body | decide, cold | decide, warm | compact, cold | compact, warm |")
    print("|---|---|---|---|---|---|")
    for n, size, *times in rows:
        cells = []
        for k, t in enumerate(times):
            ratio = (t / n) / (base[2 + k] / base[0])
            cells.append(f"{t * 1000:.1f} ({ratio:.2f}x)")
        print(f"| {n:,} | {size / 1024:,.0f} KB | " + " | ".join(cells) + " |")
    print(json.dumps({"rows": rows}), file=sys.stderr)


if __name__ == "__main__":
    main()
