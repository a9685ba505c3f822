"""Deciding one chat request: which window, which count, which compaction.

The planner is where I/O meets the pure engine. It resolves the model's knobs (asking the upstream
for the window when it is `auto`), counts with the calibrated estimate, and only when that lands near
the line counts exactly (a local tokenizer, or the upstream's own `/tokenize`), so short requests pay
nothing. After the upstream has answered, `learn` feeds the reported prompt size back into the
calibration, and notices when the upstream cut the prompt silently: from then on that model is
compacted for the window the upstream really used (`proxy.upstream.prompt_reports`). The text
counters and the note memo every plan shares are `proxy.upstream.counters`.

`Planner`'s methods read in the order a request meets them: the window, the plan (counted with the
estimate, in a worker thread for a large request, then exactly near the line, or before refusing),
the retry after an overflow (`harder`), and what the answer reports (`learn`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from proxy.counting.cache import LruCache, ModelTable
from proxy.counting.calibration import Calibrator
from proxy.counting.margin import MIN_MARGIN, MarginMeter, calibrated_margin, texts
from proxy.counting.tokens import RequestCounter, text_of
from proxy.engine.chat import Body, ChatPlan, plan_chat, validated_messages
from proxy.engine.compaction import Policy
from proxy.engine.limits import budget_for, requested_reply
from proxy.engine.overflow import Overflow
from proxy.metrics import Metrics
from proxy.settings import ModelWindow, Settings
from proxy.upstream.counters import LockedMemo, ModelTokenizers, text_counter
from proxy.upstream.offload import Offloader
from proxy.upstream.probes import UpstreamTokenCounter, WindowDetector
from proxy.upstream.prompt_reports import PromptReports, Truncation, exact_key

T = TypeVar("T")

SUMMARY_OVERHEAD = 24  # the summary message's prefix and role markers
RETRY_MARGIN = 1.05  # a retry aims a little lower than the upstream's own count says it must
NOTE_MEMO_SIZE = 4096
# Requests with this much message text are planned in a worker thread: a first plan of it takes about
# 50 ms here, a warm one 5 ms, so the hop (0.1-0.3 ms) is a few percent of it; smaller requests stay on
# the loop, where the hop would cost more than it frees (`benchmarks/bench_planning.py`).
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
MARGIN_STEP = 0.01  # what is sent, this much lighter than the whole request, is planned again with its own margin


def _chars(messages: list[dict[str, object]]) -> int:
    """Characters of the messages' text (a cheap size: `len` of each)."""
    return sum(len(text_of(message.get("content"))) for message in messages)
MARGIN_SLACK = 0.1  # how much larger than measured the margin of a model's last plan may be and still be used
STABLE_SLACK = 0.1  # how far the calibrated factor may undercount a request and still be used
SETTLE_ROUNDS = 5  # plans made again with a larger margin, for the output's own line


def _spec(plan: ChatPlan) -> str:
    """The text counter behind `plan`'s counts (an upstream count scales the estimate)."""
    return "estimate" if plan.counted_by == "upstream" else plan.counted_by


