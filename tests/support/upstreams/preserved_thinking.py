"""An Anthropic Messages server whose model binds its thinking blocks to the conversation, as
platform.claude.com documents "preserved thinking" (the pages "Preserved thinking", "Prefix checks
on thinking blocks" and "Fix a thinking block bound to a different conversation", for Claude Fable
5.1 and later with the prefix check on, the default for accounts created since 2026-08-31):

- each `thinking` block it answers is signed over its prefix: the top-level `system` and `tools` and
  every message before it, as this server received them;
- a request that sends a `thinking` or `redacted_thinking` block back is checked block by block: if
  the block's prefix is not what it was signed over (a message before it changed, `system` or
  `tools` changed, or a thinking block before it was left out or moved), the request is refused with
  400 `invalid_request_error` and the documented message, "messages.I.content.J: Invalid `signature`
  in `thinking` block. The block is bound to a different conversation. Remove the block, or set
  `thinking.block_binding.prefix_mismatch_behavior` to "drop_block"."; taking thinking blocks out
  from some point on passes (what `drop_block` does);
- `cache_control` markers are not part of the prefix: Claude Code moves them every turn, and the
  pages say Claude Code needs nothing changed.

It answers as a tool loop would: a `thinking` block, a text, and a `tool_use` of the one tool it was
given until `--steps` answers, then the end; streamed as Anthropic's SSE when asked. Its window is
enforced as Anthropic's ("prompt is too long: N tokens > W maximum", four characters a token).
Run it as a process (``python -m tests.support.upstreams.preserved_thinking --port N``);
``GET /_recorded`` lists every request (thinking blocks sent, tokens, refused or not).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import itertools
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.upstreams.agent_model import anthropic_events
from tests.support.upstreams.formats import json_response, message_object, sse

SECRET = b"preserved-thinking-fake"
THINKING = ("thinking", "redacted_thinking")
BOUND = (
    "messages.{i}.content.{j}: Invalid `signature` in `thinking` block. The block is bound to a "
    'different conversation. Remove the block, or set `thinking.block_binding.prefix_mismatch_behavior` to "drop_block".'
)


def without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_cache_control(v) for v in value]
    return value


def signature(body: dict[str, Any], messages: list[Any], blocks: list[Any]) -> str:
    """The signature of a block whose prefix is `messages` then `blocks` of its own message."""
    prefix = without_cache_control([body.get("system"), body.get("tools"), messages, blocks])
    digest = hmac.new(SECRET, orjson.dumps(prefix, option=orjson.OPT_SORT_KEYS), hashlib.sha256)
    return "bound." + digest.hexdigest()


def unbound_block(body: dict[str, Any]) -> tuple[int, int] | None:
    """The first thinking block whose prefix is not the one it was signed over."""
    messages = body.get("messages") or []
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else ()):
            thinking = isinstance(block, dict) and block.get("type") in THINKING
            if thinking and block.get("signature") != signature(body, messages[:i], content[:j]):
                return i, j
    return None


class State:
    def __init__(self, window: int, steps: int) -> None:
        self.window, self.steps = window, steps
        self.received: list[dict[str, Any]] = []
        self.ids = itertools.count(1)


async def messages(request: Request) -> Response:
    state: State = request.app.state.state
    body = orjson.loads(await request.body())
    msgs = body.get("messages") or []
    tokens = len(orjson.dumps([body.get("system"), msgs, body.get("tools")])) // 4
    sent = sum(
        1
        for m in msgs
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") in THINKING
    )
    unbound = unbound_block(body)
    state.received.append({"tokens": tokens, "thinking_sent": sent, "refused": unbound is not None})
    if tokens > state.window:
        message = f"prompt is too long: {tokens} tokens > {state.window} maximum"
        return json_response(
            {"type": "error", "error": {"type": "invalid_request_error", "message": message}}, 400
        )
    if unbound is not None:
        error = {"type": "invalid_request_error", "message": BOUND.format(i=unbound[0], j=unbound[1])}
        return json_response({"type": "error", "error": error}, 400)
    step = sum(1 for m in msgs if m.get("role") == "assistant") + 1
    tools = [t["name"] for t in body.get("tools") or () if isinstance(t, dict) and "name" in t]
    content: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": f"Step {step}: what next.", "signature": signature(body, msgs, [])}
    ]
    content.append({"type": "text", "text": f"Step {step}."})
    if tools and step <= state.steps:
        content.append(
            {"type": "tool_use", "id": f"toolu_{step:04d}", "name": tools[0], "input": {"step": step}}
        )
    stop = "tool_use" if content[-1]["type"] == "tool_use" else "end_turn"
    usage = {
        "input_tokens": tokens,
        "output_tokens": 30,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    message = message_object(next(state.ids), body, content, stop, usage)
    if body.get("stream") is not True:
        return json_response(message)
    return sse(anthropic_events(message))


async def recorded(request: Request) -> Response:
    return json_response(request.app.state.state.received)


async def models(request: Request) -> Response:
    return json_response({"data": [{"id": "claude-opus-5-5", "type": "model"}], "has_more": False})


def create_app(window: int, steps: int) -> Starlette:
    app = Starlette(
        routes=[
            Route("/v1/messages", messages, methods=["POST"]),
            Route("/v1/models", models),
            Route("/_recorded", recorded),
        ]
    )
    app.state.state = State(window, steps)
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--window", type=int, default=200_000)
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    uvicorn.run(create_app(args.window, args.steps), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
