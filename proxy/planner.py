"""Deciding one chat request: which window, which count, which compaction.

The planner is where I/O meets the pure engine. It resolves the model's knobs (asking the upstream
for the window when it is `auto`), counts with the calibrated estimate, and only when that lands near
the line counts exactly (a local tokenizer, or the upstream's own `/tokenize`), so short requests pay
nothing. After the upstream has answered, `learn` feeds the reported prompt size back into the
calibration, and notices when the upstream cut the prompt silently: from then on that model is
compacted for the window the upstream really used.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from proxy.cache import LruCache, ModelTable
from proxy.calibration import Calibrator, truncated_window
from proxy.chat import Body, ChatPlan, plan_chat, validated_messages
from proxy.compaction import Policy
from proxy.metrics import Metrics
from proxy.overflow import Overflow
from proxy.probes import UpstreamTokenCounter, WindowDetector
from proxy.settings import ModelWindow, Settings
from proxy.tokens import MemoTextCounter, RequestCounter, TextCounter, count_chars4

log = logging.getLogger("proxy")

SUMMARY_OVERHEAD = 24  # the summary message's prefix and role markers
RETRY_MARGIN = 1.05  # a retry aims a little lower than the upstream's own count says it must
NOTE_MEMO_SIZE = 4096


@lru_cache(maxsize=16)
def text_counter(spec: str) -> TextCounter:
    """The text counter a `COMPACT_TOKENIZER` value names (`upstream` estimates; see `Planner`),
    one per process, remembering the texts it counted."""
    if spec == "chars4":
        return count_chars4
    if spec in ("estimate", "upstream"):
        from proxy.estimator import estimate_text_tokens

        return MemoTextCounter(estimate_text_tokens)
    from proxy.tokenizers import load_text_counter

    return MemoTextCounter(load_text_counter(spec))


def check_tokenizers(settings: Settings) -> None:
    """Load every configured tokenizer once, so a missing package fails at start-up, not per request."""
    specs = {settings.tokenizer} | {o.tokenizer for o in settings.models.values() if o.tokenizer}
    for spec in sorted(specs):
        try:
            text_counter(spec)
        except (ValueError, RuntimeError) as exc:
            raise ValueError(f"COMPACT_TOKENIZER={spec}: {exc}") from None


@dataclass(frozen=True, slots=True)
class Truncation:
    """The upstream read less of a prompt than it was sent: it cut it, silently."""

    model: str
    sent: int  # tokens, by the proxy's (calibrated) count
    read: int  # tokens, by the upstream's report
    window: int  # the window the upstream really used, as far as can be told


def _spec(plan: ChatPlan) -> str:
    """The text counter behind `plan`'s counts (an upstream count scales the estimate)."""
    return "estimate" if plan.counted_by == "upstream" else plan.counted_by


