"""A recent tool result too big for the window, capped to a size instead of noted.

The cap keeps the result's head and its tail, and from the part cut out its error and summary lines
(summaries first, then exit status, then error lines), with a line saying how much was cut and how
to see it. Bounded work: the cut part's lines are found by their words with `str.find`, and only
those lines are matched.
"""

from __future__ import annotations

from collections.abc import Iterator

from proxy.engine.outline import EXIT_STATUS, SUMMARY_LINE
from proxy.engine.scanning import ERROR_WORD, ERROR_WORDS, matching_lines, shorten

CAP_WORDS = "chars cut here to fit the context window"

_SUMMARY_WORDS = ("failed", "passed", "error", "skipped", "xfailed", "xpassed", "warning", "deselected")
_CUT_LINE_KINDS = (
    (SUMMARY_LINE, _SUMMARY_WORDS),
    (EXIT_STATUS, ("exit", "return code", "returncode")),
    (ERROR_WORD, ERROR_WORDS),
)


def cap_text(text: str, chars: int, *, tool: str | None) -> str | None:
    """`text` cut to about `chars` characters: its head and its tail, with the error and summary lines
    of the part cut out, and a note saying how much was cut. None when `chars` is too small to say it.
    What the lines leave of their share goes to the head and the tail, so that the cut keeps about
    `chars` whatever the text holds (the same room gives the same cut)."""
    keep = chars - 240  # the note's own words
    if keep < 80 or keep >= len(text):
        return None
    lines_budget = keep // 4
    head_end, tail_start = _ends(text, keep - lines_budget)
    middle = text[head_end:tail_start]
    found: list[tuple[int, str]] = []  # where each kept line starts in `text`, and the line
    used = 0
    for start, line in _cut_part_lines(middle):
        if used + len(line) + 1 > lines_budget:
            break
        found.append((head_end + start, line))
        used += len(line) + 1
    if used < lines_budget:  # fewer such lines than their share: a longer head and tail instead
        head_end, tail_start = _ends(text, keep - used)
        found = [(at, line) for at, line in found if head_end <= at < tail_start]
        used = sum(len(line) + 1 for _, line in found)
    kept_lines = [line for _, line in found]
    cut = tail_start - head_end - used
    lines = "\n".join(kept_lines)
    said = f" Its error and summary lines:]\n{lines}\n[…]" if kept_lines else "]"
    return (
        f"{text[:head_end]}\n[{cut:,} of {len(text):,} {CAP_WORDS}; "
        f"call {tool or 'the tool'} again (e.g. for a narrower range) to see them.{said}"
        f"\n{text[tail_start:]}"
    )


def _ends(text: str, chars: int) -> tuple[int, int]:
    """Where the head of a cut keeping `chars` of `text` ends and its tail starts (2/5 and 3/5 of it),
    at line ends."""
    head_chars = chars * 2 // 5
    tail_chars = chars - head_chars
    head_end = text.rfind("\n", 0, head_chars) + 1 or head_chars
    tail_start = text.find("\n", len(text) - tail_chars)
    tail_start = len(text) - tail_chars if tail_start < 0 else tail_start + 1
    return head_end, max(head_end, tail_start)


def _cut_part_lines(middle: str) -> Iterator[tuple[int, str]]:
    """The lines of a cut part worth keeping (errors, exceptions, failing tests, summaries, exit
    status), each with where it starts in `middle`."""
    lowered = middle.lower()
    seen: set[str] = set()
    for regex, words in _CUT_LINE_KINDS:  # summaries first: the fewest, the most telling
        for start, end in matching_lines(regex, middle, lowered, words):
            line = shorten(middle[start:end].strip(), 200)
            if line not in seen:
                seen.add(line)
                yield start, line
