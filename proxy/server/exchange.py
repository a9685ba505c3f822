"""One compacted request on its way through the pipeline: what `Pipeline.send_compacted`, `retry`
and `relay` need of it once it is planned."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.bridges.ollama.bridge import OllamaBridge
from proxy.engine.chat import ChatPlan
from proxy.engine.jsonbody import dump_json
from proxy.formats import Conversation, Route
from proxy.formats.reports import AnswerReport
from proxy.server.live import Record


@dataclass(frozen=True, slots=True)
class Exchange:
    """One compacted request on its way: its route, the upstream path, the original bytes and body,
    and the neutral conversation read from them."""

    route: Route
    path: str
    raw: bytes
    body: dict[str, Any]
    conversation: Conversation
    bridge: OllamaBridge | None = None  # set when an OpenAI chat goes to Ollama's native API
    report: AnswerReport | None = None  # what the answer must say the proxy did in the server's place
    record: Record | None = None  # the live page's record of it

    def content(self, plan: ChatPlan) -> bytes:
        """What to forward: the original bytes when nothing changed, else the original body with
        `plan`'s decisions applied by the route's format."""
        if not plan.result.changed and plan.max_tokens is None:
            return self.raw
        return dump_json(self.route.format.write(self.body, self.conversation, plan))

    @property
    def streamed(self) -> bool:
        return self.route.format.streamed(self.body)
