"""A scripted upstream that records every request as it came (`Hostile`), and the real
`compacting-proxy` process in front of it (`proxy_for`): the red-team tests' real parts (issue 18's
`tests/server/test_redteam.py` and issue 23's `tests/bodies/test_redteam_bodies.py`)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from tests.support.processes import VENV_BIN, free_port, running


@dataclass
class Seen:
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes


Handler = Callable[["ScriptedHandler", Seen], None]


@dataclass
class Hostile:
    """An upstream whose answer per path is scripted (`routes`, first matching prefix wins)."""

    port: int
    routes: dict[str, Handler] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


class ScriptedHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def handle_one(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        path = self.path.split("?")[0]
        seen = Seen(self.command, path, list(self.headers.items()), body)
        hostile: Hostile = self.server.hostile
        hostile.seen.append(seen)
        for prefix, handler in sorted(hostile.routes.items(), key=lambda kv: -len(kv[0])):
            if path.startswith(prefix):
                try:
                    handler(self, seen)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                return
        self.json(404, {"error": "not found"})

    do_GET = do_POST = handle_one

    def json(self, status: int, value: Any, headers: dict[str, str] | None = None) -> None:
        self.raw(status, json.dumps(value).encode(), "application/json", headers)

    def raw(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def chunked_then_cut(self, content_type: str, chunks: list[bytes]) -> None:
        """A chunked body broken off after `chunks`: no final chunk, the connection closed."""
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
            time.sleep(0.05)
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def endless(self, content_type: str, head: bytes, filler: bytes, total: int, encoding: str = "") -> None:
        """`head`, then `filler` repeated up to `total` bytes, with a Content-Length saying so."""
        self.send_response(200)
        self.send_header("content-type", content_type)
        if encoding:
            self.send_header("content-encoding", encoding)
        self.send_header("content-length", str(total))
        self.end_headers()
        self.wfile.write(head)
        sent = len(head)
        while sent < total:
            piece = filler[: total - sent]
            self.wfile.write(piece)
            sent += len(piece)


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the proxy hanging up on a bomb is what the tests want


@contextmanager
def hostile_upstream() -> Iterator[Hostile]:
    server = _Server(("127.0.0.1", 0), ScriptedHandler)
    server.daemon_threads = True
    hostile = Hostile(server.server_address[1])
    server.hostile = hostile  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hostile
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Proxy:
    process: subprocess.Popen[bytes]
    base_url: str
    idle_kb: int = 0  # its RSS once ready, before any request (what memory limits add to)

    @property
    def log(self) -> str:
        path: Path = self.process.log_path  # type: ignore[attr-defined]
        return path.read_text(errors="replace")

    def rss_kb(self, field: str = "VmRSS") -> int:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(rf"^{field}:\s+(\d+) kB", status, re.M).group(1))  # type: ignore[union-attr]

    def metric(self, line_start: str) -> float:
        text = httpx.get(self.base_url + "/metrics", timeout=5).text
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(line_start))


@contextmanager
def proxy_for(upstream_url: str, *, access_log: bool = False, **env: str) -> Iterator[Proxy]:
    port = free_port()
    environment = {"COMPACT_UPSTREAM_URL": upstream_url, "COMPACT_READ_TIMEOUT": "10", **env}
    args = [str(VENV_BIN / "compacting-proxy"), "--port", str(port), "--log-level", "info"]
    if not access_log:
        args.append("--no-access-log")
    with running(args, ready_url=f"http://127.0.0.1:{port}/healthz", env=environment) as process:
        proxy = Proxy(process, f"http://127.0.0.1:{port}")
        proxy.idle_kb = proxy.rss_kb()
        yield proxy


def counting_upstream(hostile: Hostile) -> None:
    """llama.cpp's `/tokenize` (of a prompt; a chat's messages get 404, as from llama-server) and
    `/apply-template`, for `COMPACT_TOKENIZER=upstream`."""

    def tokenize(h: ScriptedHandler, seen: Seen) -> None:
        body = json.loads(seen.body)
        if "content" not in body:
            h.json(404, {"error": "messages are not tokenized here"})
        else:
            h.json(200, {"tokens": [1] * (len(body["content"]) // 3)})

    def apply_template(h: ScriptedHandler, seen: Seen) -> None:
        body = json.loads(seen.body)
        h.json(200, {"prompt": "\n".join(str(m.get("content")) for m in body.get("messages", []))})

    hostile.routes.update({"/tokenize": tokenize, "/apply-template": apply_template})


def function_calls(calls: int) -> bytes:
    """A Responses body of `calls` function calls, each answered, then a question (200,000 items,
    ~15 MB, at 100,000)."""
    items: list[dict[str, Any]] = []
    for i in range(calls):
        items.append({"type": "function_call", "call_id": f"call_{i}", "name": "f", "arguments": "{}"})
        items.append({"type": "function_call_output", "call_id": f"call_{i}", "output": "ok"})
    items.append({"role": "user", "content": "and now?"})
    return json.dumps({"model": "m", "input": items}).encode()
