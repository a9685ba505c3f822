"""Deciding one chat request: which window, which count, which compaction.

The planner is where I/O meets the pure engine. It resolves the model's knobs (asking the upstream
for the window when it is `auto`), counts with the calibrated estimate, and only when that lands near
the line counts exactly (a local tokenizer, or the upstream's own `/tokenize`), so short requests pay
nothing. The plans themselves, with the estimate's margin measured on what the text is, are drafted
by `proxy.upstream.drafts`. After the upstream has answered, `read_report` feeds the reported prompt
size back into the calibration, and notices when the upstream cut the prompt silently: from then on
that model is compacted for the window the upstream really used (`proxy.upstream.prompt_reports`).
The text counters and the note memo every plan shares are `proxy.upstream.counters`.

`Planner`'s methods read in the order a request meets them: the window, the plan (counted with the
estimate, in a worker thread for a large request, then exactly near the line, or before refusing),
the retry after an overflow (`harder`), and what the answer reports (`read_report`).
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from proxy.bodies.offload import Offloader
from proxy.counting.cache import LruCache, ModelTable
from proxy.counting.calibration import Calibrator
from proxy.counting.modes import Counting, estimated
from proxy.counting.tokens import RequestCounter, text_of
from proxy.engine.index import Policy
from proxy.engine.plan import Body, ChatPlan
from proxy.metrics import Metrics
from proxy.settings import ModelWindow, Settings
from proxy.upstream.counters import LockedMemo, ModelTokenizers
from proxy.upstream.drafts import Draft, Drafter, spec_of
from proxy.upstream.overflow import Overflow
from proxy.upstream.probes import UpstreamTokenCounter, WindowDetector
from proxy.upstream.prompt_reports import PromptReports, Truncation, exact_key

T = TypeVar("T")

SUMMARY_OVERHEAD = 24  # the summary message's prefix and role markers
RETRY_MARGIN = 1.05  # a retry aims a little lower than the upstream's own count says it must
STABLE_SLACK = 0.1  # how far the calibrated factor may undercount a request and still be used
NOTE_MEMO_SIZE = 4096
# Requests with this much message text are planned in a worker thread: a first plan of it takes about
# 50 ms here, a warm one 5 ms, so the hop (0.1-0.3 ms) is a few percent of it; smaller requests stay on
# the loop, where the hop would cost more than it frees (`benchmarks/engine/bench_planning.py`).
OFFLOAD_CHARS = 500_000
# ... and so are requests of this many messages, whatever their text: 200,000 empty function calls
# are seconds of work per step (reading, sizing, planning), all of it per item.
OFFLOAD_ITEMS = 2_000
# An exact tokenizer reads 5-20 MB/s, 10-30x slower than the estimate: its plans go to a worker
# thread from a few milliseconds of counting on.
EXACT_OFFLOAD_CHARS = 25_000
# An exact count of the text still estimates the chat template around it (a token or two more a
# message than `MESSAGE_OVERHEAD` in Qwen's, a preamble for the tools): judged with this margin.
TEMPLATE_MARGIN = 0.02
# Upstreams known to answer a prompt over the window with an error (OpenAI's `context_length_exceeded`,
# Anthropic's "prompt is too long"), never cutting it: `COMPACT_UPSTREAM_REJECTS_OVERFLOW=auto`.
REJECTING_HOSTS = ("api.openai.com", "api.anthropic.com")
REJECTING_DOMAINS = (".openai.azure.com",)


def rejects_overflow(settings: Settings) -> bool:
    """Whether the upstream refuses a prompt over its window with an error (`upstream_rejects_overflow`)."""
    if settings.upstream_rejects_overflow != "auto":
        return settings.upstream_rejects_overflow
    host = (urllib.parse.urlsplit(settings.upstream_url).hostname or "").lower()
    return host in REJECTING_HOSTS or host.endswith(REJECTING_DOMAINS)


def _chars(messages: list[dict[str, Any]]) -> int:
    """Characters of the messages' text (a cheap size: `len` of each)."""
    total = 0
    for message in messages:
        content = message.get("content")
        total += len(content) if content.__class__ is str else len(text_of(content))  # most: a str
    return total


