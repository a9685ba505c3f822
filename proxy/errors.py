"""The proxy's own errors, in the shape each client expects: OpenAI's
`{"error": {message, type, param, code}}` by default, Anthropic's
`{"type": "error", "error": {type, message}}` on the Anthropic routes, Ollama's `{"error": "..."}`
on `/api/chat`; and the "cannot fit" error in each route's overflow language, the one its clients
start their own compaction on."""

from __future__ import annotations

import time
import uuid
from typing import Protocol

import orjson
from starlette.responses import Response

# Anthropic names its error types by status (docs.anthropic.com, "Errors").
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


class ErrorShape(Protocol):
    def __call__(
        self, status: int, message: str, type: str, code: str | None, param: str | None
    ) -> bytes: ...


class ProxyError(Exception):
    """An error the proxy answers itself, with an HTTP status and a client-shaped body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param

    def to_response(self, headers: dict[str, str] | None = None, shape: ErrorShape | None = None) -> Response:
        return error_response(
            self.status,
            self.message,
            type=self.type,
            code=self.code,
            param=self.param,
            headers=headers,
            shape=shape,
        )


class ContextOverflowError(ProxyError):
    """The prompt cannot fit the window: a 400 worded as the route's own server words an overflow.
    A streamed Responses request gets it as OpenAI's stream does, a `response.failed` event with
    code `context_length_exceeded`: that, not a 400, is what Codex starts its compaction on."""

    def __init__(self, message: str, *, wire: str, param: str | None, streamed: bool = False) -> None:
        super().__init__(400, message, code="context_length_exceeded", param=param)
        self.wire = wire
        self.streamed = streamed

    def to_response(self, headers: dict[str, str] | None = None, shape: ErrorShape | None = None) -> Response:
        if self.wire == "ollama":
            return error_response(400, self.message, type=self.type, headers=headers, shape=ollama_error)
        if self.wire == "responses" and self.streamed:
            return Response(
                failed_response_stream(self.message, self.code or "context_length_exceeded", self.param),
                status_code=200,
                media_type="text/event-stream",
                headers=headers,
            )
        return super().to_response(headers, shape)


def failed_response_stream(message: str, code: str, param: str | None) -> bytes:
    """A Responses stream that fails at once: `response.created`, then `response.failed` carrying
    the error (the events OpenAI's Responses API streams for a request it cannot run)."""
    rid = "resp_" + uuid.uuid4().hex
    base = {"id": rid, "object": "response", "created_at": int(time.time()), "output": []}
    created = {
        "type": "response.created",
        "sequence_number": 0,
        "response": {**base, "status": "in_progress"},
    }
    error = {"code": code, "message": message, "param": param, "type": "invalid_request_error"}
    failed = {
        "type": "response.failed",
        "sequence_number": 1,
        "response": {**base, "status": "failed", "error": error},
    }
    return b"".join(
        f"event: {event['type']}\ndata: ".encode() + orjson.dumps(event) + b"\n\n"
        for event in (created, failed)
    )


def error_body(message: str, *, type: str, code: str | None = None, param: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": type, "param": param, "code": code}})


def openai_error(status: int, message: str, type: str, code: str | None, param: str | None) -> bytes:
    return error_body(message, type=type, code=code, param=param)


def anthropic_error(status: int, message: str, type: str, code: str | None, param: str | None) -> bytes:
    kind = ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})


def ollama_error(status: int, message: str, type: str, code: str | None, param: str | None) -> bytes:
    """Ollama's own error shape (`{"error": "..."}`, api/types.go `StatusError`)."""
    return orjson.dumps({"error": message})


def error_response(
    status: int,
    message: str,
    *,
    type: str,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
    shape: ErrorShape | None = None,
) -> Response:
    return Response(
        (shape or openai_error)(status, message, type, code, param),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )
