"""The proxy's own errors, in the shape each client expects: OpenAI's
`{"error": {message, type, param, code}}` by default, Anthropic's
`{"type": "error", "error": {type, message}}` on the Anthropic routes (each format names its own
shape: `WireFormat.error_body`); and the "cannot fit" error, which each format words in its own
server's overflow language, the one its clients start their own compaction on."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import orjson

if TYPE_CHECKING:
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
    """An error the proxy answers itself, with an HTTP status and a client-shaped body; `closes`:
    the answer ends the connection (`connection: close`), as one given before the request's body
    was read to its end must: what follows on the connection is not known to be a request."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        closes: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.closes = closes

    def to_response(self, headers: dict[str, str] | None = None, shape: ErrorShape | None = None) -> Response:
        if self.closes:
            headers = {**(headers or {}), "connection": "close"}
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
    """The prompt cannot fit the window: a 400 with OpenAI's code `context_length_exceeded`,
    worded as the route's own server words an overflow (each format words it: `WireFormat.
    overflow_error`). `shape`, when given, is the format's own error shape, whatever the path;
    a format whose clients recover on something else than a 400 subclasses this and answers it
    its own way (`to_response`)."""

    def __init__(self, message: str, *, param: str | None, shape: ErrorShape | None = None) -> None:
        super().__init__(400, message, code="context_length_exceeded", param=param)
        self.shape = shape

    def to_response(self, headers: dict[str, str] | None = None, shape: ErrorShape | None = None) -> Response:
        return super().to_response(headers, self.shape or shape)


def openai_error_body(message: str, *, type: str, code: str | None = None, param: str | None = None) -> bytes:
    """OpenAI's error body, whatever the route (a route's own shape is its format's `error_body`)."""
    return orjson.dumps({"error": {"message": message, "type": type, "param": param, "code": code}})


def openai_error(status: int, message: str, type: str, code: str | None, param: str | None) -> bytes:
    return openai_error_body(message, type=type, code=code, param=param)


def anthropic_error(status: int, message: str, type: str, code: str | None, param: str | None) -> bytes:
    kind = ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})


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
    # Imported here: the engine raises these errors, and importing it must not load the framework.
    from starlette.responses import Response

    return Response(
        (shape or openai_error)(status, message, type, code, param),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )
