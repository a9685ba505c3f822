"""What one chat request asks of compaction: the fields it reads, its budget, the body to forward.

Pure: bytes and dicts in, bytes and dicts out. The body is kept as parsed JSON and only the fields
compaction needs are validated, so unknown fields and vendor extensions pass through untouched;
when nothing changes the original bytes are forwarded.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

import orjson

from proxy.counting.tokens import REPLY_PRIMER, RequestCounter, text_of
from proxy.engine.compaction import Budget, CompactionResult, NoteMemo, Policy, compact
from proxy.errors import ContextOverflowError, ProxyError
from proxy.settings import ModelWindow

Body = dict[str, Any]

_HUGE = float(2**63)
# Deeper JSON is refused with a 400 before anything walks it: the proxy's own recursive code (and
# the standard library's encoder) has room for this and more under Python's recursion limit, and no
# chat request nests anywhere near it.
MAX_JSON_DEPTH = 512
_MAX_EXPONENT = 4000  # Python turns integers of more digits than about this into text only slowly


def _scan(value: Any) -> tuple[int, bool]:
    """How deep a parsed value nests, and whether it holds a number beyond 64 bits (one walk of the
    containers, no recursion; it stops past `MAX_JSON_DEPTH`)."""
    stack = [(value, 1)]
    deepest, huge = 0, False
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if deepest > MAX_JSON_DEPTH:
                break
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
        elif type(item) is float and not -_HUGE < item < _HUGE:
            huge = True
    return deepest, huge


def _exact_float(text: str) -> float | int:
    """A JSON number with a fraction or exponent: a float, or the integer it is when it is beyond a
    double's range (1e400 is exactly ten to the 400th), so it can be written back as the same value."""
    number = float(text)
    if number not in (float("inf"), float("-inf")):
        return number
    exact = Decimal(text)
    if abs(exact.adjusted()) > _MAX_EXPONENT:
        raise ValueError(f"number {text[:40]!r} is out of range")
    return int(exact)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def parse_json_object(raw: bytes) -> Body:
    """The request body as a JSON object, or a 400 that says what is wrong with it. orjson reads it;
    what orjson refuses although it is valid JSON (a number beyond a double, an integer of hundreds
    of digits, a lone surrogate escape) the standard library reads, exactly."""
    try:
        try:
            body = orjson.loads(raw)
            depth, exact = _scan(body)  # orjson made a float of an integer beyond 64 bits: keep it exact
        except orjson.JSONDecodeError:
            exact = True
        if exact:
            body = json.loads(raw.decode("utf-8"), parse_float=_exact_float, parse_constant=_no_constants)
            depth = _scan(body)[0]
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ProxyError(400, f"The request body is not valid JSON: {exc}.", code="invalid_json") from None
    if not isinstance(body, dict):
        raise ProxyError(400, "The request body must be a JSON object.", code="invalid_json")
    if depth > MAX_JSON_DEPTH:
        raise ProxyError(
            400,
            f"The request body nests deeper than the proxy's limit of {MAX_JSON_DEPTH} levels.",
            code="invalid_json",
        )
    return body


def dump_json(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:
        # Integers beyond 64 bits. ASCII escapes keep even a lone surrogate (which the standard
        # library's parser accepts) valid on the wire.
        return json.dumps(value, separators=(",", ":")).encode()


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


def requested_reply(body: Body) -> int | None:
    """The reply limit the request names, if any (Ollama's native API names it `options.num_predict`)."""
    value = body.get(_reply_field(body))
    if value is None and isinstance(options := body.get("options"), dict):
        value = options.get("num_predict")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _reply_field(body: Body) -> str:
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
            headers["x-compaction-max-tokens"] = str(self.max_tokens)
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
            "max_tokens": self.max_tokens,
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
    clampable = _reply_field(body) in body  # the OpenAI fields only
    prompt = math.ceil(result.tokens_after * (1 + margin))  # what the prompt may really be
    if clamp and clampable and requested and prompt + requested > window.window:
        max_tokens = max(1, window.window - prompt)
    return ChatPlan(
        str(body.get("model") or ""),
        window,
        budget,
        result,
        counter.factor,
        max_tokens=max_tokens,
        reply=requested,
        reply_field=_reply_field(body) if clampable else "options.num_predict",
    )


def context_length_error(
    plan: ChatPlan,
    *,
    wire: str = "chat",
    field_of: Callable[[int], str] | None = None,
    streamed: bool = False,
) -> ContextOverflowError:
    """The "cannot fit" 400 in the route's own overflow language (the one its clients recover on:
    Anthropic's "prompt is too long: N tokens > M maximum", OpenAI's `context_length_exceeded` and
    "maximum context length is N tokens", Ollama's "input length exceeds maximum context length"),
    naming the client's own field that does not fit (`field_of` maps a neutral message index to it)
    and the remedy that would really help."""
    r = plan.result
    window = plan.window.window
    tokens = r.tokens_before if r.over_window else r.tokens_after
    maximum = window if tokens > window else plan.budget.limit
    field, part = _culprit(plan, field_of or (lambda i: f"messages[{i}]"))
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
    if wire == "messages":
        message = f"prompt is too long: {tokens} tokens > {maximum} maximum. {detail}"
    elif wire == "ollama":
        message = f"input length exceeds maximum context length ({tokens} tokens > {maximum}). {detail}"
    elif wire == "responses":  # OpenAI's Responses wording, then its chat wording
        message = (
            f"Your input exceeds the context window of this model: its maximum context length is {window} "
            f"tokens, and your input resulted in {tokens} tokens. {detail} Please reduce the length of "
            "the messages."
        )
    else:
        message = (
            f"This model's maximum context length is {window} tokens. However, your messages resulted in "
            f"{tokens} tokens. {detail} Please reduce the length of the messages."
        )
    param = field or ("input" if wire == "responses" else "messages")
    return ContextOverflowError(message, wire=wire, param=param, streamed=streamed)


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
