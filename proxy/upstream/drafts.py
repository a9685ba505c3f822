"""Drafting a chat request's plan once the planner has chosen how to count it: the counter, the
estimate's margin measured on what the text is, and plans made again until the line holds for what
is sent. No I/O: `proxy.upstream.planner` decides the count (and asks the upstream), then calls
`Drafter.plan`, in a worker thread for a large request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from proxy.counting.cache import ModelTable
from proxy.counting.margin import MIN_MARGIN, MarginMeter, calibrated_margin, text_bytes
from proxy.counting.modes import Counting
from proxy.counting.tokens import RequestCounter, WrittenJson
from proxy.engine.index import NoteMemo, Policy
from proxy.engine.plan import Body, ChatPlan, budget_for, plan_chat, requested_reply
from proxy.settings import ModelWindow, Settings
from proxy.upstream.counters import text_counter

# What is sent, this much lighter than the whole request, is planned again with its own margin.
MARGIN_STEP = 0.01
SETTLE_ROUNDS = 5  # plans made again with a larger margin, for the output's own line
MARGIN_SLACK = 0.1  # how much larger than measured the margin of a model's last plan may be and still be used


@dataclass(frozen=True, slots=True)
class Draft:
    """One request as every attempt at its plan sees it: the neutral request (its `messages`
    validated when a format read it), the window it is planned for, the counter it is counted with
    (a `Counting` mode or an exact tokenizer's spec), and whether its plans run in a worker thread."""

    body: Body
    window: ModelWindow
    spec: str = Counting.ESTIMATE
    offload: bool = False
    # Its tool calls as JSON, written once for all its plans' counts and margins (`json_text_once`).
    written: WrittenJson = field(default_factory=dict, compare=False, repr=False)

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = self.body["messages"]
        return messages


def spec_of(plan: ChatPlan) -> str:
    """The text counter behind `plan`'s counts (an upstream count scales the estimate)."""
    return Counting.ESTIMATE if plan.counted_by == Counting.UPSTREAM else plan.counted_by


def _clamped_for(plan: ChatPlan, margin: float, clamp: bool) -> ChatPlan:
    """`plan` with its reply limit lowered (when it may be) to leave room for its prompt counted
    with `margin`, as `plan_chat` lowers it."""
    reply = plan.max_tokens or plan.reply
    prompt = math.ceil(plan.result.tokens_after * (1 + margin))
    if not clamp or not reply or prompt + reply <= plan.window.window:
        return plan
    return replace(plan, max_tokens=max(1, plan.window.window - prompt))


class Drafter:
    """Makes the engine's plans of drafts, with what every plan of the process shares: the policy,
    the memo of written notes and the margin meter."""

    def __init__(self, settings: Settings, policy: Policy, notes: NoteMemo) -> None:
        self.settings = settings
        self.policy = policy
        self.notes = notes
        self.margins = MarginMeter()  # the estimate's margin, by what the text is
        self.steady_margins: ModelTable[float] = ModelTable()  # the margin each model's last plan used

    def plan(self, draft: Draft, factor: float, margin: float | None = 0.0) -> ChatPlan:
        """The engine's plan. `margin` is what the counter may undercount; None: the estimate's,
        measured on the messages, and again on what compaction leaves of them when that is heavier
        text (an English history dropped, a Chinese paste kept), so the line holds for what is sent."""
        if margin is not None:
            return self._engine_plan(draft, factor, margin)
        window, messages = draft.window, draft.messages
        # No tokenizer spends more than a token per UTF-8 byte: a request whose text cannot reach its
        # line or crowd its reply even so needs no measured margin (most requests, and a long English
        # chat far from a large window). The bound is exact up to the half line, past it only "over".
        half_line = int(window.window * window.threshold) // 2
        bound = text_bytes(messages, half_line, draft.written)
        if bound <= half_line:
            plan = self._engine_plan(draft, factor, MIN_MARGIN)
            r, room = plan.result, min(plan.budget.limit, window.window - (requested_reply(draft.body) or 0))
            if not r.changed and plan.max_tokens is None and r.tokens_before + bound <= room:
                return plan
        margin = calibrated_margin(self.margins.margin(messages, draft.written), factor)
        plan = self._engine_plan(draft, factor, margin)
        if not plan.result.changed or plan.result.overflow:
            return plan
        left = calibrated_margin(self.margins.margin(plan.result.messages, draft.written), factor)
        if left < margin - MARGIN_STEP:
            return self._lighter(plan, draft, left)
        return self._settled(plan, draft, margin, left)

    def _settled(self, plan: ChatPlan, draft: Draft, margin: float, left: float) -> ChatPlan:
        """`plan`, or one made with a larger margin, whose output fits the line its own margin gives
        it. What compaction removes is mostly ASCII tool output, so what is left may be heavier text
        (a Chinese paste kept), its margin larger and its line lower than the request's: judged on what
        is sent, compacted again (a client resends what it sent) it then goes through unchanged."""
        clamp = self.clamps(draft.window)
        for _ in range(SETTLE_ROUNDS):
            if left <= margin:
                return plan
            counter = self.counter(draft.spec, plan.factor, draft.written)
            budget = budget_for(draft.body, draft.window, counter, clamp=clamp, margin=left)
            if plan.result.tokens_after <= budget.limit:
                # It stays; a reply limit lowered beside it is lowered for the margin it goes out with.
                return _clamped_for(plan, left, clamp)
            # A little above the output's margin, so that the next output (a little heavier again,
            # as more ASCII goes) settles within it rather than creeping up round after round.
            margin = left + MARGIN_STEP
            plan = self._engine_plan(draft, plan.factor, margin)
            if not plan.result.changed or plan.result.overflow:
                return plan
            left = calibrated_margin(self.margins.margin(plan.result.messages, draft.written), plan.factor)
        return plan

    def _lighter(self, plan: ChatPlan, draft: Draft, left: float) -> ChatPlan:
        """When compaction cut the heavy text (a megabyte of digits noted), what is sent is judged with
        its own, smaller margin: planned again with it and settled on its output's margin, so the rest
        is not dropped for a margin it never had. Kept only when it still compacts within the line."""
        lighter = self._engine_plan(draft, plan.factor, left)
        if not lighter.result.changed or lighter.result.overflow:
            return plan  # the heavy text would go out whole: its margin stands
        own = calibrated_margin(self.margins.margin(lighter.result.messages, draft.written), plan.factor)
        settled = self._settled(lighter, draft, left, own)
        return plan if settled.result.overflow or not settled.result.changed else settled

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

    def _engine_plan(self, draft: Draft, factor: float, margin: float) -> ChatPlan:
        margin = self._steady(str(draft.body.get("model") or ""), margin)
        plan = plan_chat(
            draft.body,
            draft.messages,
            draft.window,
            self.counter(draft.spec, factor, draft.written),
            self.policy,
            clamp=self.clamps(draft.window),
            memo=self.notes,
            margin=margin,
        )
        return replace(plan, counted_by=draft.spec)

    def clamps(self, window: ModelWindow) -> bool:
        """Whether a reply limit that does not fit beside the prompt is lowered: by default for every
        server but those that end a reply at the window's end anyway (vLLM and OpenAI refuse
        prompt + `max_tokens` over the window)."""
        setting = self.settings.clamp_max_tokens
        return not window.stops_at_end if setting == "auto" else setting

    def counter(self, spec: str, factor: float = 1.0, written: WrittenJson | None = None) -> RequestCounter:
        return RequestCounter(
            text_counter(spec), factor=factor, image_tokens=self.settings.image_tokens, written=written
        )
