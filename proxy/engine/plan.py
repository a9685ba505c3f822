"""What one chat request asks of compaction: the fields it reads, and its plan (`plan_chat`): the
budget, the compaction, the clamped reply limit, and the headers, report and log line that say
what was done. And where a request's line is (`budget_for`): the window, less the room its reply
needs, less the margin for what the counter may undercount (`proxy.counting.margin` measures the
estimate's by what the text is).

Pure: dicts in, a frozen `ChatPlan` out. Only the fields compaction needs are validated, so
unknown fields and vendor extensions pass through untouched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from proxy.counting.modes import Counting
from proxy.counting.tokens import RequestCounter
from proxy.engine.compaction import CompactionResult, compact
from proxy.engine.index import Budget, NoteMemo, Policy
from proxy.errors import ProxyError

if TYPE_CHECKING:  # a type only: importing the settings loads pydantic-settings, and it asyncio
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
        role = message.get("role")
        if not isinstance(role, str):
            raise ProxyError(400, f"messages[{i}].role must be a string.", param=f"messages[{i}].role")
        if role != "assistant":  # `tool_calls` is read only on assistant messages; forwarded elsewhere
            continue
        tool_calls = message.get("tool_calls")
        if tool_calls is not None and not isinstance(tool_calls, list):
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
    counted_by: str = Counting.ESTIMATE  # a counting mode, or the exact tokenizer's spec
    max_tokens: int | None = None  # the reply limit after clamping, when it was lowered
    reply: int | None = None  # the reply limit the request asked for
    reply_field: str = "max_tokens"
    summarized: int = 0  # dropped runs replaced by a summary (level 3)
    # The thinking budget lowered with the reply limit (Anthropic's `budget_tokens` must stay under
    # `max_tokens`); 0: thinking turned off, no valid budget fitting the reply limit.
    thinking_budget: int | None = None
    margin: float = 0.0  # what the counter may undercount, as a share: judged against window / (1 + margin)
    sent_tokens: int | None = None  # the upstream's own count (`/tokenize`) of what is sent, where asked
    scaled: str = Counting.ESTIMATE  # counted by the upstream: the text counter its count scales
    guessed: bool = False  # counted with a vocabulary the model may not use (an unnamed model's)

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
        if result.recent_noted:
            headers["x-compaction-recent-noted"] = str(len(result.recent_noted))
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
            "recent_noted": list(result.recent_noted),
            "protected_from": result.protected_from,
            "inside_protected": self._inside_protected(),
            "overflow": result.overflow,
            "over_window": result.over_window,
            "oversized": (
                {"index": result.oversized[0], "tokens": result.oversized[1]} if result.oversized else None
            ),
            "counted_by": self.counted_by,
            "upstream_count": self.sent_tokens,
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


# Where the line is: pure arithmetic over the body's reply limit, the model's `ModelWindow` and the
# counter's fixed part.
def requested_reply(body: Body) -> int | None:
    """The reply limit the neutral request names, if any."""
    value = body.get(reply_limit_field(body))
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def reply_limit_field(body: Body) -> str:
    """The OpenAI field that names the reply limit in `body` (the newer one when it is there)."""
    return "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"


def reply_room(body: Body, window: ModelWindow) -> int:
    """Tokens to keep free for the answer: what the request asks for, else the configured reserve."""
    return requested_reply(body) or window.reply_reserve


# Anthropic's rule for extended thinking: 1024 <= `thinking.budget_tokens` < `max_tokens`.
MIN_THINKING_BUDGET = 1024


def thinking_budget(asked: int, max_tokens: int) -> int:
    """The thinking budget that stays valid beside a reply limit lowered to `max_tokens`: the budget
    asked for if it is already below it, else three quarters of the reply for thinking and the rest
    for the answer (a tool call, the reply's words), at least Anthropic's 1,024; 0 when no valid
    budget fits (a reply limit of 1,024 or less), and thinking is turned off."""
    if asked < max_tokens:
        return asked
    if max_tokens <= MIN_THINKING_BUDGET:
        return 0
    return max(MIN_THINKING_BUDGET, min(asked, max_tokens - max(1, max_tokens // 4)))


def budget_for(
    body: Body, window: ModelWindow, counter: RequestCounter, *, clamp: bool = False, margin: float = 0.0
) -> Budget:
    """The line is window * threshold, lowered to leave the reply its room. When the reply limit
    may be clamped, or the server stops a reply at the window's end anyway (llama.cpp, Ollama), a
    large one does not push the line down: only a modest room (`reply_reserve`) is kept, and the
    history keeps its notes (Claude Code asks for 32k-64k on every request). Otherwise (clamping off,
    a server that refuses prompt + reply over the window) the room asked for is kept, down to half
    the window at most.
    `margin` is the counter's possible undercount: the window is judged as `window / (1 + margin)`,
    and the line is never above that."""
    modest = clamp or window.stops_at_end
    reply = min(reply_room(body, window), window.reply_reserve) if modest else reply_room(body, window)
    limit = min(int(window.window * window.threshold), max(window.window - reply, window.window // 2))
    usable = int(window.window / (1 + margin))
    line = min(limit, usable)
    target = int(line * window.target / window.threshold)
    return Budget(limit=line, target=target, fixed=counter.fixed(body), window=usable)
