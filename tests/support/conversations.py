"""Conversations the tests compact: the pattern's bike-shop chat and a generator of agent chats."""

from __future__ import annotations

import base64
import json
import random
import struct
import zlib
from typing import Any

Message = dict[str, Any]

SYSTEM = "You are the support assistant of a bike shop."


def order_result(order: int, items: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    lines = [
        {
            "sku": f"BW-{rng.randint(1000, 9999)}",
            "name": rng.choice(["front wheel 700c", "rear wheel", "tyre", "brake pad", "bell"]),
            "price": round(rng.uniform(5, 400), 2),
            "stock": rng.randint(0, 40),
        }
        for _ in range(items)
    ]
    return json.dumps({"order": order, "status": "delivered", "carrier": "DHL", "items": lines})


def tool_call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def bike_shop_chat(items: int = 200) -> list[Message]:
    """The pattern's chat: three requests, each answered with the help of a big tool result."""
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Hi! My order #4471 came with a bent front wheel. Can you help?"},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("call_1", "get_order", order=4471)]},
        {"role": "tool", "tool_call_id": "call_1", "content": order_result(4471, items, seed=1)},
        {"role": "assistant", "content": "I'm sorry about that! Order #4471 shipped a 700c front wheel."},
        {"role": "user", "content": "Is that same wheel in stock?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [tool_call("call_2", "search_parts", query="700c")],
        },
        {"role": "tool", "tool_call_id": "call_2", "content": order_result(0, items, seed=2)},
        {"role": "assistant", "content": "Yes, the 700c front wheel BW-2231 is in stock."},
        {"role": "user", "content": "Great. Open a return for my order and ship me the new wheel."},
    ]


def agent_chat(turns: int, *, seed: int = 0, result_items: int = 30, parallel: int = 2) -> list[Message]:
    """A tool-heavy agent chat: each user request is answered after rounds of parallel tool calls."""
    rng = random.Random(seed)
    messages: list[Message] = [{"role": "system", "content": SYSTEM}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Request {turn}: please look at order #{4400 + turn}."})
        for step in range(rng.randint(0, 2)):
            calls = [
                tool_call(
                    f"call_{turn}_{step}_{k}", rng.choice(["get_order", "search_parts"]), order=4400 + turn
                )
                for k in range(rng.randint(1, parallel))
            ]
            messages.append({"role": "assistant", "content": None, "tool_calls": calls})
            for call in calls:
                content = order_result(4400 + turn, rng.randint(1, result_items), seed=rng.random())
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
        messages.append({"role": "assistant", "content": f"Here is what I found for request {turn}."})
    return messages


def screenshot_steps(steps: int, width: int, height: int) -> list[Message]:
    """A UI agent's steps on Ollama, in its own shapes: each a screenshot call with no id, and its
    result named by `tool_name`, a line of text and the screen as a base64 PNG in `images`."""
    messages: list[Message] = []
    for step in range(steps):
        call = {"function": {"name": "screenshot", "arguments": {"step": step}}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        messages.append(
            {
                "role": "tool",
                "tool_name": "screenshot",
                "content": f"screen {step}",
                "images": [png(width, height)],
            }
        )
    return messages


def png(width: int, height: int) -> str:
    """A PNG's signature and header, base64 as Ollama's `images` carry it (the counter reads the size
    from the header)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return base64.b64encode(b"\x89PNG\r\n\x1a\n" + chunk + b"\x00" * 64).decode()


def summarised_chat(turns: int = 30, *, seed: int = 11) -> list[Message]:
    """An agent chat with long answers that only level 2 can remove: at a 6,000-token window its old
    exchanges are dropped, and summarised when summaries are on."""
    chat = agent_chat(turns, seed=seed, result_items=10)
    for message in chat:
        if message["role"] == "assistant" and message.get("content"):
            message["content"] += " Details: " + "the wheel is fine. " * 60
    return chat
