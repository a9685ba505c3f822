"""`compacting-proxy demo`: a long bike-shop support chat replayed through the proxy, in-process.

The client is an agent loop that keeps the whole history and resends it every turn; the upstream is
the built-in stub with a real window that rejects over-long prompts. Nothing else is needed: both
sides talk through httpx's ASGI transport, so no port is opened.
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import httpx

from proxy.server.app import create_app
from proxy.settings import Settings
from proxy.stub import create_stub

SYSTEM = "You are the support assistant of a bike shop."
REQUESTS = [
    "Hi! My order #4471 came with a bent front wheel. Can you help?",
    "Is that same wheel in stock?",
    "What does the rear wheel of that bike cost?",
    "Do you also have the 29-inch version?",
    "Which tyres fit that wheel?",
    "Can you check whether order #4471 already shipped the bell I ordered?",
    "Are there brake pads for this bike in stock?",
    "What is your return policy for parts?",
    "Is there a discount if I buy both wheels?",
    "Please check my order history for other open orders.",
    "Do you ship to Lyon, France?",
    "Great. Open a return for my order and ship me the new wheel.",
]
TOOLS = [
    {"type": "function", "function": {"name": name, "description": text, "parameters": {"type": "object"}}}
    for name, text in (
        ("get_order", "Everything about one order: items, shipping, invoice."),
        ("search_parts", "Search the parts catalog, with stock and price for each match."),
        ("create_return", "Open a return for an order and ship a replacement part."),
    )
]


def tool_result(name: str, seed: int) -> str:
    """A big JSON tool result, like a real order or catalogue lookup."""
    rng = random.Random(seed)
    items = [
        {
            "sku": f"BW-{rng.randint(1000, 9999)}",
            "name": rng.choice(["front wheel", "rear wheel", "tyre 29x2.3", "brake pad", "bell"]),
            "price": round(rng.uniform(5, 400), 2),
            "stock": rng.randint(0, 40),
            "warehouse": rng.choice(["Lyon", "Berlin", "Milan"]),
        }
        for _ in range(45)
    ]
    return json.dumps({"tool": name, "order": 4471, "status": "delivered", "items": items})


async def replay(turns: int, window: int) -> None:
    stub = httpx.ASGITransport(app=create_stub(window))
    settings = Settings(upstream_url="http://stub/v1", window=window, _env_file=None)  # type: ignore[call-arg]
    proxy = create_app(settings, transport=stub)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy), base_url="http://proxy")
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    print(f"Replaying {turns} requests through the proxy; the stub model's window is {window} tokens.\n")
    print(f"{'turn':>4} {'step':>4} {'messages':>8} {'tokens':>15} {'truncated':>9} {'dropped':>7}  status")
    for turn, text in enumerate((REQUESTS * (turns // len(REQUESTS) + 1))[:turns], start=1):
        history.append({"role": "user", "content": text})
        for step in (1, 2):
            body = {"model": "stub", "messages": history, "tools": TOOLS}
            response = await client.post("/v1/chat/completions", json=body)
            h = response.headers
            before = h.get("x-compaction-tokens-before")
            tokens = f"{before} -> {h['x-compaction-tokens-after']}" if before else "under the line"
            status = (
                "ok" if response.is_success else f"{response.status_code} {response.json()['error']['code']}"
            )
            print(
                f"{turn:>4} {step:>4} {len(history):>8} {tokens:>15} "
                f"{h.get('x-compaction-truncated', '-'):>9} {h.get('x-compaction-dropped', '-'):>7}  {status}"
            )
            if not response.is_success:
                break
            message = response.json()["choices"][0]["message"]
            history.append(message)
            if not message.get("tool_calls"):
                break
            for call in message["tool_calls"]:
                result = tool_result(call["function"]["name"], seed=len(history))
                history.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    print(f"\nThe client kept all {len(history)} messages; each request was compacted to fit the window.")
    await client.aclose()


def run_demo(turns: int = 12, window: int = 8000) -> None:
    asyncio.run(replay(turns, window))
