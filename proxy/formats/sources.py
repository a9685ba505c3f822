"""Where each neutral message comes from in the format's own body (`Part`: an item of its list, or
one content block of it), and a compact run of them for long item lists (`ItemRuns`)."""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload


@dataclass(frozen=True, slots=True)
class Part:
    """Where a neutral message comes from: an item of the format's list (a message, an input item),
    or one content block of it when the adapter splits an item into several neutral messages."""

    item: int
    block: int | None = None


class ItemRuns(Sequence[tuple[Part, ...]]):
    """Sources where each neutral message stands for a run of whole items, or for none (what lives
    outside the list): two integers a message instead of a tuple of `Part`s, the parts made when
    asked for. A history of 200,000 items keeps 3 MB of them instead of 25."""

    def __init__(self) -> None:
        self.starts = array("q")
        self.ends = array("q")

    def append(self, start: int, end: int) -> None:
        """The next message stands for items `start` to `end` (excluded)."""
        self.starts.append(start)
        self.ends.append(end)

    def __len__(self) -> int:
        return len(self.starts)

    @overload
    def __getitem__(self, index: int) -> tuple[Part, ...]: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[tuple[Part, ...]]: ...

    def __getitem__(self, index: int | slice) -> tuple[Part, ...] | Sequence[tuple[Part, ...]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return tuple(Part(item) for item in range(self.starts[index], self.ends[index]))

    def __iter__(self) -> Iterator[tuple[Part, ...]]:
        for start, end in zip(self.starts, self.ends, strict=True):
            yield tuple(Part(item) for item in range(start, end))
