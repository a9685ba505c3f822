"""Reading a tool result in bounded work, for its note and its cap: which part of it is read, and
which of its lines name an error, found by their words.

Notes and caps run on the event loop, so their work is bounded for any result: a note reads at most
`SCAN_CHARS` of a result (its head and its tail), and lines are found by their words with `str.find`
(far faster than a pattern tried at every position), at most `MAX_LINES` of them, each matched only
in its first `LINE_CHARS`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

# What a note reads of a result: all of it up to this size, else its head and its tail (where a log
# ends on its errors and summary), so that a note costs the same bounded time for any size.
SCAN_CHARS = 65_536
ERROR_WORDS = ("error", "exception", "failed", "failure", "fatal", "traceback", "denied")
MAX_LINES = 1_000  # lines with such words looked at per result (a log of "0 errors" lines is bounded)
MAX_SCANNED = 20_000  # tokens or JSON values looked at per result: bounded work for any size
LINE_CHARS = 4_096  # of a line, what is matched: what makes it an error or summary line comes first
# `KeyError`, `AssertionError`, `CalledProcessError`: exception class names are error words too.
ERROR_WORD = re.compile(rf"\b(?:{'|'.join(ERROR_WORDS)})\b|(?-i:\b[A-Z]\w*(?:Error|Exception)\b)", re.I)
# A source line naming an error is not an error that happened.
_CODE_LINE_STARTS = ("except", "raise ", "class ", "def ", "#", "import ", "from ", "catch", "throw ", "//")
_JSON_ESCAPE = re.compile(r'\\(?:u[0-9A-Fa-f]{4}|[nrt"\\/])')
# `cat -n` and agent read tools number each line: "    12\tcode" or "    12→code".
NUMBERED_LINE = re.compile(r"^[ \t]*+([0-9]++)(?:\t|→|: )", re.M)


def head_and_tail(text: str, chars: int, head_share: float = 0.75) -> str:
    """`text` itself up to `chars`, else its head and its tail of `chars` in all, cut at line ends."""
    if len(text) <= chars:
        return text
    head = int(chars * head_share)
    head_end = text.rfind("\n", 0, head) + 1 or head
    tail_start = text.find("\n", len(text) - (chars - head)) + 1 or len(text) - (chars - head)
    return f"{text[:head_end]}\n{text[tail_start:]}"


def matching_lines(
    regex: re.Pattern[str], text: str, lowered: str, words: tuple[str, ...], most: int = MAX_LINES
) -> Iterator[tuple[int, int]]:
    """Where each line that holds a match of `regex` starts and ends, in order, each line once. Lines
    are found by their `words` (`str.find`, far faster than a pattern tried at every position) and
    only those lines are matched; at most `most` lines are looked at, whatever the text's size."""
    pos = 0
    hits = {word: lowered.find(word) for word in words}
    while most:
        live = [hit for hit in hits.values() if hit >= 0]
        if not live:
            return
        hit = min(live)
        most -= 1
        start = text.rfind("\n", 0, hit) + 1
        end = text.find("\n", hit)
        end = len(text) if end < 0 else end
        if regex.search(text, start, min(end, start + LINE_CHARS)):
            yield start, end
        pos = end + 1
        hits = {word: h if h < 0 or h >= pos else lowered.find(word, pos) for word, h in hits.items()}


def shorten(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, with an ellipsis where it was cut."""
    return text if len(text) <= limit else text[:limit].rstrip() + "…"


def error_lines(text: str, most: int) -> Iterator[str]:
    """The first lines that name an error, found word first (a line pattern backtracks on every line)."""
    lowered = text.lower()
    if not any(word in lowered for word in ERROR_WORDS):
        return
    for start, end in matching_lines(ERROR_WORD, text, lowered, ERROR_WORDS):
        if text[start : min(end, start + 80)].lstrip().startswith(_CODE_LINE_STARTS):
            continue  # `except Exception:`, `raise KeyError(...)`: a source line, not an error that happened
        if text.startswith("Traceback (most recent call last)", start):
            continue  # says only that its exception line follows
        if end - start > 100:  # a long line (JSON-escaped output): around its last error word
            found = [m.start() for m in ERROR_WORD.finditer(text, start, min(end, start + LINE_CHARS))]
            start = max(start, found[-1] - 40) if found else start
        line = _JSON_ESCAPE.sub(" ", text[start : min(end, start + 400)]).strip()
        yield shorten(line[1:].lstrip() if line.startswith("E ") else line, 100)  # pytest's `E` prefix
        most -= 1
        if not most:
            return
