"""An OpenAI chat request as Ollama's native `/api/chat` request (pure).

The translation follows what Ollama's own OpenAI layer does (`openai/openai.go`, v0.33), so the model
sees the prompt it would have seen through `/v1`, with one difference: `options.num_ctx`, the window
the proxy compacted for. Whatever that layer cannot carry faithfully (`n` > 1, `logprobs`, audio,
image URLs that are not base64 data, arguments that are not JSON, fields it does not know) makes
`to_ollama_chat` answer None, and the request goes to `/v1` as it is.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

Body = dict[str, Any]

# Fields both paths handle alike: translated, or ignored by Ollama's `/v1` as well.
TRANSLATED = frozenset(
    {
        "model",
        "messages",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "seed",
        "stop",
        "frequency_penalty",
        "presence_penalty",
        "response_format",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "reasoning",
        "reasoning_effort",
        "user",
        "n",
        "logprobs",
        # Ollama's own fields, which an OpenAI client can add through `extra_body`:
        "options",
        "keep_alive",
        "think",
    }
)
# Ollama's reasoning levels for OpenAI's `reasoning_effort` (openai.go, thinkFromReasoningEffort).
THINK_LEVELS: dict[str, bool | str] = {
    "none": False,
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "max": "max",
    "xhigh": "max",
    "ultra": "max",
}
IMAGE_PREFIXES = (
    "data:image/jpeg;base64,",
    "data:image/jpg;base64,",
    "data:image/png;base64,",
    "data:image/webp;base64,",
    "data:;base64,",
)


class Untranslatable(ValueError):
    """The request has something the native API cannot carry as `/v1` would."""


def to_ollama_chat(body: Body, *, num_ctx: int, num_predict: int | None = None) -> Body | None:
    """The native request for an OpenAI chat request, with `options.num_ctx`; None if it cannot be
    carried faithfully. `num_predict` overrides the reply limit (when the proxy clamped it)."""
    try:
        return _to_ollama_chat(body, num_ctx, num_predict)
    except Untranslatable:
        return None


def _to_ollama_chat(body: Body, num_ctx: int, num_predict: int | None) -> Body:
    if not TRANSLATED.issuperset(body) or body.get("n") not in (None, 1) or body.get("logprobs"):
        raise Untranslatable
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Untranslatable
    native: Body = {
        "model": body.get("model"),
        "messages": _messages(messages),
        "stream": body.get("stream") is True,  # Ollama streams unless told not to; OpenAI the other way
        "options": _options(body, num_ctx, num_predict),
    }
    if tools := body.get("tools"):
        native["tools"] = tools
    if (format_ := _format(body.get("response_format"))) is not None:
        native["format"] = format_
    if (think := _think(body)) is not None:
        native["think"] = think
    if "keep_alive" in body:
        native["keep_alive"] = body["keep_alive"]
    return native


def _messages(messages: list[Any]) -> list[Body]:
    """openai.go's FromChatRequest: content parts become one message each; tool results are named."""
    native: list[Body] = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(role := message.get("role"), str):
            raise Untranslatable
        role = role.lower()
        content = message.get("content")
        calls = message.get("tool_calls")
        extra: Body = {}
        if calls:
            extra["tool_calls"] = _tool_calls(calls)
        if role == "tool":
            name = message.get("name") or _tool_name(messages, message.get("tool_call_id"))
            if name:
                extra["tool_name"] = name
        if isinstance(message.get("tool_call_id"), str):
            extra["tool_call_id"] = message["tool_call_id"]
        if isinstance(message.get("reasoning"), str) and message["reasoning"]:
            extra["thinking"] = message["reasoning"]
        if isinstance(content, str):
            native.append({"role": role, "content": content, **extra})
        elif isinstance(content, list) and content:
            native.extend({"role": role, **_part(part)} for part in content)
            native[-1].update(extra)
        elif content is None and calls:
            native.append({"role": role, "content": "", **extra})
        else:
            raise Untranslatable
    return native


def _part(part: Any) -> Body:
    if not isinstance(part, dict):
        raise Untranslatable
    if part.get("type") == "text" and isinstance(part.get("text"), str):
        return {"content": part["text"]}
    if part.get("type") == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        if isinstance(url, str) and url.startswith(IMAGE_PREFIXES):
            data = url.partition(";base64,")[2]
            try:
                base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                raise Untranslatable from None
            return {"content": "", "images": [data]}
    raise Untranslatable  # audio, files, image URLs to fetch: `/v1` answers those itself


def _tool_calls(calls: Any) -> list[Body]:
    if not isinstance(calls, list):
        raise Untranslatable
    native = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
            raise Untranslatable
        try:
            arguments = orjson.loads(function["arguments"])
        except orjson.JSONDecodeError:
            raise Untranslatable from None
        if not isinstance(arguments, dict):
            raise Untranslatable
        entry: Body = {"function": {"name": function.get("name"), "arguments": arguments}}
        if isinstance(call.get("id"), str):
            entry["id"] = call["id"]
        native.append(entry)
    return native


def _tool_name(messages: list[Any], call_id: Any) -> str | None:
    """The function a tool result answers, found by its call id (the last call with that id wins)."""
    for message in reversed(messages):
        for call in message.get("tool_calls") or () if isinstance(message, dict) else ():
            if (
                isinstance(call, dict)
                and call.get("id") == call_id
                and isinstance(call.get("function"), dict)
            ):
                name = call["function"].get("name")
                return name if isinstance(name, str) else None
    return None


def _options(body: Body, num_ctx: int, num_predict: int | None) -> Body:
    # `/v1` sends temperature and top_p 1.0 when the request has none (OpenAI's defaults), not the
    # Modelfile's: so does the proxy. Ollama options given through `extra_body` come next.
    options: Body = {"temperature": 1.0, "top_p": 1.0}
    if isinstance(given := body.get("options"), dict):
        options.update(given)
    for name in ("temperature", "top_p", "seed", "frequency_penalty", "presence_penalty"):
        if body.get(name) is not None:
            options[name] = body[name]
    stop = body.get("stop")
    if isinstance(stop, str):
        options["stop"] = [stop]
    elif isinstance(stop, list):
        options["stop"] = [s for s in stop if isinstance(s, str)]
    limit = num_predict or body.get("max_completion_tokens") or body.get("max_tokens")
    if limit is not None:
        options["num_predict"] = limit
    options.setdefault("num_ctx", num_ctx)
    return options


def _format(response_format: Any) -> Any:
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "json_object":
        return "json"
    if kind == "json_schema":
        schema = response_format.get("json_schema")
        return schema.get("schema") if isinstance(schema, dict) else None
    if kind == "text":
        return None
    raise Untranslatable


def _think(body: Body) -> Any:
    if "think" in body:
        return body["think"]
    reasoning = body.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else body.get("reasoning_effort")
    if effort in (None, ""):
        return None
    if effort not in THINK_LEVELS:
        raise Untranslatable  # `/v1` answers its own error for it
    return THINK_LEVELS[effort]
