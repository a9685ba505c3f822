"""Codex's remote compaction answered by the proxy (`proxy.formats.responses_compaction` has the
wire shapes and the seal): the step the Responses format's requests take before all others
(`take`), registered by that format (`formats`) when the proxy answers it.

`COMPACT_REMOTE_COMPACTION`: `auto` (the default) answers it for every upstream but OpenAI's own API
(`api.openai.com`, which makes such items itself), `proxy` always, `upstream` never. The key that
seals the items is `COMPACT_COMPACTION_KEY`; without it each process draws a random one, so an item
is expanded only by the process that made it: after a restart, or behind several workers or replicas
that do not share the key, the next request carrying an older item is refused (400) and Codex must
start a new session. Set the key wherever that matters. An item is bound to the credentials of the
client that asked for it (`owner_of`): another client's request carrying it is refused as a forged
one is, so one key's history (its tool output) never goes upstream in another key's request.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from starlette.requests import Request
from starlette.responses import Response

from proxy.bodies.work import Bodies, is_large
from proxy.engine.plan import ChatPlan
from proxy.formats import RESPONSES, Conversation, FormatRoute, WireFormat
from proxy.formats.responses_compaction import (
    carries_items,
    compaction_answer,
    expanded_json,
    history_of,
    is_trigger,
    left_to_the_item,
    seal,
)
from proxy.live.entries import Remote
from proxy.server.flight import Flight
from proxy.server.parts import Parts
from proxy.settings import Settings
from proxy.upstream.forwarding import CREDENTIAL_HEADERS

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
    limit: int  # the most a request may unpack to (`COMPACT_MAX_BODY_BYTES`)
    formats: ClassVar[tuple[WireFormat, ...]] = (RESPONSES,)

    @classmethod
    def from_settings(cls, settings: Settings) -> RemoteCompaction:
        mode = settings.remote_compaction
        active = mode == "proxy" or (mode == "auto" and settings.upstream_host != "api.openai.com")
        key = settings.compaction_key.get_secret_value().encode() if settings.compaction_key else None
        return cls(active, key or secrets.token_bytes(32), settings.max_body_bytes)

    @staticmethod
    def is_trigger(body: dict[str, Any]) -> bool:
        return is_trigger(body)

    async def take(self, flight: Flight, parts: Parts, adapt: Adapt) -> Response | None:
        """The flight's body with the proxy's items expanded, and the answer to a trigger; None when
        the request goes on (to be read, planned, sent)."""
        assert flight.body is not None
        if (expanded := await self.expanded(flight, parts.bodies)) is not None:
            flight.body, flight.raw = await parts.bodies.parse(expanded), expanded
        if not self.is_trigger(flight.body):
            return None
        return await self.answer(adapt, parts, flight.request, flight.route, flight.body, flight.raw)

    async def expanded(self, flight: Flight, bodies: Bodies) -> bytes | None:
        """The bytes of the flight's body with the proxy's items expanded (a forged one, or one
        sealed for another client, refused), all of it within the body limit; None when it carries
        none. Unpacked in a worker thread whatever the body's size (a few KB of items unpack to
        MBs), and parsed as a body of its size is (`take`)."""
        assert flight.body is not None
        if not is_large(flight.raw) and not carries_items(flight.body):  # a small body's items are few
            return None
        owner, budget = owner_of(flight.request), self.limit - len(flight.raw)
        expand = functools.partial(expanded_json, key=self.key, owner=owner, budget=budget)
        return await bodies.offloader.run(expand, flight.body)

    async def answer(
        self,
        adapt: Adapt,
        parts: Parts,
        request: Request,
        route: FormatRoute,
        body: dict[str, Any],
        raw: bytes = b"",
    ) -> Response:
        """The `compaction` item for a trigger: the history compacted by the proxy's engine for a
        window of `SHRINK` times its size, sealed. A large history (its request's bytes `raw`) is
        read, written back and sealed in a worker thread (`parts.bodies`), planned as any other."""
        wire, params = route.format, dict(request.path_params)
        history, _, conversation = await parts.bodies.run(raw, adapt, wire, history_of(body), b"", params)
        plan = first = None
        if conversation is not None:
            credentials = parts.credentials.credentials(request)
            first = await parts.planner.plan(conversation.request, credentials)
            window = max(1, int(first.result.tokens_before * SHRINK))
            plan = await parts.planner.plan(conversation.request, credentials, window_tokens=window)
            parts.metrics.record_compaction(plan.result)
            log.info(
                "Answered a remote compaction (compaction_trigger) in the server's place. %s", plan.summary()
            )
        seal_for = functools.partial(self._sealed, wire, history, conversation, plan, owner_of(request))
        left, content = await parts.bodies.run(raw, seal_for)
        if conversation is not None and plan is not None and first is not None:  # what the item replaced
            remote = Remote(first, len(history["input"]), len(left))
            parts.records.add(request.scope["headers"], wire.name, conversation, plan, remote=remote)
        streamed = wire.streamed(body)
        before, after = (plan.result.tokens_before, plan.result.tokens_after) if plan else (0, 0)
        answer = compaction_answer(str(body.get("model") or ""), content, before, after, streamed=streamed)
        media_type = "text/event-stream" if streamed else "application/json"
        return Response(answer, media_type=media_type, headers={"x-compaction-remote": "answered"})

    def _sealed(
        self,
        wire: WireFormat,
        history: dict[str, Any],
        conversation: Conversation | None,
        plan: ChatPlan | None,
        owner: bytes,
    ) -> tuple[list[Any], str]:
        """What the item stands for (the compacted history less what Codex keeps), and its seal."""
        items = history["input"]
        if conversation is not None and plan is not None and plan.result.changed:
            items = wire.write(history, conversation, plan)["input"]
        left = left_to_the_item(history["input"], items)
        return left, seal(left, self.key, owner)


def owner_of(request: Request) -> bytes:
    """A digest of the credentials `request` carries (every key header, as sent): what a compaction
    item is bound to. The proxy's key with `COMPACT_API_KEYS`, else the client's upstream key; a
    client that sends none shares the empty digest with every other that sends none."""
    sent = sorted((k.lower(), v) for k, v in request.headers.raw if k.lower() in CREDENTIAL_HEADERS)
    return hashlib.sha256(b"\n".join(k + b":" + v for k, v in sent)).digest()
