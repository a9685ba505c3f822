"""How much the default estimate may undercount a request, by what its text is.

The estimate (`estimator.py`) aims between vocabularies: it undercounts what the heaviest of them
spends on Chinese and Japanese (cl100k: 1.4-1.6x), base64 and hex (Qwen: 1.3-1.5x), punctuation-dense
parse trees and nested reprs (1.3-1.4x), and holds within ~10% on prose and code. A request is judged
against the window less this margin, so that what the estimate says fits fits every tokenizer.

The margin is the ratio of two linear counts over the same character classes: an *upper* count
(weights below, fitted by linear programming so that it is at least 1.03x the largest of cl100k_base,
o200k_base, Qwen2.5 and Llama 3 on every 1,500-6,000-character window of the benchmark's samples,
while staying as close to them as it can on prose, code and JSON), over the estimate's own linear count.
It reads class *pairs* too: where merges stop (`pp`: punctuation runs, `sp`/`ps`: a space next to
punctuation, `dl`: hex, `lu`: base64's random case). `benchmarks/counting/bench_margin.py` measures it.

One pass in C per text (the estimator's `bytes.translate`, then 14 `bytes.count` (6 more for wide text)), remembered per
text, since a chat resends its history every turn.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

from proxy.counting.estimator import (
    _ASCII_WEIGHTS,
    _CASE_STEP,
    _CLASSES,
    _CONTINUATION,
    _SPACED_NUMBER,
    _WIDE_WEIGHTS,
)
from proxy.counting.tokens import WrittenJson, json_text_once, text_of

__all__ = ["MIN_MARGIN", "MarginMeter", "calibrated_margin", "text_bounds", "texts"]

# Upper tokens per class (and per pair of neighbouring classes), from `benchmarks/counting/bench_margin.py --fit`.
_UPPER = (
    (b"l", 0.212),
    (b"u", 0.838),
    (b"d", 1.064),
    (b"n", 0.589),
    (b"s", 0.128),
    (b"lu", 0.116),
    (b"sd", 0.933),
    (b"dl", 2.955),
    (b"pl", 0.638),
    (b"pp", 0.445),
    (b"sp", 0.261),
    (b"ps", 1.513),
    (b"dp", 0.96),
)
_UPPER_WIDE = (  # in the estimator's order of wide classes
    (b"h", 1.375),  # Han, kana: cl100k's 1.1-1.6 a character
    (b"g", 1.316),  # Hangul
    (b"c", 0.545),  # Cyrillic, Greek, Hebrew, Arabic
    (b"a", 2.986),  # accented Latin
    (b"y", 2.5),  # Indic, Thai, symbols: not in the fitted samples; byte-level BPE spends up to 3
    (b"e", 2.162),  # emoji
)
_ESTIMATE = (*_ASCII_WEIGHTS, _CASE_STEP, _SPACED_NUMBER)
# Whatever the weights say, never less than the estimate's worst error measured per kind of text
# (`benchmarks/counting/ESTIMATOR.md`): 16% on ASCII text, 40% on CJK, by the share of wide characters. The
# fitted weights are the finer measure; this floor holds on text unlike any they were fitted on
# (a `strings` dump: 1.22x under Qwen).
ASCII_FLOOR = 0.16
WIDE_FLOOR = 0.40
# The least margin over a calibrated count: the chat template's tokens.
MIN_MARGIN = 0.05
MEMO_MIN_CHARS = 256


# Every class and pair either count reads, counted once.
_NARROW = tuple(dict.fromkeys(cls for cls, _ in (*_ESTIMATE, *_UPPER)))
_ESTIMATE_AT = tuple((_NARROW.index(cls), weight) for cls, weight in _ESTIMATE)
_UPPER_AT = tuple((_NARROW.index(cls), weight) for cls, weight in _UPPER)
_WIDE_AT = len(_NARROW)
_NO_WIDE = [0] * len(_WIDE_WEIGHTS)
_NEWLINE_AT = _NARROW.index(b"n")
# Short texts are counted in runs of this many, each run remembered by its text: a chat resends its
# history, so all runs but the last are the same as the turn before.
SHORT_RUN = 64
RUN_MEMO_SIZE = 10_000  # a run's counts: about 250 bytes


def text_bounds(text: str) -> tuple[float, float]:
    """The estimate's linear count of `text` and the upper count: (estimate, upper)."""
    if not text:
        return 0.0, 0.0
    return _bounds_of(_class_counts(text))


def _class_counts(text: str) -> list[int]:
    """How many of each class and pair `text` holds (`_NARROW`, then the wide classes, zeros for ASCII
    text), then its length in bytes and in characters. Added up over texts joined by newlines, the
    sums are the joined text's own counts, less a newline per join: no pair either count reads
    spans a newline, and a byte's class is its own."""
    raw = text.encode("utf-8", "surrogatepass")
    count = raw.translate(_CLASSES, _CONTINUATION).count
    counts = [count(cls) for cls in _NARROW]
    if len(raw) != len(text):
        counts += [count(cls) for cls, _ in _WIDE_WEIGHTS]
    else:
        counts += _NO_WIDE
    counts += (len(raw), len(text))
    return counts


