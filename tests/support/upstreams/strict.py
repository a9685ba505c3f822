"""The recording format upstream (``tests.support.upstreams.formats``) made strict: it refuses a request
with a top-level field it does not know, as servers and gateways that validate with pydantic's
``extra="forbid"`` do, before anything else.

It follows Anthropic's API as Vertex AI and Bedrock serve it without the context-management beta
(and the gateways in front of them: the reports in anthropics/claude-code#21612, #14135): 400
``{"type": "error", "error": {"type": "invalid_request_error", "message": "context_management: Extra
inputs are not permitted"}}``, pydantic's own words after the field's location. The fields it knows
are anthropic-sdk-python 2.17's non-beta ``MessageCreateParams`` (which has no ``context_management``)
plus the sampling ones; for ``/v1/responses``, openai-python 3.60's ``ResponseCreateParams`` without
``context_management`` (a server that predates it), answered in OpenAI's error shape.

For ``/v1/chat/completions`` it checks what OpenAI's API checks of tool calls before anything else: an
assistant message's ``tool_calls`` must each be answered by a ``tool`` message right after it, else 400
"An assistant message with 'tool_calls' must be followed by tool messages responding to each
'tool_call_id'. The following tool_call_ids did not have response messages: ..." (``param``
``messages.[N].role``), as the API answers today (and vLLM's and llama.cpp's stricter chat templates
refuse the same history).

Run it as a process: ``python -m tests.support.upstreams.strict --port N --window W``; with ``--agent
--steps S --tree DIR [--tap-to URL]``, the scripted agent model server
(``tests.support.upstreams.agent_model``) made strict the same way, for the real CLIs.
"""

from __future__ import annotations

import argparse
import typing
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from anthropic.types import message_create_params
from openai.types.responses import response_create_params
from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import Response

from tests.support.upstreams import agent_model
from tests.support.upstreams.formats import create_app, json_response

MESSAGE_FIELDS = (
    set(typing.get_type_hints(message_create_params.MessageCreateParamsStreaming))
    | set(typing.get_type_hints(message_create_params.MessageCreateParamsNonStreaming))
    | {"temperature", "top_k", "top_p"}
)
RESPONSE_FIELDS = set(typing.get_type_hints(response_create_params.ResponseCreateParamsStreaming)) | set(
    typing.get_type_hints(response_create_params.ResponseCreateParamsNonStreaming)
)
RESPONSE_FIELDS.discard("context_management")


def strict_model(name: str, fields: set[str]) -> type[BaseModel]:
    definitions: dict[str, Any] = {field: (Any, None) for field in fields}
    return create_model(name, __config__=ConfigDict(extra="forbid"), **definitions)


MODELS = {
    "/v1/messages": strict_model("MessageCreateParams", MESSAGE_FIELDS),
    "/v1/responses": strict_model("ResponseCreateParams", RESPONSE_FIELDS),
}


def unanswered_calls(messages: Any) -> tuple[int, list[str]] | None:
    """The first assistant message whose tool calls are not all answered right after it: its index
    and the ids left without a `tool` message."""
    if not isinstance(messages, list):
        return None
    for index, message in enumerate(messages):
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        if message.get("role") != "assistant" or not calls:
            continue
        answered = set()
        for after in messages[index + 1 :]:
            if not isinstance(after, dict) or after.get("role") != "tool":
                break
            answered.add(after.get("tool_call_id"))
        missing = [str(c.get("id")) for c in calls if isinstance(c, dict) and c.get("id") not in answered]
        if missing:
            return index, missing
    return None


def openai_error(message: str, param: str | None) -> Response:
    body = {"message": message, "type": "invalid_request_error", "param": param, "code": None}
    return json_response({"error": body}, 400)


class Strict(BaseHTTPMiddleware):
    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        if request.url.path == "/v1/chat/completions" and request.method == "POST":
            raw = await request.body()
            if found := unanswered_calls(orjson.loads(raw).get("messages")):
                if record := getattr(request.app.state.recorder, "note_refused", None):
                    record(request, raw)
                index, missing = found
                return openai_error(
                    "An assistant message with 'tool_calls' must be followed by tool messages responding "
                    f"to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                    f"{', '.join(missing)}",
                    f"messages.[{index}].role",
                )
            return await call_next(request)
        model = MODELS.get(request.url.path)
        if model is None or request.method != "POST":
            return await call_next(request)
        raw = await request.body()
        try:
            model.model_validate(orjson.loads(raw))
        except ValidationError as error:
            if record := getattr(request.app.state.recorder, "record", None):
                record(request, raw)
            first = error.errors()[0]
            message = f"{'.'.join(str(part) for part in first['loc'])}: {first['msg']}"
            if request.url.path == "/v1/messages":
                return json_response(
                    {"type": "error", "error": {"type": "invalid_request_error", "message": message}}, 400
                )
            return openai_error(message, None)
        return await call_next(request)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--window", type=int, default=4000)
    parser.add_argument("--agent", action="store_true", help="the agent model server, made strict")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--tree", type=Path)
    parser.add_argument("--tap-to", default=None)
    args = parser.parse_args()
    if args.agent:
        app = agent_model.create_app(args.window, args.steps, args.tree.resolve(), args.tap_to)
    else:
        app = create_app(args.window)
    app.add_middleware(Strict)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
