"""The seam between the pipeline and where a request goes: a `Way` says where it goes upstream
(`path`, `from_root`, `outgoing`), the bytes to send for a plan (`content`), and makes the client's
answer from the upstream's (`relay`). The pipeline sends and relays over a way without knowing which
it is.

The ways, one module each beside this seam: `direct` (a compacted request to its own route's
server), `passing` (any request as it came), and the bridges to a server of another API (`ollama`:
an OpenAI chat on Ollama's native API with the window set; `gemini`: a Gemini API request on a Chat
Completions server). `choice` picks a request's way once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from starlette.responses import Response

from proxy.counting.calibration import Truncation
from proxy.engine.plan import ChatPlan
from proxy.formats import Conversation
from proxy.metrics import Metrics

Body = dict[str, Any]
Headers = list[tuple[bytes, bytes]]
# Where the prompt size the upstream reports goes (with the answer's last bytes, when it has them):
# it says whether the upstream cut the prompt.
Learn = Callable[[int | None, bytes], Truncation | None]
# Said on a whole answer when the upstream read less of the prompt than it was sent.
TRUNCATED_HEADER = "x-compaction-upstream-truncated"
# Set on a response whose body the proxy has read already (an overflow it could not retry).
READ = "compacting_proxy.read"


@dataclass(frozen=True, slots=True)
class Answer:
    """What relaying an answer needs: the plan's headers for the client, where the prompt size the
    server reports goes (`learn`), the metrics, and the client's format's event for a stream the
    server broke off."""

    headers: dict[str, str]
    learn: Learn
    metrics: Metrics
    stream_error: Callable[[str], bytes]

    def whole(self, reported: int | None, tail: bytes = b"") -> dict[str, str]:
        """The headers of a whole answer that reports `reported` prompt tokens: the plan's, and
        whether the server cut the prompt."""
        if self.learn(reported, tail):
            return {**self.headers, TRUNCATED_HEADER: "true"}
        return self.headers


class Way(Protocol):
    """One request's way upstream and its answer's way back."""

    @property
    def path(self) -> str:
        """Where the request goes."""
        ...

    @property
    def from_root(self) -> bool:
        """`path` is against the server's root (its base URL without `/v1`)."""
        ...

    @property
    def window(self) -> int | None:
        """The window the way runs the model at (Ollama's `num_ctx`); None: the server's own."""
        ...

    @property
    def retries(self) -> bool:
        """The server reports an overflow (retried once, harder); False: it cuts instead."""
        ...

    def outgoing(self, headers: Headers, query: bytes) -> tuple[Headers, bytes]:
        """The headers and query string for the server, from those the client's request would
        carry upstream."""
        ...

    def content(self, raw: bytes, body: Body, conversation: Conversation, plan: ChatPlan) -> bytes:
        """What to send for `plan` over the client's `body` (its bytes: `raw`)."""
        ...

    async def relay(self, response: httpx.Response, answer: Answer) -> Response:
        """The client's answer for the server's `response` (its body still unread, unless `READ`)."""
        ...


def read_already(response: httpx.Response, body: bytes) -> httpx.Response:
    """`response` again, with the body the proxy read of it, marked `READ`."""
    stream = httpx.ByteStream(body)
    return httpx.Response(
        response.status_code, headers=response.headers, stream=stream, extensions={READ: True}
    )
