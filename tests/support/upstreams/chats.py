"""Chats to send to a real upstream: a short one, and a long tool-using bike-shop support chat.

``support_chat(exchanges, result_items)`` grows with both knobs: every exchange is a user request,
an assistant ``tool_calls`` message, one big JSON ``tool`` result per call and an answer.  The chat
always opens with order #4471's bent wheel and ends on a user request, so a compactor has an old
part to work on and a recent part it must keep.  Same arguments, same chat.
"""

from __future__ import annotations

import json
import random
from typing import Any

Message = dict[str, Any]

SYSTEM = "You are the support assistant of Spoke & Chain, a bike shop. Use the tools to look things up."

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_order",
            "description": "Look up an order by its number: items, status, shipping and payment.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "integer", "description": "the order number"}},
                "required": ["order_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_parts",
            "description": "Search the parts catalog; returns matching parts with stock and price.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "compatible_with": {"type": "string", "description": "a bike model or standard"},
                },
                "required": ["query"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "create_return",
            "description": "Open a return (RMA) for items of an order; returns the RMA number and label.",
            "parameters": {
                "type": "object",
                "properties": {
                    "order_id": {"type": "integer"},
                    "skus": {"type": "array", "items": {"type": "string"}},
                    "reason": {"type": "string"},
                },
                "required": ["order_id", "skus", "reason"],
            },
        },
    },
]

PARTS = (
    "front wheel 700c",
    "rear wheel 700c",
    "tubeless tyre 28mm",
    "inner tube 700x25",
    "brake pads",
    "disc rotor 160mm",
    "11-speed chain",
    "derailleur hanger",
    "bottom bracket",
    "handlebar tape",
)
REQUESTS = (
    ("Is the {part} in stock in the warehouse?", "search_parts"),
    ("Can you check what else was in order #{order}?", "get_order"),
    ("Does the {part} fit my 2021 Canyon Endurace?", "search_parts"),
    ("Please open a return for the {part} from order #{order}.", "create_return"),
)


def short_chat() -> list[Message]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Hi! What are your opening hours on Saturday?"},
    ]


def tool_call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def parts_result(rng: random.Random, items: int) -> str:
    return json.dumps(
        {
            "results": [
                {
                    "sku": f"SC-{rng.randint(1000, 9999)}",
                    "name": rng.choice(PARTS),
                    "price_eur": round(rng.uniform(4, 450), 2),
                    "stock": {"warehouse": rng.randint(0, 40), "store": rng.randint(0, 5)},
                    "compatible_with": rng.sample(["road", "gravel", "700c", "11-speed", "disc"], 2),
                }
                for _ in range(items)
            ]
        }
    )


def order_result(rng: random.Random, order: int, items: int) -> str:
    return json.dumps(
        {
            "order_id": order,
            "status": "delivered",
            "carrier": "DHL",
            "tracking": f"JD{rng.randint(10**9, 10**10 - 1)}",
            "shipping_address": {"street": "Fahrradweg 12", "city": "Leipzig", "zip": "04109"},
            "items": [
                {
                    "sku": f"SC-{rng.randint(1000, 9999)}",
                    "name": rng.choice(PARTS),
                    "qty": rng.randint(1, 3),
                    "price_eur": round(rng.uniform(4, 450), 2),
                }
                for _ in range(items)
            ],
        }
    )


def return_result(rng: random.Random, order: int) -> str:
    return json.dumps(
        {
            "rma": f"RMA-{order}-{rng.randint(100, 999)}",
            "label_url": "https://example.test/label.pdf",
            "refund": "original payment method",
            "status": "open",
        }
    )


def support_chat(exchanges: int = 8, *, result_items: int = 20, seed: int = 0) -> list[Message]:
    """A support chat of ``exchanges`` tool-using exchanges, ending on a new user request."""
    rng = random.Random(seed)
    order = 4471
    messages: list[Message] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Hi! My order #{order} came with a bent front wheel. Can you help?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [tool_call("call_0", "get_order", order_id=order)],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": order_result(rng, order, result_items)},
        {
            "role": "assistant",
            "content": f"I'm sorry! Order #{order} shipped a 700c front wheel; let me help.",
        },
    ]
    for n in range(1, exchanges):
        part = rng.choice(PARTS)
        template, tool = REQUESTS[n % len(REQUESTS)]
        messages.append({"role": "user", "content": template.format(part=part, order=order)})
        call_id = f"call_{n}"
        if tool == "search_parts":
            call = tool_call(call_id, tool, query=part, compatible_with="700c road")
            result = parts_result(rng, result_items)
        elif tool == "get_order":
            call = tool_call(call_id, tool, order_id=order)
            result = order_result(rng, order, result_items)
        else:
            call = tool_call(call_id, tool, order_id=order, skus=["SC-2231"], reason="bent on arrival")
            result = return_result(rng, order)
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
        messages.append({"role": "assistant", "content": f"Done: I checked the {part} for order #{order}."})
    messages.append(
        {"role": "user", "content": f"Thanks. What is the status of the return for order #{order}?"}
    )
    return messages
