r"""A scripted model server that speaks Google's Gemini API and plays a coding agent for the real
Gemini CLI, on a real source tree, with a window it enforces with a real tokenizer.

Run it as a process: ``python -m tests.support.upstreams.gemini_model --port N --window W --steps S
--tree DIR``. It follows the Gemini API as Gemini CLI 0.61 (bundling ``@google/genai`` 1.30) reads it:

- ``POST /v1beta/models/{model}:generateContent`` and ``:streamGenerateContent?alt=sse``; the key in
  ``x-goog-api-key`` or ``?key=`` (else 403 ``PERMISSION_DENIED``, as Google answers a missing key);
- the stream is plain ``data: {candidates, usageMetadata, modelVersion, responseId}`` events ending in
  ``\r\n\r\n`` (what ``generativelanguage.googleapis.com`` sends), no event names, no ``[DONE]``: a
  text chunk, then one chunk with the function calls whole, then the last with ``finishReason`` and
  ``usageMetadata``;
- function calls come without ``id`` (as Gemini models answer; the CLI then makes its own ids and
  sends them back on the ``functionResponse`` only) and with a ``thoughtSignature`` on the first call
  part of a turn, as Gemini 2.5+/3 models answer with thinking on;
- over the window, before any stream: 400 ``{"error": {"code": 400, "message": "The input token count
  (N) exceeds the maximum number of tokens allowed (W).", "status": "INVALID_ARGUMENT"}}``;
- a ``functionResponse`` turn whose responses do not answer the calls of the model turn before it (by
  id where the call has one, else by name) is what the API refuses ("Please ensure that the number of
  function response parts is equal to the number of function call parts of the function call turn"):
  counted as orphans and answered 400;
- ``POST ...:countTokens`` answers ``{"totalTokens": N}``, ``GET /v1beta/models/{model}`` the model's
  ``inputTokenLimit`` (the window); a request with a JSON ``responseMimeType``
  (the CLI's side questions: next speaker, loop check) gets a JSON text answer.

The script: each request that offers tools gets 1-3 calls of the CLI's own tools (``read_file``,
``grep_search``/``search_file_content``, ``glob``, ``run_shell_command``, with the argument names the
declarations give) on files of ``DIR``. The step is read back from the newest ``thoughtSignature``
(``sig-step-N``) or the text ``agent-step N``, so the answer is a pure function of the request and a
compacted request resumes where it was. After ``S`` steps it answers ``TASK-COMPLETE``.
``GET /_recorded`` lists every request: method, tokens, over the window, orphans, the step, whether
the system instruction and tools came intact.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.upstreams.agent_model import (
    DONE_MARK,
    RESUME,
    TASK_MARK,
    Action,
    Script,
    count,
    digest,
    shell_text,
)

SIGNATURE = re.compile(r"sig-step-(\d+)")
METHOD = re.compile(r"^(?P<model>[^/]+):(?P<method>generateContent|streamGenerateContent|countTokens)$")


def error(status: int, message: str, name: str) -> Response:
    body = {"error": {"code": status, "message": message, "status": name}}
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def prompt_tokens(body: dict[str, Any]) -> int:
    return count({k: body.get(k) for k in ("systemInstruction", "contents", "tools")})


def declarations(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for tool in body.get("tools") or []:
        for decl in tool.get("functionDeclarations") or []:
            out[decl["name"]] = decl
    return out


def orphans(contents: list[Any]) -> int:
    """Function responses that do not answer a call of the model turn just before them."""
    found = 0
    for i, content in enumerate(contents):
        responses = [p["functionResponse"] for p in content.get("parts") or [] if "functionResponse" in p]
        if not responses:
            continue
        before = contents[i - 1] if i else {}
        calls = [p["functionCall"] for p in before.get("parts") or [] if "functionCall" in p]
        if before.get("role") != "model" or len(calls) != len(responses):
            found += len(responses)
            continue
        open_calls = list(calls)
        for response in responses:
            match = next(
                (
                    c
                    for c in open_calls
                    if (c.get("id") and c.get("id") == response.get("id"))
                    or (not c.get("id") and c.get("name") == response.get("name"))
                ),
                None,
            )
            if match is None:
                found += 1
            else:
                open_calls.remove(match)
    return found


def properties(decl: dict[str, Any]) -> set[str]:
    schema = decl.get("parametersJsonSchema") or decl.get("parameters") or {}
    return set(schema.get("properties") or {})


def tool_call(a: Action, tools: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The action as a call of Gemini CLI's own tools, with the argument names they declare."""

    def first(name: str, choices: tuple[str, ...]) -> str:
        names = properties(tools[name])
        return next((c for c in choices if c in names), choices[0])

    if a.kind == "read" and "read_file" in tools:
        return "read_file", {first("read_file", ("file_path", "absolute_path", "path")): a.path}
    grep = next((n for n in ("grep_search", "search_file_content") if n in tools), None)
    if a.kind == "grep" and grep:
        return grep, {"pattern": a.pattern, first(grep, ("dir_path", "path")): a.path}
    if a.kind == "glob" and "glob" in tools:
        return "glob", {"pattern": a.pattern, first("glob", ("dir_path", "path")): a.path}
    if "run_shell_command" in tools:
        return "run_shell_command", {"command": shell_text(a), "description": f"{a.kind} on the tree"}
    raise LookupError(f"no tool to run {a.kind} among {sorted(tools)}")


