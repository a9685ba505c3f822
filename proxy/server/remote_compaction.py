"""Codex's remote compaction answered by the proxy (`proxy.formats.responses_compaction` has the
wire shapes and the seal): the step the Responses format's requests take before all others
(`take`), registered by that format (`formats`) when the proxy answers it.

`COMPACT_REMOTE_COMPACTION`: `auto` (the default) answers it for every upstream but OpenAI's own API
(`api.openai.com`, which makes such items itself), `proxy` always, `upstream` never. The key that
seals the items is `COMPACT_COMPACTION_KEY`; without it each process draws a random one, so an item
is expanded only by the process that made it: after a restart, or behind several workers or replicas
that do not share the key, the next request carrying an older item is refused (400) and Codex must
start a new session. Set the key wherever that matters.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from starlette.requests import Request
from starlette.responses import Response

from proxy.bodies.jsonbody import dump_json
from proxy.formats import RESPONSES, Conversation, FormatRoute, WireFormat
from proxy.formats.responses_compaction import (
    compaction_answer,
    expand,
    history_of,
    is_trigger,
    left_to_the_item,
    seal,
)
from proxy.server.flight import Flight
from proxy.server.parts import Parts
from proxy.settings import Settings

# The pipeline's `adapt` step: the body, its bytes and its neutral conversation (None when the
# server keeps this history itself).
Adapt = Callable[
    [WireFormat, dict[str, Any], bytes, dict[str, str]], tuple[dict[str, Any], bytes, Conversation | None]
]

log = logging.getLogger("proxy")

SHRINK = 0.75  # the trigger's history is compacted for a window this share of its size


@dataclass(frozen=True, slots=True)
class RemoteCompaction:
    active: bool
    key: bytes
    limit: int  # the most an item may unpack to
    formats: ClassVar[tuple[WireFormat, ...]] = (RESPONSES,)

    @classmethod
    def from_settings(cls, settings: Settings) -> RemoteCompaction:
        mode = settings.remote_compaction
        active = mode == "proxy" or (mode == "auto" and settings.upstream_host != "api.openai.com")
        key = settings.compaction_key.get_secret_value().encode() if settings.compaction_key else None
        return cls(active, key or secrets.token_bytes(32), settings.max_body_bytes)

    def expand(self, body: dict[str, Any]) -> dict[str, Any]:
        """The request with the proxy's compaction items expanded (a forged one refused)."""
        return expand(body, self.key, self.limit)

    @staticmethod
    def is_trigger(body: dict[str, Any]) -> bool:
        return is_trigger(body)

    async def take(self, flight: Flight, parts: Parts, adapt: Adapt) -> Response | None:
        """The flight's body with the proxy's items expanded (a large body's walked off the loop), and
        the answer to a trigger; None when the request goes on (to be read, planned, sent)."""
        assert flight.body is not None
        expanded = await parts.bodies.run(flight.raw, self.expand, flight.body)
        if expanded is not flight.body:
            flight.body, flight.raw = expanded, dump_json(expanded)
        if not self.is_trigger(flight.body):
            return None
        return await self.answer(adapt, parts, flight.request, flight.route, flight.body)

    async def answer(
        self, adapt: Adapt, parts: Parts, request: Request, route: FormatRoute, body: dict[str, Any]
    ) -> Response:
        """The `compaction` item for a trigger: the history compacted by the proxy's engine for a
        window of `SHRINK` times its size, sealed."""
        wire = route.format
        history = history_of(body)
        history, _, conversation = adapt(wire, history, b"", dict(request.path_params))
        items = history["input"]
        if conversation is not None:
            credentials = parts.credentials.credentials(request)
            first = await parts.planner.plan(conversation.request, credentials)
            window = max(1, int(first.result.tokens_before * SHRINK))
            plan = await parts.planner.plan(conversation.request, credentials, window_tokens=window)
            if plan.result.changed:
                items = wire.write(history, conversation, plan)["input"]
            before, after = plan.result.tokens_before, plan.result.tokens_after
            parts.metrics.record_compaction(plan.result)
            log.info(
                "Answered a remote compaction (compaction_trigger) in the server's place. %s", plan.summary()
            )
        else:
            before = after = 0
        left = left_to_the_item(history["input"], items)
        streamed = wire.streamed(body)
        content = compaction_answer(
            str(body.get("model") or ""), seal(left, self.key), before, after, streamed=streamed
        )
        media_type = "text/event-stream" if streamed else "application/json"
        return Response(content, media_type=media_type, headers={"x-compaction-remote": "answered"})
