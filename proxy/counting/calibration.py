"""Self-calibration: how far the estimate is from what the upstream reports, per model.

Every successful answer reports the prompt's real size (`usage.prompt_tokens`, or Ollama's
`prompt_eval_count`). The ratio of that to the proxy's raw estimate of the same prompt is smoothed,
bounded, and used to scale the next estimates. The factor in use moves only in steps of
`STEP`, so that compaction decisions, and with them the upstream's prompt cache, stay stable
while the smoothed ratio wanders a little.

The same report also shows when a server cut the prompt silently (Ollama drops the oldest messages
to fit its window and answers 200): it then counts far fewer tokens than were sent, or exactly its
cap. `truncated_window` says which window the server must really have used.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from proxy.counting.cache import ModelTable

# A prompt the upstream counts as much smaller than estimated is more likely a cache artefact (some
# servers report only the tokens they had to evaluate) than a real overcount: such ratios are ignored.
MIN_RATIO = 0.8
MAX_FACTOR = 8.0
SMOOTHING = 0.3  # weight of the newest observation
STEP = 0.05  # the factor in use changes only when the smoothed ratio is this far (relative) from it
MIN_SAMPLE = 64  # prompts smaller than this say more about per-message overhead than about text

# A count this far under the estimate is not counting error. Before calibration the estimate can be
# off by a quarter either way (a large-vocabulary tokenizer, a server that counts characters), and a
# steady ratio like that is the tokenizer's, not a cut: a prompt read as less than this share of what
# was sent was cut.
TRUNCATION_RATIO = 0.6
# Some servers (older Ollama) report only the tokens they had to evaluate after a cached prefix: a
# small count. No chat model runs with a window this small, so such counts are never taken as cuts.
MIN_TRUNCATED_REPORT = 512

_PROMPT_TOKENS = re.compile(rb'"(?:prompt_tokens|prompt_eval_count)"\s*:\s*(\d+)')


def reported_prompt_tokens(body_tail: bytes) -> int | None:
    """The last prompt size reported in a response body (or the tail of a stream), if any."""
    matches = _PROMPT_TOKENS.findall(body_tail)
    return int(matches[-1]) if matches else None


def truncated_window(sent: int, reported: int, window: int) -> int | None:
    """The window a server really used, if its count of a prompt (`reported`) says it cut the one the
    proxy sent (`sent` tokens by the calibrated estimate, compacted for `window`); else None.

    A count of exactly the window is its cap: the estimate was too low, the window is right. A count
    far under the estimate is a cut at a smaller window, which is at least the count: the next power
    of two (windows are), or the count itself when that is not below the window already in use.
    (A count of exactly some other power of two is no sign: counts land there by chance.)"""
    if reported in (window - 1, window) and reported > sent:
        return window
    if reported > window:  # whatever happened, the server's window is larger than the one assumed
        return None
    if reported < MIN_TRUNCATED_REPORT or reported >= TRUNCATION_RATIO * sent:
        return None
    ceiling = 1 << (reported - 1).bit_length()
    return ceiling if ceiling < window else min(window, reported)


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
        """Learn from one prompt the proxy estimated at `estimated` raw tokens and the upstream counted."""
        if not self.enabled or estimated < MIN_SAMPLE or reported < MIN_RATIO * estimated:
            return
        ratio = min(MAX_FACTOR, reported / estimated)
        state = self._models.get(model)
        if state is None:
            self._models[model] = _ModelState(smoothed=ratio, factor=_quantize(ratio))
            return
        state.smoothed += SMOOTHING * (ratio - state.smoothed)
        if abs(math.log(state.smoothed / state.factor)) > STEP:
            state.factor = _quantize(state.smoothed)

    def __len__(self) -> int:
        return len(self._models)


def _quantize(ratio: float) -> float:
    """Round up to a grid of `STEP` on a log scale: nearby ratios give the same factor, and a factor
    errs on the side of counting too much, which compacts a little early rather than overflows."""
    return min(MAX_FACTOR, round(math.exp(math.ceil(math.log(ratio) / STEP - 1e-9) * STEP), 4))
