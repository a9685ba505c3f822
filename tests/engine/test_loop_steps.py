"""The loop's cut moves in large steps: replayed call by call (each request the whole loop so far),
a long agent loop breaks its prefix (what the server's prompt cache reuses) on few calls."""

from __future__ import annotations

from typing import Any

from proxy.counting.tokens import RequestCounter, count_chars4
from proxy.engine.compaction import compact
from proxy.engine.index import Budget, Policy
from tests.support.loops import one_request_loop

count = RequestCounter(count_chars4).message


def replay(window: int, **policy: Any) -> tuple[int, float, float]:
    """Prefix breaks, the share of each request's tokens the next one sends again unchanged, and
    the mean request, over a 30-call loop of file reads."""
    loop = one_request_loop(30, lines=240)
    ends = [k for k, m in enumerate(loop) if m["role"] == "assistant"] + [len(loop)]
    budget = Budget(limit=int(window * 0.8), target=int(window * 0.6), window=window)
    previous: list[dict[str, Any]] | None = None
    breaks = kept = total = 0
    for end in ends:
        out = compact(loop[:end], budget, count, Policy(**policy)).messages
        costs = [count(m) for m in out]
        assert sum(costs) <= budget.limit
        recent = [m for m in loop[:end] if m["role"] == "tool"][-3:]
        assert all(any(m is kept for kept in out) for m in recent), "the last three reads go whole"
        if previous is not None:
            same = next(
                (j for j, (a, b) in enumerate(zip(previous, out, strict=False)) if a != b),
                min(len(previous), len(out)),
            )
            breaks += same < len(previous)
            kept += sum(costs[:same])
        total += sum(costs)
        previous = out
    return breaks, kept / total, total / len(ends)


def test_a_drop_in_one_large_step_keeps_the_prefix_where_there_is_room() -> None:
    # At 12k the last three reads whole leave room for calls after a drop: few breaks.
    breaks, share, _ = replay(12000)
    assert breaks <= 12 and share >= 0.55, (breaks, f"{share:.1%}")


def test_the_last_reads_stay_whole_even_when_they_cost_the_prefix() -> None:
    # At 6k the last three reads (1,500 tokens each) fill the 4,800-token line: every call moves the
    # cut, right before them (27 breaks in 30 calls). e02f76e noted them with each drop instead (14
    # breaks): the model read back notes of the results it had just asked for.
    breaks, _, _ = replay(6000)
    assert breaks <= 30


def test_room_for_calls_trades_history_for_fewer_breaks() -> None:
    # Notes that leave no room for one more call like the last one only put off the drop a call.
    breaks, share, mean = replay(8000)
    fewer, more, smaller = replay(8000, loop_room_calls=1)
    assert fewer < breaks and more > share and smaller <= mean, (breaks, fewer, share, more)
