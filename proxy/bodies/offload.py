"""Work of a large request (parsing, reading, planning) in a worker thread, and what it takes for
the event loop to keep serving other clients meanwhile.

A worker thread holds the GIL while it works; the loop gets it back every switch interval, so a
shorter one is set while any worker runs (5 ms, Python's default, added up to 50 ms per /healthz).
And the collector: a 15 MB body of 200,000 items is a million objects, and each full collection
the worker's allocations set off walks them all with the GIL held (0.5-2 s here: every client
frozen). So while workers run, automatic collection is off; when the last one ends, what they
built is frozen (`gc.freeze`: left out of later collections, freed by reference counting like any
object), and within a minute, once the request that owned it is likely gone, collected once in
full, so that cycles among those objects are collected in the end (one pause of a full collection
a minute at most, and only after large requests).
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from proxy.bodies.heap import huge_body_out, settle

T = TypeVar("T")

OFFLOAD_SWITCH_INTERVAL = 0.0005  # seconds
UNFREEZE_AFTER_S = 60.0


class Offloader:
    """Runs work in worker threads, the loop kept responsive (shared by every request of a process)."""

    def __init__(self) -> None:
        self.running = 0  # workers running now
        self._switch_interval = sys.getswitchinterval()
        self._gc_was_enabled = True
        self._unfreeze: asyncio.TimerHandle | None = None
        self._releasing: set[asyncio.Future[None]] = set()

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """`work(*args)` in a worker thread."""
        if self.running == 0:
            self._switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(OFFLOAD_SWITCH_INTERVAL)
            self._gc_was_enabled = gc.isenabled()
            gc.disable()
        self.running += 1
        try:
            return await asyncio.to_thread(work, *args)
        finally:
            self.running -= 1
            if self.running == 0:
                sys.setswitchinterval(self._switch_interval)
                if self._gc_was_enabled:
                    gc.freeze()
                    gc.enable()
                    self._later_unfreeze()

    def _later_unfreeze(self) -> None:
        # Counted from the first freeze, not pushed back by later ones: under a steady stream of
        # large requests what was frozen is still collected once a minute.
        if self._unfreeze is None:
            self._unfreeze = asyncio.get_running_loop().call_later(UNFREEZE_AFTER_S, self._thaw)

    def _thaw(self) -> None:
        """One full collection of all that was frozen, the survivors frozen again (with the process's
        own objects, frozen at startup): the cycles among a large request's objects are collected,
        and later collections still walk only what requests allocate since."""
        self._unfreeze = None
        if self.running == 0:  # else the running work's end freezes and schedules again
            gc.unfreeze()
            gc.collect()
            gc.freeze()
            settle()

    def release(self, containers: list[Any], *, huge: bool = False) -> None:
        """Free a large request's containers (its parsed body, its neutral messages) in a worker
        thread, a few objects at a time: freed at once, on the loop, a million objects take 0.3 s
        here. The caller hands over its last references (`containers` is then only this one's).
        Run as other offloaded work, under the short switch interval: at Python's 5 ms the loop
        waited 10 ms for each step it took meanwhile."""
        task = asyncio.ensure_future(self.run(dismantle, containers, huge))
        self._releasing.add(task)  # kept until done: the loop holds tasks only weakly
        task.add_done_callback(self._releasing.discard)


def dismantle(stack: list[Any], huge: bool = False) -> None:
    """Take apart the lists and dicts of `stack` that nothing else refers to, one at a time, so that
    freeing them is many short steps between which other threads run; a container something else
    still refers to is only let go of (its other owner frees it). After a `huge` body, what was
    freed is given back to the system (`heap`)."""
    while stack:
        item = stack.pop()
        kind = type(item)
        if (kind is list or kind is dict) and sys.getrefcount(item) <= 2:  # `item` and the call's own
            stack.extend(item.values() if kind is dict else item)
            item.clear()
        del item
    if huge:
        huge_body_out()
