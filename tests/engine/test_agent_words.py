"""A note keeps first what the agent itself went on to use (issue 37, row 1): the names, paths and
listing lines its messages after the call name, read up to the request the note is written for, so
that every later request of the conversation gets the same note, byte for byte."""

from __future__ import annotations

from typing import Any

from proxy.counting.cache import LruCache
from proxy.counting.tokens import RequestCounter, count_chars4
from proxy.engine.compaction import compact
from proxy.engine.index import Budget, Policy
from tests.support.loops import SYSTEM, source, step

count = RequestCounter(count_chars4).message
BUDGET = Budget(limit=9600, target=7200, window=12000)
BIG_READ = 3  # the 400-line read, noted once the loop grows


def loop(said: str | None, later: str = "Step 7.") -> list[dict[str, Any]]:
    """A file read of 100 functions, the agent's answer to it (`said`), and eleven more reads."""
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Find the function that doubles the wrong payload and fix it."},
    ]
    step(messages, 0, [("read_file", source("fn0", 400))])
    step(messages, 1, [("read_file", source("fn1", 240))], text=said)
    for k in range(2, 12):
        step(messages, k, [("read_file", source(f"fn{k}", 240))], text=later if k == 7 else f"Step {k}.")
    return messages


def note(messages: list[dict[str, Any]], memo: LruCache | None = None) -> str:
    result = compact(messages, BUDGET, count, Policy(), memo)
    assert BIG_READ in result.truncated
    return str(result.messages[BIG_READ]["content"])


def test_a_note_keeps_first_what_the_agent_went_on_to_use() -> None:
    # e02f76e kept the names in the order they come, up to its budget: fn0_93 and its line were out.
    said = "fn0_93 doubles payload[93] (line 373): that is the bug."
    assert "fn0_93" not in note(loop(None))
    kept = note(loop(said)).partition(" Kept: ")[2]
    assert kept.startswith("373: def fn0_93(payload):")


def test_a_note_stays_the_same_in_every_later_request() -> None:
    # What the agent says after the note was first written (fn0_97 at step 7) changes nothing: the
    # prefix the server's prompt cache holds stays byte-identical.
    messages = loop("fn0_93 doubles payload[93].", later="Or is it fn0_97 (line 389)?")
    ends = [k for k, m in enumerate(messages) if m["role"] == "assistant"] + [len(messages)]
    notes = []
    for end in ends:
        result = compact(messages[:end], BUDGET, count, Policy())
        if BIG_READ in result.truncated:
            notes.append(result.messages[BIG_READ]["content"])
    assert len(notes) >= 3 and len(set(notes)) == 1, notes
    assert "fn0_93" in notes[0] and "fn0_97" not in notes[0]


def test_the_note_memo_never_mixes_two_conversations() -> None:
    memo = LruCache(64)
    first = note(loop("fn0_93 doubles payload[93]."), memo)
    second = note(loop("fn0_71 doubles payload[71]."), memo)
    assert "fn0_93" in first and "fn0_71" in second and "fn0_93" not in second
    assert note(loop("fn0_93 doubles payload[93]."), memo) == first
