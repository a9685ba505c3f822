"""A Gemini API request as a Chat Completions request (pure).

The neutral conversation the Gemini format reads is a chat already (system, user turns with text
and image parts, assistant turns with `reasoning_content` and `tool_calls` whose ids link the tool
results): the compacted messages go as they are, with the function declarations as tools and
`generationConfig` as the chat's sampling fields (`maxOutputTokens` → `max_tokens`,
`stopSequences` → `stop`, a JSON `responseMimeType` → `response_format`), the path's model as the
chat's `model`, and a streamed method as `stream` with the usage asked for. What a chat server has
no equivalent of (`thinkingConfig`, safety settings, cached content) is left out.

A `functionCall` no `functionResponse` answers (Gemini CLI's loop check ends its history with one:
the call its turn is about to run) is a call Google's API takes as it is, the model seeing it made
and nothing back; a chat server refuses an assistant's `tool_calls` no `tool` message answers
(OpenAI: 400 "An assistant message with 'tool_calls' must be followed by tool messages ..."), so the
bridge answers it with one that says no result came back.
"""

from __future__ import annotations

from typing import Any

from proxy.counting.tokens import text_of
from proxy.engine.plan import Body, ChatPlan
from proxy.formats import Conversation

SAMPLING = {
    "temperature": "temperature",
    "topP": "top_p",
    "topK": "top_k",
    "seed": "seed",
    "presencePenalty": "presence_penalty",
    "frequencyPenalty": "frequency_penalty",
    "stopSequences": "stop",
}
TOOL_CHOICE = {"AUTO": "auto", "ANY": "required", "NONE": "none", "VALIDATED": "auto"}
NO_RESULT = "(no result: this call was not answered)"


def chat_request(body: Body, conversation: Conversation, plan: ChatPlan, *, stream: bool) -> Body:
    """The chat request for `plan` over the Gemini request `body`."""
    return chat_body(body, conversation.request, plan.result.messages, plan.max_tokens, stream=stream)


def chat_body(
    body: Body, neutral: Body, messages: list[dict[str, Any]], max_tokens: int | None, *, stream: bool
) -> Body:
    """The chat request for the Gemini request `body` read as `neutral`, with these messages."""
    chat: Body = {"model": neutral["model"], "messages": answered([_message(m) for m in messages])}
    tools = [
        _tool(t) for t in neutral.get("tools") or () if isinstance(t, dict) and t.get("type") == "function"
    ]
    if tools:
        chat["tools"] = tools
        if (choice := _tool_choice(body.get("toolConfig"))) is not None:
            chat["tool_choice"] = choice
    config = body.get("generationConfig")
    config = config if isinstance(config, dict) else {}
    for ours, theirs in SAMPLING.items():
        if config.get(ours) is not None:
            chat[theirs] = config[ours]
    if (limit := max_tokens or neutral.get("max_tokens")) is not None:
        chat["max_tokens"] = limit
    if (response_format := _response_format(config)) is not None:
        chat["response_format"] = response_format
    if stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def answered(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with a `tool` message saying no result came for each call of an assistant message
    that the `tool` messages right after it leave unanswered (one pass)."""
    out: list[dict[str, Any]] = []
    pending: dict[str, None] = {}  # the last assistant message's calls not answered yet, in order
    for message in messages:
        if message.get("role") == "tool":
            pending.pop(str(message.get("tool_call_id")), None)
        else:
            out += [{"role": "tool", "tool_call_id": i, "content": NO_RESULT} for i in pending]
            calls = message.get("tool_calls") if message.get("role") == "assistant" else None
            pending = {
                c["id"]: None for c in calls or () if isinstance(c, dict) and isinstance(c.get("id"), str)
            }
        out.append(message)
    out += [{"role": "tool", "tool_call_id": i, "content": NO_RESULT} for i in pending]
    return out


def _message(message: dict[str, Any]) -> dict[str, Any]:
    """A neutral message as a chat server takes it: text-only parts as one string, a result's
    content as text, no `name` on a result (OpenAI's API refuses it there)."""
    out = {k: v for k, v in message.items() if not (message["role"] == "tool" and k == "name")}
    content = message.get("content")
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        out["content"] = "\n".join(str(p.get("text", "")) for p in content)
    elif message["role"] == "tool" and not isinstance(content, str):
        out["content"] = text_of(content)
    elif content is None and not message.get("tool_calls"):
        out["content"] = ""
    return out


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = dict(tool["function"])
    if "parameters" in function:
        function["parameters"] = _json_schema(function["parameters"])
    return {"type": "function", "function": function}


def _json_schema(schema: Any) -> Any:
    """Gemini's OpenAPI-style schema (`"type": "OBJECT"`) as JSON Schema (lower-case types)."""
    if isinstance(schema, dict):
        return {
            k: (v.lower() if k == "type" and isinstance(v, str) else _json_schema(v))
            for k, v in schema.items()
        }
    if isinstance(schema, list):
        return [_json_schema(v) for v in schema]
    return schema


def _tool_choice(config: Any) -> str | None:
    calling = config.get("functionCallingConfig") if isinstance(config, dict) else None
    mode = calling.get("mode") if isinstance(calling, dict) else None
    return TOOL_CHOICE.get(mode) if isinstance(mode, str) else None


def _response_format(config: dict[str, Any]) -> Body | None:
    if config.get("responseMimeType") != "application/json":
        return None
    schema = config.get("responseJsonSchema", config.get("responseSchema"))
    if schema is None:
        return {"type": "json_object"}
    return {"type": "json_schema", "json_schema": {"name": "response", "schema": _json_schema(schema)}}
