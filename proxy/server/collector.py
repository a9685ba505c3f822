"""The memory of a serving process: its garbage collector, set for requests that build many objects
at once.

Planning a long history builds thousands of dicts, lists and tuples that live until its answer is
written (the 2,000-message one: about 5,000 at a time). At the default threshold (700 new
containers) the collector runs seven times inside each such request, promoting what is alive, so
that the full collections walk it again with everything the process imported: 0.7 ms of a 9 ms
`/compact` (`benchmarks/throughput/bench_compact_http.py`). What a request builds is freed by its reference
counts once the request ends, not by the collector.

The allocator around huge bodies is `proxy.bodies.heap`'s.
"""

from __future__ import annotations

import gc

# New containers (less those freed) between two young collections: more than several large requests
# hold at once, so the collector runs between them rather than inside each. Cyclic garbage waits that
# much longer to be freed: a few megabytes at most.
YOUNG_THRESHOLD = 50_000


def tune_collector() -> None:
    """Freeze what the process has built so far (modules, the app: never garbage, no longer walked by
    every full collection) and collect young objects less often."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
