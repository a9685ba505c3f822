"""What one chat request asks of compaction: the fields it reads, its budget, the body to forward.

Pure: bytes and dicts in, bytes and dicts out. The body is kept as parsed JSON and only the fields
compaction needs are validated, so unknown fields and vendor extensions pass through untouched;
when nothing changes the original bytes are forwarded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

import orjson

from proxy.compaction import Budget, CompactionResult, NoteMemo, Policy, compact
from proxy.errors import ProxyError
from proxy.settings import ModelWindow
from proxy.tokens import RequestCounter

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


def budget_for(body: Body, window: ModelWindow, counter: RequestCounter, *, clamp: bool = False) -> Budget:
    """The line is window * threshold, lowered to leave the reply its room, but never below half the
    window: a reply limit near or past the window (16,384 is a common client default) must not throw
    the history away. What the prompt then leaves the reply is clamped (when allowed) or left to the
    upstream. When the reply limit may be clamped, a large one does not push the line down at all."""
    reply = min(reply_room(body, window), window.reply_reserve) if clamp else reply_room(body, window)
    limit = min(int(window.window * window.threshold), max(window.window - reply, window.window // 2))
    target = int(limit * window.target / window.threshold)
    return Budget(limit=limit, target=target, fixed=counter.fixed(body), window=window.window)


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
            headers["x-compaction-capped"] = ",".join(map(str, result.capped))
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
) -> ChatPlan:
    """Compact one validated request for `window`, counting with `counter`."""
    budget = budget_for(body, window, counter, clamp=clamp)
    policy = replace(
        policy,
        keep_recent_turns=window.keep_recent_turns,
        keep_recent_tool_results=window.keep_recent_tool_results,
    )
    result = compact(messages, budget, counter.message, policy, memo)
    max_tokens = None
    requested = requested_reply(body)
    clampable = _reply_field(body) in body  # the OpenAI fields only
    if clamp and clampable and requested and result.tokens_after + requested > window.window:
        max_tokens = max(1, window.window - result.tokens_after)
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


def context_length_error(plan: ChatPlan) -> ProxyError:
    r = plan.result
    reply = ""
    if plan.reply is not None and plan.budget.limit < int(plan.window.window * plan.window.threshold):
        reply = (
            f" The reply limit you asked for ({plan.reply_field}={plan.reply}) leaves {plan.budget.limit} "
            "tokens of the window for the prompt: lower it to leave more."
        )
    if r.over_window:
        culprit = ""
        if r.oversized:
            index, tokens = r.oversized
            culprit = (
                f" messages[{index}] alone is about {tokens} tokens, and a system prompt or user message is"
                " never cut."
            )
        return ProxyError(
            400,
            f"This model's maximum context length is {plan.window.window} tokens. However, your messages "
            f"resulted in about {r.tokens_before} tokens, and no compaction can make them fit: the system "
            f"prompt, the tool schemas and the user messages alone do not fit.{culprit} Please reduce the "
            f"length of the messages.{reply}",
            code="context_length_exceeded",
            param="messages",
        )
    return ProxyError(
        400,
        f"This model's maximum context length is {plan.window.window} tokens. However, your messages "
        f"resulted in about {r.tokens_after} tokens after compaction (the line is {plan.budget.limit}), "
        "and the protected recent part cannot be compacted further. Please reduce the length of the "
        f"messages.{reply}",
        code="context_length_exceeded",
        param="messages",
    )
