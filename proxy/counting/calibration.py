"""Self-calibration: how far a count is from what the upstream reports, per model and counter.

Every successful answer reports the prompt's real size (`usage.prompt_tokens`, or Ollama's
`prompt_eval_count`). The ratio of that to the proxy's count of the same prompt is smoothed, bounded,
and used to scale the next counts, both ways: an estimate that overcounts number-heavy text learns
it as surely as one that undercounts Chinese. The factor in use moves only in steps of `STEP`, so
that compaction decisions, and with them the upstream's prompt cache, stay stable while the smoothed
ratio wanders a little.

The same reports show when a server cut a prompt silently (Ollama drops the oldest messages to fit
its window and answers 200; an older llama.cpp with context shift cut the prompt's middle), but only
by evidence no tokenizer's difference can produce: a count below what the server's own `/tokenize`
said was sent, a count at the window the proxy set, or counts pinned near one value while the size
sent moves (`CutEvidence`). A steady ratio between two tokenizers is never taken for a cut.
"""

from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass

from proxy.counting.cache import ModelTable

# A report this far under the count says more about the server than about counting: older Ollama
# reports only the tokens it had to evaluate after a cached prefix. No tokenizer counts a text at less
# than half of what the estimate or another vocabulary does, so lower ratios are not learned.
MIN_RATIO = 0.4
MAX_FACTOR = 8.0
SMOOTHING = 0.3  # weight of the newest observation
STEP = 0.05  # the factor in use changes only when the smoothed ratio is this far (relative) from it
MIN_SAMPLE = 64  # prompts smaller than this say more about per-message overhead than about text

# Some servers (older Ollama) report only the tokens they had to evaluate after a cached prefix: a
# small count. No chat model runs with a window this small, so such counts are never taken as cuts.
MIN_TRUNCATED_REPORT = 512
# A server's own count (`/tokenize`) and its report of the same prompt differ by its template's reply
# primer at most: a report further under it was cut.
EXACT_SLACK = 16
# The model's own vocabulary (its name says which) counts the text as the server does, the chat
# template aside (a few tokens a message): a report under this share of it was cut.
OWN_VOCABULARY_UNDER = 0.8
# Counts "pinned near one value": three reports within this share of each other, while what was sent
# (counted before any calibration) moved by more than `MOVED`. A tokenizer's difference keeps a
# report in proportion to what is sent; a cut at a fixed size does not.
PINNED = 0.03
MOVED = 0.15
PINNED_REPORTS = 3
HISTORY = 4  # reports remembered per model and window, for the pinned test

_PROMPT_TOKENS = re.compile(rb'"(?:prompt_tokens|prompt_eval_count)"\s*:\s*(\d+)')


def reported_prompt_tokens(body_tail: bytes) -> int | None:
    """The last prompt size reported in a response body (or the tail of a stream), if any."""
    matches = _PROMPT_TOKENS.findall(body_tail)
    return int(matches[-1]) if matches else None


@dataclass(frozen=True, slots=True)
class Truncation:
    """The upstream read less of a prompt than it was sent: it cut it, silently."""

    model: str
    sent: int  # tokens, by the proxy's count
    read: int  # tokens, by the upstream's report
    window: int  # the window the upstream really used, as far as can be told


def window_below(reported: int, window: int) -> int:
    """The window a server that read `reported` tokens of a cut prompt used: the next power of two
    (windows are), or the count itself when that is not below the window already in use."""
    ceiling = 1 << (reported - 1).bit_length()
    return ceiling if ceiling < window else min(window, reported)


