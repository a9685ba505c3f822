"""The memory of a serving process: its garbage collector, set for requests that build many objects
at once, and its allocator, set to give large blocks back.

Planning a long history builds thousands of dicts, lists and tuples that live until its answer is
written (the 2,000-message one: about 5,000 at a time). At the default threshold (700 new
containers) the collector runs seven times inside each such request, promoting what is alive, so
that the full collections walk it again with everything the process imported: 0.7 ms of a 9 ms
`/compact` (`benchmarks/throughput/bench_compact_http.py`). What a request builds is freed by its reference
counts once the request ends, not by the collector.

glibc maps each block of 128 KiB or more apart and unmaps it when freed, until a freed mapped
block raises that threshold to its own size (up to 32 MiB): after the first huge body (16 MB) the
large lists and tables of every big request come from its heap, which it keeps. Fixing the
threshold where it starts keeps them given back: 200,000 items compacted at 8k peaked at 329 MB
RSS and settled at 171 MB; with it fixed, 315 and 110.
"""

from __future__ import annotations

import ctypes
import gc

# New containers (less those freed) between two young collections: more than several large requests
# hold at once, so the collector runs between them rather than inside each. Cyclic garbage waits that
# much longer to be freed: a few megabytes at most.
YOUNG_THRESHOLD = 50_000
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 128 * 1024  # glibc's own starting value


def tune_collector() -> None:
    """Freeze what the process has built so far (modules, the app: never garbage, no longer walked by
    every full collection) and collect young objects less often."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)


def tune_allocator() -> bool:
    """Large blocks always mapped apart and given back when freed (see the module's docstring);
    False where the C library is not glibc."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
