"""Replays trajectories request by request through one checkout's engine, and says what its notes were.

Run in this process for this checkout, and as a script for another one (`bench_notes --baseline DIR`):
`PYTHONPATH=DIR python benchmarks/notes/notes_replay.py IN.json OUT.json`, so that only the engine comes
from DIR. It uses the engine's oldest seams only (`compact`, `Budget`, `Policy`, `RequestCounter`,
`count_chars4`: the same at 16efdaf, e02f76e and now).

Each request is the whole history before one of the agent's assistant messages (and the whole
run), counted at four characters a token, with the tests' budget: the line at 0.8 of the window,
the target at 0.6. For every tool result the first time a request sends it as a note: the run, the
window, the result's index, the request's end and the note. For every request: whether one of the
last three tool results (inside the protected part) went out noted or dropped, and whether the
report said so (`recent_noted`, where the checkout has it).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from proxy.counting.tokens import RequestCounter, count_chars4

# Where 16efdaf has them too: re-exported there now, imported there for the older checkouts.
from proxy.engine.compaction import Budget, Policy, compact  # type: ignore[attr-defined]

NOTE_PREFIX = "[Truncated to save context:"
KEEP_RESULTS = 3


class DictMemo:
    """The note memo as a plain dict (it only makes the replay faster)."""

    def __init__(self) -> None:
        self.values: dict[Hashable, str] = {}

    def get(self, key: Hashable) -> str | None:
        return self.values.get(key)

    def put(self, key: Hashable, value: str) -> None:
        self.values[key] = value


def replay(runs: list[tuple[str, list[dict[str, Any]]]], windows: list[int]) -> dict[str, Any]:
    """Notes (`[run, window, index, end, note]`) and, per window, counts of the requests in which
    the last results were noted or dropped."""
    count = RequestCounter(count_chars4).message
    notes: list[list[Any]] = []
    recent: dict[str, dict[str, int]] = {}
    for window in windows:
        budget = Budget(limit=int(window * 0.8), target=int(window * 0.6), window=window)
        tally = recent.setdefault(str(window), {"requests": 0, "compacted": 0, "touched": 0, "said": 0})
        for name, messages in runs:
            memo = DictMemo()
            seen: set[int] = set()
            ends = [k for k, m in enumerate(messages) if m["role"] == "assistant" and k > 0] + [len(messages)]
            for end in ends:
                request = messages[:end]
                result = compact(request, budget, count, Policy(), memo)
                tally["requests"] += 1
                tally["compacted"] += bool(result.truncated or result.dropped or result.capped)
                tools = [k for k, m in enumerate(request) if m["role"] == "tool"]
                last = [k for k in tools[-KEEP_RESULTS:] if k >= result.protected_from]
                said = set(getattr(result, "recent_noted", ()))
                touched = [
                    k for k in last if (k in result.truncated and k not in said) or k in result.dropped
                ]
                tally["touched"] += bool(touched)
                tally["said"] += bool(said)
                for k in result.truncated:
                    if k not in seen:
                        seen.add(k)
                        notes.append([name, window, k, end, _note_of(result.messages, request[k])])
    return {"notes": notes, "recent": recent}


def _note_of(out: list[dict[str, Any]], original: dict[str, Any]) -> str:
    call_id = original.get("tool_call_id")
    for message in out:
        content = message.get("content")
        if (
            message.get("tool_call_id") == call_id
            and isinstance(content, str)
            and content.startswith(NOTE_PREFIX)
        ):
            return content
    return ""


if __name__ == "__main__":
    job = json.loads(Path(sys.argv[1]).read_text())
    with open(sys.argv[2], "w") as out:
        json.dump(replay([tuple(run) for run in job["runs"]], job["windows"]), out)