class Planner:
    """Plans every chat request of the process: its window, its count, its compaction."""

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
        self.reports = PromptReports(self.calibrator, metrics)
        # The windows the upstream was seen cutting at (`reports` writes them): every plan reads them.
        self.seen_windows = self.reports.seen_windows
        # Written notes, reused as the chat resends old results; shared with plans in worker threads.
        self.notes = LockedMemo(LruCache(NOTE_MEMO_SIZE, settings.memo_bytes))
        self.by_model = ModelTokenizers(settings.tokenizer_by_model)
        self.upstream_rejects_overflow = rejects_overflow(settings)
        self._no_exact_until = 0.0
        self.offloader = Offloader()
        self._configured: ModelTable[ModelWindow] = ModelTable()  # model names are the clients' to choose
        # With summaries, each dropped run's marker must leave room for the summary that replaces it.
        gap = settings.summary_tokens + SUMMARY_OVERHEAD if settings.summarize else 0
        self.policy = Policy(
            protected_tools=settings.protected_tools,
            preview_chars=settings.preview_chars,
            gap_tokens=gap,
            drop_to=settings.drop_to,
            loop_room_calls=settings.loop_room_calls,
        )
        self.drafter = Drafter(settings, self.policy, self.notes)
        self.counter = self.drafter.counter

    def configured(self, model: str) -> ModelWindow:
        """`settings.window_for(model)`, remembered: the settings never change, and laying a model's
        override over the defaults costs more than the lookup, every request."""
        window = self._configured.get(model)
        if window is None:
            window = self._configured[model] = self.settings.window_for(model)
        return window

    async def window(self, model: str, headers: Sequence[tuple[bytes, bytes]] = ()) -> ModelWindow:
        window = self.configured(model)
        if window.auto and self.detector:
            detected = await self.detector.window(model, headers)
            if detected:
                stops = detected.source.startswith(("llama.cpp", "ollama"))
                window = replace(window, window=detected.tokens, stops_at_end=stops)
        return window

    async def plan(
        self, body: Body, headers: Sequence[tuple[bytes, bytes]] = (), *, window_tokens: int | None = None
    ) -> ChatPlan:
        """Count with the calibrated estimate; near the line, count again with the configured
        tokenizer (a local one, or the upstream's `/tokenize`). `body` is a neutral request as a wire
        format's `read` made it (its `messages` validated there). `window_tokens` is a window the
        request itself sets (Ollama's `options.num_ctx`), which is what the server will use."""
        messages = body["messages"]
        many = len(messages) >= OFFLOAD_ITEMS
        model = str(body.get("model") or "")
        # A window the request sets needs no asking.
        window = self.configured(model) if window_tokens else await self.window(model, headers)
        if window_tokens:  # Ollama: it stops a reply at the window's end
            window = replace(window, window=window_tokens, requested=window_tokens, stops_at_end=True)
        elif self.settings.upstream_kind == "ollama":
            window = replace(window, stops_at_end=True)
        if (seen := self.seen_windows.get((model, window.requested))) and seen < window.window:
            window = replace(window, window=seen)
        window = await self.by_model.window(window, model)
        chars = await self.in_thread(_chars, messages) if many else _chars(messages)
        estimate = Counting.CHARS4 if window.tokenizer == Counting.CHARS4 else Counting.ESTIMATE
        draft = Draft(body, window, estimate, offload=many or chars >= OFFLOAD_CHARS)
        factor = self.calibrator.factor(model)
        # The estimate's margin (what it may undercount, by the kind of text) is measured in `Drafter`.
        margin = None if estimate == Counting.ESTIMATE else 0.0
        plan = await self._planned(draft, factor, margin)
        near = plan.result.tokens_before >= self.settings.exact_count_from * plan.budget.limit
        if window.tokenizer == estimate or not near:
            if window.tokenizer == Counting.ESTIMATE and plan.result.over_window:
                return await self._before_refusing(draft, plan, headers)
            return plan
        if window.tokenizer != Counting.UPSTREAM:
            factor = max(1.0, self.calibrator.factor(exact_key(model, window.tokenizer)))
            exact = replace(draft, spec=window.tokenizer, offload=many or chars >= EXACT_OFFLOAD_CHARS)
            return await self._planned(exact, factor, TEMPLATE_MARGIN)
        counted = await self.exact.count(body, headers) if self.exact else None
        if not counted:
            return plan
        raw = plan.result.tokens_before / factor
        self.calibrator.observe(model, round(raw), counted)
        plan = await self._planned(draft, self._stable(model, counted / raw))
        return replace(await self._recount(draft, plan, headers), counted_by=Counting.UPSTREAM)

    def _stable(self, model: str, ratio: float) -> float:
        """The factor to plan this request with: the calibrated one, which moves only in steps, unless
        it undercounts this request by more than `STABLE_SLACK`. The request's own ratio moves a
        little every turn, and with it every earlier cut the replay makes again (the server's prompt
        cache lost each time); the recount catches what a slightly low factor leaves over the line."""
        stable = self.calibrator.factor(model)
        return stable if stable * (1 + STABLE_SLACK) >= ratio else ratio

    async def _planned(self, draft: Draft, factor: float, margin: float | None = 0.0) -> ChatPlan:
        """The drafter's plan, in a worker thread for a large request: compacting a big history is CPU
        work that would otherwise keep every other client of this process waiting."""
        if not draft.offload:
            return self.drafter.plan(draft, factor, margin)
        return await self.in_thread(self.drafter.plan, draft, factor, margin)

    async def in_thread(self, work: Callable[..., T], *args: Any) -> T:
        """`work(*args)` in a worker thread (a large request's parsing, reading or plan), the loop
        kept responsive (`proxy.bodies.offload`)."""
        return await self.offloader.run(work, *args)

    def counter_for(self, plan: ChatPlan, factor: float | None = None) -> RequestCounter:
        """The counter `plan` was counted with (the upstream's count scales the estimate)."""
        return self.counter(spec_of(plan), plan.factor if factor is None else factor)

    async def _before_refusing(
        self, draft: Draft, plan: ChatPlan, headers: Sequence[tuple[bytes, bytes]]
    ) -> ChatPlan:
        """An estimate that says "over the window" (counted pessimistically: with its margin) is
        counted exactly before the request is refused: with the upstream's own count where it has
        one (vLLM's and llama.cpp's `/tokenize`). Where it has none, it is compacted to fit by the
        pessimistic count; else, to an upstream that refuses an overflow itself, sent for its verdict
        (`_for_the_upstream`: only an exact count refuses here); else counted with what the pessimistic count bounds (`_by_heaviest`);
        else refused: forwarding what it puts over the window to a server that may cut the prompt
        silently is what the margin is there to prevent."""
        exact = await self._upstream_count(draft.body, headers)
        if not exact:
            # Compacted as far as it takes to fit the window by the pessimistic count (the line
            # lifted to it), or refused when even that cannot fit.
            window = draft.window
            relaxed = replace(window, threshold=1.0, target=min(1.0, window.target / window.threshold))
            fitted = await self._planned(replace(draft, window=relaxed), plan.factor, None)
            if not fitted.result.over_window:
                return replace(fitted, window=window)
            if self.upstream_rejects_overflow:
                return await self._for_the_upstream(draft, plan)
            return await self._by_heaviest(draft, plan) or plan
        lenient = await self._planned(draft, plan.factor / (1 + plan.margin))
        raw = plan.result.tokens_before / plan.factor
        self.calibrator.observe(plan.model, round(raw), exact)
        counted = await self._planned(draft, exact / raw)
        counted = replace(await self._recount(draft, counted, headers), counted_by=Counting.UPSTREAM)
        if counted.result.over_window and not lenient.result.over_window:
            # The whole request's factor is not that of what is left once its old part goes:
            # what compaction makes of it is counted exactly before the request is refused.
            return await self._fitted_exactly(draft, lenient, headers) or counted
        return counted

    async def _for_the_upstream(self, draft: Draft, plan: ChatPlan) -> ChatPlan:
        """For an upstream that refuses an overflow with an error: the plan by the plain (calibrated)
        estimate, without its margin, sent for the server's verdict even where that estimate is over
        the window too (then as it came). The model's vocabulary is unknown and may be lighter for the
        text than the estimate assumes (Qwen's on Chinese: 0.6 of cl100k's); only an exact count
        refuses here. The server's error, where it sends one, is retried compacted for the count it
        gives, or reaches the client as it came: a round trip spent, never a prompt cut."""
        plain = await self._planned(draft, plan.factor)
        if not plain.result.over_window:
            return plain
        return replace(plain, result=replace(plain.result, over_window=False, oversized=None))

    async def _by_heaviest(self, draft: Draft, plan: ChatPlan) -> ChatPlan | None:
        """`plan` counted again with the heaviest of the vocabularies the margin is fitted on, where
        they are installed (None where not). The margin is sized to cover the most any of them may
        spend on the text, and overshoots it (by 15-25% on Chinese, Japanese, parse trees): what it
        puts over the window may fit them with room for the reply. Planned as a named model is
        (`TEMPLATE_MARGIN`), and never lighter than what the upstream's reports say the model spends
        (a vocabulary heavier than the four, calibrated: `plan`'s factor); refused if over even so."""
        if not await self.by_model.loadable(Counting.HEAVIEST):
            return None
        heaviest = replace(draft, spec=Counting.HEAVIEST, offload=True)  # four vocabularies: off the loop
        factor = max(1.0, self.calibrator.factor(exact_key(plan.model, Counting.HEAVIEST)))
        counted = await self._planned(heaviest, factor, TEMPLATE_MARGIN)
        reported = plan.result.tokens_before  # the estimate, scaled by what the upstream reported
        if plan.factor > 1.0 and counted.result.tokens_before < reported:
            factor *= reported / max(1, counted.result.tokens_before)
            counted = await self._planned(heaviest, factor, TEMPLATE_MARGIN)
        return counted

    async def _fitted_exactly(
        self, draft: Draft, candidate: ChatPlan, headers: Sequence[tuple[bytes, bytes]]
    ) -> ChatPlan | None:
        """`candidate` (a compaction that fits by a lenient estimate), or one made with the factor its
        exact count shows, once the upstream's count of what it forwards is within the window;
        None if neither is."""
        for _ in range(2):
            if candidate.result.over_window:
                return None
            exact = await self._upstream_count({**draft.body, "messages": candidate.result.messages}, headers)
            if not exact:
                return None
            if exact <= candidate.window.window:
                return replace(candidate, counted_by=Counting.UPSTREAM)
            factor = candidate.factor * exact / max(1, candidate.result.tokens_after) * RETRY_MARGIN
            candidate = await self._planned(replace(draft, window=candidate.window), factor)
        return None

    async def _upstream_count(self, body: Body, headers: Sequence[tuple[bytes, bytes]]) -> int | None:
        """The upstream's exact count of a request, None where it has no `/tokenize` (remembered for
        `window_refresh` seconds, so a server without one is asked again only that often)."""
        if self.exact is None or time.monotonic() < self._no_exact_until:
            return None
        exact = await self.exact.count(body, headers)
        if not exact:
            self._no_exact_until = time.monotonic() + self.settings.window_refresh
        return exact

    async def _recount(
        self, draft: Draft, plan: ChatPlan, headers: Sequence[tuple[bytes, bytes]]
    ) -> ChatPlan:
        """A compacted request counted exactly once more: the factor of the whole request is not
        that of what is left (tool schemas and role markers weigh more in a short prompt)."""
        if not plan.result.changed or self.exact is None:
            return plan
        exact = await self.exact.count({**draft.body, "messages": plan.result.messages}, headers)
        if not exact or exact <= plan.budget.limit:
            return plan
        factor = plan.factor * exact / max(1, plan.result.tokens_after) * RETRY_MARGIN
        return self.drafter.plan(replace(draft, window=plan.window), factor)

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
            if estimated(plan.counted_by):
                self.calibrator.observe(plan.model, round(sent / plan.factor), overflow.prompt_tokens)
        else:
            factor = plan.factor * 1.5
        harder = self.drafter.plan(Draft(body, window, spec_of(plan)), factor)
        if harder.result.over_window or harder.result.messages == plan.result.messages:
            return None
        return harder

    def read_report(self, plan: ChatPlan, reported: int | None) -> Truncation | None:
        """After the answer: feed what the upstream says it read back into the calibration; the cut
        it shows, if the upstream cut the prompt silently (`PromptReports`)."""
        return self.reports.read_report(plan, reported)