class Planner:
    def __init__(
        self,
        settings: Settings,
        *,
        detector: WindowDetector | None = None,
        exact: UpstreamTokenCounter | None = None,
        calibrator: Calibrator | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings
        self.detector = detector
        self.exact = exact
        self.calibrator = calibrator or Calibrator(settings.calibrate)
        self.metrics = metrics
        # The window the upstream was seen cutting at, per model and per window the request set (for
        # Ollama, a request without `num_ctx` runs at its default, one with it at that size).
        self.seen_windows: ModelTable[int] = ModelTable()
        self.notes = LruCache(NOTE_MEMO_SIZE)  # written notes, reused as the chat resends old results
        # With summaries, each dropped run's marker must leave room for the summary that replaces it.
        gap = settings.summary_tokens + SUMMARY_OVERHEAD if settings.summarize else 0
        self.policy = Policy(
            protected_tools=settings.protected_tools, preview_chars=settings.preview_chars, gap_tokens=gap
        )

    async def window(self, model: str, headers: Sequence[tuple[bytes, bytes]] = ()) -> ModelWindow:
        window = self.settings.window_for(model)
        if window.auto and self.detector:
            detected = await self.detector.window(model, headers)
            if detected:
                window = replace(window, window=detected.tokens)
        return window

    def counter(self, spec: str, factor: float = 1.0) -> RequestCounter:
        return RequestCounter(text_counter(spec), factor=factor, image_tokens=self.settings.image_tokens)

    async def plan(
        self, body: Body, headers: Sequence[tuple[bytes, bytes]] = (), *, window_tokens: int | None = None
    ) -> ChatPlan:
        """Count with the calibrated estimate; near the line, count again with the configured
        tokenizer (a local one, or the upstream's `/tokenize`). `window_tokens` is a window the
        request itself sets (Ollama's `options.num_ctx`), which is what the server will use."""
        messages = validated_messages(body)
        model = str(body.get("model") or "")
        # A window the request sets needs no asking.
        window = self.settings.window_for(model) if window_tokens else await self.window(model, headers)
        if window_tokens:
            window = replace(window, window=window_tokens, requested=window_tokens)
        if (seen := self.seen_windows.get((model, window.requested))) and seen < window.window:
            window = replace(window, window=seen)
        estimate = "chars4" if window.tokenizer == "chars4" else "estimate"
        factor = self.calibrator.factor(model)
        plan = self._plan(body, messages, window, estimate, factor)
        near = plan.result.tokens_before >= self.settings.exact_count_from * plan.budget.limit
        if window.tokenizer == estimate or not near:
            return plan
        if window.tokenizer != "upstream":
            return self._plan(body, messages, window, window.tokenizer, 1.0)
        exact = await self.exact.count(body, headers) if self.exact else None
        if not exact:
            return plan
        raw = plan.result.tokens_before / factor
        self.calibrator.observe(model, round(raw), exact)
        plan = self._plan(body, messages, window, "estimate", exact / raw)
        return replace(await self._recount(body, plan, headers), counted_by="upstream")

    def counter_for(self, plan: ChatPlan, factor: float | None = None) -> RequestCounter:
        """The counter `plan` was counted with (the upstream's count scales the estimate)."""
        return self.counter(_spec(plan), plan.factor if factor is None else factor)

    async def _recount(self, body: Body, plan: ChatPlan, headers: Sequence[tuple[bytes, bytes]]) -> ChatPlan:
        """A compacted request counted exactly once more: the factor of the whole request is not
        that of what is left (tool schemas and role markers weigh more in a short prompt)."""
        if not plan.result.changed or self.exact is None:
            return plan
        exact = await self.exact.count({**body, "messages": plan.result.messages}, headers)
        if not exact or exact <= plan.budget.limit:
            return plan
        factor = plan.factor * exact / max(1, plan.result.tokens_after) * RETRY_MARGIN
        return self._plan(body, body["messages"], plan.window, "estimate", factor)

    def harder(self, body: Body, plan: ChatPlan, overflow: Overflow) -> ChatPlan | None:
        """The plan for a retry after the upstream rejected `plan` (made from this validated `body`)
        as too long: counted with what the upstream said (its count and window, where it gave them),
        else half as much again. None if compacting harder changes nothing."""
        window = plan.window
        if overflow.window and overflow.window < window.window:
            window = replace(window, window=overflow.window)
        sent = plan.result.tokens_after
        if overflow.prompt_tokens and sent > 0:
            factor = plan.factor * max(1.0, overflow.prompt_tokens / sent) * RETRY_MARGIN
            if plan.counted_by in ("estimate", "chars4"):
                self.calibrator.observe(plan.model, round(sent / plan.factor), overflow.prompt_tokens)
        else:
            factor = plan.factor * 1.5
        harder = self._plan(body, body["messages"], window, _spec(plan), factor)
        if harder.result.over_window or harder.result.messages == plan.result.messages:
            return None
        return harder

    def _plan(
        self, body: Body, messages: list[dict[str, object]], window: ModelWindow, spec: str, factor: float
    ) -> ChatPlan:
        counter = self.counter(spec, factor)
        plan = plan_chat(
            body,
            messages,
            window,
            counter,
            self.policy,
            clamp=self.settings.clamp_max_tokens,
            memo=self.notes,
        )
        return replace(plan, counted_by=spec)

    def learn(self, plan: ChatPlan, reported: int | None) -> None:
        """Feed the upstream's count of the prompt it received back into the calibration."""
        self.read_report(plan, reported)

    def read_report(self, plan: ChatPlan, reported: int | None) -> Truncation | None:
        """`learn`, and the cut the count shows, if the upstream cut the prompt."""
        if reported is None:
            return None
        truncation = self._check_truncation(plan, reported)
        if plan.counted_by not in ("estimate", "chars4") or (
            truncation and reported < plan.result.tokens_after
        ):
            return truncation  # a count of what was left after a cut says nothing about the estimate
        before = self.calibrator.factor(plan.model)
        self.calibrator.observe(plan.model, round(plan.result.tokens_after / plan.factor), reported)
        after = self.calibrator.factor(plan.model)
        if after != before:
            log.info(
                "calibration for model %r: %.3f real tokens per estimated token", plan.model or "-", after
            )
        return truncation

    def _check_truncation(self, plan: ChatPlan, reported: int) -> Truncation | None:
        sent = plan.result.tokens_after
        window = truncated_window(sent, reported, plan.window.window)
        if window is None:
            return None
        log.warning(
            "The upstream cut the prompt silently: model %r was sent about %d tokens and read %d "
            "(compacted for a window of %d). %s",
            plan.model or "-",
            sent,
            reported,
            plan.window.window,
            f"From now on it is compacted for a window of {window}."
            if window < plan.window.window
            else "It read exactly the window: the prompt was larger than counted.",
        )
        if self.metrics:
            self.metrics.upstream_truncations.inc()
        key = (plan.model, plan.window.requested)
        self.seen_windows[key] = min(window, self.seen_windows.get(key) or window)
        return Truncation(plan.model, sent, reported, window)
