"""Where a request's line is: the window, less the room its reply needs, less the margin for what
the estimate may undercount (by how much of the text is wide). Pure arithmetic over the body's
reply limit, the model's `ModelWindow` and the counter's fixed part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.counting.tokens import RequestCounter, text_of
from proxy.engine.compaction import Budget
from proxy.settings import ModelWindow

Body = dict[str, Any]


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


# What the estimate may undercount a prompt by, from `benchmarks/ESTIMATOR.md` (its worst samples
# against cl100k and Qwen2.5): ASCII text (prose, code, JSON, logs) up to 16%; Chinese and Japanese
# 28% under cl100k (1.39x real tokens per estimated one). A request is judged against the window
# shrunk by this margin, so an estimate's error never sends it over the real window; once the
# upstream has reported counts for the model, the calibration carries most of it and half remains.
ASCII_MARGIN = 0.16
WIDE_MARGIN = 0.40


@dataclass(frozen=True, slots=True)
class TextSize:
    chars: int  # characters of the messages' text
    wide: int  # of them, about how many are wide (CJK: 3 bytes in UTF-8)


def text_size(messages: list[dict[str, Any]]) -> TextSize:
    """How much text the messages hold, and how much of it is wide. Linear, in C (`str.encode`)."""
    chars = wide = 0
    for message in messages:
        text = text_of(message.get("content"))
        if text:
            size = len(text.encode("utf-8", "surrogatepass"))
            chars += len(text)
            wide += (size - len(text)) // 2
    return TextSize(chars, wide)


def estimate_margin(size: TextSize, *, calibrated: bool = False) -> float:
    """The margin for the estimate's error on text of this `size`: ASCII's, rising to CJK's with the
    share of wide characters."""
    share = min(1.0, size.wide / size.chars) if size.chars else 0.0
    margin = ASCII_MARGIN + (WIDE_MARGIN - ASCII_MARGIN) * share
    return margin / 2 if calibrated else margin


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
