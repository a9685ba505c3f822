"""Reading back the prompt size the upstream reports once it has answered (`usage.prompt_tokens`,
Ollama's `prompt_eval_count`): it feeds the calibration (both ways from a server that never cuts a
prompt; only upward from one that may, whose lower count may be a cut's), and shows a cut by evidence
no tokenizer's difference can produce (`proxy.counting.calibration.CutEvidence`): a count under the
server's own or the model's own vocabulary's, from any server; pinned counts of a guessed count only
from a server that can cut a prompt silently (Ollama; llama.cpp, whose context shift did). From then
on that model is compacted for the window the upstream really used (`seen_windows`, which the planner
reads). An honest server that never cuts (vLLM, OpenAI's API) never shrinks a window by its counts
of an unnamed model's prompts, whatever they are.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from proxy.counting.cache import ModelTable
from proxy.counting.calibration import OWN_VOCABULARY_UNDER, Calibrator, CutEvidence, Truncation
from proxy.counting.modes import Counting, estimated
from proxy.engine.plan import ChatPlan
from proxy.metrics import Metrics

log = logging.getLogger("proxy")


def how_counted(plan: ChatPlan) -> str:
    """What `plan`'s count of what it sent is, as evidence of a cut: the server's own count, the
    model's own vocabulary, or a guess (the estimate; the four vocabularies of an unnamed model)."""
    if plan.sent_tokens is not None:
        return "server"
    if estimated(plan.counted_by) or plan.counted_by in (Counting.HEAVIEST, Counting.UPSTREAM):
        return "guess"
    return "guess" if plan.guessed else "own"


class PromptReports:
    """The upstream's reports of the prompts it read, fed back into the calibration and into the
    windows it was seen cutting at."""

    def __init__(
        self,
        calibrator: Calibrator,
        metrics: Metrics | None = None,
        own_count: Callable[[ChatPlan], int | None] | None = None,
        learn: Callable[[ChatPlan, int], None] | None = None,
    ) -> None:
        self.calibrator = calibrator
        self.metrics = metrics
        # What the model's own vocabulary (its name says which) counts of what a plan sent, if any.
        self.own_count = own_count
        self.learn = learn  # what else a report teaches (which vocabularies an unnamed model's is not)
        # The window the upstream was seen cutting at, per model and per window the request set (for
        # Ollama, a request without `num_ctx` runs at its default, one with it at that size).
        self.seen_windows: ModelTable[int] = ModelTable()
        self.evidence = CutEvidence()

    def read_report(self, plan: ChatPlan, reported: int | None) -> Truncation | None:
        """Feed the upstream's count of the prompt it received back into the calibration; the cut
        the count shows, if the upstream cut the prompt."""
        if reported is None:
            return None
        truncation = self._check_truncation(plan, reported)
        if plan.counted_by == Counting.UPSTREAM or truncation:
            return truncation  # the server's own count needs no calibration; a cut's says nothing
        if plan.window.stops_at_end and reported < plan.result.tokens_after:
            return None  # from a server that can cut silently, a lower count may be a cut's: not learned
        if self.learn:
            self.learn(plan, reported)
        if not estimated(plan.counted_by):
            return truncation  # an exact count is never scaled: only the estimate is calibrated
        before = self.calibrator.factor(plan.model)
        self.calibrator.observe(plan.model, round(plan.result.tokens_after / plan.factor), reported)
        after = self.calibrator.factor(plan.model)
        if after != before:
            log.info(
                "calibration for model %r: %.3f real tokens per estimated token", plan.model or "-", after
            )
        return truncation

    def _check_truncation(self, plan: ChatPlan, reported: int) -> Truncation | None:
        raw = round(plan.result.tokens_after / plan.factor) if plan.factor else plan.result.tokens_after
        sent = plan.sent_tokens if plan.sent_tokens is not None else raw
        key = (plan.model, plan.window.requested)
        counted = how_counted(plan)
        if counted == "guess" and reported < OWN_VOCABULARY_UNDER * sent and self.own_count:
            # Far under a guess: counted again by the model's own vocabulary, where its name says one.
            own = self.own_count(plan)
            if own is not None:
                sent, counted = own, "own"
        if counted == "guess" and not plan.window.stops_at_end:
            return None  # a server that refuses what does not fit (vLLM, OpenAI) never cut it
        window = self.evidence.cut_window(key, sent, reported, plan.window.window, counted=counted)
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
        self.seen_windows[key] = min(window, self.seen_windows.get(key) or window)
        return Truncation(plan.model, sent, reported, window)