class CutEvidence:
    """Per model and window: the last (sent, reported) pairs, and what they prove about a cut."""

    def __init__(self) -> None:
        self._reports: ModelTable[deque[tuple[int, int]]] = ModelTable()

    def cut_window(self, key: object, sent: int, reported: int, window: int, *, counted: str) -> int | None:
        """The window the server cut at, if this report (with the earlier ones for `key`) proves a
        cut of a prompt of `sent` tokens planned for `window`; else None. `counted` says how `sent`
        was counted: `server` (its own `/tokenize`), `own` (the model's own vocabulary), else a guess
        (the estimate, or the four vocabularies of an unnamed model), which only pinned counts or a
        count at the window can overrule. `sent` is counted before any calibration: a factor learned
        from a cut prompt's report would hide the cut in the next counts."""
        earlier = self._reports.get(key)
        if earlier is None:
            earlier = self._reports[key] = deque(maxlen=HISTORY)
        pairs = list(earlier)
        earlier.append((sent, reported))
        if reported > window or reported < MIN_TRUNCATED_REPORT:
            return None  # a larger window than assumed, or a report of a cached prompt's tail
        if reported >= window - 1 and sent < reported:
            return window  # the window filled to the token: the prompt was larger than counted
        if counted == "server" and reported < sent - EXACT_SLACK:
            return window_below(reported, window)
        if counted == "own" and reported < OWN_VOCABULARY_UNDER * sent:
            return window_below(reported, window)
        recent = [*pairs[-(PINNED_REPORTS - 1) :], (sent, reported)]
        if len(recent) == PINNED_REPORTS:
            reports = [r for _, r in recent]
            sizes = [s for s, _ in recent]
            pinned = max(reports) - min(reports) <= PINNED * max(reports)
            if pinned and max(sizes) - min(sizes) > MOVED * max(sizes) and reported < sent:
                return window_below(max(reports), window)
        return None


@dataclass(slots=True)
class _ModelState:
    smoothed: float
    factor: float


class Calibrator:
    """Per-model correction factors, learned from the upstream's reported counts."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._models: ModelTable[_ModelState] = ModelTable()  # names come from clients: bounded

    def factor(self, model: str) -> float:
        state = self._models.get(model)
        return state.factor if state and self.enabled else 1.0

    def calibrated(self, model: str) -> bool:
        """Whether the upstream has reported a count for `model` yet."""
        return self.enabled and model in self._models

    def observe(self, model: str, estimated: int, reported: int) -> None:
        """Learn from one prompt the proxy counted at `estimated` raw tokens and the upstream reported."""
        if not self.enabled or estimated < MIN_SAMPLE or reported < MIN_RATIO * estimated:
            return
        ratio = min(MAX_FACTOR, reported / estimated)
        state = self._models.get(model)
        if state is None:
            self._models[model] = _ModelState(smoothed=ratio, factor=quantize(ratio))
            return
        state.smoothed += SMOOTHING * (ratio - state.smoothed)
        if abs(math.log(state.smoothed / state.factor)) > STEP:
            state.factor = quantize(state.smoothed)

    def __len__(self) -> int:
        return len(self._models)


def quantize(ratio: float) -> float:
    """Round up to a grid of `STEP` on a log scale: nearby ratios give the same factor, and a factor
    errs on the side of counting too much, which compacts a little early rather than overflows."""
    return min(MAX_FACTOR, round(math.exp(math.ceil(math.log(ratio) / STEP - 1e-9) * STEP), 4))


# A vocabulary that counts a prompt at more than the server reports by this much is not the server's:
# a chat template only adds tokens. (Qwen2.5's counts digits one a token: twice cl100k's or Llama 3's.)
EXCLUDED_OVER = 1.25


class VocabularyEvidence:
    """Which of the bundled vocabularies an unnamed model cannot be using, by the upstream's reports:
    those that counted what was sent at more than `EXCLUDED_OVER` times what the server read. A
    report that rules out every one of them (a cached prompt's tail, a vocabulary lighter than all)
    says nothing and is ignored. What is ruled out stays ruled out: the next plans compact for the
    heaviest of the rest, and the same evidence always gives the same count."""

    def __init__(self) -> None:
        self._excluded: ModelTable[frozenset[str]] = ModelTable()

    def observe(self, model: str, counts: dict[str, int], reported: int) -> None:
        if reported < MIN_SAMPLE:
            return
        out = frozenset(spec for spec, count in counts.items() if count > EXCLUDED_OVER * reported)
        if not out or len(out) == len(counts):
            return
        self._excluded[model] = out | (self._excluded.get(model) or frozenset())

    def excluded(self, model: str) -> frozenset[str]:
        return self._excluded.get(model) or frozenset()
