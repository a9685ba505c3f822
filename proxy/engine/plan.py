"""What one chat request asks of compaction: the fields it reads, and its plan (`plan_chat`): the
budget, the compaction, the clamped reply limit, and the headers, report and log line that say
what was done.

Pure: dicts in, a frozen `ChatPlan` out. Only the fields compaction needs are validated, so
unknown fields and vendor extensions pass through untouched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from proxy.counting.tokens import RequestCounter
from proxy.engine.compaction import Budget, CompactionResult, NoteMemo, Policy, compact
from proxy.engine.limits import budget_for, reply_limit_field, requested_reply, thinking_budget
from proxy.errors import ProxyError
from proxy.settings import ModelWindow

Body = dict[str, Any]


def validated_messages(body: Body) -> list[dict[str, Any]]:
    """`messages` as compaction needs it: a list of objects, each with a string `role`."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise ProxyError(
            400, "'messages' is required and must be an array of message objects.", param="messages"
        )
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ProxyError(400, f"messages[{i}] must be an object.", param=f"messages[{i}]")
        if not isinstance(message.get("role"), str):
            raise ProxyError(400, f"messages[{i}].role must be a string.", param=f"messages[{i}].role")
        tool_calls = message.get("tool_calls")  # read only on assistant messages; forwarded elsewhere
        if message["role"] == "assistant" and tool_calls is not None and not isinstance(tool_calls, list):
            raise ProxyError(
                400, f"messages[{i}].tool_calls must be an array.", param=f"messages[{i}].tool_calls"
            )
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ProxyError(400, "'model' must be a string.", param="model")
    return messages


@dataclass(frozen=True, slots=True)
class ChatPlan:
    model: str
    window: ModelWindow
    budget: Budget
    result: CompactionResult
    factor: float = 1.0
    counted_by: str = "estimate"
    max_tokens: int | None = None  # the reply limit after clamping, when it was lowered
    reply: int | None = None  # the reply limit the request asked for
    reply_field: str = "max_tokens"
    summarized: int = 0  # dropped runs replaced by a summary (level 3)
    # The thinking budget lowered with the reply limit (Anthropic's `budget_tokens` must stay under
    # `max_tokens`); 0: thinking turned off, no valid budget fitting the reply limit.
    thinking_budget: int | None = None
    margin: float = 0.0  # what the counter may undercount, as a share: judged against window / (1 + margin)

    def headers(self) -> dict[str, str]:
        """`x-compaction-*` response headers, on compacted requests only."""
        result = self.result
        if not result.changed and not result.overflow and self.max_tokens is None:
            return {}
        headers = {
            "x-compaction-tokens-before": str(result.tokens_before),
            "x-compaction-tokens-after": str(result.tokens_after),
            "x-compaction-truncated": str(len(result.truncated)),
            "x-compaction-dropped": str(len(result.dropped)),
        }
        if result.overflow:
            headers["x-compaction-overflow"] = "true"
        if self.max_tokens is not None:
            headers["x-compaction-max-tokens"] = str(self.max_tokens) + (
                ""
                if self.thinking_budget is None
                else f"; budget_tokens={self.thinking_budget}"
                if self.thinking_budget
                else "; thinking=disabled"
            )
        if self.summarized:
            headers["x-compaction-summarized"] = str(self.summarized)
        if result.capped:
            headers["x-compaction-capped"] = str(len(result.capped))
        inside = self._inside_protected()
        if any(inside.values()):
            headers["x-compaction-protected"] = " ".join(f"{k}={len(v)}" for k, v in inside.items())
        return headers

    def _inside_protected(self) -> dict[str, list[int]]:
        """What the agent-loop rules changed inside the protected recent part, by action."""
        r = self.result
        return {
            "truncated": r.inside_protected(r.truncated),
            "capped": r.inside_protected(r.capped),
            "dropped": r.inside_protected(r.dropped),
        }

    def report(self) -> dict[str, Any]:
        result = self.result
        return {
            "model": self.model,
            "window": self.window.window,
            "limit": self.budget.limit,
            "target": self.budget.target,
            "tokens_before": result.tokens_before,
            "tokens_after": result.tokens_after,
            "compacted": result.changed,
            "level": 3 if self.summarized else result.level,
            "summarized": self.summarized,
            "truncated": list(result.truncated),
            "dropped": list(result.dropped),
            "protected_dropped": result.protected_dropped,
            "capped": list(result.capped),
            "protected_from": result.protected_from,
            "inside_protected": self._inside_protected(),
            "overflow": result.overflow,
            "over_window": result.over_window,
            "oversized": (
                {"index": result.oversized[0], "tokens": result.oversized[1]} if result.oversized else None
            ),
            "counted_by": self.counted_by,
            "calibration_factor": self.factor,
            "margin": round(self.margin, 4),
            "max_tokens": self.max_tokens,
            "thinking_budget": self.thinking_budget,
        }

    def summary(self) -> str:
        """The one log line of a compaction."""
        r = self.result
        return (
            f"Context optimized: model={self.model or '-'} tokens {r.tokens_before} -> {r.tokens_after} "
            f"(line {self.budget.limit}, window {self.window.window}): truncated {len(r.truncated)} tool "
            f"results, dropped {len(r.dropped)} messages"
            + (f", capped {len(r.capped)} results" if r.capped else "")
            + (f" ({self.summarized} runs summarised)" if self.summarized else "")
            + (", still over the line" if r.overflow else "")
        )


def plan_chat(
    body: Body,
    messages: list[dict[str, Any]],
    window: ModelWindow,
    counter: RequestCounter,
    policy: Policy,
    *,
    clamp: bool = False,
    memo: NoteMemo | None = None,
    margin: float = 0.0,
) -> ChatPlan:
    """Compact one validated request for `window`, counting with `counter` (which may undercount
    by `margin`)."""
    budget = budget_for(body, window, counter, clamp=clamp, margin=margin)
    policy = replace(
        policy,
        keep_recent_turns=window.keep_recent_turns,
        keep_recent_tool_results=window.keep_recent_tool_results,
    )
    result = compact(messages, budget, counter.message, policy, memo)
    max_tokens = None
    requested = requested_reply(body)
    prompt = math.ceil(result.tokens_after * (1 + margin))  # what the prompt may really be
    if clamp and requested and prompt + requested > window.window:
        max_tokens = max(1, window.window - prompt)
    thinking = None
    asked = body.get("thinking_budget")  # a neutral request's: Anthropic's `thinking.budget_tokens`
    if max_tokens is not None and isinstance(asked, int) and asked >= max_tokens:
        thinking = thinking_budget(asked, max_tokens)
    return ChatPlan(
        str(body.get("model") or ""),
        window,
        budget,
        result,
        counter.factor,
        max_tokens=max_tokens,
        reply=requested,
        reply_field=reply_limit_field(body),
        margin=margin,
        thinking_budget=thinking,
    )
