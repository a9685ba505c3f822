"""Drafting a chat request's plan once the planner has chosen how to count it: the counter, and for
the estimate its margin measured on what the text is, with plans made again until the line holds for
what is sent. No I/O and no memory of earlier requests: the same request with the same counter and
factor always gets the same plan. `proxy.planning.planner` decides the count (and asks the
upstream), then calls the drafter, in a worker thread for a large request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from proxy.counting.margin import MIN_MARGIN, MarginMeter, calibrated_margin, text_bytes
from proxy.counting.modes import Counting
from proxy.counting.tokens import RequestCounter, WrittenJson
from proxy.engine.index import NoteMemo, Policy
from proxy.engine.plan import Body, ChatPlan, budget_for, plan_chat, requested_reply, thinking_budget
from proxy.planning.counters import text_counter
from proxy.settings import ModelWindow, Settings

# What is sent, this much lighter than the whole request, is planned again with its own margin.
MARGIN_STEP = 0.01
SETTLE_ROUNDS = 5  # plans made again with a larger margin, for the output's own line
ESTIMATE_CHARS = 10  # the most characters the estimate counts as one token (but for blank space)


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
    """The text counter behind `plan`'s counts (an upstream count scales a local one)."""
    return plan.scaled if plan.counted_by == Counting.UPSTREAM else plan.counted_by


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

    def plan(self, draft: Draft, factor: float, margin: float | None = 0.0) -> ChatPlan:
        """The engine's plan. `margin` is what the counter may undercount; None: the estimate's,
        measured on the messages, and again on what compaction leaves of them when that is heavier
        text (an English history dropped, a Chinese paste kept), so the line holds for what is sent."""
        if margin is not None:
            return self._engine_plan(draft, factor, margin)
        margin = calibrated_margin(self.margins.margin(draft.messages, draft.written), factor)
        plan = self._engine_plan(draft, factor, margin)
        if not plan.result.changed or plan.result.overflow:
            return plan
        left = calibrated_margin(self.margins.margin(plan.result.messages, draft.written), factor)
        if left < margin - MARGIN_STEP:
            return self._lighter(plan, draft, left)
        return self._settled(plan, draft, margin, left)

    def far_under(self, draft: Draft, factor: float, share: float, chars: int) -> ChatPlan | None:
        """The estimate's plan where it proves the request far under its line, else None (it must be
        counted). No tokenizer spends more than a token per UTF-8 byte, so a request whose text
        cannot reach half its line even so needs nothing more (most requests, and a long English
        chat far from a large window; the bound is read only until it passes the half line). Else
        the estimate's upper count (with its margin, at least the heaviest vocabulary's on every
        fitted sample) under `share` of the line proves it too. Either way only for a request that
        is left whole, its reply limit too: a cut or a clamp is made by an exact count. `chars`, the
        messages' characters, spares a long request the estimate's pass: no text but blank space
        costs under a token for `ESTIMATE_CHARS` characters."""
        window = draft.window
        half_line = int(window.window * window.threshold) // 2
        bound = text_bytes(draft.messages, half_line, draft.written)
        if bound <= half_line:
            plan = self._engine_plan(draft, factor, MIN_MARGIN)
            r, room = plan.result, min(plan.budget.limit, window.window - (requested_reply(draft.body) or 0))
            if not r.changed and plan.max_tokens is None and r.tokens_before + bound <= room:
                return plan
        if share <= 0 or chars * factor > ESTIMATE_CHARS * share * window.window * window.threshold:
            return None
        counter = self.counter(draft.spec, factor, draft.written)
        line = share * budget_for(draft.body, window, counter, clamp=self.clamps(window)).limit
        total = counter.fixed(draft.body) + sum(map(counter.message, draft.messages))
        if total > line:
            return None
        margin = calibrated_margin(self.margins.margin(draft.messages, draft.written), factor)
        if total * (1 + margin) > line:
            return None
        plan = self._engine_plan(draft, factor, margin)
        return None if plan.result.changed or plan.max_tokens is not None else plan

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

    def _engine_plan(self, draft: Draft, factor: float, margin: float) -> ChatPlan:
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


def with_reply_limit(plan: ChatPlan, body: Body, prompt: int, floor: int | None = None) -> ChatPlan:
    """`plan` with its reply limit set for a prompt of `prompt` tokens by an exact count: lowered only
    where the reply asked for does not fit beside it, and then never below `floor` (what a lighter
    exact count still leaves), nor below 1."""
    requested = requested_reply(body)
    if plan.max_tokens is None and (not requested or prompt + requested <= plan.window.window):
        return plan
    if not requested or prompt + requested <= plan.window.window:
        return replace(plan, max_tokens=None, thinking_budget=None)
    limit = max(1, plan.window.window - prompt, min(requested, floor or 0))
    asked = body.get("thinking_budget")
    thinking = thinking_budget(asked, limit) if isinstance(asked, int) and asked >= limit else None
    return replace(plan, max_tokens=limit, thinking_budget=thinking)
