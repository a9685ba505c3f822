"""Where a request body's size decides how it is worked on: one call per step, the same for every
size. A small body is parsed, read and edited on the event loop, where a worker thread's hop would
cost more than the work; a large one (`LARGE_BYTES`, or `LARGE_OBJECTS` JSON objects whatever its
size: 16,000 Gemini parts in 0.9 MB are 50 ms of reading) is parsed in pieces (`split_parse`), read
and edited in a worker thread (`offload`), and its objects freed in one once its answer is on its
way, so the other clients are served meanwhile. The planner decides alone how it plans a large
conversation (over the same `Offloader`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from proxy.bodies.heap import huge_body_in
from proxy.bodies.jsonbody import parse_json_object
from proxy.bodies.offload import Offloader
from proxy.bodies.split_parse import SPLIT_PARSER, SplitParser

T = TypeVar("T")

LARGE_BYTES = 1024 * 1024
# A body around which glibc's heap is managed (`heap`): large blocks mapped apart while it is in the
# process, the memory given back after (walking the heap costs a millisecond or two).
HUGE_BYTES = 8 * 1024 * 1024
LARGE_OBJECTS = 2_000  # as many messages make the planner work off the loop (`planner.OFFLOAD_ITEMS`)


def is_huge(raw: bytes) -> bool:
    """Whether glibc's heap is managed around the body `raw` (`heap`): in when parsed, out when freed."""
    return len(raw) >= HUGE_BYTES


def is_large(raw: bytes) -> bool:
    """Whether the body `raw` is worked on off the loop (its objects counted as its `{`: well under
    a millisecond for a body under `LARGE_BYTES`)."""
    return len(raw) >= LARGE_BYTES or raw.count(b"{") >= LARGE_OBJECTS


@dataclass(frozen=True, slots=True)
class Bodies:
    """A process's request bodies: its worker threads (`offloader`, shared with the planner) and its
    pool of parsing children (`parser`)."""

    offloader: Offloader
    parser: SplitParser = SPLIT_PARSER

    def start(self) -> None:
        """What must start while the process is small (the parsing children's fork server)."""
        self.parser.start()

    async def parse(self, raw: bytes) -> dict[str, Any]:
        """The JSON object of `raw` (`parse_json_object`); a large one parsed off the loop."""
        if is_large(raw):
            if is_huge(raw):
                huge_body_in()  # and out when `release` has freed it
            return await self.parser.parse(raw, self.offloader)
        return parse_json_object(raw)

    async def run(self, raw: bytes, work: Callable[..., T], *args: Any) -> T:
        """`work(*args)`, a step over the body whose bytes are `raw`: in a worker thread for a large one."""
        if is_large(raw):
            return await self.offloader.run(work, *args)
        return work(*args)

    def release(self, raw: bytes, containers: list[Any]) -> None:
        """After the answer: a large body's containers (its parsed body, its neutral messages) freed in
        a worker thread, a few objects at a time (`Offloader.release`); a small one's as usual."""
        if is_large(raw):
            self.offloader.release(containers, huge=is_huge(raw))
