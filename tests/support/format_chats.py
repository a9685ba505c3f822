"""The bike-shop support chat (``tests.support.upstreams.chats.support_chat``) in each wire format, and the
invariants every format's compaction must keep, checked on what the upstream received.

``as_responses`` and ``as_anthropic`` turn a Chat Completions history into that format the way its
clients write one (reasoning items before calls, thinking blocks, tool results in the next user
message, ``cache_control`` markers).  ``check_compacted`` takes the original list and the received
one and asserts: order kept; each received item an original one, a noted tool result or a
dropped-run marker; the first request and the protected tail (the last ``keep`` user requests
onward) intact; every call with its result and every result with its call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from proxy import formats
from proxy.engine.caps import CAP_WORDS
from proxy.engine.notes import DROPPED_PREFIX, NOTE_PREFIX
from proxy.engine.summary import SUMMARY_PREFIX
from proxy.formats import WireFormat
from proxy.settings import ModelWindow

Item = dict[str, Any]
MARKS = (DROPPED_PREFIX, SUMMARY_PREFIX)


def _marks(text: Any) -> bool:
    return isinstance(text, str) and text.startswith(MARKS)


def is_marker_item(item: Item) -> bool:
    """A dropped-run marker (or its summary) standing as its own item, in any role and shape: a
    string content, or parts/blocks that are all marker text."""
    content = item.get("content")
    if isinstance(content, list):
        return bool(content) and all(isinstance(p, dict) and _marks(p.get("text")) for p in content)
    return _marks(content)


def unmerged(item: Item) -> Item:
    """`item` without the marker texts merged into it (text blocks or parts, or paragraphs of a
    string content); as it is when none was."""
    content = item.get("content")
    if isinstance(content, list):
        kept = [p for p in content if not (isinstance(p, dict) and _marks(p.get("text")))]
        return item if len(kept) == len(content) else {**item, "content": kept}
    if not isinstance(content, str) or not any(_marks(p) for p in content.split("\n\n")):
        return item
    # A marker's paragraphs run from its prefix to the next blank line (a summary has several lines).
    rest = [p for p in content.split("\n\n") if not _marks(p)]
    return {**item, "content": "\n\n".join(rest) or None}


def as_responses(messages: list[Item], *, reasoning: bool = True) -> tuple[str, list[Item]]:
    """(instructions, input items) for a chat whose first message is the system prompt."""
    instructions = messages[0]["content"]
    items: list[Item] = [{"role": "developer", "content": "Answer in English."}]
    for n, m in enumerate(messages[1:]):
        if m["role"] == "user":
            if n % 2:
                items.append({"role": "user", "content": m["content"]})
            else:
                part = {"type": "input_text", "text": m["content"]}
                items.append({"type": "message", "role": "user", "content": [part]})
        elif m["role"] == "tool":
            items.append(
                {"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]}
            )
        elif m.get("tool_calls"):
            if reasoning:
                summary = [{"type": "summary_text", "text": "Look it up first."}]
                items.append({"type": "reasoning", "id": f"rs_{n}", "summary": summary})
            calls = [(c["id"], c["function"]) for c in m["tool_calls"]]
            items += [
                {"type": "function_call", "call_id": i, "name": f["name"], "arguments": f["arguments"]}
                for i, f in calls
            ]
        else:
            text = {"type": "output_text", "text": m["content"], "annotations": []}
            items.append({"type": "message", "role": "assistant", "content": [text]})
    return instructions, items


def as_anthropic(messages: list[Item], *, thinking: bool = True) -> tuple[list[Item], list[Item]]:
    """(system blocks, messages) for a chat whose first message is the system prompt; a few
    ``cache_control`` markers as Claude Code sets them."""
    cache = {"type": "ephemeral"}
    system = [{"type": "text", "text": messages[0]["content"], "cache_control": cache}]
    out: list[Item] = []
    for n, m in enumerate(messages[1:]):
        if m["role"] == "user":
            out.append({"role": "user", "content": m["content"]})
        elif m["role"] == "tool":
            result = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}
            if out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(result)
            else:
                out.append({"role": "user", "content": [result]})
        elif m.get("tool_calls"):
            blocks: list[Item] = []
            if thinking:
                blocks.append({"type": "thinking", "thinking": "Look it up first.", "signature": f"sig{n}"})
            for call in m["tool_calls"]:
                function = call["function"]
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call["id"],
                        "name": function["name"],
                        "input": json.loads(function["arguments"]),
                    }
                )
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": "assistant", "content": [{"type": "text", "text": m["content"]}]})
    # A marker on the oldest tool result and on the last request, as an agent's cache breakpoints.
    results = [m for m in out if m["role"] == "user" and isinstance(m["content"], list)]
    if results:
        results[0]["content"][0]["cache_control"] = cache
    last = out[-1]
    out[-1] = {"role": "user", "content": [{"type": "text", "text": last["content"], "cache_control": cache}]}
    return system, out


@dataclass(frozen=True)
class Shape:
    """How one format writes user requests, calls, results and markers."""

    name: str

    def is_request(self, item: Item) -> bool:
        if item.get("role") != "user" or self.is_marker(item):
            return False
        content = item.get("content")
        return not (isinstance(content, list) and any(b.get("type") == "tool_result" for b in content))

    def is_marker(self, item: Item) -> bool:
        return is_marker_item(item)

    def calls(self, items: list[Item]) -> set[str]:
        if self.name == "responses":
            return {i["call_id"] for i in items if i.get("type") == "function_call"}
        return {
            b["id"]
            for i in items
            if i.get("role") == "assistant" and isinstance(i.get("content"), list)
            for b in i["content"]
            if b.get("type") == "tool_use"
        }

    def results(self, items: list[Item]) -> dict[str, Any]:
        if self.name == "responses":
            return {i["call_id"]: i["output"] for i in items if i.get("type") == "function_call_output"}
        return {
            b["tool_use_id"]: b.get("content")
            for i in items
            if isinstance(i.get("content"), list)
            for b in i["content"]
            if b.get("type") == "tool_result"
        }


RESPONSES = Shape("responses")
ANTHROPIC = Shape("anthropic")


def _blank_results(shape: Shape, item: Item) -> Item:
    if shape.name == "responses":
        return {**item, "output": None} if item.get("type") == "function_call_output" else item
    content = item.get("content")
    if not isinstance(content, list):
        return item
    return {
        **item,
        "content": [{**b, "content": None} if b.get("type") == "tool_result" else b for b in content],
    }


def check_compacted(shape: Shape, original: list[Item], received: list[Item], *, keep: int = 2) -> None:
    """The invariants every format keeps (see the module docstring)."""
    assert received != original, "the history was compacted"
    # Pairing: every call answered, every result called.
    assert shape.calls(received) == set(shape.results(received)), "a call or a result was orphaned"
    assert all(item.get("content") != [] for item in received), "an emptied message was left behind"
    # Protected tail and first request.
    requests = [i for i, item in enumerate(original) if shape.is_request(item)]
    tail = original[requests[-keep] :]
    # The loop rules may note, cap or drop tool exchanges inside the protected part; its requests stay.
    kept = [item for item in tail if shape.is_request(item)]
    assert [item for item in received if shape.is_request(item)][-len(kept) :] == kept, (
        "a protected request changed"
    )
    assert received[-1] == original[-1] or not shape.is_request(original[-1])
    first = original[requests[0]]
    assert first in received, "the first request was dropped"
    # Every received item is an original one (a result maybe noted, a block maybe gone) or a marker.
    at = 0
    for item in received:
        if shape.is_marker(item):
            continue
        while at < len(original) and not _is_part_of(shape, item, original[at]):
            at += 1
        assert at < len(original), f"received an item that is not in the original, in order: {item}"
        at += 1
    for call_id, output in shape.results(received).items():
        if not (isinstance(output, str) and (output.startswith(NOTE_PREFIX) or CAP_WORDS in output)):
            assert output == shape.results(original)[call_id], (
                "a result changed without being noted or capped"
            )


def _is_part_of(shape: Shape, item: Item, original: Item) -> bool:
    """Whether `item` is `original`, tool results aside, or (Anthropic) it with some blocks gone;
    a marker merged into it aside."""
    if item.get("role") == "assistant" and unmerged(item) is not item:
        item = unmerged(item)
        if item.get("content") is None and original.get("content") == "":
            item = {**item, "content": ""}
    if _blank_results(shape, item) == _blank_results(shape, original):
        return True
    content, whole = item.get("content"), original.get("content")
    if shape.name != "anthropic" or not (isinstance(content, list) and isinstance(whole, list)):
        return False
    if {k: v for k, v in item.items() if k != "content"} != {
        k: v for k, v in original.items() if k != "content"
    }:
        return False
    blank = _blank_results(shape, {"content": whole})["content"]
    return all(block in blank for block in _blank_results(shape, {"content": content})["content"])


def in_format(wire: WireFormat, chat: list[dict[str, Any]]) -> dict[str, Any]:
    """`chat` as a request body in `wire`'s format, with a small reply limit."""
    if wire is formats.RESPONSES:
        instructions, items = as_responses(chat)
        return {"model": "m", "instructions": instructions, "input": items[1:], "max_output_tokens": 100}
    if wire is formats.ANTHROPIC:
        # `as_anthropic` expects a last user request: give it one, then take it away again.
        ends_in_results = chat[-1]["role"] == "tool"
        system, messages = as_anthropic(
            [*chat, {"role": "user", "content": "."}] if ends_in_results else chat
        )
        messages = messages[:-1] if ends_in_results else messages
        return {"model": "m", "system": system, "messages": messages, "max_tokens": 100}
    return {"model": "m", "messages": chat, "max_tokens": 100}


def posted_to(path: str, chat: list[Item], *, max_tokens: int) -> dict[str, Any]:
    """`chat` as the body a client posts to `path`, `/v1/responses` or `/v1/messages` (the one that
    requires `max_tokens`), for the model "m"."""
    if path == "/v1/responses":
        instructions, items = as_responses(chat)
        return {"model": "m", "instructions": instructions, "input": items}
    system, messages = as_anthropic(chat)
    return {"model": "m", "max_tokens": max_tokens, "system": system, "messages": messages}


def window_of(tokens: int, keep: int = 2) -> ModelWindow:
    return ModelWindow(window=tokens, threshold=0.8, target=0.6, keep_recent_turns=keep, reply_reserve=100)
