"""The seam between the pipeline and a bridge: a compacted request that goes to a server speaking
another API than its client's, translated there and its answer translated back.

A `Bridge` offers what the route's own upstream offers: where the request goes (`path`, `from_root`,
`outgoing`), the bytes to send for a plan (`content`), and the
client's answer made from the server's (`relay`). `proxy.bridges.choice.Bridges` picks one once per
request from the route's `bridge` name and the upstream (or none: the request goes its route's own
way). The bridges: `ollama` (an OpenAI chat on Ollama's native API, with the window set) and
`gemini` (a Gemini API request on a Chat Completions server, or on Ollama's native API through both).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from starlette.responses import Response

from proxy.engine.plan import ChatPlan
from proxy.formats import Conversation
from proxy.metrics import Metrics
from proxy.upstream.prompt_reports import Truncation

Body = dict[str, Any]
Headers = list[tuple[bytes, bytes]]
RawHeaders = Sequence[tuple[bytes, bytes]]
Learn = Callable[[int | None], Truncation | None]
# Said on a whole answer when the upstream read less of the prompt than it was sent.
TRUNCATED_HEADER = "x-compaction-upstream-truncated"


@dataclass(frozen=True, slots=True)
class Answer:
    """What relaying a bridged answer needs: the plan's headers for the client, where the prompt
    size the server reports goes (`learn` says whether it cut the prompt), the metrics, and the
    client's format's event for a stream the server broke off."""

    headers: dict[str, str]
    learn: Learn
    metrics: Metrics
    stream_error: Callable[[str], bytes]


class Bridge(Protocol):
    """One request's way to a server of another API."""

    @property
    def path(self) -> str:
        """Where the translated request goes."""
        ...

    @property
    def from_root(self) -> bool:
        """`path` is against the server's root (its base URL without `/v1`)."""
        ...

    @property
    def window(self) -> int | None:
        """The window the bridge runs the model at (Ollama's `num_ctx`); None: the server's own."""
        ...

    @property
    def retries(self) -> bool:
        """The server reports an overflow (retried once, harder); False: it cuts instead."""
        ...

    def outgoing(self, headers: Headers, query: bytes) -> tuple[Headers, bytes]:
        """The headers and query string for the server, from those the client's request would
        carry upstream."""
        ...

    def content(self, body: Body, conversation: Conversation, plan: ChatPlan) -> bytes:
        """The translated request for `plan` over the client's `body`."""
        ...

    async def relay(self, response: httpx.Response, answer: Answer) -> Response:
        """The client's answer for the server's `response` (its body still unread)."""
        ...
