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
from proxy.counting.modes import OWN_MODES, Counting, estimated
from proxy.counting.tokens import RequestCounter, text_of
from proxy.engine.index import Policy
from proxy.engine.plan import Body, ChatPlan
from proxy.metrics import Metrics
from proxy.planning.counters import LockedMemo, Vocabularies
from proxy.planning.drafts import Draft, Drafter, spec_of
from proxy.planning.local_count import LocalCount
from proxy.planning.prompt_reports import PromptReports
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
# the loop, where the hop would cost more than it frees (`benchmarks/engine/bench_planning.py`).
OFFLOAD_CHARS = 500_000
# ... and so are requests of this many messages, whatever their text: 200,000 empty function calls
# are seconds of work per step (reading, sizing, planning), all of it per item.
OFFLOAD_ITEMS = 2_000
# A vocabulary reads 20-30 MB/s the first time it sees a text (the four of them a quarter of that),
# 5x slower than the estimate: such plans go to a worker thread from a few milliseconds of counting on.
EXACT_OFFLOAD_CHARS = 25_000
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
        self.reports = PromptReports(
            self.calibrator,
            metrics,
            lambda plan: self.local.own_count(plan),
            lambda plan, reported: self.local.learn(plan, reported),
        )
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
        self.local = LocalCount(
            self.drafter, self.calibrator, self.vocabularies, rejects_overflow=rejects_overflow(settings)
        )

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
        estimate = Counting.CHARS4 if window.tokenizer == Counting.CHARS4 else Counting.ESTIMATE
        draft = Draft(body, window, estimate, offload=many or chars >= OFFLOAD_CHARS)
        factor = self.calibrator.factor(model)
        share = self.settings.exact_count_from
        exact = replace(draft, offload=draft.offload or chars >= EXACT_OFFLOAD_CHARS)
        if window.tokenizer not in OWN_MODES or not self.server.may_count():
            # Nothing to ask the upstream: the whole decision in one go (one hop to a worker thread).
            return await self._run(self.local.decide, exact, factor, share, chars)
        if estimate != Counting.CHARS4:
            quick = await self._run(self.drafter.far_under, draft, factor, share, chars)
            if quick is not None:
                return quick
        if window.tokenizer in (Counting.ESTIMATE, Counting.CHARS4):
            plan = await self._planned(exact, factor, 0.0 if estimate == Counting.CHARS4 else None)
            if not plan.result.over_window:
                return plan
        counted = await self.server.count(body, headers)
        if counted:
            local = replace(exact, spec=self.local.spec_for(model, window.tokenizer) or exact.spec)
            return await self.server.plan(local, counted, headers)
        return await self._run(self.local.counted, exact, factor)

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
