"""glibc's heap around huge bodies: large blocks mapped apart while one is worked on, and its
memory given back to the system once it is freed.

glibc maps each block of 128 KiB or more apart and unmaps it when freed, until a freed mapped block
raises that threshold to its own size (up to 32 MiB): after the first huge body (16 MB) the large
lists and tables of every big request came from a heap glibc keeps (200,000 items compacted at 8k
settled at 171 MB RSS, 110 MB with the threshold held). But a threshold held at 128 KiB for good
(`mallopt` also stops glibc from moving its trim threshold) cost every request of a few hundred KB
its heap: 1 ms of CPU in 9 for `/compact` on 2,000 messages. So it is held only while a huge body
is in the process (`huge_body_in`), and once the last one is freed its heap's free pages are given
back (`huge_body_out`: `malloc_trim`) and both thresholds set where glibc's own would have grown.
A huge body whose request ended without its objects being released that way (refused, answered by
the proxy, forwarded as it came) is let go of at the next quiet minute (`settle`, from the
offloader's full collection). Where the C library is not glibc, nothing is done.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters
M_MMAP_THRESHOLD = -3
HELD_MMAP_THRESHOLD = 128 * 1024  # glibc's starting value
# After: where glibc's dynamic thresholds end (its mmap threshold's maximum on 64 bits, the trim
# threshold twice it), so a request of a few hundred KB reuses the heap as it did before any huge body.
GROWN_MMAP_THRESHOLD = 32 * 1024 * 1024
GROWN_TRIM_THRESHOLD = 2 * GROWN_MMAP_THRESHOLD


def _libc_function(name: str, *argtypes: Any) -> Callable[..., int] | None:
    try:
        function = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = argtypes
    return function  # type: ignore[no-any-return]


_mallopt = _libc_function("mallopt", ctypes.c_int, ctypes.c_int)
_malloc_trim = _libc_function("malloc_trim", ctypes.c_size_t)
_lock = threading.Lock()
_huge_bodies = 0  # huge bodies in the process now


def huge_body_in() -> None:
    """A huge body is about to be parsed: its large blocks mapped apart, given back when freed."""
    global _huge_bodies
    with _lock:
        _huge_bodies += 1
        if _huge_bodies == 1 and _mallopt is not None:
            _mallopt(M_MMAP_THRESHOLD, HELD_MMAP_THRESHOLD)


def huge_body_out() -> None:
    """A huge body's objects are freed (in a worker thread: the heap is walked): the last one's
    memory given back, the thresholds set as grown."""
    global _huge_bodies
    with _lock:
        _huge_bodies = max(0, _huge_bodies - 1)
        if not _huge_bodies:
            _give_back()


def settle() -> None:
    """No large work has run for a while: any huge body still counted in is gone (its request ended
    without `huge_body_out`), so its memory is given back too."""
    global _huge_bodies
    with _lock:
        if _huge_bodies:
            _huge_bodies = 0
            _give_back()


def _give_back() -> None:
    if _mallopt is None or _malloc_trim is None:
        return
    _malloc_trim(0)
    _mallopt(M_TRIM_THRESHOLD, GROWN_TRIM_THRESHOLD)
    _mallopt(M_MMAP_THRESHOLD, GROWN_MMAP_THRESHOLD)
