"""What a compaction costs at small windows: milliseconds per request of a coding-agent loop whose
history is about 100,000 tokens, at 8k, 16k and 32k windows, in the steady state of a loop (the
counter and the note memo warm from the previous calls, as in the proxy).

A small window caps more: every request caps the latest results again, so at 8k capping is most
of the engine's time unless it is memoised like the notes. Each figure is also given as a ratio
against the 32k window of the same run (machines differ; ratios hold).

    python -m benchmarks.engine.bench_windows [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from benchmarks.cache import agent_loops as sim
from benchmarks.cache.bench_loops import window_model
from proxy.counting.cache import LruCache
from proxy.counting.estimator import estimate_text_tokens
from proxy.counting.tokens import MemoTextCounter, RequestCounter
from proxy.engine.compaction import compact
from proxy.engine.index import Policy
from proxy.engine.plan import budget_for
from proxy.planning.planner import NOTE_MEMO_SIZE

WINDOWS = (8_000, 16_000, 32_000)
HISTORY_TOKENS = 100_000
BODY = {"model": "m", "messages": []}


def measure(loop: sim.Loop, window: int, calls: int) -> tuple[float, int]:
    """Mean ms per compaction over `calls` requests around the one whose history is ~100k tokens,
    and that history's tokens."""
    counter = RequestCounter(MemoTextCounter(estimate_text_tokens))
    sizes = [sum(counter.message(m) for m in loop.history(k)) for k in range(len(loop.requests))]
    at = next(k for k, size in enumerate(sizes) if size >= HISTORY_TOKENS)
    first = max(0, at - calls // 2)
    budget = budget_for(BODY, window_model(window), counter)
    policy = Policy(keep_recent_turns=2, keep_recent_tool_results=3)
    memo = LruCache(NOTE_MEMO_SIZE)
    times = []
    for k in range(max(0, first - 5), first + calls):  # five warm-up calls, as the loop before made them
        history = loop.history(k)
        started = time.process_time()
        compact(history, budget, counter.message, policy, memo)
        if k >= first:
            times.append(time.process_time() - started)
    return statistics.mean(times) * 1000, sizes[at]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls timed")
    args = parser.parse_args()
    loop = sim.agent_loop("1 request, 400 calls", 7, [400])
    calls = 10 if args.quick else 30
    rows = [(window, *measure(loop, window, calls)) for window in WINDOWS]
    base = rows[-1][1]
    print(f"`{' '.join(['python', *sys.argv])}`; mean CPU ms per compaction over {calls} calls of a")
    print(f"single-request agent loop around {HISTORY_TOKENS:,} tokens of history; ratio against 32k.\n")
    print("| window | history tokens | ms per compaction | per 100k tokens | ratio |")
    print("|---|---|---|---|---|")
    for window, ms, tokens in rows:
        print(f"| {window:,} | {tokens:,} | {ms:.1f} | {ms * 100_000 / tokens:.1f} | {ms / base:.1f}x |")


if __name__ == "__main__":
    main()
