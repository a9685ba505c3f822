"""Counting a request without the upstream: with the vocabulary the model's name says, else with
the four bundled ones (an unnamed model may use any of them), else with the estimate. No I/O and no
memory of earlier requests but the estimate's calibration (where no vocabulary counts) and what the
upstream's reports ruled out of the four (only for text they count very differently): the same request
gets the same decision. Runs where the planner puts it, in a worker thread for a large request.

With the four: compacted until it fits the heaviest; forwarded if it fits any of them (the heaviest
that fits plans it); refused only when even the lightest puts the part never cut over the window, or,
to an upstream that refuses an overflow itself, sent for its verdict. A reply limit the heaviest
lowers below the reply's room is lowered only as far as the lightest count needs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from proxy.counting.calibration import Calibrator, VocabularyEvidence
from proxy.counting.modes import HEAVIEST_OF, OWN_MODES, Counting
from proxy.engine.plan import Body, ChatPlan, requested_reply
from proxy.planning.counters import Vocabularies, heaviest_but
from proxy.planning.drafts import Draft, Drafter, with_reply_limit

# A vocabulary's count of the text still leaves out the chat template around it (a token or two more
# a message than `MESSAGE_OVERHEAD` in Llama 3's and Qwen's, a preamble for the tools): counted this
# much heavier, so that the line is where the server draws it. Never what refuses a request: what it
# alone puts over the window is planned by the vocabulary's own count.
TEMPLATE_FACTOR = 1.02


class LocalCount:
    """Plans by the vocabularies this process has, or by the estimate where it has none."""

    def __init__(
        self, drafter: Drafter, calibrator: Calibrator, vocabularies: Vocabularies, *, rejects_overflow: bool
    ) -> None:
        self.drafter = drafter
        self.calibrator = calibrator
        self.vocabularies = vocabularies
        self.rejects_overflow = rejects_overflow
        self.evidence = VocabularyEvidence()  # which of the four the upstream's reports rule out

    def spec_for(self, model: str, mode: str) -> str | None:
        """The local counter of a request: the configured vocabulary, else (the default rule) the
        one `model`'s name says, else the four; None where none is here."""
        if mode not in OWN_MODES:
            return mode if self.vocabularies.has(mode) else None
        spec = self.vocabularies.for_model(model)
        if spec is None and self.vocabularies.has(Counting.HEAVIEST):
            spec = heaviest_but(self.evidence.excluded(model))
        return spec

    def decide(self, draft: Draft, factor: float, share: float, chars: int) -> ChatPlan:
        """The whole decision where the upstream is not asked: far under by the estimate's bounds,
        else (`COMPACT_TOKENIZER=estimate`) by the estimate unless it is over the window, else
        counted (`factor`: the estimate's calibration)."""
        mode = draft.window.tokenizer
        if mode != Counting.CHARS4:
            quick = self.drafter.far_under(draft, factor, share, chars)
            if quick is not None:
                return quick
        if mode in (Counting.ESTIMATE, Counting.CHARS4):
            plan = self.drafter.plan(draft, factor, 0.0 if mode == Counting.CHARS4 else None)
            if not plan.result.over_window:
                return plan
        return self.counted(draft, factor)

    def counted(self, draft: Draft, factor: float) -> ChatPlan:
        """`draft` counted by its vocabulary (`spec_for`), or by the estimate where none is here."""
        model = str(draft.body.get("model") or "")
        spec = self.spec_for(model, draft.window.tokenizer)
        if spec is None:  # no vocabulary here: the estimate, with its margin
            plan = self.drafter.plan(replace(draft, spec=Counting.ESTIMATE), factor, None)
            return self.for_the_upstream(draft, plan) if self._may_send(plan) else plan
        exact = replace(draft, spec=spec)
        # Never scaled by a calibration: the count is exact, and what the server adds around it (its
        # template) is `TEMPLATE_FACTOR`'s; a factor learned from other requests would move this plan.
        plan = self.drafter.plan(exact, TEMPLATE_FACTOR, 0.0)
        if not spec.startswith(Counting.HEAVIEST):
            return self._own(exact, plan) if plan.result.over_window else plan
        plan = replace(plan, guessed=True)
        if plan.result.over_window:
            return self._by_lightest(exact, plan)
        return self._reply_by_lightest(exact, plan)

    def _own(self, draft: Draft, plan: ChatPlan) -> ChatPlan:
        """What only the template's allowance puts over the window, planned by the vocabulary's count."""
        own = self.drafter.plan(draft, 1.0, 0.0)
        return plan if own.result.over_window else own

    def _may_send(self, plan: ChatPlan) -> bool:
        return plan.result.over_window and self.rejects_overflow

    def _by_lightest(self, draft: Draft, heaviest: ChatPlan) -> ChatPlan:
        """What the heaviest vocabulary puts over the window, planned with each of the four: the
        heaviest plan that fits is forwarded, compacted and its reply limited by that count; where
        none fits, the refusal says the lightest count, which decided it."""
        plans = [self.drafter.plan(replace(draft, spec=spec), 1.0, 0.0) for spec in HEAVIEST_OF]
        fitting = [plan for plan in plans if not plan.result.over_window]
        if fitting:
            return replace(max(fitting, key=lambda p: p.result.tokens_before), guessed=True)
        if self._may_send(heaviest):
            return self.for_the_upstream(draft, heaviest)
        return replace(min(plans, key=lambda p: p.result.tokens_before), guessed=True)

    def _reply_by_lightest(self, draft: Draft, plan: ChatPlan) -> ChatPlan:
        """A reply limit the heaviest lowers below the reply's room (the request's limit, at most
        `COMPACT_REPLY_RESERVE`) is lowered only as far as the lightest count of what is sent needs."""
        room = min(requested_reply(draft.body) or 0, draft.window.reply_reserve)
        if plan.max_tokens is None or plan.max_tokens >= room:
            return plan
        lightest = min(self._total(spec, draft.body, plan.result.messages) for spec in HEAVIEST_OF)
        prompt = plan.window.window - plan.max_tokens  # what the heaviest count leaves it
        return with_reply_limit(plan, draft.body, prompt, floor=min(room, plan.window.window - lightest))

    def _total(self, spec: str, body: Body, messages: list[dict[str, Any]]) -> int:
        counter = self.drafter.counter(spec)
        return counter.fixed(body) + sum(map(counter.message, messages))

    def learn(self, plan: ChatPlan, reported: int) -> None:
        """What the upstream read of a guessed plan's prompt rules out of the four (`VocabularyEvidence`)."""
        if plan.guessed:
            counts = {
                spec: plan.budget.fixed + self._total(spec, {}, plan.result.messages) for spec in HEAVIEST_OF
            }
            self.evidence.observe(plan.model, counts, reported)

    def own_count(self, plan: ChatPlan) -> int | None:
        """What the vocabulary `plan.model`'s name says counts of the messages `plan` sent, if any."""
        spec = self.vocabularies.for_model(plan.model)
        return None if spec is None else sum(map(self.drafter.counter(spec).message, plan.result.messages))

    def for_the_upstream(self, draft: Draft, plan: ChatPlan) -> ChatPlan:
        """For an upstream that refuses an overflow with an error: the plan by the plain (calibrated)
        estimate, without its margin, sent for the server's verdict even where that is over the
        window too (then as it came). The server's error, where it sends one, is retried compacted
        for the count it gives, or reaches the client as it came: a round trip spent, never a cut."""
        estimate = replace(draft, spec=Counting.ESTIMATE)
        plain = self.drafter.plan(estimate, self.calibrator.factor(plan.model))
        if not plain.result.over_window:
            return plain
        return replace(plain, result=replace(plain.result, over_window=False, oversized=None))
