"""One string object for each short string value of a large body's many objects.

orjson makes every string value an object of its own (it shares keys only), and a body of 200,000
items repeats its `"type": "function_call"`, its tool names and each call's id (in the call and in
its output) hundreds of thousands of times, 50-70 bytes each: 40 MB of the 15 MB body's objects.
`split_parse` hands each run of a long list's items here as it parses them.
"""

from __future__ import annotations

from typing import Any

SHARED_CHARS = 32  # string values this short are shared (a longer one is rarely repeated)
BYTES_PER_SHARED = 64  # of the body, for each distinct string remembered
MIN_SHARED = 4096


class Shared:
    """The strings met so far in one body's objects: at most one for each `BYTES_PER_SHARED` bytes
    of the body, so the table stays small beside it (and is let go of once the body is parsed)."""

    def __init__(self, body_bytes: int) -> None:
        self.first: dict[str, str] = {}
        self.room = max(MIN_SHARED, body_bytes // BYTES_PER_SHARED)

    def strings_of(self, items: list[Any]) -> list[Any]:
        """`items`, each short string value of an object among them the first one equal to it."""
        first, room = self.first, self.room
        for item in items:
            if item.__class__ is not dict:
                continue
            for key, value in item.items():
                if value.__class__ is str and len(value) <= SHARED_CHARS:
                    known = first.get(value)
                    if known is None:
                        if len(first) < room:
                            first[value] = value
                    elif known is not value:
                        item[key] = known
        return items
