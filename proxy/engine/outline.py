"""The outline of a tool result, the part of its note that says what the result established.

A file read keeps its line range and the names it defines (top-level first, not `cat -n` line
numbers), grep output the files it matched; what a test or shell run came to is the note's outcome
(`outcome.py`), which shares this budget. The outline's budget is in tokens (by `_tokens`), not a cut in
characters: its short parts first, then the files matched and the names defined share what is left,
top-level names before nested ones, listed in file order.

Every pattern here is linear in what it reads (no start rescans a run, no nested unbounded
repetition), and each runs only where its words occur: most results are neither test nor shell
output.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from proxy.engine.scanning import NUMBERED_LINE, shorten

OUTLINE_TOKENS = 160
OUTLINE_ITEM_CHARS = 120
# Definitions: a line that starts (after its number, indentation and modifiers) with one of these.
_DEFINITION_WORDS = (
    "def",
    "class",
    "function",
    "function*",
    "const",
    "fn",
    "func",
    "interface",
    "struct",
    "enum",
    "trait",
    "type",
)
_MODIFIERS = (
    "export ",
    "default ",
    "pub ",
    "pub(crate) ",
    "async ",
    "static ",
    "public ",
    "private ",
    "abstract ",
)
_DEFINITION = re.compile(
    r"^([ \t]*+)(?:[0-9]++(?:\t|→|:? )([ \t]*+))?"  # indentation, or a listing's number and indentation
    rf"(?:(?:{'|'.join(re.escape(m.strip()) for m in _MODIFIERS)}) ++)*+"
    rf"(?:{'|'.join(re.escape(w) for w in _DEFINITION_WORDS)}) ++([A-Za-z_$][\w$]*+)",
    re.M,
)
# grep/ripgrep output: "path:line:text".
_MATCH_LINE = re.compile(r"^([\w./@+-]+\.\w+):\d+:", re.M)
# Up to the line's first `=` (pytest's `==== 1 failed, 2 passed in 0.1s ====`), at most 200 more chars.
SUMMARY_LINE = re.compile(
    r"^[=\- ]*+((?:[0-9]++ (?:failed|passed|errors?|skipped|xfailed|xpassed|warnings?|deselected)"
    r"(?:, )?)++[^\n=]{0,200}+)",
    re.M,
)
EXIT_STATUS = re.compile(
    r"(?:exit(?:ed)?(?: with)? (?:code|status)|return code|returncode)[:= ]++(-?[0-9]++)", re.I
)


def outline(text: str, spent: int = 0) -> str:
    """What a file read or a grep established, in a few words: where a listing starts and ends, the
    files it matched and the names it defines. What a run came to (exit status, summary, errors,
    failed tests) is the note's outcome (`outcome.py`); `spent`: the tokens it took of this budget."""
    parts: list[str] = []
    numbers = NUMBERED_LINE.findall(text, 0, 4000)
    if len(numbers) >= 3:
        last = NUMBERED_LINE.findall(text, max(0, len(text) - 400))
        parts.append(f"lines {numbers[0]}-{last[-1] if last else numbers[-1]}")
    files = _unique(iter(_MATCH_LINE.findall(text))) if _MATCH_LINE.search(text, 0, 200) else []
    definitions: dict[str, bool] = {}
    for name, top in _definitions(text):
        definitions[name] = definitions.get(name, False) or top
    lists = len(parts)  # where the two lists go, once the short parts have taken their share
    short = [shorten(part, OUTLINE_ITEM_CHARS * 4) for part in parts]
    left = OUTLINE_TOKENS - spent - sum(_tokens(part) + 1 for part in short)
    share = left // 2 if files and definitions else left
    listed: list[str] = []
    if files:
        chosen = _within(files, [True] * len(files), share)
        listed.append(f"{len(files)} files matched: {chosen}")
        left -= _tokens(listed[-1])
    if definitions:
        listed.append("defines " + _within(list(definitions), list(definitions.values()), left))
    parts = short[:lists] + listed + short[lists:]
    return f" Outline: {'; '.join(parts)}." if parts else ""


def _within(items: list[str], first: list[bool], budget: int) -> str:
    """`items` (in their order) within `budget` tokens: those marked `first` are chosen first, then
    the others, each while it fits; what is left out is counted."""
    chosen: set[int] = set()
    used = 0
    for wanted in (True, False):
        for i, item in enumerate(items):
            if first[i] is wanted and i not in chosen:
                cost = _tokens(item) + 1
                if used + cost <= budget:
                    chosen.add(i)
                    used += cost
    text = ", ".join(items[i] for i in sorted(chosen))
    more = len(items) - len(chosen)
    return f"{text} (+{more} more)" if more and text else text or f"{more} names"


_TOKEN_PIECE = re.compile(r"[A-Za-z]{1,10}|[0-9]{1,3}|[^\sA-Za-z0-9]")


def _tokens(text: str) -> int:
    """About how many tokens `text` is for a BPE tokenizer (words, 3-digit groups, symbols): a budget
    that holds across tokenizers, where characters would favour long names over many short ones."""
    return len(_TOKEN_PIECE.findall(text))


def _definitions(text: str) -> Iterator[tuple[str, bool]]:
    """The names `text` defines, each with whether it is top-level (not indented)."""
    if not any(f"{word} " in text for word in _DEFINITION_WORDS):
        return  # most results define nothing: skip the walk over their lines
    for match in _DEFINITION.finditer(text):
        indent = match.group(2) if match.group(2) is not None else match.group(1)
        yield match.group(3), not indent


def _unique(items: Iterator[str]) -> list[str]:
    return list(dict.fromkeys(item for item in items if item))