def _bounds_of(counts: list[int]) -> tuple[float, float]:
    """(estimate, upper) from a text's `_class_counts`."""
    estimate = sum(counts[i] * weight for i, weight in _ESTIMATE_AT)
    upper = sum(counts[i] * weight for i, weight in _UPPER_AT)
    floor = ASCII_FLOOR
    if counts[-2] != counts[-1]:
        wide = counts[_WIDE_AT:-2]
        estimate += sum(n * weight for n, (_, weight) in zip(wide, _WIDE_WEIGHTS, strict=True))
        upper += sum(n * weight for n, (_, weight) in zip(wide, _UPPER_WIDE, strict=True))
        floor += (WIDE_FLOOR - ASCII_FLOOR) * min(1.0, sum(wide) / counts[-1])
    return estimate, max(upper, estimate * (1 + floor))


def texts(messages: Iterable[Mapping[str, Any]], written: WrittenJson | None = None) -> Iterable[str]:
    """The text of each message that the counter counts: its content, reasoning and tool calls (their
    JSON taken from `written` where the counter wrote it)."""
    for message in messages:
        content = message.get("content")
        if content.__class__ is str:  # most messages: no call to find their text
            if content:
                yield content
        elif text := text_of(content):
            yield text
        if isinstance(reasoning := message.get("reasoning_content"), str) and reasoning:
            yield reasoning
        if calls := message.get("tool_calls"):
            yield json_text_once(calls, written)


def text_bytes(messages: Iterable[Mapping[str, Any]], cap: int, written: WrittenJson | None = None) -> int:
    """The most UTF-8 bytes the messages' `texts` can take, counted only until they pass `cap`: an
    ASCII text's length (`isascii` reads a flag the string keeps), four a character for any other.
    Whether a request's text can reach a bound is known from its first few messages, not from all
    2,000."""
    total = 0
    for text in texts(messages, written):
        total += len(text) if text.isascii() else 4 * len(text)
        if total > cap:
            break
    return total


class MarginMeter:
    """The margin of a request's messages, remembering each text's counts by its hash and length.
    Safe to share with plans in worker threads (a lost update only costs a recount)."""

    def __init__(self, size: int = 100_000) -> None:
        self.size = size
        self._memo: dict[tuple[int, int], tuple[float, float]] = {}
        self._runs: dict[tuple[int, int], tuple[int, ...]] = {}

    def bounds(self, text: str) -> tuple[float, float]:
        if len(text) < MEMO_MIN_CHARS:
            return text_bounds(text)
        key = (hash(text), len(text))
        found = self._memo.get(key)
        if found is None:
            found = text_bounds(text)
            if len(self._memo) >= self.size:
                with contextlib.suppress(KeyError, RuntimeError, StopIteration):
                    del self._memo[next(iter(self._memo))]
            self._memo[key] = found
        return found

    def margin(self, messages: Iterable[Mapping[str, Any]], written: WrittenJson | None = None) -> float:
        """How much more than the estimate the heaviest tokenizer may count these messages, as a share
        (`written`: the request's tool calls as JSON, see `json_text_once`)."""
        estimate = upper = 0.0
        short: list[str] = []  # counted together: a call per short text costs more
        memo = self._memo
        for text in texts(messages, written):
            if len(text) < MEMO_MIN_CHARS:
                short.append(text)
                continue
            found = memo.get((hash(text), len(text)))  # `bounds`, its lookup inlined: thousands a request
            e, u = self.bounds(text) if found is None else found
            estimate += e
            upper += u
        e, u = self._joined_bounds(short)
        estimate, upper = estimate + e, upper + u
        return max(MIN_MARGIN, upper / estimate - 1) if estimate else MIN_MARGIN

    def _joined_bounds(self, short: list[str]) -> tuple[float, float]:
        """`text_bounds("\\n".join(short))`, the same figures, from the class counts of runs of
        `SHORT_RUN` texts, each run's remembered."""
        if not short:
            return 0.0, 0.0
        total: list[int] | None = None
        runs = 0
        for start in range(0, len(short), SHORT_RUN):
            text = "\n".join(short[start : start + SHORT_RUN])
            key = (hash(text), len(text))
            counts = self._runs.get(key)
            if counts is None:
                counts = tuple(_class_counts(text))
                if len(self._runs) >= RUN_MEMO_SIZE:
                    with contextlib.suppress(KeyError, RuntimeError, StopIteration):
                        del self._runs[next(iter(self._runs))]
                self._runs[key] = counts
            total = list(counts) if total is None else [a + b for a, b in zip(total, counts, strict=True)]
            runs += 1
        assert total is not None
        joins = runs - 1  # the newline between two runs: one byte, one character, a newline
        total[_NEWLINE_AT] += joins
        total[-2] += joins
        total[-1] += joins
        return _bounds_of(total)


def calibrated_margin(margin: float, factor: float) -> float:
    """The margin over an estimate already scaled by a calibration `factor`: the upstream's reports
    say what the model spends on the text it has seen, not on this text (a Chinese paste after an
    English session), so the count is never judged lighter than the upper count; a factor above it
    (a tokenizer heavier than any measured) is kept, with the least margin on top."""
    return max(MIN_MARGIN, (1 + margin) / factor - 1) if factor > 0 else margin