def _clamped_for(plan: ChatPlan, margin: float, clamp: bool) -> ChatPlan:
    """`plan` with its reply limit lowered (when it may be) to leave room for its prompt counted
    with `margin`, as `plan_chat` lowers it."""
    reply = plan.max_tokens or plan.reply
    prompt = math.ceil(plan.result.tokens_after * (1 + margin))
    if not clamp or not reply or prompt + reply <= plan.window.window:
        return plan
    return replace(plan, max_tokens=max(1, plan.window.window - prompt))


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
        self.margins = MarginMeter()  # the estimate's margin, by what the text is
        self.steady_margins: ModelTable[float] = ModelTable()  # the margin each model's last plan used
        self.by_model = ModelTokenizers(settings.tokenizer_by_model)
        self._no_exact_until = 0.0
        self.offloader = Offloader()
        # With summaries, each dropped run's marker must leave room for the summary that replaces it.
        gap = settings.summary_tokens + SUMMARY_OVERHEAD if settings.summarize else 0
        self.policy = Policy(
            protected_tools=settings.protected_tools,
            preview_chars=settings.preview_chars,
            gap_tokens=gap,
            drop_to=settings.drop_to,
        )

    async def window(self, model: str, headers: Sequence[tuple[bytes, bytes]] = ()) -> ModelWindow:
        window = self.settings.window_for(model)
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
        tokenizer (a local one, or the upstream's `/tokenize`). `window_tokens` is a window the
        request itself sets (Ollama's `options.num_ctx`), which is what the server will use."""
        listed = body.get("messages")
        many = isinstance(listed, list) and len(listed) >= OFFLOAD_ITEMS
        messages = await self.in_thread(validated_messages, body) if many else validated_messages(body)
        model = str(body.get("model") or "")
        # A window the request sets needs no asking.
        window = self.settings.window_for(model) if window_tokens else await self.window(model, headers)
        if window_tokens:  # Ollama: it stops a reply at the window's end
            window = replace(window, window=window_tokens, requested=window_tokens, stops_at_end=True)
        elif self.settings.upstream_kind == "ollama":
            window = replace(window, stops_at_end=True)
        if (seen := self.seen_windows.get((model, window.requested))) and seen < window.window:
            window = replace(window, window=seen)
        window = await self.by_model.window(window, model)
        estimate = "chars4" if window.tokenizer == "chars4" else "estimate"
        factor = self.calibrator.factor(model)
        chars = await self.in_thread(_chars, messages) if many else _chars(messages)
        offload = many or chars >= OFFLOAD_CHARS
        # The estimate's margin (what it may undercount, by the kind of text) is measured in `_plan`.
        margin = None if estimate == "estimate" else 0.0
        plan = await self._planned(offload, body, messages, window, estimate, factor, margin)
        near = plan.result.tokens_before >= self.settings.exact_count_from * plan.budget.limit
        if window.tokenizer == estimate or not near:
            if window.tokenizer == "estimate" and plan.result.over_window:
                return await self._before_refusing(body, messages, window, plan, headers, offload)
            return plan
        if window.tokenizer != "upstream":
            exact_offload = many or chars >= EXACT_OFFLOAD_CHARS
            factor = max(1.0, self.calibrator.factor(exact_key(model, window.tokenizer)))
            return await self._planned(
                exact_offload, body, messages, window, window.tokenizer, factor, TEMPLATE_MARGIN
            )
        exact = await self.exact.count(body, headers) if self.exact else None
        if not exact:
            return plan
        raw = plan.result.tokens_before / factor
        self.calibrator.observe(model, round(raw), exact)
        plan = await self._planned(offload, body, messages, window, "estimate", self._stable(model, exact / raw))
        return replace(await self._recount(body, plan, headers), counted_by="upstream")

    def _steady(self, model: str, margin: float) -> float:
        """The margin to plan with: the one the model's last plan used, if it is no smaller than
        `margin` and at most `MARGIN_SLACK` larger. The margin measured on a chat's text moves a little
        every turn as the chat grows, and with it the line every earlier cut is made against again
        (the server's prompt cache lost each time); a larger margin only compacts a little earlier."""
        last = self.steady_margins.get(model)
        if last is not None and margin <= last <= margin + MARGIN_SLACK:
            return last
        self.steady_margins[model] = margin
        return margin

    def _stable(self, model: str, ratio: float) -> float:
        """The factor to plan this request with: the calibrated one, which moves only in steps, unless
        it undercounts this request by more than `STABLE_SLACK`. The request's own ratio moves a
        little every turn, and with it every earlier cut the replay makes again (the server's prompt
        cache lost each time); the recount catches what a slightly low factor leaves over the line."""
        stable = self.calibrator.factor(model)
        return stable if stable * (1 + STABLE_SLACK) >= ratio else ratio

    async def _planned(
        self,
        offload: bool,
        body: Body,
        messages: list[dict[str, object]],
        window: ModelWindow,
        spec: str,
        factor: float,
        margin: float | None = 0.0,
    ) -> ChatPlan:
        """`_plan`, in a worker thread for a large request: compacting a big history is CPU work
        that would otherwise keep every other client of this process waiting."""
        if not offload:
            return self._plan(body, messages, window, spec, factor, margin)
        return await self.in_thread(self._plan, body, messages, window, spec, factor, margin)

    async def in_thread(self, work: Callable[..., T], *args: Any) -> T:
        """`work(*args)` in a worker thread (a large request's parsing, reading or plan), the loop
        kept responsive (`proxy.upstream.offload`)."""
        return await self.offloader.run(work, *args)

    def _plan(
        self,
        body: Body,
        messages: list[dict[str, object]],
        window: ModelWindow,
        spec: str,
        factor: float,
        margin: float | None = 0.0,
    ) -> ChatPlan:
        """The engine's plan. `margin` is what the counter may undercount; None: the estimate's,
        measured on the messages, and again on what compaction leaves of them when that is heavier
        text (an English history dropped, a Chinese paste kept), so the line holds for what is sent."""
        if margin is not None:
            return self._engine_plan(body, messages, window, spec, factor, margin)
        # No tokenizer spends more than a token per UTF-8 byte (4 per character): a request whose text
        # cannot reach its line or crowd its reply even so needs no measured margin (most requests).
        bound = 4 * sum(map(len, texts(messages)))
        if bound <= int(window.window * window.threshold) // 2:
            plan = self._engine_plan(body, messages, window, spec, factor, MIN_MARGIN)
            r, room = plan.result, min(plan.budget.limit, window.window - (requested_reply(body) or 0))
            if not r.changed and plan.max_tokens is None and r.tokens_before + bound <= room:
                return plan
        margin = calibrated_margin(self.margins.margin(messages), factor)
        plan = self._engine_plan(body, messages, window, spec, factor, margin)
        if not plan.result.changed or plan.result.overflow:
            return plan
        left = calibrated_margin(self.margins.margin(plan.result.messages), factor)
        if left < margin - MARGIN_STEP:
            return self._lighter(plan, body, messages, window, spec, left)
        return self._settled(plan, body, messages, window, spec, margin, left)

    def _settled(
        self,
        plan: ChatPlan,
        body: Body,
        messages: list[dict[str, object]],
        window: ModelWindow,
        spec: str,
        margin: float,
        left: float,
    ) -> ChatPlan:
        """`plan`, or one made with a larger margin, whose output fits the line its own margin gives
        it. What compaction removes is mostly ASCII tool output, so what is left may be heavier text
        (a Chinese paste kept), its margin larger and its line lower than the request's: judged on what
        is sent, compacted again (a client resends what it sent) it then goes through unchanged."""
        clamp = self._clamps(window)
        for _ in range(SETTLE_ROUNDS):
            if left <= margin:
                return plan
            counter = self.counter(spec, plan.factor)
            if plan.result.tokens_after <= budget_for(body, window, counter, clamp=clamp, margin=left).limit:
                # It stays; a reply limit lowered beside it is lowered for the margin it goes out with.
                return _clamped_for(plan, left, clamp)
            # A little above the output's margin, so that the next output (a little heavier again,
            # as more ASCII goes) settles within it rather than creeping up round after round.
            margin = left + MARGIN_STEP
            plan = self._engine_plan(body, messages, window, spec, plan.factor, margin)
            if not plan.result.changed or plan.result.overflow:
                return plan
            left = calibrated_margin(self.margins.margin(plan.result.messages), plan.factor)
        return plan

    def _lighter(
        self,
        plan: ChatPlan,
        body: Body,
        messages: list[dict[str, object]],
        window: ModelWindow,
        spec: str,
        left: float,
    ) -> ChatPlan:
        """When compaction cut the heavy text (a megabyte of digits noted), what is sent is judged with
        its own, smaller margin: planned again with it and settled on its output's margin, so the rest
        is not dropped for a margin it never had. Kept only when it still compacts within the line."""
        lighter = self._engine_plan(body, messages, window, spec, plan.factor, left)
        if not lighter.result.changed or lighter.result.overflow:
            return plan  # the heavy text would go out whole: its margin stands
        own = calibrated_margin(self.margins.margin(lighter.result.messages), plan.factor)
        settled = self._settled(lighter, body, messages, window, spec, left, own)
        return plan if settled.result.overflow or not settled.result.changed else settled

    def _engine_plan(
        self,
        body: Body,
        messages: list[dict[str, object]],
        window: ModelWindow,
        spec: str,
        factor: float,
        margin: float,
    ) -> ChatPlan:
        margin = self._steady(str(body.get("model") or ""), margin)
        counter = self.counter(spec, factor)
        plan = plan_chat(
            body,
            messages,
            window,
            counter,
            self.policy,
            clamp=self._clamps(window),
            memo=self.notes,
            margin=margin,
        )
        return replace(plan, counted_by=spec)

    def _clamps(self, window: ModelWindow) -> bool:
        """Whether a reply limit that does not fit beside the prompt is lowered: by default for every
        server but those that end a reply at the window's end anyway (vLLM and OpenAI refuse
        prompt + `max_tokens` over the window)."""
        setting = self.settings.clamp_max_tokens
        return not window.stops_at_end if setting == "auto" else setting

    def counter(self, spec: str, factor: float = 1.0) -> RequestCounter:
        return RequestCounter(text_counter(spec), factor=factor, image_tokens=self.settings.image_tokens)

    def counter_for(self, plan: ChatPlan, factor: float | None = None) -> RequestCounter:
        """The counter `plan` was counted with (the upstream's count scales the estimate)."""
        return self.counter(_spec(plan), plan.factor if factor is None else factor)

    async def _before_refusing(
        self,
        body: Body,
        messages: list[dict[str, object]],
        window: ModelWindow,
        plan: ChatPlan,
        headers: Sequence[tuple[bytes, bytes]],
        offload: bool,
    ) -> ChatPlan:
        """An estimate that says "over the window" (counted pessimistically: with its margin) is
        counted exactly before the request is refused: with the upstream's own count where it has
        one (vLLM's and llama.cpp's `/tokenize`). Where it has none, it is refused: forwarding what
        the pessimistic count puts over the window is what the margin is there to prevent."""
        exact = await self._upstream_count(body, headers)
        if not exact:
            # Compacted as far as it takes to fit the window by the pessimistic count (the line
            # lifted to it), or refused when even that cannot fit.
            relaxed = replace(window, threshold=1.0, target=min(1.0, window.target / window.threshold))
            fitted = await self._planned(offload, body, messages, relaxed, "estimate", plan.factor, None)
            return plan if fitted.result.over_window else replace(fitted, window=window)
        lenient = await self._planned(
            offload, body, messages, window, "estimate", plan.factor / (1 + plan.margin)
        )
        raw = plan.result.tokens_before / plan.factor
        self.calibrator.observe(plan.model, round(raw), exact)
        counted = await self._planned(offload, body, messages, window, "estimate", exact / raw)
        counted = replace(await self._recount(body, counted, headers), counted_by="upstream")
        if counted.result.over_window and not lenient.result.over_window:
            # The whole request's factor is not that of what is left once its old part goes:
            # what compaction makes of it is counted exactly before the request is refused.
            return await self._fitted_exactly(body, lenient, headers, offload) or counted
        return counted

    async def _fitted_exactly(
        self, body: Body, candidate: ChatPlan, headers: Sequence[tuple[bytes, bytes]], offload: bool
    ) -> ChatPlan | None:
        """`candidate` (a compaction that fits by a lenient estimate), or one made with the factor its
        exact count shows, once the upstream's count of what it forwards is within the window;
        None if neither is."""
        messages = body["messages"]
        for _ in range(2):
            if candidate.result.over_window:
                return None
            exact = await self._upstream_count({**body, "messages": candidate.result.messages}, headers)
            if not exact:
                return None
            if exact <= candidate.window.window:
                return replace(candidate, counted_by="upstream")
            factor = candidate.factor * exact / max(1, candidate.result.tokens_after) * RETRY_MARGIN
            candidate = await self._planned(offload, body, messages, candidate.window, "estimate", factor)
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

    # After the answer: what the upstream says it read (see `PromptReports`).

    def learn(self, plan: ChatPlan, reported: int | None) -> None:
        """Feed the upstream's count of the prompt it received back into the calibration."""
        self.reports.learn(plan, reported)

    def read_report(self, plan: ChatPlan, reported: int | None) -> Truncation | None:
        """`learn`, and the cut the count shows, if the upstream cut the prompt."""
        return self.reports.read_report(plan, reported)

