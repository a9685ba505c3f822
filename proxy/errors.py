"""The proxy's own errors, in the shape OpenAI's clients expect: `{"error": {message, type, param, code}}`."""

from __future__ import annotations

import orjson
from starlette.responses import Response


class ProxyError(Exception):
    """An error the proxy answers itself, with an HTTP status and an OpenAI-style body."""

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

    def to_response(self, headers: dict[str, str] | None = None) -> Response:
        return error_response(
            self.status, self.message, type=self.type, code=self.code, param=self.param, headers=headers
        )


def error_body(message: str, *, type: str, code: str | None = None, param: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": type, "param": param, "code": code}})


def error_response(
    status: int,
    message: str,
    *,
    type: str,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    return Response(
        error_body(message, type=type, code=code, param=param),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )
