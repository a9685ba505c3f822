"""What the live page costs a request: `python -m benchmarks.engine.bench_live_records`.

In-process and in order, for the small chat and the large agent loop (`chat_bodies.py`): the plan of
the request (the step the proxy takes anyway, as the planner makes it), the record the pipeline
appends when nobody watches the page, and the well built when a page is watching (in a task after
the request, off its path). Medians of repeated runs, in microseconds, and the record as a share
of the plan.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable

from benchmarks.throughput.chat_bodies import large_chat, small_chat
from proxy.engine.plan import plan_chat
from proxy.formats import Conversation
from proxy.live.records import Records
from proxy.live.well import Decided, build_well
from proxy.planning.planner import Planner
from proxy.settings import Settings


def median_us(run: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def main() -> None:
    print("| body | plan µs | record µs (nobody watching) | record / plan | well µs (a page watching) |")
    print("|---|---|---|---|---|")
    for name, body, window, repeat in (
        ("small", small_chat(), 1_000_000, 3000),
        ("small, compacted", small_chat(), 500, 3000),
        ("large (200 messages)", large_chat(), 20_000, 30),
    ):
        settings = Settings(_env_file=None, window=window, upstream_kind="openai")  # type: ignore[call-arg]
        planner = Planner(settings)
        messages = body["messages"]
        counter = planner.counter("estimate", 1.0)

        window_for = settings.window_for(body["model"])
        plan = functools.partial(plan_chat, body, messages, window_for, counter, planner.policy)
        planned = plan()
        records = Records(settings, planner.counter_for)
        headers = [(b"host", b"127.0.0.1:8080"), (b"content-type", b"application/json")]
        decided = Decided.of(planned.result, len(messages))
        plan_us = median_us(plan, repeat)
        add = functools.partial(records.add, headers, "chat", Conversation(body), planned)
        record_us = median_us(add, repeat)
        well = functools.partial(build_well, body, planned, counter, decided, None, False)
        well_us = median_us(well, max(10, repeat // 10))
        print(f"| {name} | {plan_us:.0f} | {record_us:.1f} | {record_us / plan_us:.1%} | {well_us:.0f} |")


if __name__ == "__main__":
    main()
