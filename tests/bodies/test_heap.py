"""glibc's heap around huge bodies (`proxy.bodies.heap`): the mmap threshold held at 128 KiB only
while a huge body is in the process, and when the last one is freed its memory given back and the
thresholds set as glibc's own grow, so ordinary requests reuse the heap (held for good, it cost
`/compact` on 2,000 messages 1 ms of CPU in 9)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.bodies import heap


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    seen: list[tuple[Any, ...]] = []
    monkeypatch.setattr(heap, "_mallopt", lambda param, value: seen.append(("mallopt", param, value)) or 1)
    monkeypatch.setattr(heap, "_malloc_trim", lambda pad: seen.append(("trim", pad)) or 1)
    monkeypatch.setattr(heap, "_huge_bodies", 0)
    return seen


def test_the_threshold_is_held_while_huge_bodies_are_in_and_given_back_after_the_last(
    calls: list[tuple[Any, ...]],
) -> None:
    heap.huge_body_in()
    heap.huge_body_in()  # a second one meanwhile: already held
    assert calls == [("mallopt", heap.M_MMAP_THRESHOLD, 128 * 1024)]
    heap.huge_body_out()
    assert len(calls) == 1, "the other huge body is still in the process"
    heap.huge_body_out()
    assert calls[1:] == [
        ("trim", 0),
        ("mallopt", heap.M_TRIM_THRESHOLD, 64 * 1024 * 1024),
        ("mallopt", heap.M_MMAP_THRESHOLD, 32 * 1024 * 1024),
    ]


def test_a_release_with_nothing_in_leaves_the_next_huge_body_held(calls: list[tuple[Any, ...]]) -> None:
    heap.huge_body_out()  # nothing in: nothing held, the heap trimmed as after any last huge body
    heap.huge_body_in()
    assert calls[-1] == ("mallopt", heap.M_MMAP_THRESHOLD, 128 * 1024)


def test_a_huge_body_never_released_is_let_go_of_at_the_next_quiet_minute(
    calls: list[tuple[Any, ...]],
) -> None:
    heap.huge_body_in()  # its request refused: no release follows
    heap.settle()
    assert calls[1:] == [
        ("trim", 0),
        ("mallopt", heap.M_TRIM_THRESHOLD, 64 * 1024 * 1024),
        ("mallopt", heap.M_MMAP_THRESHOLD, 32 * 1024 * 1024),
    ]
    heap.settle()  # nothing in: nothing more
    assert len(calls) == 4
