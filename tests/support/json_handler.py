"""A `BaseHTTPRequestHandler` that answers JSON: the base of the small fake servers some process
tests run in a thread (each says which real API it imitates)."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


class JsonHandler(BaseHTTPRequestHandler):
    """`_send` writes a JSON answer with its length; GETs are 404 in OpenAI's error shape; no logs."""

    def do_GET(self) -> None:
        self._send(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass
