"""An upstream that counts and refuses as OpenAI's API does, for the counting tests: no `/tokenize`
(404), a chat whose prompt (counted with a real vocabulary, its template's markers added) is over the
window refused with 400 `context_length_exceeded` worded as OpenAI words it ("maximum context length is
N tokens. However, your messages resulted in M tokens"), else answered with `usage.prompt_tokens` as
it counted. Every chat body is recorded (`bodies`), and those it answered (`answered`).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from typing import Any, ClassVar

from proxy.counting.tokenizers import load_text_counter
from proxy.counting.tokens import MESSAGE_OVERHEAD, REPLY_PRIMER, text_of
from tests.support.json_handler import JsonHandler
from tests.support.processes import VENV_BIN, free_port, running


class OpenAICounting(JsonHandler):
    bodies: ClassVar[list[dict[str, Any]]] = []
    answered: ClassVar[list[dict[str, Any]]] = []
    count: ClassVar[Callable[[str], int]] = len
    window: ClassVar[int] = 8192

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if not self.path.endswith("/chat/completions"):
            self._send(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
            return
        kind = type(self)
        kind.bodies.append(body)
        texts = (text_of(m.get("content")) for m in body["messages"])
        prompt = sum(kind.count(text) + MESSAGE_OVERHEAD for text in texts) + REPLY_PRIMER
        if prompt > kind.window:
            message = (
                f"This model's maximum context length is {kind.window} tokens. However, your messages "
                f"resulted in {prompt} tokens. Please reduce the length of the messages."
            )
            error = {"message": message, "type": "invalid_request_error", "param": "messages"}
            self._send(400, {"error": {**error, "code": "context_length_exceeded"}})
            return
        kind.answered.append(body)
        message = {"role": "assistant", "content": "ok"}
        answer = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 1, "total_tokens": prompt + 1},
        }
        self._send(200, answer)


@contextlib.contextmanager
def proxy_and_openai(counter: str, window: int, **env: str) -> Iterator[tuple[str, type[OpenAICounting]]]:
    """The real `compacting-proxy` (`COMPACT_WINDOW=window`) in front of an `OpenAICounting` that
    counts with the tokenizer `counter`: the proxy's URL and the upstream's handler class."""
    attributes = {
        "bodies": [],
        "answered": [],
        "count": staticmethod(load_text_counter(counter)),
        "window": window,
    }
    handler = type("Upstream", (OpenAICounting,), attributes)
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = free_port()
    env = {
        "COMPACT_UPSTREAM_URL": f"http://127.0.0.1:{server.server_port}/v1",
        "COMPACT_WINDOW": str(window),
        "COMPACT_UPSTREAM_KIND": "openai",
        **env,
    }
    args = [str(VENV_BIN / "compacting-proxy"), "--port", str(port), "--no-access-log"]
    try:
        with running(args, ready_url=f"http://127.0.0.1:{port}/healthz", env=env):
            yield f"http://127.0.0.1:{port}", handler
    finally:
        server.shutdown()
        server.server_close()
