"""Reading the Gemini API's `contents` into neutral messages (`proxy.formats.gemini` is the format):
a model turn with its text, thoughts and calls (ids made where the model gave none), each function
response linked to the call it answers, parts as Chat Completions content, function declarations as
tools.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.counting.tokens import json_text
from proxy.formats.base import Message, Part, str_field


class Calls:
    """The calls not answered yet, in order: (model content, neutral id, name, the call's own id)."""

    def __init__(self) -> None:
        self.open: list[tuple[int, str, str, str | None]] = []

    def add(self, index: int, position: int, call: dict[str, Any]) -> str:
        own = str_field(call.get("id")) or None
        neutral = own or f"gemini-call-{index}-{position}"
        self.open.append((index, neutral, str_field(call.get("name")) or "", own))
        return neutral

    def answer(self, response: dict[str, Any], index: int, block: int) -> str:
        """The neutral id of the call `response` answers: the call with its `id`; else (Gemini CLI
        gives ids to the results of calls that came without one) the first unanswered call of its
        `name` in the latest model turn that has one; else the oldest unanswered call."""
        own = str_field(response.get("id"))
        matched = [k for k, entry in enumerate(self.open) if own and entry[3] == own]
        if not matched:
            named = [k for k, entry in enumerate(self.open) if entry[2] == response.get("name")]
            if named:
                latest = self.open[named[-1]][0]
                matched = [next(k for k in named if self.open[k][0] == latest)]
        if not matched and self.open:
            matched = [0]
        if matched:
            return self.open.pop(matched[0])[1]
        return own or f"gemini-result-{index}-{block}"  # answers no call: an orphan, kept with its neighbours


def read_content(
    index: int, item: dict[str, Any], messages: list[Message], sources: list[tuple[Part, ...]], calls: Calls
) -> None:
    parts = [p if isinstance(p, dict) else {} for p in item.get("parts") or []]
    if item.get("role") == "model":
        message: Message = {"role": "assistant", "content": None}
        texts = [p for p in parts if "functionCall" not in p and p.get("thought") is not True]
        thoughts = [p["text"] for p in parts if p.get("thought") is True and isinstance(p.get("text"), str)]
        tool_calls = [
            _call(calls.add(index, j, p["functionCall"]), p["functionCall"])
            for j, p in enumerate(parts)
            if isinstance(p.get("functionCall"), dict)
        ]
        if texts:
            message["content"] = _chat_content(texts)
        if thoughts:
            message["reasoning_content"] = "\n".join(thoughts)
        if tool_calls:
            message["tool_calls"] = tool_calls
        messages.append(message)
        sources.append((Part(index),))
        return
    results = [b for b, p in enumerate(parts) if isinstance(p.get("functionResponse"), dict)]
    if not results:
        messages.append({"role": "user", "content": _chat_content(parts)})
        sources.append((Part(index),))
        return
    for b in results:
        response = parts[b]["functionResponse"]
        call_id = calls.answer(response, index, b)
        result: Message = {"role": "tool", "tool_call_id": call_id, "content": _result_text(response)}
        if isinstance(name := response.get("name"), str):
            result["name"] = name
        messages.append(result)
        sources.append((Part(index, b),))
    answered = set(results)
    rest = [b for b in range(len(parts)) if b not in answered]
    if rest:
        messages.append({"role": "user", "content": _chat_content([parts[b] for b in rest])})
        sources.append(tuple(Part(index, b) for b in rest))


def _call(call_id: str, call: dict[str, Any]) -> Message:
    args = call.get("args")
    return {
        "id": call_id,
        "type": "function",
        "function": {
            "name": str_field(call.get("name")) or "",
            "arguments": json_text(args if args is not None else {}),
        },
    }


def _result_text(response: dict[str, Any]) -> str:
    """A function's result as text: Gemini CLI's `{"output": text}` as that text, else its JSON."""
    value = response.get("response")
    if isinstance(value, dict) and set(value) == {"output"} and isinstance(value["output"], str):
        return value["output"]
    extra = {k: v for k, v in response.items() if k not in ("id", "name")}
    return json_text(extra)


def system_text(system: Any) -> Any:
    if isinstance(system, str):
        return system
    if isinstance(system, dict):
        return _chat_content([p for p in system.get("parts") or [] if isinstance(p, dict)])
    return json_text(system)


def _chat_content(parts: Sequence[dict[str, Any]]) -> Any:
    """Parts as Chat Completions content: text as text, images as image parts, the rest (files,
    code, executable results) as their JSON text."""
    out: list[Any] = []
    for part in parts:
        data = part.get("inlineData")
        if isinstance(part.get("text"), str):
            out.append({"type": "text", "text": part["text"]})
        elif isinstance(data, dict) and str(data.get("mimeType", "")).startswith("image/"):
            url = f"data:{data.get('mimeType')};base64,{data.get('data', '')}"
            out.append({"type": "image_url", "image_url": {"url": url}})
        else:
            out.append({"type": "text", "text": json_text(part)})
    return out


def chat_tools(tools: Any) -> list[Any]:
    """Function declarations as Chat Completions tools; any other tool (search, code execution) as
    it is, counted whole."""
    out: list[Any] = []
    for tool in tools if isinstance(tools, list) else ():
        declarations = tool.get("functionDeclarations") if isinstance(tool, dict) else None
        if not isinstance(declarations, list):
            out.append(tool)
            continue
        for declaration in declarations:
            if not isinstance(declaration, dict):
                continue
            function: Message = {"name": str_field(declaration.get("name")) or ""}
            if isinstance(description := declaration.get("description"), str):
                function["description"] = description
            schema = declaration.get("parametersJsonSchema", declaration.get("parameters"))
            if schema is not None:
                function["parameters"] = schema
            out.append({"type": "function", "function": function})
    return out