def step_of(body: dict[str, Any]) -> int:
    text = orjson.dumps(body.get("contents")).decode()
    found = [int(s) for s in SIGNATURE.findall(text)] + [int(s) for s in RESUME.findall(text)]
    return max(found, default=0)


class State:
    def __init__(self, window: int, script: Script) -> None:
        self.window = window
        self.script = script
        self.received: list[dict[str, Any]] = []
        self.first_fixed: str | None = None


async def models(request: Request) -> Response:
    state: State = request.app.state.state
    raw = request.path_params["rest"]
    match = METHOD.match(raw)
    if match is None:
        return error(404, f"models/{raw} is not found for API version v1beta.", "NOT_FOUND")
    if not (request.headers.get("x-goog-api-key") or request.query_params.get("key")):
        return error(
            403, "Method doesn't allow unregistered callers. Please use an API Key.", "PERMISSION_DENIED"
        )
    body = orjson.loads(await request.body())
    method = match["method"]
    tokens = prompt_tokens(body)
    if method == "countTokens":
        return Response(orjson.dumps({"totalTokens": tokens}), media_type="application/json")
    contents = body.get("contents") or []
    tools = declarations(body)
    fixed = digest({"system": body.get("systemInstruction"), "tools": body.get("tools")})
    record = {
        "method": method,
        "tokens": tokens,
        "over": tokens > state.window,
        "orphans": orphans(contents),
        "contents": len(contents),
        "tools": len(tools),
        "fixed": fixed,
        "has_task": TASK_MARK in orjson.dumps(contents).decode(),
        "key_in": "header" if request.headers.get("x-goog-api-key") else "query",
        "signatures": orjson.dumps(contents).decode().count("sig-step-"),
    }
    state.received.append(record)
    if record["over"]:
        message = (
            f"The input token count ({tokens}) exceeds the maximum number of tokens allowed ({state.window})."
        )
        return error(400, message, "INVALID_ARGUMENT")
    if record["orphans"]:
        return error(
            400,
            "Please ensure that the number of function response parts is equal to the number of "
            "function call parts of the function call turn.",
            "INVALID_ARGUMENT",
        )
    config = body.get("generationConfig") or {}
    parts: list[dict[str, Any]]
    if config.get("responseMimeType") == "application/json":
        answer = {"reasoning": "The model answered.", "next_speaker": "user", "confidence": 0.0}
        parts, record["kind"] = [{"text": orjson.dumps(answer).decode()}], "json"
    elif not tools:
        parts, record["kind"] = [{"text": "Surveying a source tree."}], "side"
    else:
        step = step_of(body) + 1
        record["step"] = step
        if step > state.script.steps:
            text = f"{DONE_MARK}: surveyed {len(state.script.files)} files in {state.script.steps} steps."
            parts, record["kind"] = [{"text": text}], "final"
        else:
            calls = []
            for k, action in enumerate(state.script.actions(step)):
                name, args = tool_call(action, tools)
                part: dict[str, Any] = {"functionCall": {"name": name, "args": args}}
                if k == 0:
                    part["thoughtSignature"] = f"sig-step-{step}"
                calls.append(part)
            parts = [{"text": f"Step {step} (agent-step {step - 1} done): looking further."}, *calls]
            record["kind"] = "tools"
    usage = {"promptTokenCount": tokens, "candidatesTokenCount": 20, "totalTokenCount": tokens + 20}
    base = {"modelVersion": match["model"], "responseId": f"resp-{len(state.received)}"}
    if method == "generateContent":
        candidate = {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        return Response(
            orjson.dumps({"candidates": [candidate], "usageMetadata": usage, **base}),
            media_type="application/json",
        )
    chunks = [[p] for p in parts[:1]] + ([parts[1:]] if parts[1:] else [])
    events = []
    for i, chunk in enumerate(chunks):
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": chunk}, "index": 0}
        event: dict[str, Any] = {"candidates": [candidate], **base}
        if i == len(chunks) - 1:
            candidate["finishReason"] = "STOP"
            event["usageMetadata"] = usage
        events.append(b"data: " + orjson.dumps(event) + b"\r\n\r\n")
    return Response(b"".join(events), media_type="text/event-stream")


async def model_info(request: Request) -> Response:
    """`GET /v1beta/models/{model}`: the model's limits, as Google's model resource has them."""
    state: State = request.app.state.state
    name = request.path_params["rest"]
    if not (request.headers.get("x-goog-api-key") or request.query_params.get("key")):
        return error(
            403, "Method doesn't allow unregistered callers. Please use an API Key.", "PERMISSION_DENIED"
        )
    info = {"name": f"models/{name}", "inputTokenLimit": state.window, "outputTokenLimit": 65536}
    return Response(orjson.dumps(info), media_type="application/json")


async def recorded(request: Request) -> Response:
    return Response(orjson.dumps(request.app.state.state.received), media_type="application/json")


async def healthz(request: Request) -> Response:
    return Response(b"{}", media_type="application/json")


def create_app(window: int, steps: int, tree: Path) -> Starlette:
    app = Starlette(
        routes=[
            Route("/v1beta/models/{rest:path}", models, methods=["POST"]),
            Route("/v1beta/models/{rest:path}", model_info, methods=["GET"]),
            Route("/_recorded", recorded),
            Route("/healthz", healthz),
        ]
    )
    app.state.state = State(window, Script(tree, steps))
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--window", type=int, required=True)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--tree", type=Path, required=True)
    args = parser.parse_args()
    count("warm up the tokenizer")
    uvicorn.run(
        create_app(args.window, args.steps, args.tree.resolve()),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
