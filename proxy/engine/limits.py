"""Where a request's line is: the window, less the room its reply needs, less the margin for what
the counter may undercount (`proxy.counting.margin` measures the estimate's by what the text is).
Pure arithmetic over the body's reply limit, the model's `ModelWindow` and the counter's fixed part.
"""

from __future__ import annotations

from typing import Any

from proxy.counting.tokens import RequestCounter, token_count
from proxy.engine.compaction import Budget
from proxy.settings import ModelWindow

Body = dict[str, Any]


def requested_reply(body: Body) -> int | None:
    """The reply limit the neutral request names, if any."""
    return token_count(body.get(reply_limit_field(body)))


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
