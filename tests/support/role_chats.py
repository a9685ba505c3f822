"""Support chats whose dropped stretch decides a marker's role: a long tool loop after one request,
a loop answered in words before the next request's loop, a chat without tools."""

from __future__ import annotations

from typing import Any

from tests.support.conversations import SYSTEM, order_result, tool_call

Message = dict[str, Any]


def result(k: int, items: int = 25) -> str:
    return order_result(k, items, seed=k)


def agent_turn(chat: list[Message], request: str, steps: int, first: int = 0) -> None:
    chat.append({"role": "user", "content": request})
    for k in range(first, first + steps):
        call = tool_call(f"call{k:05d}", "get_order", order=k)
        chat.append({"role": "assistant", "content": None, "tool_calls": [call]})
        chat.append({"role": "tool", "tool_call_id": call["id"], "content": result(k)})


def loop_chat() -> list[Message]:
    """One request, then a long tool loop: the stretch dropped stands between the request and an
    assistant tool-calls message, so no role fits the marker: it joins that message."""
    chat: list[Message] = [{"role": "system", "content": SYSTEM}]
    agent_turn(chat, "Check every order of last week for a bent wheel.", 30)
    return chat


def answered_loop_chat() -> list[Message]:
    """A loop answered in words, then the next request's loop: the stretch dropped ends at the
    answer, so an assistant marker would stand right before an assistant message."""
    chat: list[Message] = [{"role": "system", "content": SYSTEM}]
    agent_turn(chat, "Check every order of last week for a bent wheel.", 24)
    chat.append({"role": "assistant", "content": "Orders 3 and 17 had a bent wheel: returns opened."})
    agent_turn(chat, "Now check the week before.", 4, first=24)
    return chat


def plain_chat() -> list[Message]:
    """A chat without tools: the first answers go, the marker answers the first request."""
    chat: list[Message] = [{"role": "system", "content": SYSTEM}]
    for k in range(12):
        chat.append({"role": "user", "content": f"Question {k}: what about order {k}?"})
        chat.append({"role": "assistant", "content": f"Answer {k}: " + "it is on its way. " * 120})
    chat.append({"role": "user", "content": "Thanks, that is all."})
    return chat
