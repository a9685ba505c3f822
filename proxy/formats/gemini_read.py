"""Reading the Gemini API's `contents` into neutral messages (`proxy.formats.gemini` is the format):
a model turn with its text, thoughts and calls (ids made where the model gave none), each function
response linked to the call it answers, parts as Chat Completions content, function declarations as
tools.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from proxy.counting.tokens import json_text
from proxy.formats.base import Message, str_field
from proxy.formats.sources import Part


class Calls:
    """The calls not answered yet, in order, indexed so that each answer is found in constant time
    (amortised): by the call's own id, by name in the latest model content that has one, or the
    oldest. Answered calls are only marked; the indexes skip them as they come to the front."""

    def __init__(self) -> None:
        self._neutral: list[str] = []
        self._answered: list[bool] = []
        self._oldest = 0  # no unanswered call before this position
        self._by_id: dict[str, deque[int]] = {}
        self._by_name: dict[str, dict[int, deque[int]]] = {}  # name -> model content -> positions

    def add(self, index: int, position: int, call: dict[str, Any]) -> str:
        own = str_field(call.get("id")) or None
        neutral = own or f"gemini-call-{index}-{position}"
        at = len(self._neutral)
        self._neutral.append(neutral)
        self._answered.append(False)
        if own:
            self._by_id.setdefault(own, deque()).append(at)
        name = str_field(call.get("name")) or ""
        self._by_name.setdefault(name, {}).setdefault(index, deque()).append(at)
        return neutral

    def answer(self, response: dict[str, Any], index: int, block: int) -> str:
        """The neutral id of the call `response` answers: the call with its `id`; else (Gemini CLI
        gives ids to the results of calls that came without one) the first unanswered call of its
        `name` in the latest model turn that has one; else the oldest unanswered call."""
        own = str_field(response.get("id"))
        name = response.get("name")
        found = self._first(self._by_id.get(own)) if own else None
        if found is None and isinstance(name, str):
            found = self._in_latest_content(name)
        if found is None:
            found = self._first_unanswered()
        if found is None:
            return (
                own or f"gemini-result-{index}-{block}"
            )  # answers no call: an orphan, kept with its neighbours
        self._answered[found] = True
        return self._neutral[found]

    def _first(self, positions: deque[int] | None) -> int | None:
        while positions and self._answered[positions[0]]:
            positions.popleft()
        return positions[0] if positions else None

    def _in_latest_content(self, name: str) -> int | None:
        by_content = self._by_name.get(name)
        while by_content:
            latest = next(reversed(by_content))
            if (found := self._first(by_content[latest])) is not None:
                return found
            del by_content[latest]
        return None

    def _first_unanswered(self) -> int | None:
        while self._oldest < len(self._answered) and self._answered[self._oldest]:
            self._oldest += 1
        return self._oldest if self._oldest < len(self._answered) else None


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
