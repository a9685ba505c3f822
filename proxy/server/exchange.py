"""One compacted request on its way through the pipeline: what `Pipeline.send_compacted`, `retry`
and `relay` need of it once it is planned."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.bridges.base import Bridge
from proxy.engine.plan import ChatPlan
from proxy.formats import Conversation, Route
from proxy.formats.reports import AnswerReport
from proxy.server.jsonbody import dump_json
from proxy.server.live import Record


@dataclass(frozen=True, slots=True)
class Exchange:
    """One compacted request on its way: its route, the upstream path, the original bytes and body,
    the neutral conversation read from them, and the bridge it takes to a server of another API
    (none: its route's own way)."""

    route: Route
    path: str
    raw: bytes
    body: dict[str, Any]
    conversation: Conversation
    bridge: Bridge | None = None  # set when the request goes to another API than the client's
    report: AnswerReport | None = None  # what the answer must say the proxy did in the server's place
    record: Record | None = None  # the live page's record of it

    @property
    def target(self) -> tuple[str, bool]:
        """Where it goes upstream: the path, and whether it is against the server's root."""
        way = self.bridge
        return (way.path, way.from_root) if way is not None else (self.path, self.route.from_root)

    def content(self, plan: ChatPlan) -> bytes:
        """What to forward: the original bytes when nothing changed, else the original body with
        `plan`'s decisions applied by the route's format; the bridge's translation of that."""
        if self.bridge is not None:
            return self.bridge.content(self.body, self.conversation, plan)
        if not plan.result.changed and plan.max_tokens is None:
            return self.raw
        return dump_json(self.route.format.write(self.body, self.conversation, plan))

    @property
    def retries(self) -> bool:
        """Whether an overflow the upstream reports is retried (a bridge's server may cut instead)."""
        return self.bridge is None or self.bridge.retries

    @property
    def streamed(self) -> bool:
        return self.route.format.streamed(self.body)
