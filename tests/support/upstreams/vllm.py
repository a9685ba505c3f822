"""A vLLM-shaped upstream that counts and refuses as vLLM's OpenAI server does, for the window tests.

It follows vLLM 0.11 (the `vllm/entrypoints/openai/` of the 0.10.2-0.11 line, read for this):

- `serving_engine.py` `_preprocess_chat` and `_validate_input`: the chat is rendered with the model's
  template (`add_generation_prompt`, the request's `tools`) and tokenized; a prompt of `max_model_len`
  tokens or more is refused ("This model's maximum context length is W tokens. However, your request
  has N input tokens. Please reduce the length of the input messages."), and so is one whose
  `max_completion_tokens` (else `max_tokens`) does not fit beside it ("'max_tokens' or
  'max_completion_tokens' is too large: M. This model's maximum context length is W tokens and your
  request has N input tokens (M > W - N)."). `serving_chat.py` answers either as
  `create_error_response(f"{e} {e.__cause__}")`: a 400 `{"error": {"message": "... None", "type":
  "BadRequestError", "param": null, "code": 400}}` (`protocol.py` `ErrorResponse`), before any stream.
- `utils.get_max_tokens`: without a limit the reply may run to the window's end (W - N tokens); a
  reply stops at its limit with `finish_reason: "length"`. `usage` is the prompt's real count and
  the reply's; streamed, it comes in a last chunk only with `stream_options.include_usage`.
- `serving_tokenization.py` and `protocol.py` `TokenizeChatRequest`: `POST /tokenize` with `messages`
  (and `tools`, `add_generation_prompt` default true) counts the chat exactly as a chat request is
  counted; with `prompt`, the text (BOS added unless `add_special_tokens` is false). The answer is
  `{"count", "max_model_len", "tokens", "token_strs"}`.
- `serving_models.py`: `GET /v1/models` lists the served name with its `max_model_len`; a request
  naming another model gets 404 "The model `x` does not exist." (`NotFoundError`).

The model is a vocabulary and a template (`tests.support.upstreams.vllm_template`: Llama 3 or cl100k).
Its reply is `--reply-tokens` tokens long (a request's `x-fake-reply-tokens` header overrides it), cut
at the request's limit. Every chat request is recorded with the server's count and verdict
(`GET /_recorded`, `DELETE` clears).

With `--gateway` it stands for vLLM behind a gateway that routes `/v1` alone (LiteLLM's proxy, an
ingress): `/tokenize` is a 404, the counts and refusals the same.

Run it: `python -m tests.support.upstreams.vllm --port N --max-model-len W [--vocabulary cl100k]`,
or `running_vllm(...)` below (a process on a free port, stopped on exit).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.processes import free_port, running
from tests.support.upstreams.formats import json_response, sse
from tests.support.upstreams.vllm_template import LOADERS, Vocabulary, chat_ids, prompt_ids

VERSION = "0.11.0"
TEST_HEADER = "x-fake-test-count"  # the tests' own `/tokenize` calls, answered even behind the "gateway"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def error(message: str, status: int = 400, kind: str = "BadRequestError") -> Response:
    return json_response({"error": {"message": message, "type": kind, "param": None, "code": status}}, status)


def length_problem(window: int, prompt: int, limit: int | None) -> str | None:
    """`_validate_input`'s verdict on a chat of `prompt` tokens asking for `limit` more."""
    if prompt >= window:
        return (
            f"This model's maximum context length is {window} tokens. However, your request has {prompt} "
            "input tokens. Please reduce the length of the input messages."
        )
    if limit is not None and prompt + limit > window:
        return (
            f"'max_tokens' or 'max_completion_tokens' is too large: {limit}. This model's maximum context "
            f"length is {window} tokens and your request has {prompt} input tokens "
            f"({limit} > {window} - {prompt})."
        )
    return None


