"""Why a request cannot fit, in figures and in words no wire format owns: the size it came to, what
it had to fit under, and the detail (what cannot be cut and the remedy that would really help, or
that the protected recent part is too big, and whether a lower reply limit would do). Each format
words the refusal itself around these (`WireFormat.overflow_error`).

Pure: a `ChatPlan` in, a frozen `Refusal` out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from proxy.counting.tokens import REPLY_PRIMER
from proxy.engine.plan import ChatPlan


@dataclass(frozen=True, slots=True)
class Refusal:
    """The figures and the detail of a "cannot fit" error."""

    tokens: int  # the prompt's size: as it came when nothing can make it fit, else after compaction
    maximum: int  # what it had to fit under: the window when it is over that, else the proxy's line
    window: int
    detail: str  # one or more sentences, each ending in a full stop
    field: str | None = None  # the client's own name for the largest part that is never cut


def refusal_for(plan: ChatPlan, field_of: Callable[[int], str]) -> Refusal:
    """Why `plan` cannot fit, naming the client's own field that does not fit (`field_of` maps a
    neutral message index to it)."""
    r = plan.result
    window = plan.window.window
    tokens = r.tokens_before if r.over_window else r.tokens_after
    maximum = window if tokens > window else plan.budget.limit
    field, part = _culprit(plan, field_of)
    if r.over_window:
        detail = (
            f"No compaction can make it fit: what the proxy never cuts (the system prompt, the tool "
            f"schemas and the user messages) alone does not fit the window of {window} tokens."
        )
        if field:
            detail += f" The largest part is {field}, about {part} tokens: {_remedy(plan, field)}"
    else:
        detail = (
            f"After compaction it is still about {r.tokens_after} tokens (the proxy's line is "
            f"{plan.budget.limit}), and the protected recent part cannot be compacted further."
        )
    if _lower_reply_helps(plan):
        detail += (
            f" The reply limit you asked for ({plan.reply_field}={plan.reply}) leaves {plan.budget.limit} "
            "tokens of the window for the prompt: lower it to leave more."
        )
    return Refusal(tokens, maximum, window, detail, field)


def _culprit(plan: ChatPlan, field_of: Callable[[int], str]) -> tuple[str | None, int]:
    """The biggest part that is never cut, by the client's own name for it: a message, or the tool
    schemas (counted in the budget's fixed part)."""
    r = plan.result
    if not r.over_window:
        return None, 0
    fixed = plan.budget.fixed - REPLY_PRIMER
    if r.oversized and r.oversized[1] >= fixed:
        return field_of(r.oversized[0]), r.oversized[1]
    return ("tools", fixed) if fixed > 0 else (None, 0)


def _remedy(plan: ChatPlan, field: str) -> str:
    if field == "tools":
        return "offer fewer tools, or shorter tool descriptions and schemas."
    r = plan.result
    role = r.messages[r.oversized[0]].get("role") if r.oversized else None
    if field in ("system", "instructions") or role in ("system", "developer"):
        return "shorten the system prompt."
    return "shorten that message, or start a new conversation."


def _lower_reply_helps(plan: ChatPlan) -> bool:
    """Lowering the reply limit helps only when it is what pushed the line down and the prompt
    would then fit under the line at its full height."""
    window = plan.window.window
    full = int(window * plan.window.threshold)
    if plan.reply is None or plan.budget.limit != max(window - plan.reply, window // 2):
        return False
    return plan.budget.limit < full and plan.result.tokens_after <= min(full, plan.budget.window or full)
