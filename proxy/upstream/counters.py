"""What every plan in the process shares for counting: the text counter a `COMPACT_TOKENIZER` value
names (one per process, remembering the texts it counted; every configured one loaded at start-up by
`check_tokenizers`), the exact tokenizers models' names call for (`ModelTokenizers`), and the memo of
written notes, locked for plans running in worker threads.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Hashable
from dataclasses import replace
from functools import lru_cache

from proxy.counting.by_model import tokenizer_for_model
from proxy.counting.cache import LruCache
from proxy.counting.modes import HEAVIEST_OF, Counting
from proxy.counting.tokens import MemoTextCounter, TextCounter, count_chars4
from proxy.settings import ModelWindow, Settings


@lru_cache(maxsize=16)
def text_counter(spec: str) -> TextCounter:
    """The text counter a `COMPACT_TOKENIZER` value names (`upstream` estimates; see `Planner`),
    one per process, remembering the texts it counted."""
    if spec == Counting.CHARS4:
        return count_chars4
    if spec in (Counting.ESTIMATE, Counting.UPSTREAM):
        from proxy.counting.estimator import estimate_text_tokens

        return MemoTextCounter(estimate_text_tokens)
    from proxy.counting.tokenizers import load_text_counter

    if spec == Counting.HEAVIEST:
        counters = tuple(load_text_counter(each) for each in HEAVIEST_OF)
        return MemoTextCounter(lambda text: max(count(text) for count in counters))
    return MemoTextCounter(load_text_counter(spec))


def check_tokenizers(settings: Settings) -> None:
    """Load every configured tokenizer once, so a missing package fails at start-up, not per request."""
    specs = {settings.tokenizer} | {o.tokenizer for o in settings.models.values() if o.tokenizer}
    for spec in sorted(specs):
        try:
            text_counter(spec)
        except (ValueError, RuntimeError) as exc:
            raise ValueError(f"COMPACT_TOKENIZER={spec}: {exc}") from None


class LockedMemo:
    """A note memo safe to share between the event loop and worker threads: a store is locked (it
    evicts and keeps the byte count); a lookup is not (hundreds a request on a long history), since
    each of its dict operations is atomic and an entry evicted meanwhile is only a miss."""

    def __init__(self, memo: LruCache) -> None:
        self.memo = memo
        self.lock = threading.Lock()
        self.get: Callable[[Hashable], str | None] = memo.get  # the memo's own: no call in between

    def put(self, key: Hashable, value: str) -> None:
        with self.lock:
            self.memo.put(key, value)

    def __len__(self) -> int:
        return len(self.memo)

    @property
    def bytes(self) -> int:
        return self.memo.bytes


class ModelTokenizers:
    """The bundled tokenizer a model's name says it uses (`COMPACT_TOKENIZER_BY_MODEL`), where it
    is installed: each loaded once, in a worker thread (a vocabulary takes 0.1-1 s to read)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._loadable: dict[str, bool] = {}

    async def window(self, window: ModelWindow, model: str) -> ModelWindow:
        """`window` counting with the tokenizer `model`'s name says, where it counts with the
        default estimate."""
        if window.tokenizer != Counting.ESTIMATE or not self.enabled:
            return window
        spec = tokenizer_for_model(model)
        if spec is None:
            return window
        return replace(window, tokenizer=spec) if await self.loadable(spec) else window

    async def loadable(self, spec: str) -> bool:
        """Whether the counter `spec` names is installed (loaded the first time it is asked)."""
        if (loadable := self._loadable.get(spec)) is None:
            try:
                await asyncio.to_thread(text_counter, spec)
                loadable = True
            except (RuntimeError, ValueError):
                loadable = False
            self._loadable[spec] = loadable
        return loadable
