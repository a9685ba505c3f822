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
    of the part cut out, and a note saying how much was cut. None when `chars` is too small to say it."""
    keep = chars - 240  # the note's own words
    if keep < 80 or keep >= len(text):
        return None
    lines_budget = keep // 4
    head_chars = (keep - lines_budget) * 2 // 5
    tail_chars = keep - lines_budget - head_chars
    head_end = text.rfind("\n", 0, head_chars) + 1 or head_chars
    tail_start = text.find("\n", len(text) - tail_chars)
    tail_start = len(text) - tail_chars if tail_start < 0 else tail_start + 1
    middle = text[head_end:tail_start]
    kept_lines: list[str] = []
    used = 0
    for line in _cut_part_lines(middle):
        if used + len(line) + 1 > lines_budget:
            break
        kept_lines.append(line)
        used += len(line) + 1
    cut = len(middle) - used
    lines = "\n".join(kept_lines)
    found = f" Its error and summary lines:]\n{lines}\n[…]" if kept_lines else "]"
    return (
        f"{text[:head_end]}\n[{cut:,} of {len(text):,} {CAP_WORDS}; "
        f"call {tool or 'the tool'} again (e.g. for a narrower range) to see them.{found}"
        f"\n{text[tail_start:]}"
    )


def _cut_part_lines(middle: str) -> Iterator[str]:
    """The lines of a cut part worth keeping: errors, exceptions, failing tests, summaries, exit status."""
    lowered = middle.lower()
    seen: set[str] = set()
    for regex, words in _CUT_LINE_KINDS:  # summaries first: the fewest, the most telling
        for start, end in matching_lines(regex, middle, lowered, words):
            line = shorten(middle[start:end].strip(), 200)
            if line not in seen:
                seen.add(line)
                yield line
