"""A scripted Chat Completions model that redeems a compression id, for LiteLLM's retrieval loop.

It stands for a model that, offered LiteLLM's `headroom_retrieve` tool and reading a note that says
`Retrieve original: hash=<id>`, calls the tool for that id; answered, it says what it got back. The
answers follow OpenAI's Chat Completions objects (openai-python 2.x `ChatCompletion`: `choices[0].
message` with `tool_calls` of `function` `name`/`arguments`, `finish_reason` `tool_calls` or `stop`,
`usage`), which LiteLLM 1.108.7 reads with `get_tool_calls_from_response`. Every request is kept for
the test at `GET /_received`.

Run it as a process: ``python -m tests.support.upstreams.retrieving_model --port N``.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

HASH = re.compile(r"hash=([a-f0-9]{12,24})")
RETRIEVE = "headroom_retrieve"


def completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def answer(body: dict[str, Any]) -> dict[str, Any]:
    """The script: the retrieved original described, else a call for the first id read, else text."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        content = (
            last.get("content") if isinstance(last.get("content"), str) else json.dumps(last.get("content"))
        )
        return completion(
            {"role": "assistant", "content": f"RETRIEVED {len(content)} chars: {content[:80]}"}, "stop"
        )
    offered = {t.get("function", {}).get("name") for t in body.get("tools") or () if isinstance(t, dict)}
    found = HASH.search(json.dumps(messages))
    if RETRIEVE in offered and found:
        call = {
            "id": "call_retrieve_0",
            "type": "function",
            "function": {"name": RETRIEVE, "arguments": json.dumps({"hash": found.group(1)})},
        }
        return completion({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")
    return completion({"role": "assistant", "content": "Nothing to retrieve."}, "stop")


async def chat(request: Request) -> Response:
    body = await request.json()
    request.app.state.received.append(body)
    return JSONResponse(answer(body))


async def received(request: Request) -> Response:
    return JSONResponse(request.app.state.received)


async def models(request: Request) -> Response:
    return JSONResponse({"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "t"}]})


def create_app() -> Starlette:
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models),
            Route("/_received", received),
        ]
    )
    app.state.received = []
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(create_app(), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
