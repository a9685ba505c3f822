"""A scripted OpenAI-compatible model server that plays the model for aider (``aider-chat`` 0.86) in
its whole-file edit format, with a window it enforces with a real tokenizer.

Run it as a process: ``python -m tests.support.upstreams.aider_model --port N --window W --file NAME``.
``POST /v1/chat/completions`` answers:

- aider's own summary request (its system prompt is ``aider.prompts.summarize``: "*Briefly* summarize
  this partial conversation about programming"): a short summary;
- any other request: the edit, in aider's ``whole`` format (``aider/coders/wholefile_prompts.py``:
  the file's path alone on a line, then a fenced block with the file's whole new content): the
  content of ``NAME`` as the request shows it (aider sends the chat files in a user message, each
  as its path and a fenced block) with ``EDIT_LINE`` added, or the content with it if the request
  does not show the file.

The window is enforced on the cl100k_base count of ``messages``; over it, OpenAI's own overflow error
before any stream (400, ``code: context_length_exceeded``, "This model's maximum context length is N
tokens. However, your messages resulted in M tokens...": the words LiteLLM, inside aider, maps to
its ``ContextWindowExceededError``, on which aider prints "has hit a token limit!" and stops). The
stream is OpenAI's ``chat.completion.chunk`` SSE ending with ``[DONE]``, as LiteLLM reads it.
``GET /_recorded`` lists every request: tokens, over the window, its kind.
"""

from __future__ import annotations

import argparse
import re
import time
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.upstreams.agent_model import count
from tests.support.upstreams.formats import json_response

EDIT_LINE = 'def greet(name):\n    return f"Hello, {name}!"  # edited-by-aider-model\n'
SUMMARY_PROMPT = "summarize this partial conversation"


def text_of(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def shown_file(messages: list[dict[str, Any]], name: str) -> str | None:
    """The content of `name` as the newest message that shows it has it (a path line, then a fence)."""
    pattern = re.compile(rf"(?:^|\n){re.escape(name)}\n(```+)[^\n]*\n(.*?)\n?\1", re.S)
    for message in reversed(messages):
        if message.get("role") == "user" and (found := pattern.search(text_of(message.get("content")))):
            return found.group(2) + "\n"
    return None


def reply_for(messages: list[dict[str, Any]], name: str) -> tuple[str, str]:
    system = text_of(messages[0].get("content")) if messages else ""
    if SUMMARY_PROMPT in system:
        return "summary", "The user and I went over the project's modules and fixed several functions."
    content = shown_file(messages, name) or ""
    if EDIT_LINE not in content:
        content = content + ("\n" if content and not content.endswith("\n\n") else "") + EDIT_LINE
    return "edit", f"I added the `greet` function.\n\n{name}\n```python\n{content}```\n"


async def chat(request: Request) -> Response:
    state = request.app.state
    body = orjson.loads(await request.body())
    messages = body.get("messages") or []
    tokens = count(messages)
    kind, text = reply_for(messages, state.file)
    state.received.append({"tokens": tokens, "over": tokens > state.window, "kind": kind, "at": time.time()})
    if tokens > state.window:
        error = {
            "message": f"This model's maximum context length is {state.window} tokens. However, your "
            f"messages resulted in {tokens} tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
        return json_response({"error": error}, 400)
    usage = {"prompt_tokens": tokens, "completion_tokens": 40, "total_tokens": tokens + 40}
    base = {"id": f"chatcmpl-{len(state.received)}", "created": int(time.time()), "model": body.get("model")}
    if body.get("stream") is not True:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        return json_response({**base, "object": "chat.completion", "choices": [choice], "usage": usage})
    chunk = {**base, "object": "chat.completion.chunk"}
    pieces = [
        {
            **chunk,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
        },
        *(
            {
                **chunk,
                "choices": [{"index": 0, "delta": {"content": text[i : i + 64]}, "finish_reason": None}],
            }
            for i in range(0, len(text), 64)
        ),
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage},
    ]
    sse = b"".join(b"data: " + orjson.dumps(p) + b"\n\n" for p in pieces) + b"data: [DONE]\n\n"
    return Response(sse, media_type="text/event-stream")


async def recorded(request: Request) -> Response:
    return json_response(request.app.state.received)


async def models(request: Request) -> Response:
    return json_response(
        {"object": "list", "data": [{"id": "local-model", "object": "model", "owned_by": "t"}]}
    )


def create_app(window: int, file: str) -> Starlette:
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models),
            Route("/healthz", models),
            Route("/_recorded", recorded),
        ]
    )
    app.state.window, app.state.file, app.state.received = window, file, []
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--window", type=int, required=True)
    parser.add_argument("--file", required=True)
    args = parser.parse_args()
    uvicorn.run(create_app(args.window, args.file), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
