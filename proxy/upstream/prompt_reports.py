"""Reading back the prompt size the upstream reports once it has answered (`usage.prompt_tokens`,
Ollama's `prompt_eval_count`): it feeds the calibration, and shows when the upstream cut the prompt
silently; from then on that model is compacted for the window the upstream really used
(`seen_windows`, which the planner reads).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from proxy.counting.cache import ModelTable
from proxy.counting.calibration import Calibrator, truncated_window
from proxy.counting.modes import Counting, estimated
from proxy.engine.plan import ChatPlan
from proxy.metrics import Metrics

log = logging.getLogger("proxy")


@dataclass(frozen=True, slots=True)
class Truncation:
    """The upstream read less of a prompt than it was sent: it cut it, silently."""

    model: str
    sent: int  # tokens, by the proxy's (calibrated) count
    read: int  # tokens, by the upstream's report
    window: int  # the window the upstream really used, as far as can be told


def exact_key(model: str, spec: str) -> str:
    """The calibration key of `model` counted with the exact tokenizer `spec`: the server may count
    more than the bundled vocabulary does (its chat template, a fine-tune's added tokens), and that
    factor (only ever above 1) is applied to the exact counts."""
    return f"{model}\x00{spec}"


class PromptReports:
    """The upstream's reports of the prompts it read, fed back into the calibration and into the
    windows it was seen cutting at."""

    def __init__(self, calibrator: Calibrator, metrics: Metrics | None = None) -> None:
        self.calibrator = calibrator
        self.metrics = metrics
        # The window the upstream was seen cutting at, per model and per window the request set (for
        # Ollama, a request without `num_ctx` runs at its default, one with it at that size).
        self.seen_windows: ModelTable[int] = ModelTable()

    def read_report(self, plan: ChatPlan, reported: int | None) -> Truncation | None:
        """Feed the upstream's count of the prompt it received back into the calibration; the cut
        the count shows, if the upstream cut the prompt."""
        if reported is None:
            return None
        truncation = self._check_truncation(plan, reported)
        if plan.counted_by == Counting.UPSTREAM or (truncation and reported < plan.result.tokens_after):
            return truncation  # a count of what was left after a cut says nothing about the counter
        # An exact tokenizer's counts are calibrated apart from the estimate's (`exact_key`).
        key = plan.model if estimated(plan.counted_by) else exact_key(plan.model, plan.counted_by)
        before = self.calibrator.factor(key)
        self.calibrator.observe(key, round(plan.result.tokens_after / plan.factor), reported)
        after = self.calibrator.factor(key)
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
