"""Deciding one chat request: which window, which count, which compaction.

The planner is where I/O meets the pure engine. It resolves the model's knobs (asking the upstream
for the window when it is `auto`), proves most requests far under their line with the estimate's
cheap bounds, and counts the rest as the server counts (`COMPACT_TOKENIZER=auto`): with the
upstream's own `/tokenize` where it has one (vLLM, llama.cpp: `proxy.planning.server_count`); else
with the vocabulary the model's name says; else with the four bundled vocabularies, compacting to fit
the heaviest and refusing only what even the lightest puts over the window. A guess never refuses a
request, never squeezes its reply below its room and never shrinks a window, and nothing an earlier
request left behind changes whether a request is refused. After the upstream has answered,
`read_report` feeds the reported prompt size back into the calibration and notices a silent cut
(`proxy.planning.prompt_reports`).

`Planner`'s methods read in the order a request meets them: the window, the plan, the retry after an
overflow (`harder`), and what the answer reports (`read_report`).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from proxy.bodies.offload import Offloader
from proxy.counting.cache import LruCache, ModelTable
from proxy.counting.calibration import Calibrator, Truncation
from proxy.counting.modes import HEAVIEST_OF, OWN_MODES, Counting, estimated
from proxy.counting.tokens import RequestCounter, text_of
from proxy.engine.index import Policy
from proxy.engine.plan import Body, ChatPlan, requested_reply
from proxy.metrics import Metrics
from proxy.planning.counters import LockedMemo, Vocabularies
from proxy.planning.drafts import Draft, Drafter, spec_of, with_reply_limit
from proxy.planning.prompt_reports import PromptReports, exact_key
from proxy.planning.server_count import ServerCount
from proxy.settings import ModelWindow, Settings
from proxy.upstream.overflow import Overflow
from proxy.upstream.probes import UpstreamTokenCounter, WindowDetector

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
# A vocabulary reads 20-30 MB/s the first time it sees a text (the four of them a quarter of that),
# 5x slower than the estimate: such plans go to a worker thread from a few milliseconds of counting on.
EXACT_OFFLOAD_CHARS = 25_000
# A vocabulary's count of the text still leaves out the chat template around it (a token or two more
# a message than `MESSAGE_OVERHEAD` in Qwen's, a preamble for the tools): judged with this margin.
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
        self.calibrator = calibrator or Calibrator(settings.calibrate)
        self.reports = PromptReports(self.calibrator, metrics, self._own_count)
        # The windows the upstream was seen cutting at (`reports` writes them): every plan reads them.
        self.seen_windows = self.reports.seen_windows
        # Written notes, reused as the chat resends old results; shared with plans in worker threads.
        self.notes = LockedMemo(LruCache(NOTE_MEMO_SIZE, settings.memo_bytes))
        self.vocabularies = Vocabularies(settings)
        self.upstream_rejects_overflow = rejects_overflow(settings)
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
        self.server = ServerCount(exact, self._planned, self.drafter.clamps, refresh=settings.window_refresh)

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

    async def _window_for(
        self, model: str, headers: Sequence[tuple[bytes, bytes]], window_tokens: int | None
    ) -> ModelWindow:
        # A window the request sets needs no asking.
        window = self.configured(model) if window_tokens else await self.window(model, headers)
        if window_tokens:  # Ollama: it stops a reply at the window's end
            window = replace(window, window=window_tokens, requested=window_tokens, stops_at_end=True)
        elif self.settings.upstream_kind == "ollama":
            window = replace(window, stops_at_end=True)
        if (seen := self.seen_windows.get((model, window.requested))) and seen < window.window:
            window = replace(window, window=seen)
        return window

    async def plan(
        self, body: Body, headers: Sequence[tuple[bytes, bytes]] = (), *, window_tokens: int | None = None
    ) -> ChatPlan:
        """The plan of one request. `body` is a neutral request as a wire format's `read` made it (its
        `messages` validated there). `window_tokens` is a window the request itself sets (Ollama's
        `options.num_ctx`), which is what the server will use."""
        messages = body["messages"]
        many = len(messages) >= OFFLOAD_ITEMS
        model = str(body.get("model") or "")
        window = await self._window_for(model, headers, window_tokens)
        chars = await self.in_thread(_chars, messages) if many else _chars(messages)
        chars4 = window.tokenizer == Counting.CHARS4
        draft = Draft(
            body,
            window,
            Counting.CHARS4 if chars4 else Counting.ESTIMATE,
            offload=many or chars >= OFFLOAD_CHARS,
        )
        factor = self.calibrator.factor(model)
        if not chars4:
            share = self.settings.exact_count_from
            quick = await self._run(self.drafter.far_under, draft, factor, share)
            if quick is not None:
                return quick
        if window.tokenizer in (Counting.ESTIMATE, Counting.CHARS4):
            plan = await self._planned(draft, factor, 0.0 if chars4 else None)
            if not plan.result.over_window:
                return plan
        return await self._counted(
            replace(draft, offload=many or chars >= EXACT_OFFLOAD_CHARS), factor, headers
        )

    async def _counted(self, draft: Draft, factor: float, headers: Sequence[tuple[bytes, bytes]]) -> ChatPlan:
        """`draft` counted as the server counts: its `/tokenize`, else the model's vocabulary, else the
        four (`factor`: the estimate's calibration, for where none of them is here)."""
        model, mode = str(draft.body.get("model") or ""), draft.window.tokenizer
        if mode in OWN_MODES:
            spec = self.vocabularies.for_model(model)
            if spec is None and self.vocabularies.has(Counting.HEAVIEST):
                spec = Counting.HEAVIEST
        else:
            spec = mode if self.vocabularies.has(mode) else None
        if mode in OWN_MODES:
            counted = await self.server.count(draft.body, headers)
            if counted:
                return await self.server.plan(replace(draft, spec=spec or draft.spec), counted, headers)
        if spec is None:  # no vocabulary here: the estimate, with its margin
            plan = await self._planned(draft, factor, None)
            return await self._for_the_upstream(draft, plan) if self._may_send(plan) else plan
        exact = replace(draft, spec=spec)
        plan = await self._planned(
            exact, max(1.0, self.calibrator.factor(exact_key(model, spec))), TEMPLATE_MARGIN
        )
        if spec != Counting.HEAVIEST:
            return plan
        plan = replace(plan, guessed=True)
        if plan.result.over_window:
            return await self._by_lightest(exact, plan)
        return await self._reply_by_lightest(exact, plan)

    def _may_send(self, plan: ChatPlan) -> bool:
        return plan.result.over_window and self.upstream_rejects_overflow

    async def _by_lightest(self, draft: Draft, heaviest: ChatPlan) -> ChatPlan:
        """What the heaviest vocabulary puts over the window, planned with each of the four: the
        heaviest plan that fits is forwarded (a request that fits by any of them may be the model's),
        compacted and its reply limited by that count; refused only when none fits, unless the
        upstream refuses an overflow itself (then sent for its verdict)."""
        fitting = []
        for spec in HEAVIEST_OF:
            plan = await self._planned(replace(draft, spec=spec), 1.0, 0.0)
            if not plan.result.over_window:
                fitting.append(plan)
        if fitting:
            return replace(max(fitting, key=lambda p: p.result.tokens_before), guessed=True)
        return await self._for_the_upstream(draft, heaviest) if self._may_send(heaviest) else heaviest

    async def _reply_by_lightest(self, draft: Draft, plan: ChatPlan) -> ChatPlan:
        """A reply limit the heaviest vocabulary lowers below the reply's room (the request's limit, at
        most `COMPACT_REPLY_RESERVE`) is lowered only as far as the lightest count of what is sent
        needs: the model may use any of the four."""
        room = min(requested_reply(draft.body) or 0, draft.window.reply_reserve)
        if plan.max_tokens is None or plan.max_tokens >= room:
            return plan
        lightest = min(self._total(spec, draft.body, plan.result.messages) for spec in HEAVIEST_OF)
        prompt = plan.window.window - plan.max_tokens  # what the heaviest count leaves it
        return with_reply_limit(plan, draft.body, prompt, floor=min(room, plan.window.window - lightest))

    def _own_count(self, plan: ChatPlan) -> int | None:
        """What the vocabulary `plan.model`'s name says counts of the messages `plan` sent, if any."""
        spec = self.vocabularies.for_model(plan.model)
        return None if spec is None else sum(map(self.counter(spec).message, plan.result.messages))

    def _total(self, spec: str, body: Body, messages: list[dict[str, Any]]) -> int:
        counter = self.counter(spec)
        return counter.fixed(body) + sum(map(counter.message, messages))

    async def _for_the_upstream(self, draft: Draft, plan: ChatPlan) -> ChatPlan:
        """For an upstream that refuses an overflow with an error: the plan by the plain (calibrated)
        estimate, without its margin, sent for the server's verdict even where that is over the
        window too (then as it came). The server's error, where it sends one, is retried compacted
        for the count it gives, or reaches the client as it came: a round trip spent, never a cut."""
        plain = await self._planned(
            replace(draft, spec=Counting.ESTIMATE), self.calibrator.factor(plan.model)
        )
        if not plain.result.over_window:
            return plain
        return replace(plain, result=replace(plain.result, over_window=False, oversized=None))

    async def _planned(self, draft: Draft, factor: float, margin: float | None = 0.0) -> ChatPlan:
        """The drafter's plan, in a worker thread for a large request: compacting a big history is CPU
        work that would otherwise keep every other client of this process waiting."""
        return await self._run(self.drafter.plan, draft, factor, margin)

    async def _run(self, work: Callable[..., T], draft: Draft, *args: Any) -> T:
        if not draft.offload:
            return work(draft, *args)
        return await self.in_thread(work, draft, *args)

    async def in_thread(self, work: Callable[..., T], *args: Any) -> T:
        """`work(*args)` in a worker thread (a large request's parsing, reading or plan), the loop
        kept responsive (`proxy.bodies.offload`)."""
        return await self.offloader.run(work, *args)

    def counter_for(self, plan: ChatPlan, factor: float | None = None) -> RequestCounter:
        """The counter `plan` was counted with (the upstream's count scales a local one)."""
        return self.counter(spec_of(plan), plan.factor if factor is None else factor)

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
