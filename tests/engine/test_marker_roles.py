"""Drop markers keep roles alternating (issue 19, item 4), in every format's write-back.

Strict chat templates raise on roles that do not alternate: Gemma's and Mistral's
(``raise_exception('... conversation roles must alternate user/assistant/user/assistant/...')``;
Mistral's skips tool results and tool-calls messages when it checks). A marker standing as an
assistant message before another assistant message broke them in 51% of real compacted requests.
Each case here is checked on what the upstream would read: the Chat Completions messages as sent
(Ollama's are the same), the Responses items as llama.cpp folds them into chat messages
(``server_chat_convert_responses_to_chatcmpl`` merges consecutive assistant-side items), and the
Anthropic messages as they are (they must alternate).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from proxy.counting.tokens import RequestCounter, count_chars4, text_of
from proxy.engine.index import Policy
from proxy.engine.notes import DROPPED_PREFIX
from proxy.engine.plan import plan_chat
from proxy.engine.summary import SUMMARY_PREFIX
from proxy.formats import ANTHROPIC, CHAT, OLLAMA, RESPONSES, WireFormat
from tests.support.conversations import SYSTEM, tool_call
from tests.support.format_chats import in_format, window_of
from tests.support.role_chats import agent_turn, answered_loop_chat, loop_chat, plain_chat, result

Message = dict[str, Any]
COUNTER = RequestCounter(count_chars4)


def roles_problem(messages: list[Message], *, general: bool = True) -> str | None:
    """What a strict template rejects. Mistral's rule: after the leading system messages, user
    messages and assistant messages without tool calls alternate, starting with a user message.
    With `general`, also no assistant message right after another (tool results stand on the
    user's side), as templates that render every message as a turn require."""
    body = [m for m in messages if m["role"] not in ("system", "developer")]
    seen = [m for m in body if m["role"] != "tool" and not m.get("tool_calls")]
    for k, message in enumerate(seen):
        if (message["role"] == "user") != (k % 2 == 0):
            return f"roles must alternate (Mistral's rule), at {json.dumps(message)[:120]}"
    if general:
        for a, b in itertools.pairwise(body):
            if a["role"] == b["role"] == "assistant":
                return f"two assistant messages in a row: {json.dumps(b)[:120]}"
    return None


def as_llama_chat(items: list[Message]) -> list[Message]:
    """Responses input items as llama.cpp turns them into chat messages: consecutive assistant-side
    items (messages, calls, reasoning) fold into one assistant message."""
    out: list[Message] = []
    for item in items:
        kind, role = item.get("type", "message"), item.get("role")
        if kind == "message" and role != "assistant":
            out.append({"role": role, "content": text_of(item.get("content"))})
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
        else:
            if not out or out[-1]["role"] != "assistant":
                out.append({"role": "assistant", "content": ""})
            turn = out[-1]
            if kind == "function_call":
                turn.setdefault("tool_calls", []).append(item["call_id"])
            elif kind == "message":
                turn["content"] += text_of(item.get("content"))
    return out


def as_chat(wire: WireFormat, body: dict[str, Any]) -> list[Message]:
    """What the upstream's template sees of a body in `wire`'s format."""
    if wire is RESPONSES:
        return [{"role": "system", "content": body["instructions"]}, *as_llama_chat(body["input"])]
    if wire is ANTHROPIC:
        roles = [m["role"] for m in body["messages"]]
        assert all(a != b for a, b in itertools.pairwise(roles)), f"Anthropic roles: {roles}"
        # As llama.cpp converts them: tool_result blocks become tool messages.
        return [
            {"role": "tool", "content": ""}
            if m["role"] == "user" and _results_only(m)
            else {"role": m["role"], "content": text_of(m["content"]), "tool_calls": _uses(m) or None}
            for m in body["messages"]
        ]
    return body["messages"]


def _uses(message: Message) -> list[str]:
    content = message.get("content")
    return [b["id"] for b in content if b.get("type") == "tool_use"] if isinstance(content, list) else []


def _results_only(message: Message) -> bool:
    content = message.get("content")
    return isinstance(content, list) and all(b.get("type") == "tool_result" for b in content)


def compacted(wire: WireFormat, chat: list[Message], window: int, **policy: Any) -> dict[str, Any]:
    body = in_format(wire, chat)
    conversation = wire.read(body, {})
    assert conversation is not None
    request = conversation.request
    plan = plan_chat(request, request["messages"], window_of(window), COUNTER, Policy(**policy))
    assert plan.result.dropped, "the case must drop a stretch"
    return wire.write(body, conversation, plan)


CASES = {"loop": (loop_chat, 4000), "answered loop": (answered_loop_chat, 4000), "plain": (plain_chat, 3000)}
WIRES = {"chat": CHAT, "ollama": OLLAMA, "responses": RESPONSES, "messages": ANTHROPIC}


@pytest.mark.parametrize("wire_name", sorted(WIRES))
@pytest.mark.parametrize("case", sorted(CASES))
def test_roles_alternate_after_compaction(case: str, wire_name: str) -> None:
    make, window = CASES[case]
    chat = make()
    assert roles_problem(chat) is None, "the case alternates as it came"
    wire = WIRES[wire_name]
    sent = compacted(wire, chat, window)
    text = json.dumps(sent)
    assert text.count(DROPPED_PREFIX) == 1, "one marker for the one stretch"
    problem = roles_problem(as_chat(wire, sent))
    assert problem is None, problem


def test_a_marker_joins_the_tool_calls_message_after_the_first_request() -> None:
    sent = compacted(CHAT, loop_chat(), 4000)["messages"]
    assert [m["role"] for m in sent[:3]] == ["system", "user", "assistant"]
    joined = sent[2]
    assert joined["tool_calls"] and joined["content"].startswith(DROPPED_PREFIX)


def test_anthropic_writes_the_marker_as_a_text_block_after_thinking_before_the_calls() -> None:
    sent = compacted(ANTHROPIC, loop_chat(), 4000)["messages"]
    joined = sent[1]
    assert joined["role"] == "assistant"
    kinds = [b["type"] for b in joined["content"]]
    assert kinds == ["thinking", "text", "tool_use"], kinds
    assert joined["content"][1]["text"].startswith(DROPPED_PREFIX)
    assert "cache_control" not in joined["content"][1]


def test_responses_writes_the_marker_as_an_assistant_item_of_the_turn_it_joins() -> None:
    sent = compacted(RESPONSES, loop_chat(), 4000)["input"]
    assert sent[0]["role"] == "user"
    marker = sent[1]
    assert marker == {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": marker["content"][0]["text"]}],
    }
    assert marker["content"][0]["text"].startswith(DROPPED_PREFIX)
    assert sent[2]["type"] in ("reasoning", "function_call"), "the turn it joins follows it"


def test_between_two_answers_in_words_the_marker_is_a_user_message() -> None:
    """An agent that reports progress in words between its calls: two answers with only tool
    exchanges between them (which Mistral's check skips) do not alternate as they came; where the
    exchanges between them are dropped, a user marker stands there, and then they do."""
    chat: list[Message] = [{"role": "system", "content": SYSTEM}]
    agent_turn(chat, "Check every order of last week.", 0)
    for k in range(30):
        if k % 6 == 0:
            chat.append({"role": "assistant", "content": f"Progress {k}: nothing wrong so far."})
        call = tool_call(f"call{k:05d}", "get_order", order=k)
        chat.append({"role": "assistant", "content": None, "tool_calls": [call]})
        chat.append({"role": "tool", "tool_call_id": call["id"], "content": result(k)})
    result_ = compacted_result(chat, 4000)
    out = result_.messages
    markers = [m for m in result_.markers if m.into is None]
    assert markers, "a marker between two answers"
    for marker in markers:
        before, at, after = out[marker.position - 1], out[marker.position], out[marker.position + 1]
        assert at == {"role": "user", "content": marker.text}
        assert before["role"] == after["role"] == "assistant" and not after.get("tool_calls")
        assert before["content"].startswith("Progress") and after["content"].startswith("Progress")


def compacted_result(chat: list[Message], window: int) -> Any:
    plan = plan_chat(
        {"model": "m", "messages": chat, "max_tokens": 100}, chat, window_of(window), COUNTER, Policy()
    )
    assert plan.result.dropped
    return plan.result


async def test_a_summary_stands_where_its_marker_did_merged_too() -> None:
    """Level 3: the summary of a stretch whose marker joined the tool-calls message after the first
    request joins it too; the calls stay, and roles still alternate."""
    from tests.support.fakes import SummarisingUpstream, proxy_client

    upstream = SummarisingUpstream()
    async with proxy_client(upstream, window=4000, summarize=True, summary_tokens=200) as client:
        response = await client.post("/v1/chat/completions", json={"model": "m", "messages": loop_chat()})
    assert response.status_code == 200
    assert response.headers["x-compaction-summarized"] == "1"
    [sent] = upstream.chat_requests()
    joined = sent["messages"][2]
    assert joined["tool_calls"] and joined["content"].startswith(SUMMARY_PREFIX)
    assert "order #4471 summary" in joined["content"] and DROPPED_PREFIX not in json.dumps(sent)
    assert roles_problem(sent["messages"]) is None
