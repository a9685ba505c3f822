"""The one-line note that replaces an old tool result (level 1), and the marker for dropped turns.

A note keeps what the next turn most likely needs, within a small budget: which tool was called
with which arguments, how big its result was, the head of the result, its outline (`outline.py`:
what a file read, a grep or a test run established) and the facts in it (`facts.py`: identifiers
ranked by what an agent's next step uses). Pure and deterministic: the same result always gives the
same note, so a compacted prefix stays byte-identical from one turn to the next. A note reads at
most `SCAN_CHARS` of a result (`scanning.py`), so it costs the same bounded time for any size. A
recent result too big for the window is capped instead (`caps.py`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import Any

import orjson

from proxy.engine.facts import facts_section, pick_facts
from proxy.engine.failures import is_pytest
from proxy.engine.outcome import OUTCOME_CHARS, outcome
from proxy.engine.outline import outline
from proxy.engine.scanning import NUMBERED_LINE, SCAN_CHARS, head_and_tail, shorten

NOTE_PREFIX = "[Truncated to save context:"
DROPPED_PREFIX = "[Earlier conversation dropped to save context:"

ARGUMENT_CHARS = 120
_TRACEBACK = "Traceback (most recent call last):"
_SPACE = re.compile(r"\s+")
# mini-swe-agent's wrapper of an observation: its status (said by the outcome) and its warning that
# the output was too long (said by the note's size), which would otherwise fill the preview.
_WRAPPER = re.compile(
    r"\A\s*+<returncode>-?[0-9]++</returncode>\s*+(?:<output(?:_head)?>\s*+)?"
    r"|<warning>[^<]{0,600}+</warning>\s*+(?:<output_head>\s*+)?"
)


def is_note(content: Any) -> bool:
    """Whether a content value is already a note (notes are never truncated again)."""
    return isinstance(content, str) and content.startswith(NOTE_PREFIX)


def is_dropped_marker(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, str) and content.startswith(DROPPED_PREFIX)


def dropped_marker(count: int) -> dict[str, Any]:
    """What stands where whole exchanges were dropped, so the model knows something is missing and
    strict templates still see a user turn answered by an assistant turn."""
    noun = "message" if count == 1 else "messages"
    return {"role": "assistant", "content": f"{DROPPED_PREFIX} {count} earlier {noun}.]"}


def build_note(
    text: str,
    *,
    tool: str | None,
    arguments: str | None,
    preview_chars: int = 150,
    fits: Callable[[str], bool] | None = None,
    used: AbstractSet[str] = frozenset(),
) -> str:
    """The note that stands in for a tool result whose plain text is `text`. `fits` may bound the
    facts section further than its character budget (the engine bounds it in tokens); `used`: the
    facts the agent's own messages name (`agent_facts`), kept first."""
    call, ran, said = _parts(text, tool, arguments, preview_chars)
    kept = pick_facts(text, call + ran + said, fits, used)
    return _note(call, text, ran, said, facts_section(kept))


def note_without_facts(
    text: str, *, tool: str | None, arguments: str | None, preview_chars: int = 150
) -> str:
    """The note without its facts, which cost the most to find: for costing a note before writing it."""
    call, ran, said = _parts(text, tool, arguments, preview_chars)
    return _note(call, text, ran, said, "")


def _parts(text: str, tool: str | None, arguments: str | None, preview_chars: int) -> tuple[str, str, str]:
    """The call, what the run came to (said first: the next step depends on it most), and the
    preview with the outline, which gets what the outcome left of the outline's budget, so a note
    costs what it did. A pytest report's head (platform, plugins, collected) says nothing: its
    preview's room goes to the outcome (its failures and exception lines). Nor does a traceback's
    first frame, where the outcome says where it failed."""
    read = head_and_tail(text, SCAN_CHARS)
    call, preview = _call_and_preview(text, tool, arguments, preview_chars)
    if is_pytest(read):
        ran, preview = outcome(read, OUTCOME_CHARS + preview_chars), ""
    else:
        ran = outcome(read)
        preview = "" if preview.startswith(_TRACEBACK) and ran else f" Preview: {preview}"
    return call, ran, preview + outline(read, spent=len(ran) // 4)


def _note(call: str, text: str, ran: str, said: str, kept: str) -> str:
    return f"{NOTE_PREFIX} {call} returned {len(text):,} chars.{ran}{said}{kept}]"


def _call_and_preview(
    text: str, tool: str | None, arguments: str | None, preview_chars: int
) -> tuple[str, str]:
    call = f"{tool or 'tool'}({shorten(_compact_json(arguments or ''), ARGUMENT_CHARS)})"
    head = _WRAPPER.sub("", text[: preview_chars * 8 + 600], 2)  # the outcome says the status
    if NUMBERED_LINE.search(head, 0, 200):
        head = NUMBERED_LINE.sub("", head)
    return call, shorten(" ".join(head[: preview_chars * 4].split()), preview_chars)


def _compact_json(text: str) -> str:
    try:
        return orjson.dumps(orjson.loads(text)).decode()
    except (orjson.JSONDecodeError, TypeError):
        return _SPACE.sub(" ", text).strip()