class FakeVllm:
    def __init__(
        self, window: int, vocabulary: Vocabulary, model: str, reply_tokens: int, tokenize: bool = True
    ) -> None:
        self.window = window
        self.tokenize_route = tokenize
        self.vocabulary = vocabulary
        self.model = model
        self.reply_tokens = reply_tokens
        self.received: list[dict[str, Any]] = []
        self.ids = itertools.count(1)

    def wrong_model(self, body: dict[str, Any]) -> Response | None:
        name = body.get("model")
        if name is None or name == self.model:
            return None
        return error(f"The model `{name}` does not exist.", 404, "NotFoundError")

    async def models(self, request: Request) -> Response:
        card = {
            "id": self.model,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "vllm",
            "root": self.model,
            "parent": None,
            "max_model_len": self.window,
        }
        return json_response({"object": "list", "data": [card]})

    async def tokenize(self, request: Request) -> Response:
        if not self.tokenize_route and TEST_HEADER not in request.headers:
            return json_response({"detail": "Not Found"}, 404)
        body = orjson.loads(await request.body())
        if problem := self.wrong_model(body):
            return problem
        if "messages" in body:
            generation = body.get("add_generation_prompt", True)
            ids = chat_ids(self.vocabulary, body["messages"], body.get("tools"), generation)
        else:
            ids = prompt_ids(
                self.vocabulary, str(body.get("prompt", "")), body.get("add_special_tokens", True)
            )
        answer = {"count": len(ids), "max_model_len": self.window, "tokens": ids, "token_strs": None}
        return json_response(answer)

    async def chat(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        record: dict[str, Any] = {"body": body, "max_tokens": limit, "headers": dict(request.headers)}
        self.received.append(record)
        if problem := self.wrong_model(body):
            record |= {"status": 404, "prompt_tokens": None}
            return problem
        prompt = len(chat_ids(self.vocabulary, body.get("messages") or [], body.get("tools")))
        record["prompt_tokens"] = prompt
        if isinstance(limit, int) and limit < 1:
            record["status"] = 400
            return error(f"max_tokens must be at least 1, got {limit}. None")
        if problem := length_problem(self.window, prompt, limit):
            record |= {"status": 400, "error": problem}
            return error(f"{problem} None")
        wanted = int(request.headers.get("x-fake-reply-tokens", self.reply_tokens))
        room = self.window - prompt if limit is None else min(limit, self.window - prompt)
        produced = min(wanted, room)
        finish = "stop" if produced == wanted else "length"
        record |= {"status": 200, "completion_tokens": produced, "finish_reason": finish}
        text = self.vocabulary.decode([self.vocabulary.filler] * produced)
        usage = {"prompt_tokens": prompt, "total_tokens": prompt + produced, "completion_tokens": produced}
        base = {"id": f"chatcmpl-{next(self.ids)}", "created": int(time.time()), "model": self.model}
        if body.get("stream") is not True:
            message = {"role": "assistant", "content": text, "tool_calls": []}
            choice = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }
            return json_response({**base, "object": "chat.completion", "choices": [choice], "usage": usage})
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return sse(
            self._chunks({**base, "object": "chat.completion.chunk"}, text, finish, usage, include_usage)
        )

    @staticmethod
    def _chunks(
        chunk: dict[str, Any], text: str, finish: str, usage: dict[str, int], include_usage: bool
    ) -> Iterator[tuple[str | None, Any]]:
        def choice(delta: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}

        yield None, {**chunk, "choices": [choice({"role": "assistant", "content": ""})]}
        yield None, {**chunk, "choices": [choice({"content": text})]}
        yield None, {**chunk, "choices": [choice({}, finish)]}
        if include_usage:
            yield None, {**chunk, "choices": [], "usage": usage}
        yield None, b"[DONE]"

    async def recorded(self, request: Request) -> Response:
        if request.method == "DELETE":
            self.received.clear()
        return json_response(self.received)

    async def health(self, request: Request) -> Response:
        return Response(b"", status_code=200)

    async def version(self, request: Request) -> Response:
        return json_response({"version": VERSION})

    def app(self) -> Starlette:
        async def not_found(request: Request, exc: Exception) -> Response:
            status = exc.status_code if isinstance(exc, HTTPException) else 500
            return json_response({"detail": "Not Found" if status == 404 else "Method Not Allowed"}, status)

        return Starlette(
            routes=[
                Route("/v1/models", self.models),
                Route("/tokenize", self.tokenize, methods=["POST"]),
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/health", self.health),
                Route("/version", self.version),
                Route("/_recorded", self.recorded, methods=["GET", "DELETE"]),
            ],
            exception_handlers={HTTPException: not_found},
        )


@dataclass(frozen=True)
class VllmServer:
    """A running fake: its root URL (the proxy's upstream is `base_url + "/v1"`) and what it knows."""

    base_url: str
    window: int
    model: str
    gateway: bool  # its `/tokenize` unreachable to the proxy

    def count(self, body: dict[str, Any]) -> int:
        """The server's own count of a chat body (`/tokenize`), what its `usage` will report."""
        request = {key: body[key] for key in ("model", "messages", "tools") if key in body}
        answer = httpx.post(f"{self.base_url}/tokenize", json=request, headers={TEST_HEADER: "1"}, timeout=60)
        answer.raise_for_status()
        return int(answer.json()["count"])

    def count_body(self, body: dict[str, Any]) -> int:
        """`count` of a body as a client sends it to this server (its model named)."""
        return self.count({**body, "model": self.model})

    def received(self) -> list[dict[str, Any]]:
        answer: list[dict[str, Any]] = httpx.get(f"{self.base_url}/_recorded", timeout=30).json()
        return answer

    def clear(self) -> None:
        httpx.delete(f"{self.base_url}/_recorded", timeout=30)


@contextmanager
def running_vllm(
    window: int,
    *,
    vocabulary: str = "llama3",
    model: str = LLAMA,
    reply_tokens: int = 64,
    gateway: bool = False,
) -> Iterator[VllmServer]:
    """The fake as a process of its own on a free loopback port, stopped on exit. With `gateway`, its
    `/tokenize` answers 404 to the proxy, as behind a gateway that routes `/v1` alone; `count` still
    reads it (a header only the test sends)."""
    port = free_port()
    args = [sys.executable, "-m", "tests.support.upstreams.vllm", "--port", str(port)]
    args += ["--max-model-len", str(window), "--vocabulary", vocabulary, "--served-model-name", model]
    args += ["--reply-tokens", str(reply_tokens), *(["--gateway"] if gateway else [])]
    base_url = f"http://127.0.0.1:{port}"
    root = str(Path(__file__).resolve().parents[3])  # `python -m tests...` from anywhere
    env = {"PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with running(args, ready_url=f"{base_url}/health", env=env, timeout=60):
        yield VllmServer(base_url, window, model, gateway)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-model-len", type=int, required=True)
    parser.add_argument("--vocabulary", choices=sorted(LOADERS), default="llama3")
    parser.add_argument("--served-model-name", default=LLAMA)
    parser.add_argument("--reply-tokens", type=int, default=64)
    parser.add_argument("--gateway", action="store_true", help="/tokenize unreachable, as behind a gateway")
    args = parser.parse_args()
    vocabulary = LOADERS[args.vocabulary]()
    fake = FakeVllm(
        args.max_model_len, vocabulary, args.served_model_name, args.reply_tokens, not args.gateway
    )
    uvicorn.run(fake.app(), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
